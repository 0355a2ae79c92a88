package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// `conductor probe`: subscribe to a publisher without registering it, watch
// what it sends for a while, and print what it is and the registration that
// fits it. It runs once, on its own libzmq context (ingest.Tap), bounded like
// a registration's listener (the default --max-message-bytes and queue
// sizes), and decodes with the decoders ingestion uses (wire.DecodeAny).

// probeHelp opens `conductor probe --help`.
const probeHelp = `conductor probe subscribes to a KV-event publisher without registering it,
watches it for --seconds (stopping early once it has identified everything),
and prints what it saw: the dialect and its era, sequence numbers and gaps,
data-parallel ranks, media, block sizes, token_ids, LoRA names, cache salts,
how the replay endpoint answers, the hash profile that reproduces the
engine's block hashes, and the registration that fits it (curl, the Python
client, the configuration file). It exits 1, with one line saying why, when
it saw nothing usable.

Usage: conductor probe tcp://HOST:PORT [flags]

  conductor probe tcp://10.0.0.5:5557 --replay tcp://10.0.0.5:5558
  conductor probe tcp://10.0.0.5:5557 --seconds 30 --json
`

// probeFlagOrder orders `conductor probe --help`.
var probeFlagOrder = []string{"replay", "seconds", "block-size", "seed", "model", "instance-id", "json"}

// probeSettings are `conductor probe`'s command line.
type probeSettings struct {
	endpoint   string
	replay     string
	seconds    int
	blockSize  int
	seed       string
	model      string
	instanceID string
	json       bool
}

// Bounds of the replay check: how long to wait for each reply, and how many
// replies to read before hanging up.
const (
	probeReplyTimeout = 2 * time.Second
	probeMaxReplies   = 1024
)

func defineProbeFlags(ps *probeSettings) *flag.FlagSet {
	fs := flag.NewFlagSet("conductor probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&ps.replay, "replay", "", "`ENDPOINT` of the publisher's replay socket (its ROUTER): ask it to replay from a sequence seen, and report the answer")
	fs.IntVar(&ps.seconds, "seconds", 10, "listen at most `N` seconds")
	fs.IntVar(&ps.blockSize, "block-size", 0, "`N` tokens per block, for events that carry no block_size (default: the events')")
	fs.StringVar(&ps.seed, "seed", "0", "the engine's PYTHONHASHSEED `TEXT`, tried with every vLLM algorithm as \"0\" is")
	fs.StringVar(&ps.model, "model", "", "the model `NAME` to register (modelname; default: the events' model_name, else \"my-model\")")
	fs.StringVar(&ps.instanceID, "instance-id", "", "the instance `ID` to register (instance_id; default: made from the dialect and endpoint)")
	fs.BoolVar(&ps.json, "json", false, "print one JSON document instead of text")
	return fs
}

// parseProbeFlags parses `conductor probe`'s arguments: one endpoint and
// flags, in any order. --help writes the help to help and returns
// flag.ErrHelp.
func parseProbeFlags(args []string, help io.Writer) (probeSettings, error) {
	var ps probeSettings
	fs := defineProbeFlags(&ps)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				io.WriteString(help, probeHelp)
				writeFlags(help, fs, "Flags", probeFlagOrder)
				return ps, err
			}
			return ps, flagError(err, fs)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(pos) != 1:
		return ps, errors.New("want one endpoint: conductor probe tcp://HOST:PORT [flags] (conductor probe --help)")
	case ps.seconds < 1:
		return ps, fmt.Errorf("--seconds=%d: want >= 1", ps.seconds)
	case ps.blockSize < 0:
		return ps, fmt.Errorf("--block-size=%d: want >= 0 (0: the events')", ps.blockSize)
	case ps.seed == "":
		return ps, errors.New(`--seed: want the PYTHONHASHSEED text, e.g. "0"`)
	}
	ps.endpoint = pos[0]
	return ps, nil
}

// runProbe is `conductor probe`: it returns the exit status (0: a report
// printed; 1: nothing usable, or the probe could not start; 2: bad
// arguments).
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ps, err := parseProbeFlags(args, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "conductor probe:", err)
		return 2
	}
	o, rx, err := probe(ctx, &ps)
	if err != nil {
		fmt.Fprintln(stderr, "conductor probe:", err)
		return 1
	}
	if why := o.unusable(&ps, rx); why != "" {
		fmt.Fprintln(stderr, "conductor probe:", why)
		return 1
	}
	rep := buildReport(&ps, o, rx)
	if ps.json {
		err = writeReportJSON(stdout, rep)
	} else {
		err = writeReportText(stdout, rep)
	}
	if err != nil {
		fmt.Fprintln(stderr, "conductor probe:", err)
		return 1
	}
	return 0
}

// probeRun is how the listening went, beside what was observed.
type probeRun struct {
	elapsed       time.Duration
	early         bool // stopped once everything was identified
	interrupted   bool // stopped by a signal
	connected     bool // ever
	lastConnEvent string
	tooBig        int
	replay        *replayResult
}

// probe listens to ps.endpoint for up to ps.seconds, then runs the replay
// check. The error is for a probe that could not start.
func probe(ctx context.Context, ps *probeSettings) (*observation, *probeRun, error) {
	tap, err := ingest.OpenTap(ps.endpoint, ingest.IngestOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer tap.Close()
	o := newObservation(ps.seed)
	rx := &probeRun{}
	var d wire.Decoder
	var b core.Batch
	start := time.Now()
	deadline := start.Add(time.Duration(ps.seconds) * time.Second)
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
		o.batch(shape, &b, ps.blockSize)
		if o.settled() {
			rx.early = true
			break
		}
	}
	rx.elapsed = time.Since(start)
	_, rx.connected, rx.lastConnEvent = tap.Connected()
	rx.tooBig = tap.TooBig()
	if ps.replay != "" && ctx.Err() == nil {
		rx.replay = probeReplay(tap, ps.replay, o)
	}
	return o, rx, nil
}

// replayResult is how the replay endpoint answered one request.
type replayResult struct {
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

// probeReplay sends one replay request from the last sequence seen (the
// protocol a registration's listener uses) and reads the replies up to the
// end marker, probeMaxReplies, or probeReplyTimeout without one.
func probeReplay(tap *ingest.Tap, endpoint string, o *observation) *replayResult {
	r := &replayResult{Endpoint: endpoint}
	if o.hasSeq {
		r.From = o.last
	}
	err := tap.Replay(endpoint, r.From, probeReplyTimeout, func(frames [][]byte) bool {
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
		return r.Replies < probeMaxReplies
	})
	switch {
	case errors.Is(err, ingest.ErrTapTimeout) && !r.Answered:
		r.Error = fmt.Sprintf("no reply within %v", probeReplyTimeout)
	case errors.Is(err, ingest.ErrTapTimeout):
		r.Error = fmt.Sprintf("no end marker: the replies stopped for %v", probeReplyTimeout)
	case err != nil:
		r.Error = err.Error()
	}
	return r
}

// unusable says why the probe saw nothing it can report on ("" when it
// did).
func (o *observation) unusable(ps *probeSettings, rx *probeRun) string {
	in := fmt.Sprintf("in %.1f s", rx.elapsed.Seconds())
	switch {
	case o.messages == 0 && o.malformed == 0 && rx.tooBig == 0:
		if !rx.connected {
			why := "nothing accepted a connection there"
			if rx.lastConnEvent != "" {
				why = rx.lastConnEvent
			}
			return fmt.Sprintf("no message from %s %s: not connected (%s); check the address and that the engine publishes KV events", ps.endpoint, in, why)
		}
		return fmt.Sprintf("no message from %s %s: connected, but nothing was published "+
			"(engines publish when their cache changes: send the engine a request while probing, or probe longer with --seconds)", ps.endpoint, in)
	case o.messages == 0 && o.malformed > 0:
		return fmt.Sprintf("%d messages from %s, none a KV-event message [topic, seq, payload]: %s", o.malformed, ps.endpoint, o.firstBad)
	case o.messages == 0:
		return fmt.Sprintf("%d messages from %s, all above the %d-byte message limit", rx.tooBig, ps.endpoint, ingest.DefaultMaxMessageBytes)
	case o.decodedMessages == 0:
		return fmt.Sprintf("%d messages from %s, none decodable as any dialect: %s", o.messages, ps.endpoint, o.firstErr)
	case o.stored+o.removed+o.cleared == 0:
		why := "every batch was empty"
		if o.dropped > 0 {
			why = fmt.Sprintf("%d undecodable events, first: %s", o.dropped, o.firstErr)
		}
		return fmt.Sprintf("%d messages from %s, no event in them (%s)", o.messages, ps.endpoint, strings.TrimSpace(why))
	}
	return ""
}
