package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Query tail latency while ingest runs flat out, the user's way:
// conductor as a child process (startLoadChild: engine-a holds an 8k-token
// prompt), a second publisher (engine-b) streaming fresh 64-block batches over
// ZMQ as fast as conductor applies them (flow control keeps at most
// tailWindow batches in flight, so the run is lossless), and 4 keep-alive
// connections querying the 8k-token prompt over msgpack at the same time. It
// reports the query p50/p99/p999/max, ingest blocks/s and, from the server's
// /metrics, GC pauses, GC and assist CPU, scheduler latency, the applier's
// longest uninterrupted run and RSS. TAIL_BATCH sets the blocks per batch
// (default 64). Run:
//
//	TAIL_BLOCKS=10000000 go test -run '^$' -bench BenchmarkTailUnderIngest -benchtime 1x -timeout 30m ./bench/
//
// Cases: grow (the index grows from the fixture to TAIL_BLOCKS more blocks,
// default 2M) and steady (every batch also evicts the blocks stored
// steadyWindow batches earlier; TAIL_STEADY_BLOCKS blocks, default 2M, after a
// fill that is not measured), each with 4 querying connections and with none
// (the ingest-only CPU per block). BENCH_CONDUCTOR_BIN runs a prebuilt binary instead
// of building cmd/conductor (to compare two builds alternately); TAIL_ARGS adds
// server flags (space-separated); TAIL_PUBLISHER_NICE runs the publisher
// process at that nice value (engines publish from other hosts in a
// deployment: this shows what is left when it does not compete for the cores).

const (
	tailWindow   = 8192         // batches published but not yet applied, at most
	tailBatchEnv = "TAIL_BATCH" // blocks per batch (default 64); the publisher process inherits it
)

// tailBatch is the number of blocks engine-b publishes per batch.
func tailBatch() int { return envInt(tailBatchEnv, 64) }

// tailRun is one measured run.
type tailRun struct {
	Load      LoadResult
	Blocks    int // stored during the measured part
	Elapsed   time.Duration
	ServerCPU time.Duration
	Metrics   tailMetrics // deltas over the measured part (RSS and apply max: at the end)
	Peer      bool        // the C++ conductor: Metrics holds RSS alone
}

type tailMetrics struct {
	GCs        float64
	GCPauseMax float64 // upper bound of the highest GC pause bucket hit, seconds
	GCCPU      float64 // seconds
	AssistCPU  float64 // seconds
	SchedP99   float64 // runnable → running latency, seconds (bucket bound)
	SchedMax   float64
	// HandlerP99 and HandlerMax bound the server's own /query time (read to
	// response written; conductor_http_request_duration_seconds buckets): what
	// the client saw beyond them was spent outside the handler (kernel,
	// socket wake-ups, the client's own scheduling).
	HandlerP99, HandlerMax float64
	ApplyMax               float64 // longest uninterrupted applier run, seconds (NaN: not exported)
	RSS                    float64 // bytes
	Gaps                   float64
}

func (r tailRun) String() string {
	m := r.Metrics
	perBlock := time.Duration(0)
	if r.Blocks > 0 {
		perBlock = r.ServerCPU / time.Duration(r.Blocks)
	}
	s := fmt.Sprintf("ingest %d blocks in %v = %.2f M blocks/s, server CPU %v (%v/block); ",
		r.Blocks, r.Elapsed.Round(time.Millisecond), float64(r.Blocks)/r.Elapsed.Seconds()/1e6, r.ServerCPU, perBlock)
	if r.Load.Requests > 0 {
		s += fmt.Sprintf("query %.0f rps p50 %v p99 %v p999 %v max %v; ", r.Load.RPS, r.Load.P50, r.Load.P99, r.Load.P999, r.Load.Max)
	}
	s += fmt.Sprintf("GCs %.0f, GC pause max ≤%.3gms, GC CPU %.2fs (assist %.2fs), sched-latency p99 ≤%.3gms max ≤%.3gms, handler p99 ≤%.3gms max ≤%.3gms, apply max %.3gms, RSS %.0f MB",
		m.GCs, m.GCPauseMax*1e3, m.GCCPU, m.AssistCPU, m.SchedP99*1e3, m.SchedMax*1e3, m.HandlerP99*1e3, m.HandlerMax*1e3, m.ApplyMax*1e3, m.RSS/1e6)
	return s
}

// metricsPage is one /metrics scrape: sample lines by full series name.
type metricsPage map[string]float64

func (s *serverProc) scrape(tb testing.TB) metricsPage {
	tb.Helper()
	resp, err := http.Get(s.url("/metrics"))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	p := metricsPage{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			p[line[:i]] = v
		}
	}
	return p
}

// sumPrefix sums every series whose name starts with prefix.
func (p metricsPage) sumPrefix(prefix string) float64 {
	var t float64
	for k, v := range p {
		if strings.HasPrefix(k, prefix) {
			t += v
		}
	}
	return t
}

// maxPrefix is the largest value of the series starting with prefix (NaN if none).
func (p metricsPage) maxPrefix(prefix string) float64 {
	m := math.NaN()
	for k, v := range p {
		if strings.HasPrefix(k, prefix) && (math.IsNaN(m) || v > m) {
			m = v
		}
	}
	return m
}

var leRE = regexp.MustCompile(`le="([^"]+)"`)

// histDelta returns the bucket bounds of the cumulative Prometheus histogram
// name whose count grew between a and b, as the upper bound of quantile q and
// of the highest bucket that grew (0 when nothing was observed). labels,
// when not empty, selects one series: its labels before le, each followed by
// a comma (`path="/query",`).
func histDelta(a, b metricsPage, name, labels string, q float64) (quant, max float64) {
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range b {
		if !strings.HasPrefix(k, name+"_bucket{"+labels) {
			continue
		}
		m := leRE.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		le := math.Inf(1)
		if m[1] != "+Inf" {
			le, _ = strconv.ParseFloat(m[1], 64)
		}
		bs = append(bs, bucket{le, v - a[k]})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return 0, 0
	}
	total := bs[len(bs)-1].n
	quant = math.NaN()
	for i, bk := range bs {
		if math.IsNaN(quant) && bk.n >= q*total {
			quant = bk.le
		}
		if bk.n == total {
			// The first bucket holding every observation bounds the max.
			max = bk.le
			if math.IsInf(max, 1) && i > 0 {
				max = bs[i-1].le // at least this
			}
			break
		}
	}
	return quant, max
}

func tailMetricsDelta(a, b metricsPage) tailMetrics {
	var m tailMetrics
	m.GCs = b["go_gc_duration_seconds_count"] - a["go_gc_duration_seconds_count"]
	_, m.GCPauseMax = histDelta(a, b, "go_gc_pauses_seconds", "", 0.99)
	m.GCCPU = b["go_gc_cpu_seconds_total"] - a["go_gc_cpu_seconds_total"]
	m.AssistCPU = b["go_gc_mark_assist_cpu_seconds_total"] - a["go_gc_mark_assist_cpu_seconds_total"]
	m.SchedP99, m.SchedMax = histDelta(a, b, "go_sched_latencies_seconds", "", 0.99)
	m.HandlerP99, m.HandlerMax = histDelta(a, b, "conductor_http_request_duration_seconds", `path="/query",`, 0.99)
	m.ApplyMax = b.maxPrefix("conductor_ingest_apply_run_max_seconds")
	m.Gaps = b.sumPrefix(`conductor_ingest_gaps_total{instance="engine-b"`) + b.sumPrefix(`conductor_ingest_stale_clears_total{instance="engine-b"`)
	return m
}

// runTail measures one case on the server named server (conductor or C++;
// args are conductor's flags): blocks stored by engine-b (steady, conductor
// only: after a fill of steadyWindow batches) while conns connections query
// the 8k prompt. On the C++ conductor the /metrics figures stay zero.
func runTail(tb testing.TB, server string, steady bool, blocks, conns int, args ...string) tailRun {
	tb.Helper()
	s := startNamed(tb, server, args...)
	prompt := loadFixture(tb, s)
	body, ct := queryBody("msgpack", prompt[:8192])
	p := newTailPublisher(tb, s, steady)
	if steady {
		p.publish(tb, steadyWindow)
	}
	if conns > 0 {
		// Warm the query path before measuring.
		if _, err := RunLoad(context.Background(), LoadOptions{Addr: s.addr, ContentType: ct, Body: body,
			Connections: conns, Requests: 200, Expect: expectPrompt(8192)}); err != nil {
			tb.Fatal(err)
		}
	}
	var m0, m1 metricsPage
	if !s.cpp {
		m0 = s.scrape(tb)
	}
	c0 := s.cpu(tb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type loadOut struct {
		r   LoadResult
		err error
	}
	done := make(chan loadOut, 1)
	if conns > 0 {
		go func() {
			r, err := RunLoad(ctx, LoadOptions{Addr: s.addr, ContentType: ct, Body: body, Connections: conns,
				Duration: time.Hour, Expect: expectPrompt(8192)})
			done <- loadOut{r, err}
		}()
	} else {
		done <- loadOut{}
	}
	start := time.Now()
	p.publish(tb, blocks/tailBatch())
	elapsed := time.Since(start)
	cancel()
	out := <-done
	if out.err != nil {
		tb.Fatal(out.err)
	}
	c1 := s.cpu(tb)
	if !s.cpp {
		m1 = s.scrape(tb)
	}
	run := tailRun{Load: out.r, Blocks: blocks / tailBatch() * tailBatch(), Elapsed: elapsed, ServerCPU: c1 - c0,
		Metrics: tailMetricsDelta(m0, m1), Peer: s.cpp}
	run.Metrics.RSS = s.rss(tb)
	if run.Metrics.Gaps != 0 {
		tb.Fatalf("lossy run (gaps or stale clears on engine-b): %v", run)
	}
	return run
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func tailArgs() []string { return strings.Fields(os.Getenv("TAIL_ARGS")) }

func BenchmarkTailUnderIngest(b *testing.B) {
	var rows []string
	for _, mode := range []string{"grow", "steady"} {
		for _, conns := range []int{4, 0} {
			b.Run(fmt.Sprintf("%s/conns=%d", mode, conns), func(b *testing.B) {
				n := envInt("TAIL_BLOCKS", 2_000_000)
				if mode == "steady" {
					n = envInt("TAIL_STEADY_BLOCKS", 2_000_000)
				}
				for range b.N {
					r := runTail(b, serverConductor, mode == "steady", n, conns, tailArgs()...)
					b.Logf("%s/conns=%d: %v", mode, conns, r)
					rows = append(rows, r.row(fmt.Sprintf("%s/conns=%d", mode, conns)))
					b.ReportMetric(float64(r.Blocks)/r.Elapsed.Seconds(), "blocks/s")
					b.ReportMetric(float64(r.ServerCPU.Nanoseconds())/float64(r.Blocks), "server-ns/block")
					if conns > 0 {
						b.ReportMetric(float64(r.Load.P50.Microseconds()), "p50-µs")
						b.ReportMetric(float64(r.Load.P99.Microseconds()), "p99-µs")
						b.ReportMetric(float64(r.Load.P999.Microseconds()), "p999-µs")
						b.ReportMetric(float64(r.Load.Max.Microseconds()), "max-µs")
					}
					b.ReportMetric(r.Metrics.RSS/1e6, "RSS-MB")
				}
			})
		}
	}
	if len(rows) > 0 {
		// One table of every case that ran, as Markdown.
		fmt.Printf("\ntail under ingest (TAIL_BLOCKS=%d TAIL_STEADY_BLOCKS=%d TAIL_ARGS=%q TAIL_PUBLISHER=%q TAIL_PUBLISHER_NICE=%q)\n%s\n%s\n",
			envInt("TAIL_BLOCKS", 2_000_000), envInt("TAIL_STEADY_BLOCKS", 2_000_000), os.Getenv("TAIL_ARGS"), os.Getenv("TAIL_PUBLISHER"), os.Getenv("TAIL_PUBLISHER_NICE"),
			tailHeader, strings.Join(rows, "\n"))
	}
}

const tailHeader = "| case | blocks | ingest M blocks/s | server CPU/block | query rps | p50 | p99 | p999 | max | handler p99 / max | GCs | GC pause max | assist CPU | apply max | RSS |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

// row is the run as a line of tailHeader's table.
func (r tailRun) row(name string) string {
	m := r.Metrics
	var q string
	if r.Load.Requests > 0 {
		us := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1e3) }
		q = fmt.Sprintf("%.0f | %s | %s | %s | %s", r.Load.RPS, us(r.Load.P50), us(r.Load.P99), us(r.Load.P999), us(r.Load.Max))
		if r.Peer {
			q += " | –"
		} else {
			q += fmt.Sprintf(" | ≤%.3g / ≤%.3g ms", m.HandlerP99*1e3, m.HandlerMax*1e3)
		}
	} else {
		q = "– | – | – | – | – | –"
	}
	runtime := fmt.Sprintf("%.0f | ≤%.3g ms | %.2f s | %.0f ms", m.GCs, m.GCPauseMax*1e3, m.AssistCPU, m.ApplyMax*1e3)
	if r.Peer {
		runtime = "– | – | – | –"
	}
	return fmt.Sprintf("| %s | %d | %.2f | %.0f ns | %s | %s | %.0f MB |",
		name, r.Blocks, float64(r.Blocks)/r.Elapsed.Seconds()/1e6, float64(r.ServerCPU.Nanoseconds())/float64(max(r.Blocks, 1)),
		q, runtime, m.RSS/1e6)
}

// TestTailHarness runs the tail harness briefly: every published block is
// applied without loss while queries run, every query answered 200, and the
// server exports the GC and applier figures the benchmark reads.
func TestTailHarness(t *testing.T) {
	const blocks = 64 * 200
	r := runTail(t, serverConductor, false, blocks, 2)
	t.Logf("%v", r)
	if r.Blocks != blocks || r.Load.Requests == 0 {
		t.Fatalf("run: %+v", r)
	}
	if r.Metrics.RSS <= 0 || math.IsNaN(r.Metrics.ApplyMax) || r.Metrics.ApplyMax <= 0 || r.Metrics.HandlerMax <= 0 {
		t.Fatalf("metrics missing: %+v", r.Metrics)
	}
}
