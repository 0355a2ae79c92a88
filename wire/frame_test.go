package wire

import (
	"errors"
	"testing"
)

func TestParseLive(t *testing.T) {
	seq := []byte{0, 0, 0, 0, 0, 0, 1, 0}
	f := func(frames [][]byte, wantSeq uint64, wantErr error) {
		t.Helper()
		topic, s, payload, err := ParseLive(frames)
		if !errors.Is(err, wantErr) || (err == nil && (s != wantSeq || &payload[0] != &frames[2][0] || string(topic) != string(frames[0]))) {
			t.Errorf("ParseLive(%x) = %q %d %x %v; want seq %d err %v", frames, topic, s, payload, err, wantSeq, wantErr)
		}
	}
	f([][]byte{{}, seq, {0x90}}, 256, nil)
	f([][]byte{[]byte("kv@pod@model"), seq, {0x90}}, 256, nil)
	f(nil, 0, ErrFrameCount)
	f([][]byte{seq, {0x90}}, 0, ErrFrameCount)
	f([][]byte{{}, seq, {0x90}, {}}, 0, ErrFrameCount)
	f([][]byte{{}, seq[:7], {0x90}}, 0, ErrSeqLength)
	f([][]byte{{}, append(seq, 0), {0x90}}, 0, ErrSeqLength)
}

func TestParseReplayReply(t *testing.T) {
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 42}
	ff := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	p := []byte{0x93}
	f := func(frames [][]byte, wantSeq uint64, wantEnd bool, wantErr error) {
		t.Helper()
		s, payload, end, err := ParseReplayReply(frames)
		if !errors.Is(err, wantErr) || (err == nil && (s != wantSeq || end != wantEnd || (!end && string(payload) != string(p)))) {
			t.Errorf("ParseReplayReply(%x) = %d %x %v %v; want %d %v %v", frames, s, payload, end, err, wantSeq, wantEnd, wantErr)
		}
	}
	f([][]byte{{}, seq, p}, 42, false, nil)
	f([][]byte{{}, []byte("topic"), seq, p}, 42, false, nil)
	f([][]byte{{}, {}, seq, p}, 42, false, nil)
	f([][]byte{{}, ff, {}}, ReplayEndSeq, true, nil)
	f([][]byte{{}, {}, ff, {}}, ReplayEndSeq, true, nil)
	f([][]byte{{}, seq, {}}, 42, true, nil)         // empty last frame: end, whatever the seq
	f([][]byte{{}, ff, p}, ReplayEndSeq, true, nil) // the -1 marker is never a batch
	f([][]byte{{}, p}, 0, false, ErrFrameCount)
	f([][]byte{{}, {}, {}, seq, p}, 0, false, ErrFrameCount)
	f([][]byte{{1}, seq, p}, 0, false, ErrNoDelimiter)
	f([][]byte{{}, seq[:4], p}, 0, false, ErrSeqLength)
	f([][]byte{{}, []byte("topic"), p, seq}, 0, false, ErrSeqLength)
}

func TestAppendReplayRequest(t *testing.T) {
	dst := make([][]byte, 1, 4)
	dst[0] = []byte("keep")
	got := AppendReplayRequest(dst, 0x0102030405060708)
	if len(got) != 3 || string(got[0]) != "keep" || got[1] == nil || len(got[1]) != 0 ||
		string(got[2]) != "\x01\x02\x03\x04\x05\x06\x07\x08" || &got[0] != &dst[0] {
		t.Errorf("AppendReplayRequest = %x", got)
	}
	// The request's frames followed by a payload form a valid 3-frame reply.
	s, _, end, err := ParseReplayReply(append(AppendReplayRequest(nil, 7), []byte{0x90}))
	if err != nil || s != 7 || end {
		t.Errorf("round trip: %d %v %v", s, end, err)
	}
}
