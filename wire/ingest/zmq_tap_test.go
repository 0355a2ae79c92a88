package ingest_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/wire"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// TestTap: a Tap receives a publisher's live messages whole, reports the
// connection, and replays from a sequence it saw in the publisher's reply
// form (4 frames, then 3) up to the end marker.
func TestTap(t *testing.T) {
	for _, frames := range []int{4, 3} {
		pub := newPublisher(t, bench.PublisherOptions{ReplyFrames: frames, Topic: []byte("kv")})
		tap, err := ingest.OpenTap(pub.Endpoint(), ingest.IngestOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A SUB misses what is published before it joins: publish until one arrives.
		var seq uint64
		var payload []byte
		waitFor(t, "a live message", func() bool {
			publish(t, pub, []byte{0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x90, 0x00})
			msg, ok, err := tap.Next(20 * time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return false
			}
			topic, s, p, err := wire.ParseLive(msg)
			if err != nil || string(topic) != "kv" {
				t.Fatalf("live message %q: %v", msg, err)
			}
			seq, payload = s, bytes.Clone(p)
			return true
		})
		if now, ever, _ := tap.Connected(); !now || !ever {
			t.Fatalf("connected %v, ever %v", now, ever)
		}
		var replies [][]byte
		end := false
		err = tap.Replay(pub.ReplayEndpoint(), seq, 5*time.Second, func(fr [][]byte) bool {
			if len(fr) != frames {
				t.Errorf("%d-frame reply from a %d-frame publisher", len(fr), frames)
			}
			s, p, e, err := wire.ParseReplayReply(fr)
			if err != nil {
				t.Fatal(err)
			}
			if e {
				end = true
				return false
			}
			if len(replies) == 0 && (s != seq || !bytes.Equal(p, payload)) {
				t.Errorf("first reply seq %d, want %d with the live payload", s, seq)
			}
			replies = append(replies, bytes.Clone(p))
			return true
		})
		if err != nil || !end || len(replies) == 0 || int(pub.NextSeq()-seq) != len(replies) {
			t.Fatalf("replay: %v, end %v, %d replies from %d, next %d", err, end, len(replies), seq, pub.NextSeq())
		}
		tap.Close()
		tap.Close()
	}
}

// TestTapBounds: nothing published is a timeout, not an error; a replay
// endpoint with no ROUTER behind it is ErrTapTimeout within the bound;
// endpoints libzmq cannot connect to are refused; a message above
// MaxMessageBytes is never handed over.
func TestTapBounds(t *testing.T) {
	pub := newPublisher(t, bench.PublisherOptions{NoReplay: true})
	tap, err := ingest.OpenTap(pub.Endpoint(), ingest.IngestOptions{MaxMessageBytes: 64, ReceiveQueueBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	if _, ok, err := tap.Next(50 * time.Millisecond); ok || err != nil {
		t.Fatalf("nothing published: ok %v, %v", ok, err)
	}
	start := time.Now()
	if err := tap.Replay("tcp://127.0.0.1:1", 0, 100*time.Millisecond, func([][]byte) bool { return true }); !errors.Is(err, ingest.ErrTapTimeout) {
		t.Fatalf("replay with no ROUTER: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("replay timeout took %v", d)
	}
	for _, ep := range []string{"tcp://*:5557", "udp://x:1", ""} {
		if _, err := ingest.OpenTap(ep, ingest.IngestOptions{}); !errors.Is(err, ingest.ErrBadEndpoint) {
			t.Errorf("OpenTap(%q): %v", ep, err)
		}
		if err := tap.Replay(ep, 0, time.Millisecond, nil); !errors.Is(err, ingest.ErrBadEndpoint) {
			t.Errorf("Replay(%q): %v", ep, err)
		}
	}
	small := []byte{0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x90, 0x00}
	waitFor(t, "a small message", func() bool {
		publish(t, pub, small)
		_, ok, err := tap.Next(20 * time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	publish(t, pub, make([]byte, 1000))
	for i := 0; i < 5; i++ {
		if msg, ok, _ := tap.Next(20 * time.Millisecond); ok && len(msg) == 3 && len(msg[2]) > 64 {
			t.Fatalf("a %d-byte payload handed over", len(msg[2]))
		}
	}
}
