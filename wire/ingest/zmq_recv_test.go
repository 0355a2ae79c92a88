package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	zmq "github.com/pebbe/zmq4"
)

// pairSockets returns a connected inproc PAIR pair in a fresh context.
func pairSockets(t testing.TB) (tx, rx *zmq.Socket) {
	t.Helper()
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	rx, err = ctx.NewSocket(zmq.PAIR)
	if err != nil {
		t.Fatal(err)
	}
	tx, err = ctx.NewSocket(zmq.PAIR)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("inproc://recv-test-%p", t)
	if err := rx.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := tx.Connect(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.Close()
		_ = rx.Close()
		_ = ctx.Term()
	})
	return tx, rx
}

// TestSocketHandle proves socketHandle's layout assumption (see its Safety note).
func TestSocketHandle(t *testing.T) {
	if unsafe.Sizeof(pebbeSocket{}) != unsafe.Sizeof(zmq.Socket{}) {
		t.Fatalf("zmq.Socket layout changed: %d bytes, mirror %d", unsafe.Sizeof(zmq.Socket{}), unsafe.Sizeof(pebbeSocket{}))
	}
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Term()
	for _, typ := range []zmq.Type{zmq.SUB, zmq.DEALER, zmq.PAIR, zmq.ROUTER} {
		s, err := ctx.NewSocket(typ)
		if err != nil {
			t.Fatal(err)
		}
		if !handleMatches(s) {
			t.Errorf("%v: handle does not answer ZMQ_TYPE like the socket", typ)
		}
		_ = s.Close()
	}
}

func TestFrameReader(t *testing.T) {
	tx, rx := pairSockets(t)
	r := newFrameReader()
	defer r.free()
	if !handleMatches(rx) {
		t.Fatal("fast path unavailable")
	}
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
		for j, f := range msg {
			flag := zmq.Flag(0)
			if j < len(msg)-1 {
				flag = zmq.SNDMORE
			}
			if _, err := tx.SendBytes(f, flag); err != nil {
				t.Fatal(err)
			}
		}
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
		if _, err := tx.SendBytes(m, 0); err != nil {
			t.Fatal(err)
		}
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
	r := newFrameReader()
	defer r.free()
	r.max = 1000
	send := func(frames ...[]byte) {
		t.Helper()
		for j, f := range frames {
			flag := zmq.Flag(0)
			if j < len(frames)-1 {
				flag = zmq.SNDMORE
			}
			if _, err := tx.SendBytes(f, flag); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := func(frames [][]byte, wantErr error) {
		t.Helper()
		send(frames...)
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
	if len(r.buf) != initialFrameBuf {
		t.Fatalf("buffer grew to %d bytes for refused messages", len(r.buf))
	}
}
