package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// pairSockets returns a connected inproc PAIR pair in a fresh context, both
// opened through the package's binding (zmq_sock.go). The binding is checked
// against an independent implementation by the integration tests, whose
// publishers are pebbe/zmq4 sockets.
func pairSockets(t testing.TB) (tx, rx *zsocket) {
	t.Helper()
	ctx, err := newZContext()
	if err != nil {
		t.Fatal(err)
	}
	if rx, err = ctx.socket(zPAIR); err != nil {
		t.Fatal(err)
	}
	if tx, err = ctx.socket(zPAIR); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("inproc://recv-test-%p", t)
	if err := rx.bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := tx.connect(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.close()
		_ = rx.close()
		_ = ctx.term()
	})
	return tx, rx
}

// sendMsg sends frames as one multipart message.
func sendMsg(t testing.TB, s *zsocket, frames ...[]byte) {
	t.Helper()
	for j, f := range frames {
		flags := 0
		if j < len(frames)-1 {
			flags = zSNDMORE
		}
		if err := s.send(f, flags); err != nil {
			t.Fatal(err)
		}
	}
}

// TestZSocketBinding: sockets report the type they were opened with, the
// listeners' options are accepted, libzmq's errors come back as errnos that
// match syscall's under errors.Is with libzmq's message, and close and term
// are idempotent and ordered as libzmq requires.
func TestZSocketBinding(t *testing.T) {
	ctx, err := newZContext()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.setMaxSockets(16); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ  int
		want int
	}{{zSUB, 2}, {zPAIR, 0}, {zDEALER, 5}} { // ZMQ_SUB, ZMQ_PAIR, ZMQ_DEALER in zmq.h
		s, err := ctx.socket(zopt(c.typ))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.socketType(); got != c.want {
			t.Errorf("socket %d: ZMQ_TYPE %d, want %d", c.typ, got, c.want)
		}
		if err := setInts(s, optLinger, 0, optIPv6, 1, optRcvHWM, 1000, optReconnectIvl, 100, optReconnectIvlMax, 1000); err != nil {
			t.Errorf("socket %d: %v", c.typ, err)
		}
		if err := s.close(); err != nil {
			t.Fatal(err)
		}
		if err := s.close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
	}
	s, err := ctx.socket(zSUB)
	if err != nil {
		t.Fatal(err)
	}
	for ep, want := range map[string]syscall.Errno{
		"nonsense":                 syscall.EINVAL,
		"tcp://":                   syscall.EINVAL,
		"nosuchproto://x":          syscall.EPROTONOSUPPORT,
		"tcp://127.0.0.1:notaport": syscall.EINVAL,
	} {
		err := s.connect(ep)
		if !errors.Is(err, want) || err.Error() == "" {
			t.Errorf("connect %q: %v, want %v", ep, err, want)
		}
	}
	if err := s.setInt(9999, 1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unknown option: %v, want EINVAL", err)
	}
	_ = s.close()
	if err := ctx.term(); err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.socket(zPAIR); !errors.Is(err, errClosed) {
		t.Fatalf("socket after term: %v", err)
	}
	// libzmq's private errnos print libzmq's message, not "errno N".
	if msg := zmqErrno(156384763).Error(); msg == "" || msg == syscall.Errno(156384763).Error() {
		t.Errorf("EFSM prints %q", msg)
	}
}

// TestParseMonitorEvent: the v1 monitor message layout of zmq_socket_monitor(3).
func TestParseMonitorEvent(t *testing.T) {
	f := func(frames [][]byte, wantEv uint16, wantPeer string, wantOK bool) {
		t.Helper()
		ev, peer, ok := parseMonitorEvent(frames)
		if ok != wantOK || ok && (ev != wantEv || string(peer) != wantPeer) {
			t.Fatalf("%q: %d %q %v", frames, ev, peer, ok)
		}
	}
	head := make([]byte, 6)
	head[0], head[1] = 0x00, 0x10 // 0x1000 HANDSHAKE_SUCCEEDED, little-endian (amd64, arm64)
	f([][]byte{head, []byte("tcp://127.0.0.1:5557")}, evHandshakeSucceeded, "tcp://127.0.0.1:5557", true)
	f([][]byte{head}, 0, "", false)
	f([][]byte{head[:5], []byte("x")}, 0, "", false)
	f([][]byte{head, []byte("x"), []byte("y")}, 0, "", false)
	if eventName(evDisconnected) != "DISCONNECTED" || eventName(3) != "event 3" {
		t.Fatal(eventName(evDisconnected), eventName(3))
	}
}

func TestFrameReader(t *testing.T) {
	tx, rx := pairSockets(t)
	r := newFrameReader(initialFrameBuf)
	defer r.free()
	big := bytes.Repeat([]byte{0xab}, 3*initialFrameBuf+17) // forces growth
	cases := [][][]byte{
		{[]byte("topic"), {0, 0, 0, 0, 0, 0, 0, 7}, []byte("payload")},
		{{}, {}, {}},
		{[]byte("one")},
		{nil, []byte("x"), big},
		{[]byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e"), []byte("f"), []byte("g")},
		{[]byte("after"), []byte("the"), []byte("long one")},
	}
	for i, msg := range cases {
		sendMsg(t, tx, msg...)
		got, err := r.read(rx)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		want := msg
		if len(want) > maxKeptFrames {
			want = want[:maxKeptFrames]
		}
		if len(got) != len(want) {
			t.Fatalf("case %d: %d frames, want %d", i, len(got), len(want))
		}
		for j := range want {
			if !bytes.Equal(got[j], want[j]) {
				t.Fatalf("case %d frame %d: got %d bytes, want %d", i, j, len(got[j]), len(want[j]))
			}
		}
	}
	if _, err := r.read(rx); !isEAGAIN(err) {
		t.Fatalf("empty socket: got %v, want EAGAIN", err)
	}
	// A huge message grows the buffer; the next read drops it again.
	huge := bytes.Repeat([]byte{1}, maxKeptFrameBuf+1)
	for _, m := range [][]byte{huge, []byte("small")} {
		sendMsg(t, tx, m)
		got, err := r.read(rx)
		if err != nil || len(got) != 1 || !bytes.Equal(got[0], m) {
			t.Fatalf("read %d bytes: %v", len(m), err)
		}
	}
	if len(r.buf) != initialFrameBuf {
		t.Fatalf("buffer kept at %d bytes after a huge message", len(r.buf))
	}
}

// TestFrameReaderMax: a message whose kept frames exceed max is refused with
// ErrMessageTooBig without growing the buffer, whether it would have fitted the
// current buffer or not, and the stream stays aligned for the next message.
func TestFrameReaderMax(t *testing.T) {
	tx, rx := pairSockets(t)
	r := newFrameReader(initialFrameBuf)
	defer r.free()
	r.max = 1000
	f := func(frames [][]byte, wantErr error) {
		t.Helper()
		sendMsg(t, tx, frames...)
		got, err := r.read(rx)
		if !errors.Is(err, wantErr) {
			t.Fatalf("%d frames: err %v, want %v", len(frames), err, wantErr)
		}
		if wantErr == nil && (len(got) != len(frames) || !bytes.Equal(got[len(got)-1], frames[len(frames)-1])) {
			t.Fatalf("%d frames: got %d", len(frames), len(got))
		}
	}
	f([][]byte{make([]byte, 600), make([]byte, 400)}, nil)               // exactly max
	f([][]byte{make([]byte, 600), make([]byte, 401)}, ErrMessageTooBig)  // fits the buffer, above max
	f([][]byte{make([]byte, 10), make([]byte, 1<<20)}, ErrMessageTooBig) // would grow the buffer
	f([][]byte{[]byte("next"), []byte("message")}, nil)
	// A refused message still yields its frames of at most smallFrame
	// bytes (topic, sequence) and elidedFrame for the larger ones, whether
	// its frames had been copied (it fitted the buffer) or not, and its size.
	seq := []byte{0, 0, 0, 0, 0, 0, 1, 2}
	for _, payload := range [][]byte{make([]byte, 1200), make([]byte, 1<<20)} {
		sendMsg(t, tx, []byte("kv"), seq, payload)
		got, err := r.read(rx)
		if !errors.Is(err, ErrMessageTooBig) || len(got) != 3 || string(got[0]) != "kv" || !bytes.Equal(got[1], seq) ||
			&got[2][0] != &elidedFrame[0] || r.elided != 1<<2 || r.size != 2+8+len(payload) {
			t.Fatalf("refused %d-byte payload: frames %q, elided %b, size %d, err %v", len(payload), got, r.elided, r.size, err)
		}
	}
	f([][]byte{[]byte("after"), []byte("refused")}, nil)
	if len(r.buf) != initialFrameBuf {
		t.Fatalf("buffer grew to %d bytes for refused messages", len(r.buf))
	}
}
