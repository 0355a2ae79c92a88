package bench

import (
	"encoding/binary"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// TestPublisherSharedContext: two publishers made in one context both reach
// a subscriber; closing one leaves the other publishing and the context
// alive, and once both are closed the context terminates (zmq_ctx_term
// blocks while any socket of it is open).
func TestPublisherSharedContext(t *testing.T) {
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	var pubs [2]*Publisher
	for i := range pubs {
		if pubs[i], err = NewPublisher(PublisherOptions{Context: ctx, NoReplay: true, Topic: []byte{byte('a' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := ctx.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetLinger(0)
	_ = sub.SetSubscribe("")
	_ = sub.SetRcvtimeo(20 * time.Millisecond)
	for _, p := range pubs {
		if err := sub.Connect(p.Endpoint()); err != nil {
			t.Fatal(err)
		}
	}
	// receive publishes from p until sub gets one of p's messages (the
	// subscription reaches a PUB some time after the connect), and returns
	// the payload and sequence received.
	receive := func(p *Publisher, payload string) (string, uint64) {
		t.Helper()
		for deadline := time.Now().Add(waitBound); time.Now().Before(deadline); {
			if _, err := p.Publish([]byte(payload)); err != nil {
				t.Fatal(err)
			}
			msg, err := sub.RecvMessageBytes(0)
			if err != nil {
				continue // the timeout: not connected yet
			}
			if len(msg) == 3 && string(msg[0]) == string(p.opts.Topic) {
				return string(msg[2]), binary.BigEndian.Uint64(msg[1])
			}
		}
		t.Fatalf("%v never reached the subscriber", p)
		return "", 0
	}
	if got, _ := receive(pubs[0], "zero"); got != "zero" {
		t.Fatalf("publisher 0 sent %q", got)
	}
	if got, _ := receive(pubs[1], "one"); got != "one" {
		t.Fatalf("publisher 1 sent %q", got)
	}
	if err := pubs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pubs[0].Publish([]byte("late")); err != ErrClosed {
		t.Fatalf("publish after close: %v", err)
	}
	// Publisher 1's next batch arrives with its next sequence: the shared
	// context outlived publisher 0.
	before := pubs[1].NextSeq()
	if got, seq := receive(pubs[1], "still"); got != "still" || seq < before {
		t.Fatalf("publisher 1 after publisher 0 closed: %q seq %d (next was %d)", got, seq, before)
	}
	if err := pubs[1].Close(); err != nil {
		t.Fatal(err)
	}
	_ = sub.Close()
	done := make(chan error, 1)
	go func() { done <- ctx.Term() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitBound):
		t.Fatal("the shared context did not terminate: a publisher left a socket open")
	}
}
