package replica

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// Benchmarks of the JetStream path, in-process (the relay, the embedded NATS
// server and the replica share the process and its cores): relay throughput,
// replica catch-up and snapshot load. Batches are 16 stored blocks of a
// vllm_v1 registration (engine hashes are the index keys: no re-hashing), so
// the figures are the transport's, not the hasher's.

const benchBlocks = 16

func benchReg(b testing.TB, inst string) core.Registration {
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		b.Fatal(err)
	}
	return core.Registration{Endpoint: "tcp://127.0.0.1:1/" + inst, Type: core.PublisherVLLM, ModelName: "m",
		TenantID: "default", InstanceID: inst, BlockSize: 16, Profile: p, ProfileExplicit: true}
}

func benchBatch(rng *rand.Rand, seq uint64, n int) *core.Batch {
	bt := &core.Batch{Seq: seq, HasSeq: true}
	e := bt.NextEvent()
	e.Kind, e.Medium, e.BlockSize = core.EventStored, []byte("GPU"), 16
	for i := 0; i < n; i++ {
		e.Hashes = append(e.Hashes, rng.Uint64())
	}
	return bt
}

func benchOpts(url string) Options {
	o := natsOpts(url)
	o.MemoryStorage = false // file storage, as deployed
	return o
}

// publish relays n batches through a fresh relay and waits for their
// acknowledgement.
func publish(b *testing.B, url string, n int) {
	relay, err := NewRelay(benchOpts(url))
	if err != nil {
		b.Fatal(err)
	}
	src := core.New(core.Options{Observer: relay, Logger: quietLog()})
	relay.Start(src)
	defer relay.Close(0)
	sub, _, err := src.Register(benchReg(b, "e"))
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < n; i++ {
		sub.Apply(benchBatch(rng, uint64(i), benchBlocks))
		for relay.queued() > 4*relay.opts.MaxPending { // keep within the buffer
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitUntil(b, "the relay to drain", 5*time.Minute, func() bool { return relay.queued() == 0 })
}

// BenchmarkRelayThroughput: batches applied by the relay's index until
// JetStream (file storage) acknowledged every one.
func BenchmarkRelayThroughput(b *testing.B) {
	b.ReportAllocs()
	ns := natstest.Start(b, b.TempDir(), -1)
	b.ResetTimer()
	start := time.Now()
	publish(b, ns.ClientURL(), b.N)
	d := time.Since(start)
	b.ReportMetric(float64(b.N*benchBlocks)/d.Seconds(), "blocks/s")
	b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
}

// BenchmarkReplicaCatchUp: a replica started on a stream of b.N batches,
// until it applied the last.
func BenchmarkReplicaCatchUp(b *testing.B) {
	b.ReportAllocs()
	ns := natstest.Start(b, b.TempDir(), -1)
	publish(b, ns.ClientURL(), b.N)
	last := streamLast(b, ns.ClientURL(), "CONDUCTOR")
	b.ResetTimer()
	start := time.Now()
	rep, err := NewReplica(core.New(core.Options{Logger: quietLog()}), benchOpts(ns.ClientURL()), nil)
	if err != nil {
		b.Fatal(err)
	}
	rep.Start()
	defer rep.Close()
	waitUntil(b, "catch-up", 10*time.Minute, func() bool { return rep.applied.Load() == last })
	d := time.Since(start)
	b.ReportMetric(float64(b.N*benchBlocks)/d.Seconds(), "blocks/s")
}

// BenchmarkSnapshotLoad: a replica's snapshot of n blocks written to the
// object store (file storage), then loaded by a new replica: the warm start.
func BenchmarkSnapshotLoad(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			ns := natstest.Start(b, b.TempDir(), -1)
			ix := core.New(core.Options{Logger: quietLog(), ContextSizeHint: n})
			sub, _, err := ix.Register(benchReg(b, "e"))
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewSource(1))
			for i := 0; i < n/256; i++ {
				sub.Apply(benchBatch(rng, uint64(i), 256))
			}
			holdings := ix.TierBlocks()
			nc, err := nats.Connect(ns.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			w, err := NewReplica(ix, benchOpts(ns.ClientURL()), nil)
			if err != nil {
				b.Fatal(err)
			}
			w.applied.Store(1)
			ctx := context.Background()
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				start := time.Now()
				if err := w.writeSnapshot(ctx, js); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(start).Seconds(), "write_s")
				rix := core.New(core.Options{Logger: quietLog(), ContextSizeHint: n})
				lo := benchOpts(ns.ClientURL())
				lo.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
				r, err := NewReplica(rix, lo, nil)
				if err != nil {
					b.Fatal(err)
				}
				start = time.Now()
				if seq := r.loadSnapshot(ctx, js); seq != 1 {
					b.Fatalf("loaded seq %d", seq)
				}
				b.ReportMetric(time.Since(start).Seconds(), "load_s")
				if rix.TierBlocks() != holdings {
					b.Fatalf("restored %v, source %v", rix.TierBlocks(), holdings)
				}
			}
		})
	}
}
