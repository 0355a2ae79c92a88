// Package bench is conductor's load harness: simulated KV-event publishers over
// real ZMQ, payload builders for every dialect, the one load runner (RunLoad)
// and HTTP/1.1 client (Conn) every query load uses, and the benchmarks that
// drive them.
package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// PublisherOptions configure a simulated engine publisher. The zero value is valid.
type PublisherOptions struct {
	// Endpoint the PUB socket binds. Default "tcp://127.0.0.1:*" (a free port;
	// Endpoint() returns the bound address). Binding a fixed address that was
	// just released is retried for up to a second (libzmq frees ports
	// asynchronously), so a "restarted" publisher can take its predecessor's.
	Endpoint string
	// ReplayEndpoint the ROUTER replay socket binds. Default "tcp://127.0.0.1:*".
	ReplayEndpoint string
	// NoReplay: no ROUTER socket at all (like the Mooncake master).
	NoReplay bool
	// ReplyFrames is the replay reply shape: 3 = ["", seq, payload] (SGLang, vLLM
	// before PR #45177) or 4 = ["", topic, seq, payload] (newer vLLM). Default 4.
	ReplyFrames int
	// Topic is frame 0 of every live message (and of 4-frame replies). Default "".
	Topic []byte
	// Ring is how many batches are kept for replay (vLLM's buffer_steps).
	// Default 10000.
	Ring int
	// SndHWM is the PUB socket's send high-water mark in messages (vLLM's hwm).
	// Default 100000; negative means 0 (unlimited).
	SndHWM int
	// FirstSeq is the sequence number of the first batch. Default 0.
	FirstSeq uint64
	// ReplayDelay delays each replay answer (a slow publisher); the answer holds
	// the ring as it was when the request arrived. Default 0.
	ReplayDelay time.Duration
	// IPv6 sets ZMQ_IPV6 on both sockets, so that a wildcard bind
	// (tcp://*:P) answers on IPv6 and IPv4 addresses alike. Default false.
	IPv6 bool
	// Context is a libzmq context to make the sockets in, shared with other
	// publishers: one I/O thread and no per-publisher context threads, for a
	// process that hosts hundreds of publishers (its ZMQ_MAX_SOCKETS must
	// leave room for two sockets per publisher). Close leaves it to its owner
	// to terminate. Default nil: a context of the publisher's own, terminated
	// by Close.
	Context *zmq.Context
}

// Publisher simulates a vLLM / SGLang / Mooncake-master KV-event publisher: a PUB
// socket sending [topic, seq (8 bytes BE), payload] and, unless NoReplay, a ROUTER
// replay socket that implements vLLM's protocol: a request [identity, "", start
// (8 bytes BE)] is answered with every ring entry whose seq ≥ start, in order, then
// the end marker (seq 2^64−1, empty payload); any other request gets no reply.
//
// Publish methods are safe for concurrent use (mu serialises the PUB socket, which
// libzmq allows to move between threads under a lock). The ROUTER is owned by one
// goroutine. Payloads are kept by reference: do not modify them after publishing.
type Publisher struct {
	opts     PublisherOptions
	ctx      *zmq.Context
	ownCtx   bool // ctx is the publisher's own: Close terminates it
	endpoint string
	replayEP string

	// mu guards pub, ring, next and requests: held per publish (a few µs), and by
	// the replay goroutine while it copies the ring entries it will send.
	mu       sync.Mutex
	pub      *zmq.Socket
	ring     []ringEntry // circular, ringLen entries from ringHead
	ringHead int
	ringLen  int
	next     uint64
	requests []uint64
	closed   bool

	stop chan struct{}
	done chan struct{}
}

type ringEntry struct {
	seq     uint64
	payload []byte
}

// ReplayEnd is the end marker's sequence number.
const ReplayEnd = ^uint64(0)

// NewPublisher binds the sockets and starts the replay goroutine.
func NewPublisher(opts PublisherOptions) (*Publisher, error) {
	if opts.Endpoint == "" {
		opts.Endpoint = "tcp://127.0.0.1:*"
	}
	if opts.ReplayEndpoint == "" {
		opts.ReplayEndpoint = "tcp://127.0.0.1:*"
	}
	if opts.ReplyFrames == 0 {
		opts.ReplyFrames = 4
	}
	if opts.ReplyFrames != 3 && opts.ReplyFrames != 4 {
		return nil, fmt.Errorf("bench: ReplyFrames=%d: want 3 or 4", opts.ReplyFrames)
	}
	if opts.Ring == 0 {
		opts.Ring = 10000
	}
	switch {
	case opts.SndHWM == 0:
		opts.SndHWM = 100000
	case opts.SndHWM < 0:
		opts.SndHWM = 0
	}
	ctx := opts.Context
	if ctx == nil {
		var err error
		if ctx, err = zmq.NewContext(); err != nil {
			return nil, err
		}
	}
	p := &Publisher{opts: opts, ctx: ctx, ownCtx: opts.Context == nil, next: opts.FirstSeq, ring: make([]ringEntry, opts.Ring),
		stop: make(chan struct{}), done: make(chan struct{})}
	fail := func(err error) (*Publisher, error) {
		if p.pub != nil {
			_ = p.pub.Close()
		}
		if p.ownCtx {
			_ = ctx.Term()
		}
		return nil, err
	}
	var err error
	if p.pub, err = ctx.NewSocket(zmq.PUB); err != nil {
		return fail(err)
	}
	_ = p.pub.SetLinger(0)
	if err = p.pub.SetIpv6(opts.IPv6); err != nil {
		return fail(err)
	}
	if err = p.pub.SetSndhwm(opts.SndHWM); err != nil {
		return fail(err)
	}
	if p.endpoint, err = bindRetry(p.pub, opts.Endpoint); err != nil {
		return fail(err)
	}
	if opts.NoReplay {
		close(p.done)
		return p, nil
	}
	router, err := ctx.NewSocket(zmq.ROUTER)
	if err != nil {
		return fail(err)
	}
	_ = router.SetLinger(0)
	_ = router.SetIpv6(opts.IPv6)
	_ = router.SetSndhwm(0) // a whole ring must fit: a ROUTER drops what does not
	if p.replayEP, err = bindRetry(router, opts.ReplayEndpoint); err != nil {
		_ = router.Close()
		return fail(err)
	}
	go p.serveReplay(router)
	return p, nil
}

// bindRetry binds ep, retrying EADDRINUSE for up to a second, and returns the
// bound address (ZMQ_LAST_ENDPOINT resolves a "*" port).
func bindRetry(s *zmq.Socket, ep string) (string, error) {
	deadline := time.Now().Add(time.Second)
	for {
		err := s.Bind(ep)
		if err == nil {
			return s.GetLastEndpoint()
		}
		if zmq.AsErrno(err) != zmq.EADDRINUSE || time.Now().After(deadline) {
			return "", fmt.Errorf("bench: bind %s: %w", ep, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Endpoint is the bound PUB address (what a subscriber registers as endpoint).
func (p *Publisher) Endpoint() string { return p.endpoint }

// ReplayEndpoint is the bound ROUTER address, or "" with NoReplay.
func (p *Publisher) ReplayEndpoint() string { return p.replayEP }

// NextSeq is the sequence the next published batch gets.
func (p *Publisher) NextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}

// ReplayRequests returns the start sequences of the well-formed replay requests
// received so far.
func (p *Publisher) ReplayRequests() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint64(nil), p.requests...)
}

// ErrClosed is returned by methods of a closed Publisher.
var ErrClosed = errors.New("bench: publisher closed")

// Publish sends payload as the next batch and keeps it in the replay ring.
func (p *Publisher) Publish(payload []byte) (uint64, error) { return p.publish(payload, true) }

// PublishHidden gives payload the next sequence and keeps it in the replay ring
// without sending it live: the subscriber sees a gap that replay can heal.
func (p *Publisher) PublishHidden(payload []byte) (uint64, error) { return p.publish(payload, false) }

func (p *Publisher) publish(payload []byte, live bool) (uint64, error) {
	var seqb [8]byte
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	seq := p.next
	if live {
		binary.BigEndian.PutUint64(seqb[:], seq)
		if err := sendFrames(p.pub, p.opts.Topic, seqb[:], payload); err != nil {
			return 0, err
		}
	}
	p.next++
	i := (p.ringHead + p.ringLen) % len(p.ring)
	if p.ringLen == len(p.ring) {
		p.ringHead = (p.ringHead + 1) % len(p.ring)
	} else {
		p.ringLen++
	}
	p.ring[i] = ringEntry{seq: seq, payload: payload}
	return seq, nil
}

// SendRaw sends an arbitrary multipart message on the PUB socket (a misbehaving
// publisher); it does not touch the sequence or the ring.
func (p *Publisher) SendRaw(frames ...[]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	return sendFrames(p.pub, frames...)
}

func sendFrames(s *zmq.Socket, frames ...[]byte) error {
	for i, f := range frames {
		flag := zmq.Flag(0)
		if i < len(frames)-1 {
			flag = zmq.SNDMORE
		}
		if _, err := s.SendBytes(f, flag); err != nil {
			return err
		}
	}
	return nil
}

// serveReplay owns the ROUTER socket until Close.
func (p *Publisher) serveReplay(router *zmq.Socket) {
	defer close(p.done)
	defer router.Close()
	poller := zmq.NewPoller()
	poller.Add(router, zmq.POLLIN)
	var seqb [8]byte
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		polled, err := poller.Poll(20 * time.Millisecond)
		if err != nil {
			return
		}
		if len(polled) == 0 {
			continue
		}
		msg, err := router.RecvMessageBytes(0)
		if err != nil {
			return
		}
		// [identity, "", start(8)]; anything else is ignored, as vLLM does.
		if len(msg) != 3 || len(msg[1]) != 0 || len(msg[2]) != 8 {
			continue
		}
		id, start := msg[0], binary.BigEndian.Uint64(msg[2])
		p.mu.Lock()
		p.requests = append(p.requests, start)
		var out []ringEntry
		for k := 0; k < p.ringLen; k++ {
			e := p.ring[(p.ringHead+k)%len(p.ring)]
			if e.seq >= start {
				out = append(out, e)
			}
		}
		p.mu.Unlock()
		if p.opts.ReplayDelay > 0 {
			select {
			case <-time.After(p.opts.ReplayDelay):
			case <-p.stop:
				return
			}
		}
		for _, e := range out {
			binary.BigEndian.PutUint64(seqb[:], e.seq)
			if p.opts.ReplyFrames == 4 {
				err = sendFrames(router, id, nil, p.opts.Topic, seqb[:], e.payload)
			} else {
				err = sendFrames(router, id, nil, seqb[:], e.payload)
			}
			if err != nil {
				break
			}
		}
		binary.BigEndian.PutUint64(seqb[:], ReplayEnd)
		if p.opts.ReplyFrames == 4 {
			_ = sendFrames(router, id, nil, nil, seqb[:], nil)
		} else {
			_ = sendFrames(router, id, nil, seqb[:], nil)
		}
	}
}

// Close stops the replay goroutine and closes both sockets, and terminates
// the publisher's own context (not a shared PublisherOptions.Context).
// Idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	_ = p.pub.Close()
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	if !p.ownCtx {
		return nil
	}
	return p.ctx.Term()
}

// String describes the publisher for test logs.
func (p *Publisher) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "publisher pub=%s", p.endpoint)
	if p.replayEP != "" {
		fmt.Fprintf(&b, " replay=%s/%d-frame", p.replayEP, p.opts.ReplyFrames)
	}
	return b.String()
}
