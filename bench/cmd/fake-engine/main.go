// Command fake-engine is a simulated KV-event publisher over real ZMQ
// (bench.Publisher: PUB + ROUTER replay) for end-to-end tests, the runnable
// docs and benchmarks of conductor. It binds its sockets, prints one JSON line
// to stdout,
//
//	{"endpoint": "tcp://127.0.0.1:PORT", "replay_endpoint": "tcp://127.0.0.1:PORT", "blocks": N, "tokens": T}
//
// and then publishes stored events for the prompt token ids base, base+1,
// ..., base+T-1 (complete blocks only), every -interval, -repeat times (0 =
// until stopped). Repeating makes the events reach a subscriber that connects
// late (a PUB socket drops what no subscriber is connected for); storing the
// same blocks again is idempotent in the index. Block i is filed on the i-th
// medium of -media (the last one repeats). SIGINT or SIGTERM closes the
// sockets and exits 0.
//
// -dialect picks the publisher it plays, and with it the hash chain of the
// block keys (-strategy):
//
//	vllm-array   vLLM up to v0.23: array-encoded events      vllm_v1 (-algorithm, -seed, -lora, -salt)
//	vllm-map     vLLM after v0.23: map-encoded events        vllm_v1
//	sglang-array SGLang array-encoded events (signed hashes)  sglang
//	sglang-map   SGLang map-encoded events                    sglang
//	standard     an RFC #1527 standard publisher              xxh3 (seed 1337)
//	mooncake     a Mooncake store master: one event per block, no replay socket,
//	             medium cpu by default; -strategy names the key space of the
//	             engines it serves (vllm_v1 by default, sglang or xxh3)
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

// dialect is the publisher fake-engine plays.
type dialect string

const (
	vllmArray   dialect = "vllm-array"
	vllmMap     dialect = "vllm-map"
	sglangArray dialect = "sglang-array"
	sglangMap   dialect = "sglang-map"
	standard    dialect = "standard"
	mooncake    dialect = "mooncake"
)

// strategy is the dialect's own hash strategy.
func (d dialect) strategy() string {
	switch d {
	case vllmArray, vllmMap, mooncake:
		return "vllm_v1"
	case sglangArray, sglangMap:
		return "sglang"
	case standard:
		return "xxh3"
	}
	return ""
}

func (d dialect) vllm() bool { return d == vllmArray || d == vllmMap }

type options struct {
	dialect      dialect
	strategy     string
	pub, replay  string
	tokens, base int
	blockSize    int
	algorithm    string
	seed         string
	lora, salt   string
	model        string
	media        []string
	interval     time.Duration
	repeat       int
	batch        int
	dp           int
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	var media, d string
	fs := flag.NewFlagSet("fake-engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&d, "dialect", string(vllmArray), "publisher: vllm-array, vllm-map, sglang-array, sglang-map, standard or mooncake")
	fs.StringVar(&o.strategy, "strategy", "", "hash chain of the block keys: vllm_v1, sglang or xxh3 (default: the dialect's; only mooncake takes another)")
	fs.StringVar(&o.pub, "pub", "tcp://127.0.0.1:*", "PUB endpoint to bind (* = a free port)")
	fs.StringVar(&o.replay, "replay", "tcp://127.0.0.1:*", `ROUTER replay endpoint to bind ("" = none; mooncake has none)`)
	fs.IntVar(&o.tokens, "tokens", 64, "prompt length in tokens")
	fs.IntVar(&o.base, "token-base", 0, "first token id (token i is base+i)")
	fs.IntVar(&o.blockSize, "block-size", 16, "tokens per block")
	fs.StringVar(&o.algorithm, "algorithm", "sha256_cbor", "vllm_v1 hash (vLLM's --prefix-caching-hash-algo): sha256, sha256_cbor, xxhash or xxhash_cbor")
	fs.StringVar(&o.seed, "seed", "0", "vllm_v1: vLLM's PYTHONHASHSEED (decimal text)")
	fs.StringVar(&o.lora, "lora", "", "vLLM dialects: the LoRA adapter's name (lora_name; hashed into every block)")
	fs.StringVar(&o.salt, "salt", "", "vLLM dialects: the requests' cache_salt (hashed into the first block)")
	fs.StringVar(&o.model, "model", "", "standard and mooncake: the events' model_name (default nil: the registration's)")
	fs.StringVar(&media, "media", "", "comma-separated medium per block; the last repeats (default GPU, cpu for mooncake)")
	fs.DurationVar(&o.interval, "interval", 100*time.Millisecond, "pause between publications")
	fs.IntVar(&o.repeat, "repeat", 0, "publications (0 = until stopped)")
	fs.IntVar(&o.batch, "batch", 512, "blocks per stored event (mooncake: always 1)")
	fs.IntVar(&o.dp, "dp", 0, "data-parallel rank of the batches and events (-1 = nil)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.dialect = dialect(d)
	replaySet := false
	fs.Visit(func(f *flag.Flag) { replaySet = replaySet || f.Name == "replay" })
	if o.dialect == mooncake && !replaySet {
		o.replay = ""
	}
	own := o.dialect.strategy()
	if o.strategy == "" {
		o.strategy = own
	}
	switch {
	case own == "":
		return o, fmt.Errorf("-dialect %q: want vllm-array, vllm-map, sglang-array, sglang-map, standard or mooncake", d)
	case o.strategy != own && (o.dialect != mooncake || (o.strategy != "sglang" && o.strategy != "xxh3")):
		return o, fmt.Errorf("-strategy %q: -dialect %s hashes with %s (mooncake also takes sglang or xxh3)", o.strategy, d, own)
	case (o.lora != "" || o.salt != "") && !o.dialect.vllm():
		return o, errors.New("-lora and -salt apply to the vLLM dialects")
	case o.tokens < 0 || o.blockSize <= 0 || o.batch <= 0 || o.repeat < 0 || o.interval <= 0:
		return o, errors.New("-tokens, -repeat must be >= 0; -block-size, -batch, -interval > 0")
	case o.base < 0 || o.base+o.tokens > 1<<31-1:
		return o, errors.New("token ids must be in 0..2^31-1")
	}
	switch {
	case media != "":
		o.media = strings.Split(media, ",")
	case o.dialect == mooncake:
		o.media = []string{"cpu"}
	default:
		o.media = []string{"GPU"}
	}
	return o, nil
}

// spec is the hash profile of the block keys.
func (o *options) spec() hash.Spec {
	switch o.strategy {
	case "vllm_v1":
		return hash.Spec{Strategy: "vllm_v1", Algorithm: o.algorithm, PythonHashSeed: o.seed, IndexProjection: "low64_be"}
	case "sglang":
		return hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", IndexProjection: "first64_be"}
	}
	return hash.Spec{Strategy: "xxh3"}
}

// prompt is what every publication is built from: the token ids and the key
// of each complete block, computed once.
type prompt struct {
	tokens []int32
	keys   []uint64
}

func newPrompt(o *options) (*prompt, error) {
	p, err := hash.Resolve(o.spec())
	if err != nil {
		return nil, err
	}
	tokens := make([]int32, o.tokens)
	for i := range tokens {
		tokens[i] = int32(o.base + i)
	}
	keys, err := hash.AppendChain(nil, &p, tokens, o.blockSize, []byte(o.lora), []byte(o.salt))
	if err != nil {
		return nil, err
	}
	// Complete blocks only (the sglang chain also keys a trailing partial page).
	return &prompt{tokens: tokens, keys: keys[:len(tokens)/o.blockSize]}, nil
}

// span is one event's blocks: keys[lo:hi], all on one medium.
type span struct {
	lo, hi int
	medium string
}

// spans cuts the blocks into events: one per run of blocks on the same
// medium, at most limit long.
func (o *options) spans(n, limit int) []span {
	medium := func(i int) string { return o.media[min(i, len(o.media)-1)] }
	var out []span
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && hi-lo < limit && medium(hi) == medium(lo) {
			hi++
		}
		out = append(out, span{lo, hi, medium(lo)})
		lo = hi
	}
	return out
}

// payloads builds publication number pub (0, 1, ...): its batches. Engine
// dialects publish the same events every time; standard and mooncake
// publishers number their events, so publication pub continues the ids
// where publication pub-1 stopped.
func (o *options) payloads(p *prompt, pub int) [][]byte {
	now := time.Now()
	ts := float64(now.UnixNano()) / 1e9
	ms := uint64(now.UnixMilli())
	bs := o.blockSize
	if o.dialect == mooncake {
		evs := make([]bench.MooncakeEvent, len(p.keys))
		for i, k := range p.keys {
			evs[i] = bench.MooncakeEvent{EventID: uint64(pub*len(p.keys) + i + 1), Type: "stored",
				SeqHashes: []uint64{k}, ObjectKey: fmt.Sprintf("fake-engine@%016x", k),
				Medium: o.media[min(i, len(o.media)-1)], BackendID: "fake-engine", ModelName: o.model, DPRank: max(o.dp, 0)}
		}
		return [][]byte{bench.AppendMooncakeBatch(nil, ms, o.dp, evs...)}
	}
	spans := o.spans(len(p.keys), o.batch)
	var out [][]byte
	for i, r := range spans {
		if o.dialect == standard {
			ev := bench.StandardEvent{EventID: uint64(pub*len(spans) + i + 1), Type: "stored", SeqHashes: p.keys[r.lo:r.hi],
				Tokens: p.tokens[r.lo*bs : r.hi*bs], ModelName: o.model, BlockSize: bs, Medium: r.medium, DPRank: o.dp}
			if r.lo > 0 {
				ev.Parent, ev.HasParent = p.keys[r.lo-1], true
			}
			out = append(out, bench.AppendStandardBatch(nil, ms, o.dp, ev))
			continue
		}
		ev := bench.EngineStored{Hashes: p.keys[r.lo:r.hi], Tokens: p.tokens[r.lo*bs : r.hi*bs],
			BlockSize: bs, Medium: r.medium, LoraName: o.lora}
		if r.lo > 0 {
			ev.Parent, ev.HasParent = p.keys[r.lo-1], true
		}
		switch o.dialect {
		case vllmArray:
			out = append(out, bench.AppendVLLMBatch(nil, bench.EraArray, ts, o.dp, ev))
		case vllmMap:
			out = append(out, bench.AppendVLLMBatch(nil, bench.EraMap, ts, o.dp, ev))
		case sglangArray:
			out = append(out, bench.AppendSGLangBatch(nil, bench.EraArray, ts, o.dp, ev))
		default:
			out = append(out, bench.AppendSGLangBatch(nil, bench.EraMap, ts, o.dp, ev))
		}
	}
	return out
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
	p, err := newPrompt(&o)
	if err != nil {
		fmt.Fprintln(stderr, "fake-engine:", err)
		return 2
	}
	popts := bench.PublisherOptions{Endpoint: o.pub, ReplayEndpoint: o.replay, NoReplay: o.replay == ""}
	if o.dialect == sglangArray || o.dialect == sglangMap {
		popts.ReplyFrames = 3 // SGLang answers replays without the topic frame
	}
	pub, err := bench.NewPublisher(popts)
	if err != nil {
		fmt.Fprintln(stderr, "fake-engine:", err)
		return 1
	}
	defer pub.Close()
	line, _ := json.Marshal(map[string]any{"endpoint": pub.Endpoint(), "replay_endpoint": pub.ReplayEndpoint(),
		"blocks": len(p.keys), "tokens": o.tokens})
	fmt.Fprintln(stdout, string(line))

	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for n := 0; o.repeat == 0 || n < o.repeat; n++ {
		for _, b := range o.payloads(p, n) {
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
