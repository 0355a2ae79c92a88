// Package probe watches a KV-event publisher without registering it and
// reports what it is: the dialect and its era, sequence numbers and gaps,
// data-parallel ranks, media, block sizes, token_ids, LoRA names, cache
// salts, how its replay endpoint answers, the hash profile that reproduces
// its block hashes, and the registration that fits it (a /register body, the
// Python client's call, a configuration-file entry). `conductor probe` is
// its command line.
//
// A probe runs once, on its own libzmq context (ingest.Tap), bounded like a
// registration's listener (the default message limit and queue sizes), and
// decodes with the decoders ingestion uses (wire.DecodeAny). What it keeps
// of the messages is bounded too (observe.go). Run is safe to call from
// several goroutines at once; each call has its own subscriber.
package probe

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// Options say what to probe and how. The zero value of every field but
// Endpoint is its default.
type Options struct {
	// Endpoint is the publisher's PUB socket, e.g. tcp://10.0.0.5:5557.
	// Required.
	Endpoint string
	// Replay is the publisher's replay socket (its ROUTER); the probe asks
	// it to replay from a sequence seen and reports the answer. Default ""
	// (no replay check).
	Replay string
	// Seconds is the longest the probe listens; it stops earlier once it
	// has identified everything. Default 10.
	Seconds int
	// BlockSize is the tokens per block for events that carry no
	// block_size. Default 0: the events'.
	BlockSize int
	// Seed is the engine's PYTHONHASHSEED text, tried with every vLLM
	// algorithm as "0" is. Default "0".
	Seed string
	// Model is the registration's modelname. Default "": the events'
	// model_name, else "my-model".
	Model string
	// InstanceID is the registration's instance_id. Default "": made from
	// the dialect and the endpoint ("vllm-10.0.0.5-5557").
	InstanceID string
}

// DefaultSeconds is Options.Seconds' default.
const DefaultSeconds = 10

// Errors of Run.
var (
	// ErrOptions: Options that Validate refuses.
	ErrOptions = errors.New("conductor probe: invalid options")
	// ErrNothingUsable: the probe saw nothing it can report on (nothing
	// connected, nothing published, nothing decodable); the error says
	// which, in one line.
	ErrNothingUsable = errors.New("conductor probe: nothing usable")
)

// EnsureDefaults fills the zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Seconds == 0 {
		o.Seconds = DefaultSeconds
	}
	if o.Seed == "" {
		o.Seed = "0"
	}
}

// Validate reports every bad field, wrapping ErrOptions.
func (o *Options) Validate() error {
	var bad []string
	if o.Endpoint == "" {
		bad = append(bad, "endpoint: required")
	}
	if o.Seconds < 1 {
		bad = append(bad, fmt.Sprintf("seconds=%d: want >= 1", o.Seconds))
	}
	if o.BlockSize < 0 {
		bad = append(bad, fmt.Sprintf("block_size=%d: want >= 0 (0: the events')", o.BlockSize))
	}
	if o.Seed == "" {
		bad = append(bad, `seed: want the PYTHONHASHSEED text, e.g. "0"`)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrOptions, strings.Join(bad, "; "))
	}
	return nil
}

// unusableError is ErrNothingUsable with its reason; its text is the
// reason alone.
type unusableError struct{ why string }

func (e *unusableError) Error() string { return e.why }
func (e *unusableError) Unwrap() error { return ErrNothingUsable }

// Run listens to opts.Endpoint for up to opts.Seconds (less when ctx ends
// first: the report says it was interrupted), runs the replay check, and
// returns the report. The error wraps ErrOptions for bad options and
// ErrNothingUsable when nothing usable arrived; any other error is a probe
// that could not start (a malformed endpoint).
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o, rx, err := listen(ctx, &opts)
	if err != nil {
		return nil, err
	}
	if why := o.unusable(&opts, rx); why != "" {
		return nil, &unusableError{why}
	}
	return buildReport(&opts, o, rx), nil
}

// Bounds of the replay check: how long to wait for each reply, and how many
// replies to read before hanging up.
const (
	replyTimeout = 2 * time.Second
	maxReplies   = 1024
)

// listenRun is how the listening went, beside what was observed.
type listenRun struct {
	elapsed       time.Duration
	early         bool // stopped once everything was identified
	interrupted   bool // stopped by a signal
	connected     bool // ever
	lastConnEvent string
	tooBig        int
	replay        *ReplayResult
}

// listen listens to ps.Endpoint for up to ps.Seconds, then runs the replay
// check. The error is for a probe that could not start.
func listen(ctx context.Context, ps *Options) (*observation, *listenRun, error) {
	tap, err := ingest.OpenTap(ps.Endpoint, ingest.IngestOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer tap.Close()
	o := newObservation(ps.Seed)
	rx := &listenRun{}
	var d wire.Decoder
	var b core.Batch
	start := time.Now()
	deadline := start.Add(time.Duration(ps.Seconds) * time.Second)
	for {
		if ctx.Err() != nil {
			rx.interrupted = true
			break
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		frames, ok, err := tap.Next(min(wait, 100*time.Millisecond))
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		_, seq, payload, err := wire.ParseLive(frames)
		if err != nil {
			o.malformed++
			if o.firstBad == "" {
				o.firstBad = err.Error()
			}
			continue
		}
		o.live(seq, payload)
		shape, err := d.DecodeAny(payload, &b)
		if err != nil {
			o.decodeErrs++
			if o.firstErr == "" {
				o.firstErr = fmt.Sprintf("seq=%d: %v", seq, err)
			}
			continue
		}
		o.batch(shape, &b, ps.BlockSize)
		if o.settled() {
			rx.early = true
			break
		}
	}
	rx.elapsed = time.Since(start)
	_, rx.connected, rx.lastConnEvent = tap.Connected()
	rx.tooBig = tap.TooBig()
	if ps.Replay != "" && ctx.Err() == nil {
		rx.replay = replay(tap, ps.Replay, o)
	}
	return o, rx, nil
}

// ReplayResult is how the replay endpoint answered one request.
type ReplayResult struct {
	Endpoint string `json:"endpoint"`
	// From is the sequence asked for: the last one seen live (0 when none
	// was: then the publisher replays its whole ring).
	From     uint64 `json:"from"`
	Answered bool   `json:"answered"`
	// Frames is the reply form: 3 (["", seq, payload]: SGLang, older vLLM)
	// or 4 (["", topic, seq, payload]: newer vLLM); 0 without a reply.
	Frames  int `json:"frames,omitempty"`
	Replies int `json:"replies"`
	// FirstSeq and LastSeq are the first and last replayed sequences.
	FirstSeq  uint64 `json:"first_seq,omitempty"`
	LastSeq   uint64 `json:"last_seq,omitempty"`
	EndMarker bool   `json:"end_marker"`
	// SameAsLive: the reply for From carried the payload seen live.
	SameAsLive bool   `json:"same_as_live"`
	Error      string `json:"error,omitempty"`
}

// replay sends one replay request from the last sequence seen (the
// protocol a registration's listener uses) and reads the replies up to the
// end marker, maxReplies, or replyTimeout without one.
func replay(tap *ingest.Tap, endpoint string, o *observation) *ReplayResult {
	r := &ReplayResult{Endpoint: endpoint}
	if o.hasSeq {
		r.From = o.last
	}
	err := tap.Replay(endpoint, r.From, replyTimeout, func(frames [][]byte) bool {
		seq, payload, end, err := wire.ParseReplayReply(frames)
		if err != nil {
			r.Error = fmt.Sprintf("malformed reply: %v", err)
			return false
		}
		r.Answered = true
		if r.Frames == 0 || !end {
			r.Frames = len(frames)
		}
		if end {
			r.EndMarker = true
			return false
		}
		if r.Replies == 0 {
			r.FirstSeq = seq
		}
		r.LastSeq = seq
		r.Replies++
		if o.hasSeq && seq == o.last && maphash.Bytes(o.seed, payload) == o.lastSum {
			r.SameAsLive = true
		}
		return r.Replies < maxReplies
	})
	switch {
	case errors.Is(err, ingest.ErrTapTimeout) && !r.Answered:
		r.Error = fmt.Sprintf("no reply within %v", replyTimeout)
	case errors.Is(err, ingest.ErrTapTimeout):
		r.Error = fmt.Sprintf("no end marker: the replies stopped for %v", replyTimeout)
	case err != nil:
		r.Error = err.Error()
	}
	return r
}

// unusable says why the probe saw nothing it can report on ("" when it
// did).
func (o *observation) unusable(ps *Options, rx *listenRun) string {
	in := fmt.Sprintf("in %.1f s", rx.elapsed.Seconds())
	switch {
	case o.messages == 0 && o.malformed == 0 && rx.tooBig == 0:
		if !rx.connected {
			why := "nothing accepted a connection there"
			if rx.lastConnEvent != "" {
				why = rx.lastConnEvent
			}
			return fmt.Sprintf("no message from %s %s: not connected (%s); check the address and that the engine publishes KV events", ps.Endpoint, in, why)
		}
		return fmt.Sprintf("no message from %s %s: connected, but nothing was published "+
			"(engines publish when their cache changes: send the engine a request while probing, or probe longer with --seconds)", ps.Endpoint, in)
	case o.messages == 0 && o.malformed > 0:
		return fmt.Sprintf("%d messages from %s, none a KV-event message [topic, seq, payload]: %s", o.malformed, ps.Endpoint, o.firstBad)
	case o.messages == 0:
		return fmt.Sprintf("%d messages from %s, all above the %d-byte message limit", rx.tooBig, ps.Endpoint, ingest.DefaultMaxMessageBytes)
	case o.decodedMessages == 0:
		return fmt.Sprintf("%d messages from %s, none decodable as any dialect: %s", o.messages, ps.Endpoint, o.firstErr)
	case o.stored+o.removed+o.cleared == 0:
		why := "every batch was empty"
		if o.dropped > 0 {
			why = fmt.Sprintf("%d undecodable events, first: %s", o.dropped, o.firstErr)
		}
		return fmt.Sprintf("%d messages from %s, no event in them (%s)", o.messages, ps.Endpoint, strings.TrimSpace(why))
	}
	return ""
}
