package mooncake

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// BenchmarkQueryHandler measures the /query handler (routing, parse,
// core.Index.Query with lazy sha256_cbor hashing, response encoding, metrics)
// on a reused RequestCtx: vLLM sha256_cbor, B=16, full hits up to 8k tokens,
// the first 512 blocks at 131k. Forms: msgpack int array, msgpack LE int32 bin,
// JSON. Run:
//
//	go test -run '^$' -bench BenchmarkQueryHandler -benchmem ./httpd/mooncake/
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
