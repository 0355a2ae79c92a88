package bench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The streams axis (`make bench-streams`): what a server pays per stored
// block as the number of publishers grows. For each K in STREAMS_COUNTS
// (default 1, 16, 64, 256 and 1,000), a fresh server, pinned with taskset to
// STREAMS_CORES CPUs of its own (default 1), ingests from K publishers at
// once, each its own registration (stream-0000, …), spread over publisher
// processes pinned to the other CPUs (one process per CPU, at most K). Every
// stream publishes max(STREAMS_MIN_BATCHES, STREAMS_BLOCKS ÷ (K × 64))
// batches of 64 fresh blocks (defaults 32 and 1,310,720: 1.31M blocks in all
// up to 256 streams, 2.05M at 1,000). The run is lossless: this process
// releases the batches in rounds and keeps at most tailWindow batches
// published and not yet stored, reading the server's block count
// (/global_view's prefix_count, which conductor and the C++ conductor both
// serve) every tailPoll; the point ends when the count shows every block, or
// after STREAMS_LIMIT seconds (default 200), when it is reported as not
// finished. A row gives the aggregate blocks/s, the server's CPU per stored
// block (/proc), how busy the server's and the harness's CPUs were, and the
// server's threads and RSS at the end, every stream still registered.
//
// STREAMS_ARGS passes conductor flags; BENCH_CPP_CONDUCTOR adds the C++
// conductor (peer_test.go) on every point. STREAMS_OUT (default
// results/streams) receives streams.md (the tables, with the layout) and the
// curves streams-cpu.svg and streams-rate.svg. Run:
//
//	go test -run '^$' -bench BenchmarkStreams -benchtime 1x -timeout 1h ./bench/
func BenchmarkStreams(b *testing.B) {
	counts := envInts(b, "STREAMS_COUNTS", []int{1, 16, 64, 256, 1000})
	total := envInts(b, "STREAMS_BLOCKS", []int{1_310_720})[0]
	minBatches := envInts(b, "STREAMS_MIN_BATCHES", []int{32})[0]
	cores := envInts(b, "STREAMS_CORES", []int{1})[0]
	limit := time.Duration(envInts(b, "STREAMS_LIMIT", []int{200})[0]) * time.Second
	args := strings.Fields(os.Getenv("STREAMS_ARGS"))
	layout, err := layoutFor(allowedCPUs(b), cores, 1)
	if err != nil {
		b.Fatalf("bench-streams: %v", err)
	}
	pinSelf(b, layout.client)
	res := streamsResults{Layout: layout, Args: args, Total: total, MinBatches: minBatches, Limit: limit}
	for _, srv := range servers() {
		slug := map[string]string{serverConductor: "conductor", serverCpp: "cpp"}[srv]
		for _, k := range counts {
			b.Run(fmt.Sprintf("%s/streams=%d", slug, k), func(b *testing.B) {
				for range b.N {
					r, _ := runStreams(b, srv, layout, k, streamBatches(total, minBatches, k), limit, args)
					b.Logf("%+v", r)
					b.ReportMetric(r.cpuPerBlock(), "server-ns/block")
					b.ReportMetric(r.rate(), "blocks/s")
					b.ReportMetric(float64(r.Threads), "threads")
					res.Runs = append(res.Runs, r)
				}
			})
		}
	}
	if len(res.Runs) == 0 {
		return
	}
	out := os.Getenv("STREAMS_OUT")
	if out == "" {
		out = filepath.Join("results", "streams")
	}
	if err := res.write(out); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("streams results in %s\n", out)
}

// streamBatches is the batches each of k streams publishes: total blocks in
// all, in tailBatch()-block batches, and at least minBatches.
func streamBatches(total, minBatches, k int) int {
	return max(minBatches, (total+k*tailBatch()-1)/(k*tailBatch()))
}

// streamsRound is the batches one round releases, over all streams.
const streamsRound = 512

// streamFleet is K streams in publisher processes, stream i registered with
// the server as streamName(i).
type streamFleet struct {
	s       *serverProc
	procs   []*procPublisher
	streams int
}

// startStreamFleet starts k streams in procs processes (at most k) pinned to
// cpus, registers every stream and primes them all.
func startStreamFleet(tb testing.TB, s *serverProc, k, procs int, cpus []int) *streamFleet {
	tb.Helper()
	f := &streamFleet{s: s, streams: k}
	procs = max(1, min(procs, k))
	for i, first := 0, 0; i < procs; i++ {
		n := k / procs
		if i < k%procs {
			n++
		}
		p := startPublisherProc(tb, s.addr, []string{fmt.Sprintf("%s=%d %d", streamsEnv, first, n)}, cpus, "")
		if len(p.eps) != n {
			tb.Fatalf("publisher process for %d streams gave %d endpoints", n, len(p.eps))
		}
		for j, ep := range p.eps {
			s.register(tb, streamName(first+j), ep.Endpoint, ep.ReplayEndpoint)
		}
		f.procs = append(f.procs, p)
		first += n
	}
	f.all(tb, "prime")
	return f
}

// all sends cmd to every publisher process, then waits for every answer
// (the processes work at the same time).
func (f *streamFleet) all(tb testing.TB, cmd string) {
	tb.Helper()
	for _, p := range f.procs {
		p.send(tb, cmd)
	}
	for _, p := range f.procs {
		p.answer(tb, cmd)
	}
}

// clientCPU is the CPU time of this process and the publisher processes.
func (f *streamFleet) clientCPU(tb testing.TB) time.Duration {
	tb.Helper()
	d := selfCPU(tb)
	for _, p := range f.procs {
		c, err := ProcCPU(p.pid())
		if err != nil {
			tb.Fatal(err)
		}
		d += c
	}
	return d
}

// ingest has every stream publish batches batches, in rounds of about
// streamsRound batches, each round released once at most tailWindow batches
// would be published and not yet stored, and waits until the server's block
// count shows them all or limit has passed since the first round.
// serverCPUs are the CPUs the server is pinned to (nil: not pinned), watched
// for other processes' use.
func (f *streamFleet) ingest(tb testing.TB, batches int, limit time.Duration, serverCPUs []int) streamsRun {
	tb.Helper()
	s, k, batch := f.s, f.streams, tailBatch()
	base := s.prefixCount(tb)
	want := batches * k * batch
	stored := func() int {
		n := s.prefixCount(tb) - base
		if n > want {
			tb.Fatalf("the server counts %d new blocks, %d were published", n, want)
		}
		return n
	}
	round := max(1, streamsRound/k)
	window := max(tailWindow, 2*round*k) * batch // blocks
	c0, cl0, watch := s.cpu(tb), f.clientCPU(tb), watchCPUs(tb, s, serverCPUs)
	start := time.Now()
	done, sent := 0, 0 // blocks stored; batches each stream published
	over := func() bool { return time.Since(start) > limit }
release:
	for sent < batches {
		n := min(round, batches-sent)
		for done = stored(); (sent+n)*k*batch-done > window; done = stored() {
			if over() {
				break release
			}
			time.Sleep(tailPoll)
		}
		f.all(tb, fmt.Sprintf("send %d", n))
		sent += n
	}
	for done = stored(); done < want && !over(); done = stored() {
		time.Sleep(tailPoll)
	}
	elapsed := time.Since(start)
	c1, cl1, others := s.cpu(tb), f.clientCPU(tb), watch.others(tb, s)
	run := streamsRun{Streams: k, Batches: batches, Want: want, Blocks: done, Elapsed: elapsed, Limit: limit,
		ServerCPU: c1 - c0, ClientCPU: cl1 - cl0, Others: others, RSS: s.rss(tb), Threads: s.threads(tb)}
	if done < want {
		dumpStall(tb, s, k) // ends the server
	}
	return run
}

// runStreams starts the server named server (conductor with args) pinned to
// layout.server, k streams in publisher processes pinned to layout.client,
// and measures their ingest of batches batches each; the server stays up
// for the caller (until cleanup).
func runStreams(tb testing.TB, server string, layout cpuLayout, k, batches int, limit time.Duration, args []string) (streamsRun, *serverProc) {
	tb.Helper()
	s := startNamedOn(tb, server, layout.server, args...)
	f := startStreamFleet(tb, s, k, len(layout.client), layout.client)
	r := f.ingest(tb, batches, limit, layout.server)
	r.Server, r.ServerCores, r.ClientCores, r.Procs = server, len(layout.server), len(layout.client), len(f.procs)
	return r, s
}

// streamsRun is one ingest measurement.
type streamsRun struct {
	Server                   string
	Streams, Procs           int // streams, publisher processes
	Batches                  int // per stream
	Want                     int // blocks published
	Blocks                   int // blocks stored in the measured part; < Want: it did not finish
	Elapsed, Limit           time.Duration
	ServerCPU, ClientCPU     time.Duration // ClientCPU: this process and the publisher processes
	Others                   float64       // the share of the server's CPUs the server did not use and others did (NaN: not pinned)
	ServerCores, ClientCores int
	RSS                      float64 // bytes, at the end
	Threads                  int     // the server's, at the end
}

// finished reports whether every published block was stored.
func (r streamsRun) finished() bool { return r.Blocks == r.Want }

// rate is the blocks stored per second.
func (r streamsRun) rate() float64 { return float64(r.Blocks) / r.Elapsed.Seconds() }

// cpuPerBlock is the server's CPU per stored block, in ns.
func (r streamsRun) cpuPerBlock() float64 {
	return float64(r.ServerCPU.Nanoseconds()) / float64(max(r.Blocks, 1))
}

func (r streamsRun) serverBusy() float64 { return busy(r.ServerCPU, r.Elapsed, r.ServerCores) }
func (r streamsRun) clientBusy() float64 { return busy(r.ClientCPU, r.Elapsed, r.ClientCores) }

// busy is the share of cores CPUs that cpu used over wall.
func busy(cpu, wall time.Duration, cores int) float64 {
	return cpu.Seconds() / wall.Seconds() / float64(max(cores, 1))
}

// streamsResults is the streams axis.
type streamsResults struct {
	Layout     cpuLayout
	Args       []string
	Total      int // STREAMS_BLOCKS
	MinBatches int
	Limit      time.Duration
	Runs       []streamsRun
}

// find is server's run with k streams, or nil.
func (r *streamsResults) find(server string, k int) *streamsRun {
	for i := range r.Runs {
		if r.Runs[i].Server == server && r.Runs[i].Streams == k {
			return &r.Runs[i]
		}
	}
	return nil
}

// markdown is the report: the layout, the goals, one row per run and, with
// the C++ conductor, the two side by side.
func (r *streamsResults) markdown() string {
	var md strings.Builder
	procs := 0
	for _, run := range r.Runs {
		procs = max(procs, run.Procs)
	}
	where := "in one publisher process"
	if procs > 1 {
		where = fmt.Sprintf("in up to %d publisher processes (one per harness CPU)", procs)
	}
	fmt.Fprintf(&md, "Pinned with taskset: %s. K publishers at once, each its own registration (without a replay endpoint), "+
		"%s; every stream publishes max(%d, %s ÷ (K × %d)) batches of %d fresh blocks, "+
		"at most %s batches published and not yet stored; a point that has not stored them all after %s is reported as not finished. "+
		"Conductor flags: %s. Server CPU per stored block from /proc; busy: CPU used ÷ (its CPUs × wall time), server and harness "+
		"(this process and the publisher processes); others on its CPUs: the share of the server's CPUs that went to anything "+
		"but the server: other processes, interrupts (/proc/stat; taskset keeps the server on its CPUs, not others off them); limited by: the side whose CPUs "+
		"were at least 90 %% busy, other processes when they and the server filled the server's CPUs, neither when the server "+
		"waited with CPU to spare; threads and RSS: the server's at the end, every stream registered.\n\n",
		r.Layout, where, r.MinBatches, thousands(r.Total), tailBatch(), tailBatch(), thousands(tailWindow), seconds(r.Limit), flagsText(r.Args))
	if !r.hasPeer() {
		md.WriteString(noPeer)
	}
	md.WriteString(r.goals())
	md.WriteString("\n| server | streams | batches per stream | blocks | M blocks/s | server CPU per block | server busy | others on its CPUs | harness busy | limited by | server threads | RSS |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		rate := fmt.Sprintf("%.2f", run.rate()/1e6)
		if !run.finished() {
			rate = fmt.Sprintf("did not finish in %s (%s of %s blocks, %.2f)", seconds(run.Limit), thousands(run.Blocks), thousands(run.Want), run.rate()/1e6)
		}
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s | %s ns | %.0f %% | %s | %.0f %% | %s | %s | %.0f MB |\n", run.Server, thousands(run.Streams),
			thousands(run.Batches), thousands(run.Want), rate, thousands(int(math.Round(run.cpuPerBlock()))),
			100*run.serverBusy(), percent(run.Others), 100*run.clientBusy(), limitedBy(run.serverBusy(), run.Others, run.clientBusy()),
			thousands(run.Threads), run.RSS/1e6)
	}
	if r.hasPeer() {
		md.WriteString("\n| streams | conductor CPU per block | C++ CPU per block | conductor ÷ C++ | conductor M blocks/s | C++ M blocks/s |\n" +
			"|---|---|---|---|---|---|\n")
		for _, run := range r.Runs {
			if run.Server != serverConductor {
				continue
			}
			them := r.find(serverCpp, run.Streams)
			if them == nil {
				continue
			}
			rate := fmt.Sprintf("%.2f", them.rate()/1e6)
			if !them.finished() {
				rate = fmt.Sprintf("did not finish in %s", seconds(them.Limit))
			}
			fmt.Fprintf(&md, "| %s | %s ns | %s ns | %.2f× | %.2f | %s |\n", thousands(run.Streams),
				thousands(int(math.Round(run.cpuPerBlock()))), thousands(int(math.Round(them.cpuPerBlock()))),
				run.cpuPerBlock()/them.cpuPerBlock(), run.rate()/1e6, rate)
		}
	}
	return md.String()
}

// noPeer opens a report of conductor alone.
const noPeer = "No C++ conductor in this run (BENCH_CPP_CONDUCTOR unset): conductor's figures alone.\n\n"

func (r *streamsResults) hasPeer() bool {
	return slices.ContainsFunc(r.Runs, func(run streamsRun) bool { return run.Server == serverCpp })
}

// goals sets conductor's largest stream count against its smallest (CPU per
// block, goal ≤ 1.15×) and its aggregate rate against the 64-stream one
// (goal ≥ 1), when the run has those points.
func (r *streamsResults) goals() string {
	var ks []int
	for _, run := range r.Runs {
		if run.Server == serverConductor && run.finished() {
			ks = append(ks, run.Streams)
		}
	}
	if len(ks) < 2 {
		return ""
	}
	lo, hi := r.find(serverConductor, slices.Min(ks)), r.find(serverConductor, slices.Max(ks))
	s := fmt.Sprintf("conductor: server CPU per block at %s streams ÷ at %s: %.2f× (goal ≤ 1.15×)", thousands(hi.Streams),
		thousands(lo.Streams), hi.cpuPerBlock()/lo.cpuPerBlock())
	if mid := r.find(serverConductor, 64); mid != nil && mid.finished() && hi.Streams > 64 {
		s += fmt.Sprintf("; aggregate rate at %s streams ÷ at 64: %.2f× (goal ≥ 1×)", thousands(hi.Streams), hi.rate()/mid.rate())
	}
	return s + ".\n"
}

// write renders the report to dir/streams.md and the curves to SVGs.
func (r *streamsResults) write(dir string) error {
	cpu := &Chart{Title: "ingest: server CPU per stored block", XLabel: "streams (log)", YLabel: "ns per block",
		LogX: true, XTick: func(v float64) string { return count(int(v)) }}
	rate := &Chart{Title: "ingest: aggregate rate", XLabel: "streams (log)", YLabel: "M blocks/s",
		LogX: true, XTick: func(v float64) string { return count(int(v)) }}
	for _, run := range r.Runs {
		if !run.finished() {
			continue
		}
		cs, rs := chartSeries(cpu, run.Server), chartSeries(rate, run.Server)
		cs.X, cs.Y = append(cs.X, float64(run.Streams)), append(cs.Y, run.cpuPerBlock())
		rs.X, rs.Y = append(rs.X, float64(run.Streams)), append(rs.Y, run.rate()/1e6)
	}
	md := r.markdown()
	charts := map[string]*Chart{}
	if len(cpu.Series) > 0 {
		charts["streams-cpu.svg"], charts["streams-rate.svg"] = cpu, rate
		md += "\n![server CPU per block against streams](bench/curves/streams-cpu.svg)\n" +
			"![aggregate blocks/s against streams](bench/curves/streams-rate.svg)\n"
	}
	return writeReport(dir, "streams.md", md, charts)
}

// chartSeries is c's series named name, added when c has none.
func chartSeries(c *Chart, name string) *Series {
	for i := range c.Series {
		if c.Series[i].Name == name {
			return &c.Series[i]
		}
	}
	c.Series = append(c.Series, Series{Name: name})
	return &c.Series[len(c.Series)-1]
}

// writeReport writes md to dir/name and each chart to dir/its file name.
func writeReport(dir, name, md string, charts map[string]*Chart) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file, c := range charts {
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		err = c.SVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(md), 0o644)
}

// percent writes a share as "12 %", NaN as "–".
func percent(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*v)
}

// flagsText writes conductor flags for a report: `--a b`, or none.
func flagsText(args []string) string {
	if len(args) == 0 {
		return "none"
	}
	return "`" + strings.Join(args, " ") + "`"
}

// seconds writes d in whole seconds ("200 s").
func seconds(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }

// thousands writes n with thousands separators (1,310,720).
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// TestStreamBatches: the batches per stream of the default axis, worked by
// hand: 1,310,720 blocks ÷ (K × 64), at least 32.
func TestStreamBatches(t *testing.T) {
	for k, want := range map[int]int{1: 20480, 16: 1280, 64: 320, 256: 80, 1000: 32} {
		if got := streamBatches(1_310_720, 32, k); got != want {
			t.Errorf("K=%d: %d batches, want %d", k, got, want)
		}
	}
	// Rounded up: 100 blocks over 3 streams of 64-block batches is one each.
	if got := streamBatches(100, 1, 3); got != 1 {
		t.Errorf("100 blocks, 3 streams: %d batches, want 1", got)
	}
}

// TestThousands: counts as the tables write them.
func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 65536: "65,536", 1_310_720: "1,310,720", -2048: "-2,048"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestStreamsHarness runs the streams harness briefly on conductor: 5
// streams in 2 publisher processes (3 and 2), each registered under its own
// name (the priming query lists exactly those 5), store every block they
// publish (ingest fails on a count above what was published and reports
// one below it), and the report and its two curves are written. With two
// CPUs or more the server and the harness are pinned apart.
func TestStreamsHarness(t *testing.T) {
	var layout cpuLayout
	if cpus := allowedCPUs(t); len(cpus) >= 2 {
		layout, _ = layoutFor(cpus, 1, 1)
		pinSelf(t, layout.client)
	}
	s := startServerOn(t, layout.server)
	f := startStreamFleet(t, s, 5, 2, layout.client)
	if len(f.procs) != 2 || len(f.procs[0].eps) != 3 || len(f.procs[1].eps) != 2 {
		t.Fatalf("%d processes", len(f.procs))
	}
	body, ct := queryBody("bin", primeTokens())
	_, page := s.post(t, "/query", ct, body)
	holders, err := fullRows(page, 16)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"stream-0000": true, "stream-0001": true, "stream-0002": true, "stream-0003": true, "stream-0004": true}
	if !maps.Equal(holders, want) {
		t.Fatalf("holders of the prime block: %v", holders)
	}
	r := f.ingest(t, 20, waitBound, layout.server)
	r.Server, r.ServerCores, r.ClientCores, r.Procs = serverConductor, len(layout.server), len(layout.client), len(f.procs)
	t.Logf("%+v", r)
	if !r.finished() || r.Want != 5*20*tailBatch() || r.Streams != 5 || r.Batches != 20 {
		t.Fatalf("run: %+v", r)
	}
	// Each registration's listener holds a thread: at least one per stream.
	if r.Threads < 5 || r.RSS <= 0 || r.ServerCPU < 0 || r.Elapsed <= 0 {
		t.Fatalf("server figures: %+v", r)
	}
	dir := t.TempDir()
	res := streamsResults{Layout: layout, Total: 6400, MinBatches: 20, Limit: waitBound, Runs: []streamsRun{r}}
	if err := res.write(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"streams.md", "streams-cpu.svg", "streams-rate.svg"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestStreamsReport: the report of hand-made runs against hand-worked
// lines: rates, CPU per block, busy shares, what limited each run, a run
// that did not finish, the goals and the side-by-side table.
func TestStreamsReport(t *testing.T) {
	run := func(server string, k, batches, want, blocks int, elapsed, cpu, client time.Duration, others float64, threads int, rss float64) streamsRun {
		return streamsRun{Server: server, Streams: k, Procs: 1, Batches: batches, Want: want, Blocks: blocks, Elapsed: elapsed,
			Limit: 200 * time.Second, ServerCPU: cpu, ClientCPU: client, Others: others, ServerCores: 1, ClientCores: 1, RSS: rss, Threads: threads}
	}
	r := streamsResults{Layout: cpuLayout{server: []int{0}, client: []int{1}}, Args: []string{"--log-level", "warn"},
		Total: 1_310_720, MinBatches: 32, Limit: 200 * time.Second, Runs: []streamsRun{
			run(serverConductor, 1, 20480, 1_000_000, 1_000_000, time.Second, 950*time.Millisecond, 250*time.Millisecond, 0.01, 9, 150e6),
			run(serverConductor, 64, 320, 1_000_000, 1_000_000, 500*time.Millisecond, 400*time.Millisecond, 100*time.Millisecond, 0.02, 72, 200e6),
			run(serverConductor, 1000, 32, 2_048_000, 2_048_000, 2*time.Second, 1945600*time.Microsecond, 1900*time.Millisecond, 0, 1008, 444e6),
			run(serverCpp, 1, 20480, 1_000_000, 1_000_000, 2*time.Second, 1800*time.Millisecond, 200*time.Millisecond, 0.03, 12, 300e6),
			run(serverCpp, 64, 320, 1_000_000, 250_000, 200*time.Second, 150*time.Second, 20*time.Second, 0.2, 80, 900e6),
		}}
	got := r.markdown()
	for _, want := range []string{
		"Pinned with taskset: server on CPU 0, publishers and query client on CPU 1. K publishers at once, each its own registration " +
			"(without a replay endpoint), in one publisher process; ",
		"every stream publishes max(32, 1,310,720 ÷ (K × 64)) batches of 64 fresh blocks, at most 8,192 batches published and not yet stored; " +
			"a point that has not stored them all after 200 s is reported as not finished. Conductor flags: `--log-level warn`.",
		"\nconductor: server CPU per block at 1,000 streams ÷ at 1: 1.00× (goal ≤ 1.15×); aggregate rate at 1,000 streams ÷ at 64: 0.51× (goal ≥ 1×).\n",
		"\n| conductor | 1 | 20,480 | 1,000,000 | 1.00 | 950 ns | 95 % | 1 % | 25 % | server | 9 | 150 MB |\n",
		"\n| conductor | 64 | 320 | 1,000,000 | 2.00 | 400 ns | 80 % | 2 % | 20 % | neither | 72 | 200 MB |\n",
		"\n| conductor | 1,000 | 32 | 2,048,000 | 1.02 | 950 ns | 97 % | 0 % | 95 % | server and harness | 1,008 | 444 MB |\n",
		"\n| C++ | 64 | 320 | 1,000,000 | did not finish in 200 s (250,000 of 1,000,000 blocks, 0.00) | 600,000 ns | 75 % | 20 % | 10 % | other processes | 80 | 900 MB |\n",
		"\n| streams | conductor CPU per block | C++ CPU per block | conductor ÷ C++ | conductor M blocks/s | C++ M blocks/s |\n",
		"\n| 1 | 950 ns | 1,800 ns | 0.53× | 1.00 | 0.50 |\n",
		"\n| 64 | 400 ns | 600,000 ns | 0.00× | 2.00 | did not finish in 200 s |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	// Without the C++ conductor: no side-by-side table; with one finished
	// point: no goals.
	if strings.Contains(got, noPeer) {
		t.Errorf("a run with the C++ conductor says it had none:\n%s", got)
	}
	r.Runs = r.Runs[:1]
	got = r.markdown()
	if strings.Contains(got, "conductor ÷ C++") || strings.Contains(got, "goal") || !strings.Contains(got, noPeer) {
		t.Errorf("one conductor run:\n%s", got)
	}
}

// dumpStall writes, for a point that did not finish, the server's ingest
// metrics, then its goroutines (SIGQUIT ends it) and its log, to
// STREAMS_OUT/stall-<k>.txt (nothing without STREAMS_OUT).
func dumpStall(tb testing.TB, s *serverProc, k int) {
	tb.Helper()
	dir := os.Getenv("STREAMS_OUT")
	if dir == "" {
		return
	}
	var b strings.Builder
	if resp, err := http.Get(s.url("/metrics")); err == nil {
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(page), "\n") {
			if strings.HasPrefix(line, "conductor_ingest_") {
				b.WriteString(line + "\n")
			}
		}
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	time.Sleep(2 * time.Second)
	b.WriteString("\n--- server log and goroutines ---\n" + s.logs.String())
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("stall-%d.txt", k)), []byte(b.String()), 0o644)
	}
}
