package ingest_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// BenchmarkZMQIngestHWM measures end-to-end ingest of 16-block vLLM batches
// (~1 KB, the size IngestOptions.RcvHWM must not penalise) from a publisher
// over loopback TCP, publish to applied, against the high-water mark of the
// SUB socket: libzmq hands messages from its I/O thread to the listener in
// credits of half the mark, so a small mark costs a thread hand-off every few
// messages. "hwm=200000" is RcvHWM's default, the mark when MaxMessageBytes
// is -1 (the baseline); "defaults" is IngestOptions' zero value (64, from
// ReceiveQueueBytes/MaxMessageBytes, with ZMQ_MAXMSGSIZE set). The publisher is kept at most 16384 batches ahead,
// as bench.BenchmarkIngestZMQ does, so no run drops. Run (IngestOptions.RcvHWM):
//
//	go test -run '^$' -bench ZMQIngestHWM -benchtime 100000x -count 6 ./wire/ingest/
func BenchmarkZMQIngestHWM(b *testing.B) {
	for _, hwm := range []int{1, 4, 16, 32, 64, 128, 200000} {
		b.Run(fmt.Sprintf("hwm=%d", hwm), func(b *testing.B) {
			benchIngestHWM(b, ingest.IngestOptions{RcvHWM: hwm, MaxMessageBytes: -1})
		})
	}
	b.Run("defaults", func(b *testing.B) { benchIngestHWM(b, ingest.IngestOptions{}) })
}

func benchIngestHWM(b *testing.B, opts ingest.IngestOptions) {
	const blocks = 16
	opts.Logger = slog.New(slog.DiscardHandler)
	ix := core.New(core.Options{Logger: opts.Logger})
	g, err := ingest.NewIngester(ix, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	if _, err := g.Register(core.Registration{Endpoint: pub.Endpoint(), ReplayEndpoint: pub.ReplayEndpoint(),
		Type: core.PublisherVLLM, ModelName: testModel, InstanceID: "engine-0", BlockSize: testBS,
		Profile: vllmProfile(b), ProfileExplicit: true}); err != nil {
		b.Fatal(err)
	}
	status := func() ingest.ListenerStatus { return g.Listeners()[0] }
	for deadline := time.Now().Add(waitLimit); !status().HasSeq; {
		if time.Now().After(deadline) {
			b.Fatal("subscriber never connected")
		}
		if _, err := pub.Publish(emptyVLLM()); err != nil {
			b.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tmpl := bench.NewStoredTemplate(blocks, testBS, 0, false)
	hs := make([]uint64, blocks)
	b.SetBytes(int64(tmpl.Size()))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var seq uint64
	for i := 0; i < b.N; i++ {
		for j := range hs {
			hs[j] = uint64(i*blocks+j+1) * 0x9e3779b97f4a7c15
		}
		if seq, err = pub.Publish(tmpl.Fill(make([]byte, 0, tmpl.Size()), hs, nil)); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
			for seq-status().LastSeq >= 16384 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	for deadline := time.Now().Add(time.Minute); status().LastSeq != seq; {
		if time.Now().After(deadline) {
			b.Fatalf("last batch never applied: %+v", status())
		}
		time.Sleep(50 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*blocks)/elapsed.Seconds(), "blocks/s")
	if st := status(); st.Gaps != 0 || st.DecodeErrors != 0 || st.StaleClears != 0 {
		b.Fatalf("lossy run: %+v", st)
	}
}
