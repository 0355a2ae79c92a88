package bench

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// msgpackAnswer is a hand-built msgpack /query answer: instances with their
// longest_matched and one other field each, plus an unrelated top-level key.
func msgpackAnswer(rows map[string]int64) []byte {
	b := msgp.AppendMapHeader(nil, 2)
	b = msgp.AppendString(b, "other")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendInt(b, 7)
	b = msgp.AppendString(b, "instances")
	b = msgp.AppendMapHeader(b, uint32(len(rows)))
	for id, n := range rows {
		b = msgp.AppendString(b, id)
		b = msgp.AppendMapHeader(b, 2)
		b = msgp.AppendString(b, "device")
		b = msgp.AppendInt64(b, n)
		b = msgp.AppendString(b, "longest_matched")
		b = msgp.AppendInt64(b, n)
	}
	return b
}

func TestExpectCheck(t *testing.T) {
	const mp, js = "application/msgpack", "application/json"
	want := &Expect{Instance: "engine-a", LongestMatched: 1024}
	f := func(ct string, body []byte, ok bool) {
		t.Helper()
		err := want.Check(ct, body)
		if ok != (err == nil) || err != nil && !errors.Is(err, ErrLoadAnswer) {
			t.Fatalf("%s %q: err %v, want ok=%v", ct, body, err, ok)
		}
	}
	f(mp, msgpackAnswer(map[string]int64{"engine-a": 1024}), true)
	f(mp, msgpackAnswer(map[string]int64{"engine-b": 16, "engine-a": 1024}), true)
	f(mp, msgpackAnswer(map[string]int64{"engine-a": 1008}), false)
	f(mp, msgpackAnswer(map[string]int64{"engine-b": 1024}), false)
	f(mp, msgpackAnswer(nil), false)
	f(mp, []byte{0x80}, false) // {}
	f(mp, msgpackAnswer(map[string]int64{"engine-a": 1024})[:20], false)
	f(mp, append(msgpackAnswer(map[string]int64{"engine-a": 1024}), 0xc0), false)
	f(mp, nil, false)
	f(js, []byte(`{"default":{"engine-a":{"longest_matched":1024,"device":1024}}}`), true)
	f(js, []byte(`{"default":{"engine-b":{"longest_matched":0},"engine-a":{"longest_matched":1024}}}`), true)
	f(js, []byte(`{"default":{"engine-a":{"longest_matched":16}}}`), false)
	f(js, []byte(`{"default":{"engine-a":{"device":1024}}}`), false)
	f(js, []byte(`{"default":{"engine-b":{"longest_matched":1024}}}`), false)
	f(js, []byte(`{"t1":{},"default":{"engine-a":{"longest_matched":1024}}}`), false)
	f(js, []byte(`{}`), false)
	f(js, []byte(`{"default":{"engine-a":{"longest_matched":1024}}`), false)
	f(js, nil, false)
}

// TestLoadChecksEveryAnswer: a server answering 200 with a wrong body fails
// the run, whether the body is wrong from the start (`{}`, another count) or
// only after many right answers (so every body is checked, not the first).
func TestLoadChecksEveryAnswer(t *testing.T) {
	right := []byte(`{"default":{"engine-a":{"longest_matched":1024}}}`)
	want := &Expect{Instance: "engine-a", LongestMatched: 1024}
	run := func(answer func(n int64) []byte) error {
		var served atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write(answer(served.Add(1)))
		}))
		defer srv.Close()
		_, err := RunLoad(context.Background(), LoadOptions{Addr: srv.Listener.Addr().String(), ContentType: "application/json",
			Body: []byte(`{}`), Connections: 2, Requests: 400, Expect: want})
		return err
	}
	if err := run(func(int64) []byte { return right }); err != nil {
		t.Fatalf("right answers: %v", err)
	}
	for name, answer := range map[string]func(n int64) []byte{
		"empty object": func(int64) []byte { return []byte(`{}`) },
		"wrong count":  func(int64) []byte { return []byte(`{"default":{"engine-a":{"longest_matched":16}}}`) },
		"wrong late": func(n int64) []byte {
			if n > 300 {
				return []byte(`{}`)
			}
			return right
		},
	} {
		if err := run(answer); !errors.Is(err, ErrLoadAnswer) {
			t.Fatalf("%s: err %v, want ErrLoadAnswer", name, err)
		}
	}
	if _, err := RunLoad(context.Background(), LoadOptions{Addr: "127.0.0.1:1", Body: []byte(`{}`)}); err == nil {
		t.Fatal("RunLoad without Expect ran")
	}
}
