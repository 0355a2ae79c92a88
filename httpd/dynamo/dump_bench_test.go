package dynamo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// buildDumpIndex fills an index with n blocks held by one Dynamo-style
// worker (vLLM publisher, xxh3 profile: conductor re-hashes the tokens and
// keeps an engine-hash map entry per block), in chains of 64 blocks of 16
// tokens, 1 in 8 chains offloaded to CPU as well.
func buildDumpIndex(tb testing.TB, n int) (*core.Index, *Server) {
	return buildWorkersIndex(tb, n, 1)
}

// buildWorkersIndex is buildDumpIndex with workers 1..w of the one model (one
// context), each holding n/w blocks of its own.
func buildWorkersIndex(tb testing.TB, n, w int) (*core.Index, *Server) {
	ix := core.New(core.Options{Logger: quietLogger(), ContextSizeHint: n})
	d, err := newDynamo(ix, newCoreRegistrar(ix), Options{Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	const chain = 64
	b := &core.Batch{}
	tok := int32(0)
	var h uint64
	for id := 1; id <= w; id++ {
		if err := d.Register(Worker{InstanceID: uint64(id), Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", id), ModelName: "m", BlockSize: 16}); err != nil {
			tb.Fatal(err)
		}
		sub, _ := ix.Lookup(core.ServiceKey{InstanceID: strconv.Itoa(id), TenantID: "default"})
		for done := 0; done < n/w; done += chain {
			b.Reset()
			ev := b.NextEvent()
			ev.Kind, ev.BlockSize, ev.HasTokens = core.EventStored, 16, true
			k := min(chain, n/w-done)
			for i := 0; i < k*16; i++ {
				ev.Tokens = append(ev.Tokens, tok)
				tok++
			}
			for i := 0; i < k; i++ {
				h++
				ev.Hashes = append(ev.Hashes, h*0x9E3779B97F4A7C15)
			}
			sub.Apply(b)
			if done/chain%8 == 0 {
				ev.Medium = []byte("CPU")
				sub.Apply(b)
			}
		}
	}
	return ix, d
}

// heapPeak samples HeapInuse every 5 ms until stopped and returns the peak.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > peak.Load() {
			peak.Store(ms.HeapInuse)
		}
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() uint64 { close(quit); wg.Wait(); sample(); return peak.Load() }
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// cpuTime is this process's user+system CPU time (the machine is shared:
// wall time alone mostly measures the other tenants).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapInuseU() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// BenchmarkDump measures GET /dump of an index of N blocks in both forms
// (written to a counting writer: time, bytes, peak extra heap over the live
// index), then a replica's recovery from it over loopback HTTP (a second
// index in the same process: Recover → RestoreDump). One iteration per
// size; run with -benchtime=1x.
func BenchmarkDump(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			ix, d := buildDumpIndex(b, n)
			holdings := ix.TierBlocks()
			b.ReportAllocs()
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				for _, form := range []string{"main", "dynamo"} {
					base := heapInuseU()
					stop := heapPeak()
					cw := &countWriter{}
					w := bufio.NewWriterSize(cw, 64<<10)
					start, cpu0 := time.Now(), cpuTime()
					var err error
					if form == "main" {
						err = dump.Write(ix, w)
					} else {
						err = d.WriteDump(w)
					}
					el, cpu := time.Since(start), cpuTime()-cpu0
					peak := stop()
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(el.Seconds(), form+"_dump_s")
					b.ReportMetric(cpu.Seconds(), form+"_dump_cpu_s")
					b.ReportMetric(float64(cw.n)/float64(n), form+"_bytes/block")
					b.ReportMetric(float64(cw.n)/1e6, form+"_MB")
					b.ReportMetric(float64(int64(peak)-int64(base))/1e6, form+"_peak_extra_MB")
				}
				// Recovery over loopback HTTP from the Dynamo port.
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				go func() { _ = d.Serve(ln) }()
				rix := core.New(core.Options{Logger: quietLogger(), ContextSizeHint: n})
				rd, _ := newDynamo(rix, newCoreRegistrar(rix), Options{Logger: quietLogger()})
				if err := rd.Register(Worker{InstanceID: 1, Endpoint: "tcp://127.0.0.1:1", ModelName: "m", BlockSize: 16}); err != nil {
					b.Fatal(err)
				}
				start, cpu0 := time.Now(), cpuTime()
				st, ok, err := dump.Recover(context.Background(), rix, []string{"http://" + ln.Addr().String()}, dump.RecoverOptions{Indexers: rd, Logger: quietLogger()})
				el, cpu := time.Since(start), cpuTime()-cpu0
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				if rix.TierBlocks() != holdings {
					b.Fatalf("replica holds %v, source %v", rix.TierBlocks(), holdings)
				}
				b.ReportMetric(el.Seconds(), "recover_s")
				b.ReportMetric(cpu.Seconds(), "recover_cpu_s")
				b.ReportMetric(float64(st.Bytes)/1e6, "recover_MB")
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = d.Shutdown(ctx)
				cancel()
				d, _ = newDynamo(ix, newCoreRegistrar(ix), Options{Logger: quietLogger()}) // a fresh server for the next iteration
				_ = d.AddIndexer("m", "default", 16)
				runtime.KeepAlive(rix)
			}
		})
	}
}

// BenchmarkSnapshotFile: what a warm restart costs (cmd/conductor's
// snapshot): the main form written to a file, SHA-256 of it (the meta's
// checksum), fsync; then, at start, the checksum verified and the file
// restored into a fresh index with the same registration.
func BenchmarkSnapshotFile(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			ix, _ := buildDumpIndex(b, n)
			holdings := ix.TierBlocks()
			path := filepath.Join(b.TempDir(), "index.snapshot")
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				start, cpu0 := time.Now(), cpuTime()
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				h := sha256.New()
				w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
				if err := dump.Write(ix, w); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				size, _ := f.Seek(0, io.SeekCurrent)
				f.Close()
				sum := h.Sum(nil)
				b.ReportMetric(time.Since(start).Seconds(), "write_s")
				b.ReportMetric((cpuTime() - cpu0).Seconds(), "write_cpu_s")
				b.ReportMetric(float64(size)/1e6, "MB")

				rix := core.New(core.Options{Logger: quietLogger(), ContextSizeHint: n})
				rd, _ := newDynamo(rix, newCoreRegistrar(rix), Options{Logger: quietLogger()})
				if err := rd.Register(Worker{InstanceID: 1, Endpoint: "tcp://127.0.0.1:1", ModelName: "m", BlockSize: 16}); err != nil {
					b.Fatal(err)
				}
				start, cpu0 = time.Now(), cpuTime()
				rf, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				h.Reset()
				if _, err := io.Copy(h, rf); err != nil || !bytes.Equal(h.Sum(nil), sum) {
					b.Fatal("checksum", err)
				}
				if _, err := rf.Seek(0, io.SeekStart); err != nil {
					b.Fatal(err)
				}
				if _, err := dump.Restore(rix, rf, rd); err != nil {
					b.Fatal(err)
				}
				rf.Close()
				b.ReportMetric(time.Since(start).Seconds(), "restore_s")
				b.ReportMetric((cpuTime() - cpu0).Seconds(), "restore_cpu_s")
				if rix.TierBlocks() != holdings {
					b.Fatalf("restored %v, source %v", rix.TierBlocks(), holdings)
				}
				runtime.KeepAlive(rix)
			}
		})
	}
}

// BenchmarkDumpStreams measures the main-form dump (the snapshot's, and
// GET /dump's) of one context of 1M blocks held by 1, 2, 16 and 256
// workers, each its own share of the blocks: time per block of the context.
// One iteration per case; run with -benchtime=1x.
func BenchmarkDumpStreams(b *testing.B) {
	const n = 1 << 20
	for _, k := range []int{1, 2, 16, 256} {
		b.Run(fmt.Sprintf("streams=%d", k), func(b *testing.B) {
			ix, _ := buildWorkersIndex(b, n, k)
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				w := bufio.NewWriterSize(&countWriter{}, 64<<10)
				start := time.Now()
				if err := dump.Write(ix, w); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n), "ns/block")
			}
		})
	}
}
