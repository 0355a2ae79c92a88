package httpd

import (
	"encoding/json"
	"fmt"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/seed-c7a81618/conductor/hash"
)

// BenchmarkQueryHandler measures the /query handler (routing, parse,
// core.Index.Query with lazy sha256_cbor hashing, response encoding, metrics)
// on a reused RequestCtx: vLLM sha256_cbor, B=16, full hits up to 8k tokens,
// the first 512 blocks at 131k. Forms: msgpack int array, msgpack LE int32 bin,
// JSON. Run:
//
//	go test -run '^$' -bench BenchmarkQueryHandler -benchmem ./httpd/
//
// memo=on runs the same requests with a hash digest memo: the prompt repeats, so
// every block after the first request is a memo hit.
func BenchmarkQueryHandler(b *testing.B) {
	for _, memo := range []string{"off", "on"} {
		f := newFixture(b)
		if memo == "on" {
			f = newFixtureMemo(b, hash.NewMemo(hash.DefaultMemoBytes))
		}
		benchQueryHandler(b, f, "memo="+memo+"/")
	}
}

func benchQueryHandler(b *testing.B, f *fixture, prefix string) {
	for _, form := range []string{"msgpack", "bin", "json"} {
		for _, n := range []int{1024, 8192, fixtureMax} {
			b.Run(fmt.Sprintf("%s%s/tokens=%d", prefix, form, n), func(b *testing.B) {
				path, ct := ctOf(form)
				body := f.body(form, n)
				ctx := requestCtx(path, ct, body)
				f.serve(ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d", ctx.Response.StatusCode())
				}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU(b)
				for i := 0; i < b.N; i++ {
					f.serve(ctx)
				}
				b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// BenchmarkQueryHandlerParallel runs the msgpack handler from every P, each
// goroutine with its own RequestCtx.
func BenchmarkQueryHandlerParallel(b *testing.B) {
	f := newFixture(b)
	for _, n := range []int{1024, 8192, fixtureMax} {
		b.Run(fmt.Sprintf("msgpack/tokens=%d", n), func(b *testing.B) {
			body := f.body("msgpack", n)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := requestCtx("/query", "application/msgpack", body)
				for pb.Next() {
					f.serve(ctx)
				}
			})
		})
	}
}

// BenchmarkJSONTokens compares the JSON reader with encoding/json (the
// baseline it replaces) and valyala/fastjson (zero-allocation, exact uint64)
// on the real /query shape at 1k, 8k and 131k tokens: every reader must
// produce the int32 token slice the hasher needs.
func BenchmarkJSONTokens(b *testing.B) {
	for _, n := range []int{1024, 8192, 131072} {
		tokens := seqTokens(n, 100000)
		body := []byte(jsonEnc(obj{"model", "deepseek", "block_size", 16, "token_ids", tokens}))
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) { benchJSONTokens(b, body, len(tokens)) })
	}
}

func benchJSONTokens(b *testing.B, body []byte, n int) {
	b.Run("jsonscan", func(b *testing.B) {
		var r jsonReader
		var scratch []byte
		buf := make([]int32, 0, n)
		var toks []int32
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r.init(body, &scratch, true)
			toks = toks[:0]
			for {
				k, ok := r.nextKey()
				if !ok {
					break
				}
				if string(k) == "token_ids" {
					var fe *RequestError
					if toks, fe = r.int32s(&buf, "token_ids", 1<<20); fe != nil {
						b.Fatal(fe)
					}
				} else {
					r.value()
				}
			}
			if len(toks) != n {
				b.Fatal(len(toks))
			}
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		var p fastjson.Parser
		buf := make([]int32, 0, n)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			v, err := p.ParseBytes(body)
			if err != nil {
				b.Fatal(err)
			}
			arr, err := v.Get("token_ids").Array()
			if err != nil {
				b.Fatal(err)
			}
			buf = buf[:0]
			for _, e := range arr {
				x, err := e.Int()
				if err != nil || x < math.MinInt32 || x > math.MaxInt32 {
					b.Fatal(err)
				}
				buf = append(buf, int32(x))
			}
			if len(buf) != n {
				b.Fatal(len(buf))
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		var v struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			v.TokenIDs = v.TokenIDs[:0]
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// processCPU is this process's user+system CPU time (all threads). Beside
// ns/op (wall time) it is the figure that survives a machine shared with other
// jobs: time spent waiting for a core is not counted.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
