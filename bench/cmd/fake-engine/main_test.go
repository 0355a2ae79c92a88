package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire"
)

// TestPayloads: one BlockStored event per run of blocks on one medium (the
// last medium repeats), parents chained across events, complete blocks only.
func TestPayloads(t *testing.T) {
	o, err := parse([]string{"-tokens", "70", "-block-size", "16", "-media", "GPU,GPU,CPU"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPrompt(&o)
	if err != nil {
		t.Fatal(err)
	}
	batches := o.payloads(p, 0)
	if len(p.keys) != 4 || len(batches) != 2 {
		t.Fatalf("blocks %d batches %d", len(p.keys), len(batches))
	}
	var prevLast any
	for i, b := range batches {
		v, rest, err := msgp.ReadIntfBytes(b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("batch %d: %v", i, err)
		}
		batch := v.([]any) // [ts, events, dp]
		ev := batch[1].([]any)[0].([]any)
		hashes, parent, tokens, medium := ev[1].([]any), ev[2], ev[3].([]any), ev[6]
		if ev[0] != "BlockStored" || len(hashes) != 2 || len(tokens) != 32 || ev[4] != int64(16) {
			t.Fatalf("event %d: %v", i, ev)
		}
		if want := []string{"GPU", "CPU"}[i]; medium != want {
			t.Fatalf("event %d medium %v, want %s", i, medium, want)
		}
		if tokens[0] != int64(32*i) {
			t.Fatalf("event %d first token %v", i, tokens[0])
		}
		if parent != prevLast {
			t.Fatalf("event %d parent %v, want %v", i, parent, prevLast)
		}
		prevLast = hashes[1]
	}
}

// TestDialects: every dialect's batches decode with conductor's own decoder
// for the publisher type they are registered as, and carry the keys of the
// dialect's hash profile (the ones a query under that profile computes), the
// prompt's tokens and parents, rank and LoRA; standard and mooncake
// publishers number their events consecutively across publications.
func TestDialects(t *testing.T) {
	f := func(args []string, wd wire.Dialect, spec hash.Spec, lora, salt string, wantIDs bool) {
		t.Helper()
		o, err := parse(append([]string{"-tokens", "72", "-block-size", "16", "-batch", "2", "-dp", "1"}, args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		prof, err := hash.Resolve(spec)
		if err != nil {
			t.Fatal(err)
		}
		want, err := hash.AppendChain(nil, &prof, promptTokens(72), 16, []byte(lora), []byte(salt))
		if err != nil {
			t.Fatal(err)
		}
		want = want[:4] // complete blocks only
		p, err := newPrompt(&o)
		if err != nil {
			t.Fatal(err)
		}
		var dec wire.Decoder
		var b core.Batch
		var nextID uint64 = 1
		for pub := range 2 {
			var keys []uint64
			for i, payload := range o.payloads(p, pub) {
				if err := dec.Decode(wd, payload, &b); err != nil || b.Skipped != 0 {
					t.Fatalf("%v: batch %d: %v (skipped %d: %v)", args, i, err, b.Skipped, b.Errors)
				}
				if !b.HasDPRank || b.DPRank != 1 {
					t.Fatalf("%v: batch rank %v %d", args, b.HasDPRank, b.DPRank)
				}
				for _, ev := range b.Events {
					if ev.Kind != core.EventStored {
						t.Fatalf("%v: event kind %v", args, ev.Kind)
					}
					// The master knows no parents (nil): one event is one object.
					if wd != wire.DialectMooncake && (ev.HasParent != (len(keys) > 0) || (ev.HasParent && ev.Parent != keys[len(keys)-1])) {
						t.Fatalf("%v: parent %v %d after %v", args, ev.HasParent, ev.Parent, keys)
					}
					if wd != wire.DialectMooncake && (len(ev.Tokens) != 16*len(ev.Hashes) || ev.Tokens[0] != int32(16*len(keys))) {
						t.Fatalf("%v: tokens %v for %d blocks after %d", args, ev.Tokens, len(ev.Hashes), len(keys))
					}
					if string(ev.LoraName) != lora {
						t.Fatalf("%v: lora_name %q", args, ev.LoraName)
					}
					if wantIDs {
						if !ev.HasEventID || ev.EventID != nextID {
							t.Fatalf("%v: publication %d event id %d, want %d", args, pub, ev.EventID, nextID)
						}
						nextID++
					}
					keys = append(keys, ev.Hashes...)
				}
			}
			if !slices.Equal(keys, want) {
				t.Fatalf("%v: keys %v, want %v", args, keys, want)
			}
		}
	}
	vllm := hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}
	sglang := hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", IndexProjection: "first64_be"}
	xxh3 := hash.Spec{Strategy: "xxh3"}
	f(nil, wire.DialectVLLM, vllm, "", "", false)
	f([]string{"-dialect", "vllm-map", "-algorithm", "xxhash", "-seed", "42"}, wire.DialectVLLM,
		hash.Spec{Strategy: "vllm_v1", Algorithm: "xxhash", PythonHashSeed: "42", IndexProjection: "low64_be"}, "", "", false)
	f([]string{"-dialect", "vllm-map", "-algorithm", "xxhash_cbor", "-lora", "adapter-A", "-salt", "s"}, wire.DialectVLLM,
		hash.Spec{Strategy: "vllm_v1", Algorithm: "xxhash_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}, "adapter-A", "s", false)
	f([]string{"-dialect", "sglang-array"}, wire.DialectSGLang, sglang, "", "", false)
	f([]string{"-dialect", "sglang-map"}, wire.DialectSGLang, sglang, "", "", false)
	f([]string{"-dialect", "standard"}, wire.DialectStandard, xxh3, "", "", true)
	f([]string{"-dialect", "mooncake"}, wire.DialectMooncake, vllm, "", "", true)
	f([]string{"-dialect", "mooncake", "-strategy", "sglang"}, wire.DialectMooncake, sglang, "", "", true)
}

func promptTokens(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// TestParseDialectDefaults: a mooncake master binds no replay socket unless
// asked and files blocks as cpu; a dialect takes only its own hash strategy
// (mooncake also sglang and xxh3); -lora and -salt are vLLM's.
func TestParseDialectDefaults(t *testing.T) {
	o, err := parse([]string{"-dialect", "mooncake"}, &bytes.Buffer{})
	if err != nil || o.replay != "" || !slices.Equal(o.media, []string{"cpu"}) || o.strategy != "vllm_v1" {
		t.Fatalf("mooncake defaults %+v %v", o, err)
	}
	if o, err = parse([]string{"-dialect", "mooncake", "-replay", "tcp://127.0.0.1:*"}, &bytes.Buffer{}); err != nil || o.replay == "" {
		t.Fatalf("mooncake with -replay %+v %v", o, err)
	}
	if o, err = parse(nil, &bytes.Buffer{}); err != nil || o.dialect != vllmArray || o.replay == "" || !slices.Equal(o.media, []string{"GPU"}) {
		t.Fatalf("defaults %+v %v", o, err)
	}
	for _, args := range [][]string{
		{"-dialect", "trtllm"},
		{"-dialect", "vllm-map", "-strategy", "sglang"},
		{"-dialect", "standard", "-strategy", "vllm_v1"},
		{"-dialect", "mooncake", "-strategy", "sglang_bigram"},
		{"-dialect", "sglang-map", "-lora", "a"},
		{"-dialect", "standard", "-salt", "s"},
	} {
		if _, err := parse(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestRunPrintsEndpointsAndStops: the first stdout line names the bound
// endpoints; a signal stops the command with status 0; bad flags are 2.
func TestRunPrintsEndpointsAndStops(t *testing.T) {
	out := &firstLine{seen: make(chan struct{})}
	var errb bytes.Buffer
	stop := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() { done <- run([]string{"-repeat", "1", "-interval", "10ms"}, out, &errb, stop) }()
	select {
	case <-out.seen:
	case code := <-done:
		t.Fatalf("exit %d before printing its endpoints: %s", code, errb.String())
	case <-time.After(time.Minute):
		t.Fatal("no endpoint line")
	}
	stop <- syscall.SIGTERM
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not stop")
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &line); err != nil {
		t.Fatalf("stdout %q: %v", out.String(), err)
	}
	if ep, _ := line["endpoint"].(string); !strings.HasPrefix(ep, "tcp://127.0.0.1:") || line["blocks"] != float64(4) {
		t.Fatalf("line %v", line)
	}
	if code := run([]string{"-block-size", "0"}, io.Discard, &errb, stop); code != 2 {
		t.Fatalf("bad flags: exit %d", code)
	}
}

// firstLine is an io.Writer safe to read while run writes to it; seen closes
// once a complete line has been written.
type firstLine struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
	once sync.Once
}

func (w *firstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if bytes.IndexByte(w.buf.Bytes(), '\n') >= 0 {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *firstLine) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
