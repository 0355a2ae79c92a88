package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sha256 "github.com/minio/sha256-simd"

	"github.com/seed-c7a81618/conductor/hash"
)

// The fleet cost curves (`make bench-fleet`), measured the user's way:
// conductor as a child process (FLEET_ARGS, default --hash-memo-bytes 0, so
// that every query hashes its whole prompt: the cold case), engine-a holding
// one prompt of fleetTokens' longest length on GPU, and engine-b, a publisher
// in its own process, streaming fresh blocks as fast as conductor applies
// them (the tail harness's publisher: lossless, flow-controlled).
//
// For each index size in FLEET_SIZES (default 1M and 10M blocks; 100M needs
// about 7 GB of memory and 10 minutes) and each batch size in
// FLEET_BATCHES (default 16 and 64 blocks), a fresh conductor ingests that
// many blocks from empty. A row gives its CPU per stored block (/proc),
// blocks/s, and RSS at the end, whole and per block. Then, on the full index
// of the largest batch size, once the server is idle, 4 keep-alive
// connections query prefixes of
// engine-a's prompt, fleetTokens long (each a full hit), and a row gives the
// server CPU per query. The 8k row is also set against the SHA-256 floor:
// 512 × Sum256 of one encoded 16-token block (sha256-simd, in this process),
// the hashing that no cold 8k query can avoid.
//
// FLEET_TOKENS replaces the prompt lengths (default 1k, 8k, 128k and 1M
// tokens). FLEET_OUT (default results/fleet) receives fleet.md (the tables, with the
// command and machine) and the cost curves as SVG: fleet-ingest.svg (CPU per
// block against index size), fleet-rss.svg (RSS per block against index
// size) and fleet-query.svg (server CPU per query against prompt length, one
// line per index size). Run:
//
//	FLEET_SIZES="1000000 10000000" go test -run '^$' -bench BenchmarkFleet -benchtime 1x -timeout 2h ./bench/
func BenchmarkFleet(b *testing.B) {
	sizes := envInts(b, "FLEET_SIZES", []int{1_000_000, 10_000_000})
	batches := envInts(b, "FLEET_BATCHES", []int{16, 64})
	args := strings.Fields(os.Getenv("FLEET_ARGS"))
	if _, set := os.LookupEnv("FLEET_ARGS"); !set {
		args = []string{"--hash-memo-bytes", "0"}
	}
	var res fleetResults
	res.Floor8k = sha256Floor(b, loadBlocks)
	for _, n := range sizes {
		for _, batch := range batches {
			b.Run(fmt.Sprintf("blocks=%d/batch=%d", n, batch), func(b *testing.B) {
				for range b.N {
					var qs []int
					if batch == slices.Max(batches) {
						qs = envInts(b, "FLEET_TOKENS", fleetTokens)
					}
					row := runFleet(b, n, batch, qs, args)
					b.Logf("%+v", row)
					b.ReportMetric(row.CPUPerBlock, "server-ns/block")
					b.ReportMetric(row.RSS/float64(row.Blocks), "RSS-B/block")
					res.Rows = append(res.Rows, row)
				}
			})
		}
	}
	if len(res.Rows) == 0 {
		return
	}
	out := os.Getenv("FLEET_OUT")
	if out == "" {
		out = filepath.Join("results", "fleet")
	}
	if err := res.write(out, args); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("fleet results in %s\n", out)
}

// fleetTokens are the prompt lengths queried on each full index.
var fleetTokens = []int{1 << 10, 1 << 13, 1 << 17, 1 << 20}

// fleetRow is one index size and batch size.
type fleetRow struct {
	Blocks, Batch int
	CPUPerBlock   float64 // server ns per stored block
	Rate          float64 // blocks/s
	RSS           float64 // bytes, at the end of the ingest
	// QueryCPU is the server CPU per query (µs) by prompt length, and
	// QueryGC the collector's CPU in the cycles that ended during the
	// measured queries, per query; empty when the row did not query.
	QueryCPU, QueryGC map[int]float64
}

type fleetResults struct {
	Rows    []fleetRow
	Floor8k time.Duration // 512 × Sum256 of an encoded block
}

// runFleet starts conductor with args, has engine-a store a prompt of the
// longest of queryTokens (8k without queries), streams blocks fresh blocks
// from engine-b in batches of batch, and then queries each length of
// queryTokens.
func runFleet(tb testing.TB, blocks, batch int, queryTokens []int, args []string) fleetRow {
	tb.Helper()
	tb.(interface{ Setenv(k, v string) }).Setenv(tailBatchEnv, strconv.Itoa(batch))
	s := startServer(tb, args...)
	e := registerEngine(tb, s)
	prompt := make([]int32, slices.Max(append([]int{loadBlocks * loadBS}, queryTokens...)))
	for i := range prompt {
		prompt[i] = int32(1000 + i%120000)
	}
	e.store(tb, prompt, 0)
	waitMatched(tb, s, prompt, len(prompt))
	p := newTailPublisher(tb, s, false)
	c0 := s.cpu(tb)
	start := time.Now()
	p.publish(tb, blocks/batch)
	elapsed := time.Since(start)
	cpu := s.cpu(tb) - c0
	stored := blocks / batch * batch
	row := fleetRow{Blocks: stored, Batch: batch, CPUPerBlock: float64(cpu.Nanoseconds()) / float64(stored),
		Rate: float64(stored) / elapsed.Seconds(), RSS: s.scrape(tb)["process_resident_memory_bytes"]}
	if len(queryTokens) == 0 {
		return row
	}
	settle(tb, s)
	row.QueryCPU, row.QueryGC = map[int]float64{}, map[int]float64{}
	for _, n := range queryTokens {
		body, ct := queryBody("bin", prompt[:n])
		// About half a second of server CPU per length at ~20 ns a token.
		reqs := max(40, 25_000_000/n)
		r := measure(tb, s, ct, body, &Expect{Instance: "engine-a", LongestMatched: int64(n)}, 4, reqs)
		row.QueryCPU[n] = float64(r.CPUPerReq.Nanoseconds()) / 1e3
		row.QueryGC[n] = float64(r.GCPerReq.Nanoseconds()) / 1e3
	}
	return row
}

// settle waits until the server has been idle for a second (under 5 % of
// one core), so that a collection the ingest started (marking a large index
// takes tens of CPU-seconds) is not billed to the queries measured next. The
// collector's own CPU counter cannot tell: the runtime adds a cycle's CPU
// to it when the cycle ends.
func settle(tb testing.TB, s *serverProc) {
	tb.Helper()
	// A failure bound only: one cycle over a 100M-block index takes tens of
	// CPU-seconds.
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
		c0 := s.cpu(tb)
		time.Sleep(time.Second)
		if s.cpu(tb)-c0 < 50*time.Millisecond {
			return
		}
	}
	tb.Fatalf("the server never went idle after the ingest")
}

// sha256Floor times n × Sum256 of one encoded 16-token block (the median of
// 7 rounds).
func sha256Floor(tb testing.TB, n int) time.Duration {
	tb.Helper()
	toks := make([]int32, 16)
	for i := range toks {
		toks[i] = int32(1000 + i)
	}
	var parent [32]byte
	enc := hash.AppendCBORBlock(nil, parent[:], toks, nil)
	var rounds []time.Duration
	var sink byte
	for range 7 {
		start := time.Now()
		for range 1000 {
			for range n {
				d := sha256.Sum256(enc)
				sink ^= d[0]
			}
		}
		rounds = append(rounds, time.Since(start)/1000)
	}
	runtime.KeepAlive(sink)
	slices.Sort(rounds)
	return rounds[len(rounds)/2]
}

// envInts reads a space-separated list of positive integers (def when unset).
func envInts(tb testing.TB, name string, def []int) []int {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	var out []int
	for _, f := range strings.Fields(v) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			tb.Fatalf("%s=%q: want positive integers", name, v)
		}
		out = append(out, n)
	}
	return out
}

// write renders the tables to dir/fleet.md and the curves to SVGs.
func (r *fleetResults) write(dir string, args []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Conductor flags: `%s`. SHA-256 floor for 8k tokens (512 × Sum256 of one encoded block, in-process): %.1f µs.\n\n",
		strings.Join(args, " "), float64(r.Floor8k.Nanoseconds())/1e3)
	md.WriteString("| index blocks | batch | ingest M blocks/s | server CPU per block | RSS | RSS per block |\n|---|---|---|---|---|---|\n")
	ingest := map[int]*Series{}
	rss := map[int]*Series{}
	var batches []int
	for _, row := range r.Rows {
		fmt.Fprintf(&md, "| %s | %d | %.2f | %.0f ns | %.0f MB | %.1f B |\n", count(row.Blocks), row.Batch, row.Rate/1e6,
			row.CPUPerBlock, row.RSS/1e6, row.RSS/float64(row.Blocks))
		if ingest[row.Batch] == nil {
			batches = append(batches, row.Batch)
			ingest[row.Batch] = &Series{Name: fmt.Sprintf("%d-block batches", row.Batch)}
			rss[row.Batch] = &Series{Name: fmt.Sprintf("%d-block batches", row.Batch)}
		}
		ingest[row.Batch].X = append(ingest[row.Batch].X, float64(row.Blocks))
		ingest[row.Batch].Y = append(ingest[row.Batch].Y, row.CPUPerBlock)
		rss[row.Batch].X = append(rss[row.Batch].X, float64(row.Blocks))
		rss[row.Batch].Y = append(rss[row.Batch].Y, row.RSS/float64(row.Blocks))
	}
	var lengths []int // the prompt lengths queried
	for _, row := range r.Rows {
		for n := range row.QueryCPU {
			if !slices.Contains(lengths, n) {
				lengths = append(lengths, n)
			}
		}
	}
	slices.Sort(lengths)
	md.WriteString("\nServer CPU per query by prompt length, measured once the server is idle after the ingest; in brackets the collector's CPU in the cycles that ended during the queries, per query.\n")
	md.WriteString("\n| index blocks | " + strings.Join(mapStrings(lengths, func(n int) string { return tokens(n) + " tokens" }), " | ") +
		" | 8k ÷ SHA-256 floor |\n|---|" + strings.Repeat("---|", len(lengths)+1) + "\n")
	query := Chart{Title: "/query server CPU per request, cold (no memo), full hit", XLabel: "prompt tokens (log)",
		YLabel: "server CPU per query (log)", LogX: true, LogY: true, XTick: func(v float64) string { return count(int(v)) }, YTick: micros}
	for _, row := range r.Rows {
		if row.QueryCPU == nil {
			continue
		}
		cells := mapStrings(lengths, func(n int) string {
			return fmt.Sprintf("%s (GC %s)", micros(row.QueryCPU[n]), micros(row.QueryGC[n]))
		})
		fmt.Fprintf(&md, "| %s | %s | %.2f× |\n", count(row.Blocks), strings.Join(cells, " | "),
			row.QueryCPU[1<<13]*1e3/float64(r.Floor8k.Nanoseconds()))
		line := Series{Name: count(row.Blocks) + " blocks"}
		for _, n := range lengths {
			line.X, line.Y = append(line.X, float64(n)), append(line.Y, row.QueryCPU[n])
		}
		query.Series = append(query.Series, line)
	}
	charts := map[string]*Chart{
		"fleet-ingest.svg": {Title: "ingest: server CPU per stored block", XLabel: "index blocks (log)", YLabel: "ns per block",
			LogX: true, XTick: func(v float64) string { return count(int(v)) }},
		"fleet-rss.svg": {Title: "RSS per indexed block at the end of the ingest", XLabel: "index blocks (log)", YLabel: "bytes per block",
			LogX: true, XTick: func(v float64) string { return count(int(v)) }},
	}
	for _, bs := range batches {
		charts["fleet-ingest.svg"].Series = append(charts["fleet-ingest.svg"].Series, *ingest[bs])
		charts["fleet-rss.svg"].Series = append(charts["fleet-rss.svg"].Series, *rss[bs])
	}
	if len(query.Series) > 0 {
		charts["fleet-query.svg"] = &query
	}
	for name, c := range charts {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = c.SVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	md.WriteString("\n![ingest CPU per block against index size](bench/curves/fleet-ingest.svg)\n" +
		"![RSS per block against index size](bench/curves/fleet-rss.svg)\n")
	if charts["fleet-query.svg"] != nil {
		md.WriteString("![query server CPU against prompt length](bench/curves/fleet-query.svg)\n")
	}
	return os.WriteFile(filepath.Join(dir, "fleet.md"), []byte(md.String()), 0o644)
}

// count writes a block count: 1M, 10M, 250k, else the number.
func count(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return strconv.Itoa(n/1e6) + "M"
	case n >= 1e3 && n%1e3 == 0:
		return strconv.Itoa(n/1e3) + "k"
	}
	return strconv.Itoa(n)
}

// tokens writes a power-of-two token count as prompts are named: 1k = 1,024,
// 1M = 1,048,576.
func tokens(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "k"
	}
	return strconv.Itoa(n)
}

func mapStrings(ns []int, f func(int) string) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = f(n)
	}
	return out
}

// TestFleetHarness runs the fleet harness briefly: every block streamed is
// stored (the publisher's flow control waits for it), the server's CPU and
// RSS are read, each query length is a full hit (measure checks every
// answer), and the report and its three curves are written.
func TestFleetHarness(t *testing.T) {
	qs := []int{1 << 10, 1 << 13}
	row := runFleet(t, 64*100, 64, qs, []string{"--hash-memo-bytes", "0"})
	t.Logf("%+v", row)
	if row.Blocks != 6400 || row.RSS <= 0 || row.Rate <= 0 || row.QueryCPU[1<<10] <= 0 || row.QueryCPU[1<<13] <= 0 {
		t.Fatalf("row: %+v", row)
	}
	dir := t.TempDir()
	res := fleetResults{Rows: []fleetRow{row}, Floor8k: sha256Floor(t, loadBlocks)}
	if err := res.write(dir, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fleet.md", "fleet-ingest.svg", "fleet-rss.svg", "fleet-query.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// micros writes a time in µs with three significant digits, as ms from
// 1,000 µs (51.2 µs, 174 µs, 3.37 ms, 125 ms).
func micros(us float64) string {
	unit := "µs"
	if us >= 1000 {
		us, unit = us/1e3, "ms"
	}
	if us >= 100 {
		return fmt.Sprintf("%.0f %s", us, unit)
	}
	return fmt.Sprintf("%.3g %s", us, unit)
}

// TestMicros: the fleet tables' times, against hand-written forms.
func TestMicros(t *testing.T) {
	for us, want := range map[float64]string{0: "0 µs", 0.145: "0.145 µs", 51.2: "51.2 µs", 173.7: "174 µs",
		3368.4: "3.37 ms", 66000: "66 ms", 124750: "125 ms", 1.5e6: "1500 ms"} {
		if got := micros(us); got != want {
			t.Errorf("micros(%g) = %q, want %q", us, got, want)
		}
	}
}
