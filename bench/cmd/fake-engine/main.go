// Command fake-engine is a simulated vLLM KV-event publisher over real ZMQ
// (bench.Publisher: PUB + ROUTER replay) for end-to-end tests and benchmarks of
// conductor. It binds its sockets, prints one JSON line to stdout,
//
//	{"endpoint": "tcp://127.0.0.1:PORT", "replay_endpoint": "tcp://127.0.0.1:PORT", "blocks": N, "tokens": T}
//
// and then publishes BlockStored events for the prompt token ids base,
// base+1, ..., base+T-1 (complete blocks only), hashed with vLLM's v1 chain
// (vllm_v1, -algorithm, -seed, low64_be), every -interval, -repeat times (0 =
// until stopped), as array-encoded vLLM KVEventBatches. Repeating makes the
// events reach a subscriber that connects late (a PUB socket drops what no
// subscriber is connected for); storing the same blocks again is idempotent in
// the index. Block i is filed on the i-th medium of -media (the last one
// repeats). SIGINT or SIGTERM closes the sockets and exits 0.
//
// Register it with conductor as, for example (Python client):
//
//	{"instance_id": "fake-0", "endpoint": ENDPOINT, "replay_endpoint": REPLAY,
//	 "model_name": "m", "block_size": 16, "hash_profile": {"strategy": "vllm_v1",
//	 "algorithm": "sha256_cbor", "python_hash_seed": "0", "index_projection": "low64_be"}}
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
)

type options struct {
	pub, replay  string
	tokens, base int
	blockSize    int
	algorithm    string
	seed         string
	media        []string
	interval     time.Duration
	repeat       int
	batch        int
	dp           int
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	var media string
	fs := flag.NewFlagSet("fake-engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.pub, "pub", "tcp://127.0.0.1:*", "PUB endpoint to bind (* = a free port)")
	fs.StringVar(&o.replay, "replay", "tcp://127.0.0.1:*", "ROUTER replay endpoint to bind")
	fs.IntVar(&o.tokens, "tokens", 64, "prompt length in tokens")
	fs.IntVar(&o.base, "token-base", 0, "first token id (token i is base+i)")
	fs.IntVar(&o.blockSize, "block-size", 16, "tokens per block")
	fs.StringVar(&o.algorithm, "algorithm", "sha256_cbor", "vLLM hash (--prefix-caching-hash-algo): sha256, sha256_cbor, xxhash or xxhash_cbor")
	fs.StringVar(&o.seed, "seed", "0", "vLLM PYTHONHASHSEED (decimal text)")
	fs.StringVar(&media, "media", "GPU", "comma-separated medium per block; the last repeats")
	fs.DurationVar(&o.interval, "interval", 100*time.Millisecond, "pause between publications")
	fs.IntVar(&o.repeat, "repeat", 0, "publications (0 = until stopped)")
	fs.IntVar(&o.batch, "batch", 512, "blocks per BlockStored event")
	fs.IntVar(&o.dp, "dp", 0, "data_parallel_rank of the batches (-1 = nil)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.tokens < 0 || o.blockSize <= 0 || o.batch <= 0 || o.repeat < 0 || o.interval <= 0:
		return o, errors.New("-tokens, -repeat must be >= 0; -block-size, -batch, -interval > 0")
	case o.base < 0 || o.base+o.tokens > 1<<31-1:
		return o, errors.New("token ids must be in 0..2^31-1")
	}
	o.media = strings.Split(media, ",")
	return o, nil
}

// payloads builds the batches of one publication.
func payloads(o options) ([][]byte, int, error) {
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: o.algorithm, PythonHashSeed: o.seed, IndexProjection: "low64_be"})
	if err != nil {
		return nil, 0, err
	}
	tokens := make([]int32, o.tokens)
	for i := range tokens {
		tokens[i] = int32(o.base + i)
	}
	hashes, err := hash.AppendChain(nil, &p, tokens, o.blockSize, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	medium := func(i int) string { return o.media[min(i, len(o.media)-1)] }
	var out [][]byte
	for lo := 0; lo < len(hashes); {
		// one event per run of blocks on the same medium, at most o.batch long
		hi := lo + 1
		for hi < len(hashes) && hi-lo < o.batch && medium(hi) == medium(lo) {
			hi++
		}
		ev := bench.EngineStored{Hashes: hashes[lo:hi], Tokens: tokens[lo*o.blockSize : hi*o.blockSize],
			BlockSize: o.blockSize, Medium: medium(lo)}
		if lo > 0 {
			ev.Parent, ev.HasParent = hashes[lo-1], true
		}
		out = append(out, bench.AppendVLLMBatch(nil, bench.EraArray, float64(time.Now().UnixNano())/1e9, o.dp, ev))
		lo = hi
	}
	return out, len(hashes), nil
}

func run(args []string, stdout, stderr io.Writer, stop <-chan os.Signal) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "fake-engine:", err)
		return 2
	}
	batches, blocks, err := payloads(o)
	if err != nil {
		fmt.Fprintln(stderr, "fake-engine:", err)
		return 2
	}
	pub, err := bench.NewPublisher(bench.PublisherOptions{Endpoint: o.pub, ReplayEndpoint: o.replay})
	if err != nil {
		fmt.Fprintln(stderr, "fake-engine:", err)
		return 1
	}
	defer pub.Close()
	line, _ := json.Marshal(map[string]any{"endpoint": pub.Endpoint(), "replay_endpoint": pub.ReplayEndpoint(),
		"blocks": blocks, "tokens": o.tokens})
	fmt.Fprintln(stdout, string(line))

	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for n := 0; o.repeat == 0 || n < o.repeat; n++ {
		for _, b := range batches {
			if _, err := pub.Publish(b); err != nil {
				fmt.Fprintln(stderr, "fake-engine: publish:", err)
				return 1
			}
		}
		select {
		case <-stop:
			return 0
		case <-tick.C:
		}
	}
	<-stop
	return 0
}

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, stop))
}
