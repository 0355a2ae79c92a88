package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The core axis (`make bench-cores`): how a server's ingest and query rates
// grow with its cores. For each count c in CORES_COUNTS (default 1, 2, 4 and
// 8) a fresh server is pinned with taskset to c CPUs, and this process and
// its publisher processes to the others, at least c of them: the harness has
// as many cores as the server or more. A point the CPUs this process may use
// cannot hold is not measured: the report says how many free cores it needs.
//
// Ingest: CORES_STREAMS streams (default 64) as on the streams axis
// (streams_test.go), CORES_BLOCKS blocks in all (default 1,310,720).
// Queries, on the same server once it is idle: engine-a holds an 8k-token
// prompt (loadFixture), and CORES_CONNS keep-alive connections (default 64)
// from this process ask for its first 1k tokens, a full hit, CORES_QUERIES
// × c times (default 50,000 per server core); the conductor flags
// (CORES_ARGS, default --hash-memo-bytes 0) leave out the hash memo, so that
// every query hashes its prompt (the cold path).
//
// Whether the harness held the rate back: each row gives how busy the
// server's CPUs and the harness's were (CPU used from /proc ÷ (CPUs × wall
// time)), and names what limited it: the server when its CPUs were at least
// 90 % busy and the harness's were not, the harness (the figure is then a
// floor of the server's rate) when the harness's were and the server's were
// not, other processes when they and the server filled the server's CPUs
// (taskset keeps the server on its CPUs, not others off them: /proc/stat
// tells how much of those CPUs went to anything else), neither when both
// had CPU to spare (the server waited: on its locks, on the network, on too
// few connections).
//
// BENCH_CPP_CONDUCTOR adds the C++ conductor on every point. CORES_OUT
// (default results/cores) receives cores.md and the curves cores-ingest.svg
// and cores-query.svg (rate against server cores, with the line that is
// linear from the 1-core point). Run:
//
//	go test -run '^$' -bench BenchmarkCores -benchtime 1x -timeout 1h ./bench/
func BenchmarkCores(b *testing.B) {
	cores := envInts(b, "CORES_COUNTS", []int{1, 2, 4, 8})
	k := envInts(b, "CORES_STREAMS", []int{64})[0]
	total := envInts(b, "CORES_BLOCKS", []int{1_310_720})[0]
	perCore := envInts(b, "CORES_QUERIES", []int{50_000})[0]
	conns := envInts(b, "CORES_CONNS", []int{64})[0]
	limit := time.Duration(envInts(b, "CORES_LIMIT", []int{200})[0]) * time.Second
	args := strings.Fields(os.Getenv("CORES_ARGS"))
	if _, set := os.LookupEnv("CORES_ARGS"); !set {
		args = []string{"--hash-memo-bytes", "0"}
	}
	allowed := allowedCPUs(b)
	res := coresResults{Args: args, Streams: k, Conns: conns}
	for _, c := range cores {
		layout, err := layoutFor(allowed, c, c)
		if err != nil {
			fmt.Printf("bench-cores: %d server cores not measured: %v\n", c, err)
			res.Skipped = append(res.Skipped, coresSkip{Cores: c, Reason: err.Error()})
			continue
		}
		for _, srv := range servers() {
			slug := map[string]string{serverConductor: "conductor", serverCpp: "cpp"}[srv]
			b.Run(fmt.Sprintf("%s/cores=%d", slug, c), func(b *testing.B) {
				for range b.N {
					p := runCores(b, srv, layout, k, streamBatches(total, 1, k), perCore*c, conns, limit, args)
					b.Logf("%+v", p)
					b.ReportMetric(p.Ingest.rate(), "blocks/s")
					b.ReportMetric(p.Query.Load.RPS, "queries/s")
					res.Points = append(res.Points, p)
				}
			})
		}
	}
	out := os.Getenv("CORES_OUT")
	if out == "" {
		out = filepath.Join("results", "cores")
	}
	if err := res.write(out); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("cores results in %s\n", out)
}

// corePoint is one server on one core count.
type corePoint struct {
	Server string
	Layout cpuLayout
	Ingest streamsRun
	Query  serverRun
	// QueryOthers is the share of the server's CPUs other processes took
	// while it answered the queries (NaN: not pinned).
	QueryOthers float64
}

func (p corePoint) cores() int { return len(p.Layout.server) }

func (p corePoint) queryServerBusy() float64 {
	return busy(p.Query.ServerCPU, p.Query.Load.Elapsed, len(p.Layout.server))
}

func (p corePoint) queryClientBusy() float64 {
	return busy(p.Query.ClientCPU, p.Query.Load.Elapsed, len(p.Layout.client))
}

// coresSkip is a core count this machine could not measure.
type coresSkip struct {
	Cores  int
	Reason string
}

// runCores pins this process to layout.client, measures the ingest of k
// streams of batches batches each (runStreams), then n queries of the 1k
// prompt over conns connections on the same server.
func runCores(tb testing.TB, server string, layout cpuLayout, k, batches, n, conns int, limit time.Duration, args []string) corePoint {
	tb.Helper()
	pinSelf(tb, layout.client)
	r, s := runStreams(tb, server, layout, k, batches, limit, args)
	prompt := loadFixture(tb, s)
	settle(tb, s)
	body, ct := queryBody("bin", prompt[:1<<10])
	watch := watchCPUs(tb, s, layout.server)
	q := measure(tb, s, ct, body, expectPrompt(1<<10), conns, n)
	return corePoint{Server: server, Layout: layout, Ingest: r, Query: q, QueryOthers: watch.others(tb, s)}
}

// limitedBy names what held a measured rate back, from how busy the
// server's and the harness's CPUs were (shares of their CPUs) and the share
// of the server's CPUs that other processes took (NaN: not known).
func limitedBy(server, others, client float64) string {
	const full = 0.9
	switch {
	case server >= full && client >= full:
		return "server and harness"
	case server >= full:
		return "server"
	case client >= full:
		return "harness (a floor)"
	case server+others >= full:
		return "other processes"
	}
	return "neither"
}

// coresResults is the core axis.
type coresResults struct {
	Args           []string
	Streams, Conns int
	Points         []corePoint
	Skipped        []coresSkip
}

func (r *coresResults) find(server string, cores int) *corePoint {
	for i := range r.Points {
		if r.Points[i].Server == server && r.Points[i].cores() == cores {
			return &r.Points[i]
		}
	}
	return nil
}

// markdown is the report: what was not measured and why, the goals, and the
// ingest and query tables.
func (r *coresResults) markdown() string {
	var md strings.Builder
	fmt.Fprintf(&md, "Each point: the server pinned with taskset to its cores, this process (flow control, query client) and the "+
		"publisher processes to at least as many others. Ingest: %d streams as on the streams axis. Queries: the first 1k tokens "+
		"of engine-a's 8k-token prompt (a full hit) over %d keep-alive connections, once the server is idle after the ingest. "+
		"Conductor flags: %s. Busy: CPU used (/proc) ÷ (its CPUs × wall time); others on its CPUs: the share of the server's CPUs "+
		"that went to anything but the server: other processes, interrupts (/proc/stat); limited by: the side whose CPUs were at least 90 %% busy, other processes "+
		"when they and the server filled the server's CPUs, neither when the server waited with CPU to spare.\n\n",
		r.Streams, r.Conns, flagsText(r.Args))
	if !slices.ContainsFunc(r.Points, func(p corePoint) bool { return p.Server == serverCpp }) {
		md.WriteString(noPeer)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(&md, "- %d server cores: not measured on this machine (%s).\n", s.Cores, s.Reason)
	}
	if len(r.Skipped) > 0 {
		md.WriteString("\n")
	}
	md.WriteString(r.goals())
	if len(r.Points) == 0 {
		return md.String()
	}
	md.WriteString("\n| server | server cores | harness cores | ingest M blocks/s | ÷ 1-core rate | server CPU per block | server busy | others on its CPUs | harness busy | limited by | server threads |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Points {
		rate := fmt.Sprintf("%.2f", p.Ingest.rate()/1e6)
		if !p.Ingest.finished() {
			rate = fmt.Sprintf("did not finish in %s (%.2f)", seconds(p.Ingest.Limit), p.Ingest.rate()/1e6)
		}
		in := p.Ingest
		fmt.Fprintf(&md, "| %s | %d | %d | %s | %s | %s ns | %.0f %% | %s | %.0f %% | %s | %s |\n", p.Server, p.cores(), len(p.Layout.client),
			rate, r.ratio(p, func(q *corePoint) float64 { return q.Ingest.rate() }), thousands(int(math.Round(in.cpuPerBlock()))),
			100*in.serverBusy(), percent(in.Others), 100*in.clientBusy(), limitedBy(in.serverBusy(), in.Others, in.clientBusy()),
			thousands(in.Threads))
	}
	md.WriteString("\n| server | server cores | harness cores | queries/s | ÷ 1-core rate | server CPU per query | client p99 | server busy | others on its CPUs | harness busy | limited by |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.Points {
		fmt.Fprintf(&md, "| %s | %d | %d | %s | %s | %s | %s | %.0f %% | %s | %.0f %% | %s |\n", p.Server, p.cores(), len(p.Layout.client),
			thousands(int(math.Round(p.Query.Load.RPS))), r.ratio(p, func(q *corePoint) float64 { return q.Query.Load.RPS }),
			micros(float64(p.Query.ServerCPU.Nanoseconds())/1e3/float64(max(p.Query.Load.Requests, 1))),
			micros(float64(p.Query.Load.P99.Nanoseconds())/1e3), 100*p.queryServerBusy(), percent(p.QueryOthers),
			100*p.queryClientBusy(), limitedBy(p.queryServerBusy(), p.QueryOthers, p.queryClientBusy()))
	}
	return md.String()
}

// ratio is p's rate over the same server's 1-core rate ("–" without one).
func (r *coresResults) ratio(p corePoint, rate func(*corePoint) float64) string {
	one := r.find(p.Server, 1)
	if one == nil || rate(one) <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", rate(&p)/rate(one))
}

// goals sets conductor's 8-core rates against 0.8 × 8 × its 1-core rates.
func (r *coresResults) goals() string {
	one, eight := r.find(serverConductor, 1), r.find(serverConductor, 8)
	if one == nil || eight == nil {
		return "The goals (8 cores ≥ 0.8 × 8 × the 1-core rate, ingest and queries) need conductor's 1- and 8-core points.\n"
	}
	return fmt.Sprintf("conductor, 8 cores ÷ 1 core: ingest %.2f×, queries %.2f× (goal ≥ 6.4× each).\n",
		eight.Ingest.rate()/one.Ingest.rate(), eight.Query.Load.RPS/one.Query.Load.RPS)
}

// write renders the report to dir/cores.md and, when a point was measured,
// the curves to SVGs.
func (r *coresResults) write(dir string) error {
	md := r.markdown()
	charts := map[string]*Chart{}
	if len(r.Points) > 0 {
		coresTick := func(v float64) string { return fmt.Sprintf("%g", v) }
		ingest := &Chart{Title: "ingest: aggregate rate by server cores", XLabel: "server cores", YLabel: "M blocks/s", XTick: coresTick}
		query := &Chart{Title: "cold /query 1k tokens: rate by server cores", XLabel: "server cores", YLabel: "k queries/s", XTick: coresTick}
		for _, p := range r.Points {
			is, qs := chartSeries(ingest, p.Server), chartSeries(query, p.Server)
			is.X, is.Y = append(is.X, float64(p.cores())), append(is.Y, p.Ingest.rate()/1e6)
			qs.X, qs.Y = append(qs.X, float64(p.cores())), append(qs.Y, p.Query.Load.RPS/1e3)
		}
		if one := r.find(serverConductor, 1); one != nil {
			var cs []int
			for _, p := range r.Points {
				cs = append(cs, p.cores())
			}
			slices.Sort(cs)
			cs = slices.Compact(cs)
			il, ql := Series{Name: "conductor, linear from 1 core"}, Series{Name: "conductor, linear from 1 core"}
			for _, c := range cs {
				il.X, il.Y = append(il.X, float64(c)), append(il.Y, float64(c)*one.Ingest.rate()/1e6)
				ql.X, ql.Y = append(ql.X, float64(c)), append(ql.Y, float64(c)*one.Query.Load.RPS/1e3)
			}
			ingest.Series, query.Series = append(ingest.Series, il), append(query.Series, ql)
		}
		charts["cores-ingest.svg"], charts["cores-query.svg"] = ingest, query
		md += "\n![ingest rate against server cores](bench/curves/cores-ingest.svg)\n" +
			"![query rate against server cores](bench/curves/cores-query.svg)\n"
	}
	return writeReport(dir, "cores.md", md, charts)
}

// TestLimitedBy: what held a rate back, at and around the 90 % line.
func TestLimitedBy(t *testing.T) {
	for _, c := range []struct {
		server, others, client float64
		want                   string
	}{
		{0.95, 0.05, 0.50, "server"},
		{0.90, 0, 0.10, "server"},
		{0.50, 0.40, 0.95, "harness (a floor)"},
		{0.97, 0, 0.95, "server and harness"},
		{0.60, 0.35, 0.20, "other processes"},
		{0.89, 0, 0.89, "neither"},
		{0.80, math.NaN(), 0.20, "neither"},
	} {
		if got := limitedBy(c.server, c.others, c.client); got != c.want {
			t.Errorf("limitedBy(%g, %g, %g) = %q, want %q", c.server, c.others, c.client, got, c.want)
		}
	}
}

// TestCoresHarness runs one point of the core axis briefly on conductor: 3
// streams store all their blocks, then 300 queries of the 1k prompt are each
// a full hit (measure checks every answer), and the server's and the
// client's CPU are read over them. With two CPUs or more the server and the
// harness are pinned apart; the report has the point, and a core count too
// large for the machine is named as not measured.
func TestCoresHarness(t *testing.T) {
	var layout cpuLayout
	cpus := allowedCPUs(t)
	if len(cpus) >= 2 {
		layout, _ = layoutFor(cpus, 1, 1)
	}
	p := runCores(t, serverConductor, layout, 3, 10, 300, 4, waitBound, []string{"--hash-memo-bytes", "0"})
	t.Logf("%+v", p)
	if !p.Ingest.finished() || p.Ingest.Want != 3*10*tailBatch() {
		t.Fatalf("ingest: %+v", p.Ingest)
	}
	if p.Query.Load.Requests != 300 || p.Query.ServerCPU < 0 || p.Query.ClientCPU < 0 || p.Query.Load.RPS <= 0 {
		t.Fatalf("queries: %+v", p.Query)
	}
	_, err := layoutFor(cpus, len(cpus), len(cpus))
	res := coresResults{Args: []string{"--hash-memo-bytes", "0"}, Streams: 3, Conns: 4, Points: []corePoint{p},
		Skipped: []coresSkip{{Cores: len(cpus), Reason: err.Error()}}}
	dir := t.TempDir()
	if err := res.write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "cores.md"))
	if err != nil {
		t.Fatal(err)
	}
	skip := fmt.Sprintf("- %d server cores: not measured on this machine (not enough free cores: %d server cores need %d free cores",
		len(cpus), len(cpus), 2*len(cpus))
	if !strings.Contains(string(md), skip) {
		t.Errorf("no %q in\n%s", skip, md)
	}
	for _, name := range []string{"cores-ingest.svg", "cores-query.svg"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCoresReport: the report of hand-made 1- and 8-core points against
// hand-worked lines: rates and their ratio to the 1-core rate, busy shares
// over each side's own CPUs, what limited each, the goals, and a core count
// that was not measured.
func TestCoresReport(t *testing.T) {
	point := func(cores int, elapsed, cpu, client time.Duration, q LoadResult, qcpu, qclient time.Duration) corePoint {
		var l cpuLayout
		for c := range 2 * cores {
			if c < cores {
				l.server = append(l.server, c)
			} else {
				l.client = append(l.client, c)
			}
		}
		return corePoint{Server: serverConductor, Layout: l,
			Ingest: streamsRun{Server: serverConductor, Streams: 64, Batches: 320, Want: 1_310_720, Blocks: 1_310_720, Elapsed: elapsed,
				ServerCPU: cpu, ClientCPU: client, Others: 0.02, ServerCores: cores, ClientCores: cores, Threads: 72},
			Query: serverRun{Load: q, ServerCPU: qcpu, ClientCPU: qclient}, QueryOthers: math.NaN()}
	}
	r := coresResults{Args: []string{"--hash-memo-bytes", "0"}, Streams: 64, Conns: 64, Points: []corePoint{
		point(1, time.Second, 950*time.Millisecond, 300*time.Millisecond,
			LoadResult{Requests: 50_000, Elapsed: 2 * time.Second, RPS: 25_000, Latency: Latency{P99: 3 * time.Millisecond}},
			1900*time.Millisecond, time.Second),
		point(8, 125*time.Millisecond, 950*time.Millisecond, 500*time.Millisecond,
			LoadResult{Requests: 400_000, Elapsed: 2 * time.Second, RPS: 200_000, Latency: Latency{P99: 1500 * time.Microsecond}},
			15200*time.Millisecond, 16*time.Second),
	}, Skipped: []coresSkip{{Cores: 4, Reason: "too few"}}}
	got := r.markdown()
	for _, want := range []string{
		"Ingest: 64 streams as on the streams axis. Queries: the first 1k tokens of engine-a's 8k-token prompt (a full hit) over 64 keep-alive connections",
		"Conductor flags: `--hash-memo-bytes 0`.",
		"\n- 4 server cores: not measured on this machine (too few).\n",
		noPeer,
		"\nconductor, 8 cores ÷ 1 core: ingest 8.00×, queries 8.00× (goal ≥ 6.4× each).\n",
		"\n| conductor | 1 | 1 | 1.31 | 1.00× | 725 ns | 95 % | 2 % | 30 % | server | 72 |\n",
		"\n| conductor | 8 | 8 | 10.49 | 8.00× | 725 ns | 95 % | 2 % | 50 % | server | 72 |\n",
		"\n| conductor | 1 | 1 | 25,000 | 1.00× | 38 µs | 3 ms | 95 % | – | 50 % | server |\n",
		"\n| conductor | 8 | 8 | 200,000 | 8.00× | 38 µs | 1.5 ms | 95 % | – | 100 % | server and harness |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	// Without the 8-core point the goals cannot be worked out, and say so.
	r.Points = r.Points[:1]
	if got := r.markdown(); !strings.Contains(got, "The goals (8 cores ≥ 0.8 × 8 × the 1-core rate, ingest and queries) need conductor's 1- and 8-core points.") {
		t.Errorf("one point:\n%s", got)
	}
}
