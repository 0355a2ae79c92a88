package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/seed-c7a81618/conductor/probe"
)

// `conductor probe`: the command line of package probe, which subscribes to
// a publisher without registering it, watches what it sends for a while,
// and reports what it is and the registration that fits it.

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
	opts probe.Options
	json bool
}

func defineProbeFlags(ps *probeSettings) *flag.FlagSet {
	fs := flag.NewFlagSet("conductor probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	o := &ps.opts
	fs.StringVar(&o.Replay, "replay", "", "`ENDPOINT` of the publisher's replay socket (its ROUTER): ask it to replay from a sequence seen, and report the answer")
	fs.IntVar(&o.Seconds, "seconds", probe.DefaultSeconds, "listen at most `N` seconds")
	fs.IntVar(&o.BlockSize, "block-size", 0, "`N` tokens per block, for events that carry no block_size (default: the events')")
	fs.StringVar(&o.Seed, "seed", "0", "the engine's PYTHONHASHSEED `TEXT`, tried with every vLLM algorithm as \"0\" is")
	fs.StringVar(&o.Model, "model", "", "the model `NAME` to register (modelname; default: the events' model_name, else \"my-model\")")
	fs.StringVar(&o.InstanceID, "instance-id", "", "the instance `ID` to register (instance_id; default: made from the dialect and endpoint)")
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
	o := &ps.opts
	switch {
	case len(pos) != 1:
		return ps, errors.New("want one endpoint: conductor probe tcp://HOST:PORT [flags] (conductor probe --help)")
	case o.Seconds < 1:
		return ps, fmt.Errorf("--seconds=%d: want >= 1", o.Seconds)
	case o.BlockSize < 0:
		return ps, fmt.Errorf("--block-size=%d: want >= 0 (0: the events')", o.BlockSize)
	case o.Seed == "":
		return ps, errors.New(`--seed: want the PYTHONHASHSEED text, e.g. "0"`)
	}
	o.Endpoint = pos[0]
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
	rep, err := probe.Run(ctx, ps.opts)
	if err != nil {
		fmt.Fprintln(stderr, "conductor probe:", err)
		return 1
	}
	if ps.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "conductor probe:", err)
		return 1
	}
	return 0
}
