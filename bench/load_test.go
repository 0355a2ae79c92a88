package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// loadRegistrar registers straight into the index (the load run needs no ZMQ).
type loadRegistrar struct{ ix *core.Index }

func (r loadRegistrar) Register(reg core.Registration) (bool, error) {
	_, created, err := r.ix.Register(reg)
	return created, err
}

func (r loadRegistrar) Unregister(k core.ServiceKey) (core.Registration, error) {
	return r.ix.Unregister(k)
}

// Load fixture: vLLM sha256_cbor (seed "0"), B=16, one instance holding the
// first 512 blocks of a 131072-token prompt on GPU: 1k and 8k prompts are full
// hits, the 131k prompt hits its first 512 blocks (the DESIGN.md budget setup).
const (
	loadBS     = 16
	loadBlocks = 512
	loadMax    = 131072
)

// startLoadServer starts a Mooncake API server over a populated index on 127.0.0.1:0.
func startLoadServer(tb testing.TB) (addr string, prompt []int32) {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ix := core.New(core.Options{Logger: log})
	c, err := server.New(ix, loadRegistrar{ix}, server.Options{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	s := mooncake.New(c)
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		tb.Fatal(err)
	}
	sub, _, err := ix.Register(core.Registration{Endpoint: "tcp://127.0.0.1:1", Type: core.PublisherVLLM, ModelName: "m",
		InstanceID: "engine-a", BlockSize: loadBS, Profile: p, ProfileExplicit: true})
	if err != nil {
		tb.Fatal(err)
	}
	prompt = make([]int32, loadMax)
	for i := range prompt {
		prompt[i] = int32(1000 + i%120000)
	}
	keys, err := hash.AppendChain(nil, &p, prompt[:loadBlocks*loadBS], loadBS, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	b := &core.Batch{}
	e := b.NextEvent()
	e.Kind, e.BlockSize, e.Medium = core.EventStored, loadBS, []byte("GPU")
	e.Hashes = append(e.Hashes, keys...)
	if st := sub.Apply(b); st.Dropped != 0 {
		tb.Fatalf("apply %+v", st)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(ln)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return ln.Addr().String(), prompt
}

// expectPrompt is the answer to a query of the first n tokens of the load
// prompt: engine-a matches them up to the 512 blocks it holds.
func expectPrompt(n int) *Expect {
	return &Expect{Instance: "engine-a", LongestMatched: int64(min(n, loadBlocks*loadBS))}
}

// queryBody encodes a /query body for tokens: msgpack int array, msgpack LE
// bin, or JSON.
func queryBody(form string, tokens []int32) (body []byte, contentType string) {
	switch form {
	case "json":
		var sb strings.Builder
		sb.WriteString(`{"model":"m","block_size":16,"token_ids":[`)
		for i, t := range tokens {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Itoa(int(t)))
		}
		sb.WriteString("]}")
		return []byte(sb.String()), "application/json"
	}
	b := msgp.AppendMapHeader(nil, 3)
	b = msgp.AppendString(b, "model")
	b = msgp.AppendString(b, "m")
	b = msgp.AppendString(b, "block_size")
	b = msgp.AppendInt(b, loadBS)
	b = msgp.AppendString(b, "token_ids")
	if form == "bin" {
		raw := make([]byte, 4*len(tokens))
		for i, t := range tokens {
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(t))
		}
		return msgp.AppendBytes(b, raw), "application/msgpack"
	}
	b = msgp.AppendArrayHeader(b, uint32(len(tokens)))
	for _, t := range tokens {
		b = msgp.AppendInt32(b, t)
	}
	return b, "application/msgpack"
}

// BenchmarkLoadQuery is the loopback load run: 4 keep-alive connections
// (closed loop) against an in-process server, b.N requests in total.
// It reports req/s and p50/p99 latency. Run:
//
//	go test -run '^$' -bench BenchmarkLoadQuery -benchtime 20000x ./bench/
func BenchmarkLoadQuery(b *testing.B) {
	addr, prompt := startLoadServer(b)
	for _, form := range []string{"msgpack", "bin", "json"} {
		for _, n := range []int{1024, 8192, loadMax} {
			b.Run(fmt.Sprintf("%s/tokens=%d", form, n), func(b *testing.B) {
				body, ct := queryBody(form, prompt[:n])
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				res, err := RunLoad(context.Background(), LoadOptions{Addr: addr, ContentType: ct, Body: body,
					Connections: 4, Requests: b.N, Warmup: 20, Expect: expectPrompt(n)})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.RPS, "req/s")
				b.ReportMetric(float64(res.P50.Microseconds()), "p50-µs")
				b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
			})
		}
	}
}

// TestLoadSmoke runs a short load to keep RunLoad and the fixture honest:
// every response must be a 200, and a wrong path surfaces as ErrLoadStatus.
func TestLoadSmoke(t *testing.T) {
	addr, prompt := startLoadServer(t)
	for _, form := range []string{"msgpack", "bin", "json"} {
		body, ct := queryBody(form, prompt[:1024])
		res, err := RunLoad(context.Background(), LoadOptions{Addr: addr, ContentType: ct, Body: body, Requests: 200, Warmup: 5,
			Expect: expectPrompt(1024)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 200 || res.RPS <= 0 || res.P99 < res.P50 {
			t.Fatalf("%s: %v", form, res)
		}
	}
	// a wrong expectation surfaces as ErrLoadStatus
	body, ct := queryBody("msgpack", prompt[:16])
	_, err := RunLoad(context.Background(), LoadOptions{Addr: addr, Path: "/nope", ContentType: ct, Body: body, Requests: 1,
		Expect: expectPrompt(16)})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("err %v", err)
	}
}

// countWorker fails every third request of the run, with a wrong answer
// every fifth (n counts the requests of every worker).
type countWorker struct{ n *atomic.Int64 }

func (w countWorker) Do() error {
	switch n := w.n.Add(1); {
	case n%5 == 0:
		return fmt.Errorf("%w: fifth", ErrLoadAnswer)
	case n%3 == 0:
		return errors.New("third")
	}
	return nil
}
func (countWorker) Close() {}

// TestRunLoadOpenLoop: an open-loop run keeps its schedule (200 requests at
// 2000/s take about 100ms however fast the worker is), issues exactly the
// count, and with KeepGoing counts failures and wrong answers apart; without
// it the first failure ends the run.
func TestRunLoadOpenLoop(t *testing.T) {
	var n atomic.Int64
	o := LoadOptions{NewWorker: func(int) (Worker, error) { return countWorker{&n}, nil }, Connections: 4, Rate: 2000,
		Requests: 200, KeepGoing: true}
	res, err := RunLoad(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 200 || res.Count != 200 || res.Elapsed < 90*time.Millisecond {
		t.Fatalf("%v (count %d)", res, res.Count)
	}
	// 40 fifths; 66 thirds, 13 of them fifths.
	if res.Mismatches != 40 || res.Errors != 53 || res.FirstError != "third" || len(res.Mismatch) != maxKept {
		t.Fatalf("mismatches %d (kept %d), errors %d (first %q)", res.Mismatches, len(res.Mismatch), res.Errors, res.FirstError)
	}
	o.KeepGoing = false
	n.Store(0)
	if _, err := RunLoad(context.Background(), o); err == nil || !strings.Contains(err.Error(), "third") {
		t.Fatalf("err %v, want the first failure", err)
	}
}
