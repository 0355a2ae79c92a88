package bench

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// Ingest benchmarks. Provenance: the design's target is ≥ 2M blocks/s end to end
// over real ZMQ from one publisher with 16-block batches (the C++ Mooncake
// conductor ingests ~520k blocks/s on the same 2-core machine). Run:
//
//	go test -run '^$' -bench 'Ingest' -benchtime 200000x ./bench/
//
// BenchmarkIngestZMQ measures publish → PUB → SUB → decode → apply until the last
// block is visible to a query; BenchmarkIngestInProcess is its baseline without
// the transport (decode + apply of the same payloads). Two workloads:
//
//   - grow: every batch stores 16 new blocks, so the index grows without bound
//     (3.2M blocks after 200k batches): map growth is part of the figure.
//   - steady: every batch also evicts the 16 blocks stored steadyWindow batches
//     earlier, as a full GPU cache does, so the index stays at 64k blocks.
//
// blocks/s counts stored blocks only.

const benchBlockSize = 16

func benchProfile(b *testing.B) hash.Profile {
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// maxInFlight bounds published-but-unapplied batches in BenchmarkIngestZMQ.
const maxInFlight = 16384

// steadyWindow is how many batches' blocks the steady workload keeps resident.
const steadyWindow = 4096

// fillHashes stamps batch i's unique block hashes (never 0; a negative i gives
// hashes no batch stores).
func fillHashes(hs []uint64, i int) {
	for j := range hs {
		hs[j] = uint64(i*len(hs)+j+1) * 0x9e3779b97f4a7c15
	}
}

func BenchmarkIngestZMQ(b *testing.B) {
	for _, mode := range []string{"grow", "steady"} {
		for _, blocks := range []int{16, 64} {
			b.Run(fmt.Sprintf("%s/blocks=%d", mode, blocks), func(b *testing.B) { benchIngestZMQ(b, blocks, mode == "steady") })
		}
	}
}

func benchIngestZMQ(b *testing.B, blocks int, steady bool) {
	log := slog.New(slog.DiscardHandler)
	ix := core.New(core.Options{Logger: log})
	g, err := ingest.NewIngester(ix, ingest.IngestOptions{Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	pub, err := NewPublisher(PublisherOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	reg := core.Registration{Endpoint: pub.Endpoint(), ReplayEndpoint: pub.ReplayEndpoint(), Type: core.PublisherVLLM,
		ModelName: "bench", InstanceID: "engine-0", BlockSize: benchBlockSize, Profile: benchProfile(b), ProfileExplicit: true}
	if _, err := g.Register(reg); err != nil {
		b.Fatal(err)
	}
	key := core.ServiceKey{InstanceID: "engine-0", TenantID: "default"}
	lastSeq := func() (uint64, bool) {
		for _, s := range g.Listeners() {
			if s.Key == key {
				return s.LastSeq, s.HasSeq
			}
		}
		return 0, false
	}
	// Prime: the subscription is connected and has applied a batch.
	empty := AppendVLLMBatch(nil, EraMap, 1.7e9, 0)
	for deadline := time.Now().Add(waitBound); ; {
		if _, has := lastSeq(); has {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("subscriber never connected")
		}
		if _, err := pub.Publish(empty); err != nil {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	tmpl := NewStoredTemplate(blocks, benchBlockSize, 0, steady)
	hs, rm := make([]uint64, blocks), make([]uint64, blocks)
	var res core.QueryResult
	visible := func(h uint64) bool {
		req := core.QueryRequest{Model: "bench", BlockSize: benchBlockSize, Hashes: []uint64{h}, ByHash: true}
		if err := ix.Query(&req, &res); err != nil {
			b.Fatal(err)
		}
		return len(res.Instances) == 1 && res.Instances[0].LongestMatched > 0
	}
	b.SetBytes(int64(tmpl.Size()))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		fillHashes(hs, i)
		fillHashes(rm, i-steadyWindow)
		seq, err := pub.Publish(tmpl.Fill(make([]byte, 0, tmpl.Size()), hs, rm))
		if err != nil {
			b.Fatal(err)
		}
		// Flow control, as an engine's bounded queue would apply: keep at most
		// maxInFlight batches between publisher and index. libzmq credits a
		// pipe's reader only every HWM−1024 messages, so a PUB can see its pipe
		// full with far fewer than SNDHWM messages queued and drop; staying well
		// below the HWMs keeps the run lossless (asserted at the end).
		if i%256 == 255 {
			for {
				last, _ := lastSeq()
				if seq-last < maxInFlight {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	fillHashes(hs, b.N-1)
	lastHash := hs[len(hs)-1]
	for deadline := time.Now().Add(time.Minute); !visible(lastHash); {
		if time.Now().After(deadline) {
			b.Fatalf("last block never visible: %+v", g.Listeners())
		}
		time.Sleep(50 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*blocks)/elapsed.Seconds(), "blocks/s")
	if st := g.Listeners()[0]; st.Gaps != 0 || st.DecodeErrors != 0 || st.StaleClears != 0 {
		b.Fatalf("lossy run: %+v", st)
	}
}

// BenchmarkIngestInProcess is the baseline: the same payloads decoded and
// applied directly, without ZMQ.
func BenchmarkIngestInProcess(b *testing.B) {
	for _, mode := range []string{"grow", "steady"} {
		b.Run(mode+"/blocks=16", func(b *testing.B) { benchIngestInProcess(b, 16, mode == "steady") })
	}
}

func benchIngestInProcess(b *testing.B, blocks int, steady bool) {
	in := newInProcessIngest(b, blocks, steady)
	b.SetBytes(int64(in.tmpl.Size()))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		in.apply(b, i)
	}
	b.ReportMetric(float64(b.N*blocks)/time.Since(start).Seconds(), "blocks/s")
}

// inProcessIngest is ingest without the transport: one engine rank of a new
// index, and batch i of the benchmarks' vLLM payloads (fillHashes; with
// steady, removing the blocks of batch i-steadyWindow) decoded by the
// listeners' decoder and applied.
type inProcessIngest struct {
	ix     *core.Index
	sub    *core.Subscription
	tmpl   *StoredTemplate
	hs, rm []uint64
	buf    []byte
	dec    wire.Decoder
	batch  core.Batch
}

func newInProcessIngest(b *testing.B, blocks int, steady bool) *inProcessIngest {
	ix := core.New(core.Options{Logger: slog.New(slog.DiscardHandler)})
	sub, _, err := ix.Register(core.Registration{Endpoint: "tcp://127.0.0.1:1", Type: core.PublisherVLLM,
		ModelName: "bench", InstanceID: "engine-0", BlockSize: benchBlockSize, Profile: benchProfile(b), ProfileExplicit: true})
	if err != nil {
		b.Fatal(err)
	}
	tmpl := NewStoredTemplate(blocks, benchBlockSize, 0, steady)
	return &inProcessIngest{ix: ix, sub: sub, tmpl: tmpl, hs: make([]uint64, blocks), rm: make([]uint64, blocks),
		buf: make([]byte, 0, tmpl.Size())}
}

// apply decodes and applies batch i.
func (in *inProcessIngest) apply(b *testing.B, i int) core.ApplyStats {
	fillHashes(in.hs, i)
	fillHashes(in.rm, i-steadyWindow)
	in.buf = in.tmpl.Fill(in.buf[:0], in.hs, in.rm)
	if err := in.dec.Decode(wire.DialectVLLM, in.buf, &in.batch); err != nil {
		b.Fatal(err)
	}
	return in.sub.Apply(&in.batch)
}
