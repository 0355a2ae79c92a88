package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// capturePub stands in for an engine's ZmqEventPublisher in the capture
// replay tests: an XPUB socket that sends captured messages frame for frame
// (an XPUB is a PUB that also reports its subscribers, so nothing is sent
// before a subscriber is there to get it), and a ROUTER replay socket that
// answers each request as the upstream publisher does: a reply
// ["", seq, payload] for every message sent so far at or after the requested
// sequence, then the end marker. A request equal to scripted.req is answered
// with scripted.replies instead, frame for frame (the captured replay
// exchange).
//
// The XPUB is used by the test goroutine only; the ROUTER by its own
// goroutine. mu guards what they share.
type capturePub struct {
	t        *testing.T
	ctx      *zmq.Context
	pub      *zmq.Socket
	endpoint string
	replayEP string

	mu       sync.Mutex
	ring     [][][]byte // the live messages sent, [topic, seq, payload]
	end      [][]byte   // the end marker's frames after the identity
	scripted *scriptedReplay
	requests [][][]byte // every request received, without the identity frame
	reqCh    chan struct{}

	stop, stopped chan struct{}
}

// scriptedReplay is a captured replay exchange: the request frames the
// publisher's ROUTER must receive and the reply frames it sends back.
type scriptedReplay struct {
	req     [][]byte
	replies [][][]byte
	used    bool
}

// newCapturePub binds an XPUB and a ROUTER on loopback ports of the system's
// choosing. end is the end marker's frames (["", ff×8, ""] on the wire).
func newCapturePub(t *testing.T, end [][]byte) *capturePub {
	t.Helper()
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	p := &capturePub{t: t, ctx: ctx, end: end, reqCh: make(chan struct{}, 64),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	p.pub = p.bindXPUB("tcp://127.0.0.1:*")
	if p.endpoint, err = p.pub.GetLastEndpoint(); err != nil {
		t.Fatal(err)
	}
	r, err := ctx.NewSocket(zmq.ROUTER)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := r.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	if p.replayEP, err = r.GetLastEndpoint(); err != nil {
		t.Fatal(err)
	}
	go p.serveReplay(r)
	t.Cleanup(func() {
		close(p.stop)
		<-p.stopped
		if p.pub != nil {
			_ = p.pub.Close()
		}
		_ = ctx.Term()
	})
	return p
}

func (p *capturePub) bindXPUB(endpoint string) *zmq.Socket {
	p.t.Helper()
	s, err := p.ctx.NewSocket(zmq.XPUB)
	if err != nil {
		p.t.Fatal(err)
	}
	// Every subscription is reported, also a second subscriber's to the
	// same (empty) topic.
	if err := s.SetXpubVerbose(1); err != nil {
		p.t.Fatal(err)
	}
	if err := s.SetLinger(0); err != nil {
		p.t.Fatal(err)
	}
	// The port of a closed socket is released by libzmq's I/O thread, a
	// moment after Close: a rebind retries until then.
	deadline := time.Now().Add(waitBound)
	for {
		err := s.Bind(endpoint)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("bind %s: %v", endpoint, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitSubscribers waits until n subscriptions arrived on the XPUB.
func (p *capturePub) awaitSubscribers(n int) {
	p.t.Helper()
	if err := p.pub.SetRcvtimeo(waitBound); err != nil {
		p.t.Fatal(err)
	}
	for got := 0; got < n; {
		msg, err := p.pub.RecvBytes(0)
		if err != nil {
			p.t.Fatalf("waiting for subscriber %d of %d on %s: %v", got+1, n, p.endpoint, err)
		}
		if len(msg) > 0 && msg[0] == 1 { // a subscription; 0 is a subscriber going away
			got++
		}
	}
}

// send publishes one captured live message, frame for frame, and keeps it
// in the ring the replay socket answers from.
func (p *capturePub) send(frames [][]byte) {
	p.t.Helper()
	for i, f := range frames {
		flag := zmq.SNDMORE
		if i == len(frames)-1 {
			flag = 0
		}
		if _, err := p.pub.SendBytes(f, flag); err != nil {
			p.t.Fatalf("send: %v", err)
		}
	}
	p.mu.Lock()
	p.ring = append(p.ring, frames)
	p.mu.Unlock()
}

// reconnect closes the XPUB and binds a new one at the same address, as a
// publisher socket that went away and came back: its subscribers reconnect.
func (p *capturePub) reconnect() {
	p.t.Helper()
	if err := p.pub.Close(); err != nil {
		p.t.Fatal(err)
	}
	p.pub = nil
	p.pub = p.bindXPUB(p.endpoint)
}

// script makes the replay socket answer a request equal to req with replies.
func (p *capturePub) script(req [][]byte, replies [][][]byte) {
	p.mu.Lock()
	p.scripted = &scriptedReplay{req: req, replies: replies}
	p.mu.Unlock()
}

// awaitRequests waits until n replay requests were answered and returns
// every request received.
func (p *capturePub) awaitRequests(n int) [][][]byte {
	p.t.Helper()
	timeout := time.After(waitBound)
	for {
		p.mu.Lock()
		got := len(p.requests)
		reqs := append([][][]byte(nil), p.requests...)
		p.mu.Unlock()
		if got >= n {
			return reqs
		}
		select {
		case <-p.reqCh:
		case <-timeout:
			p.t.Fatalf("%d replay requests on %s, want %d", got, p.replayEP, n)
		}
	}
}

// serveReplay answers replay requests until stop.
func (p *capturePub) serveReplay(r *zmq.Socket) {
	defer close(p.stopped)
	defer r.Close()
	poller := zmq.NewPoller()
	poller.Add(r, zmq.POLLIN)
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		polled, err := poller.Poll(20 * time.Millisecond)
		if err != nil || len(polled) == 0 {
			continue
		}
		msg, err := r.RecvMessageBytes(0)
		if err != nil || len(msg) < 1 {
			continue
		}
		id, req := msg[0], msg[1:]
		if err := p.answer(r, id, req); err != nil {
			p.t.Errorf("replay reply: %v", err)
		}
		p.mu.Lock()
		p.requests = append(p.requests, req)
		p.mu.Unlock()
		select {
		case p.reqCh <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

var errBadRequest = errors.New("not a replay request [\"\", seq]")

// answer sends the replies to one request, each prefixed with the
// requester's identity.
func (p *capturePub) answer(r *zmq.Socket, id []byte, req [][]byte) error {
	p.mu.Lock()
	var replies [][][]byte
	if s := p.scripted; s != nil && !s.used && framesEqual(req, s.req) {
		s.used = true
		replies = s.replies
	} else if len(req) == 2 && len(req[0]) == 0 && len(req[1]) == 8 {
		from := binary.BigEndian.Uint64(req[1])
		for _, m := range p.ring {
			if binary.BigEndian.Uint64(m[1]) >= from {
				replies = append(replies, [][]byte{{}, m[1], m[2]})
			}
		}
		replies = append(replies, p.end)
	} else {
		p.mu.Unlock()
		return errBadRequest
	}
	p.mu.Unlock()
	for _, frames := range replies {
		if _, err := r.SendBytes(id, zmq.SNDMORE); err != nil {
			return err
		}
		for i, f := range frames {
			flag := zmq.SNDMORE
			if i == len(frames)-1 {
				flag = 0
			}
			if _, err := r.SendBytes(f, flag); err != nil {
				return err
			}
		}
	}
	return nil
}

func framesEqual(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
