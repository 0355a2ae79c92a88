package bench

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sha256 "github.com/minio/sha256-simd"

	"github.com/seed-c7a81618/conductor/core"
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
// about 7 GB of memory and 10 minutes; past 16M conductor runs with
// --max-blocks-per-registration raised to the size, since engine-b is one
// registration) and each batch size in
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
	holders := envInts(b, "FLEET_HOLDERS", fleetHolders)
	tailBlocks := envInts(b, "FLEET_TAIL_BLOCKS", []int{10_000_000})[0]
	args := strings.Fields(os.Getenv("FLEET_ARGS"))
	if _, set := os.LookupEnv("FLEET_ARGS"); !set {
		args = []string{"--hash-memo-bytes", "0"}
	}
	var res fleetResults
	res.Floor8k = sha256Floor(b, loadBlocks)
	for _, srv := range servers() {
		slug := map[string]string{serverConductor: "conductor", serverCpp: "cpp"}[srv]
		for _, n := range sizes {
			for _, batch := range batches {
				b.Run(fmt.Sprintf("%s/blocks=%d/batch=%d", slug, n, batch), func(b *testing.B) {
					for range b.N {
						var qs []int
						if batch == slices.Max(batches) {
							qs = envInts(b, "FLEET_TOKENS", fleetTokens)
						}
						row := runFleet(b, srv, n, batch, qs, args)
						b.Logf("%+v", row)
						b.ReportMetric(row.CPUPerBlock, "server-ns/block")
						b.ReportMetric(row.RSS/float64(row.Blocks), "RSS-B/block")
						res.Rows = append(res.Rows, row)
					}
				})
			}
		}
		b.Run(slug+"/holders", func(b *testing.B) {
			for range b.N {
				h := runHolders(b, srv, holders, args)
				b.Logf("%+v", h)
				res.Holders = append(res.Holders, h)
			}
		})
		b.Run(slug+"/tail", func(b *testing.B) {
			for range b.N {
				// The defaults: what a user runs.
				r := runTail(b, srv, false, tailBlocks, 4)
				b.Logf("%v", r)
				res.Tails = append(res.Tails, fleetTail{Server: srv, Run: r})
			}
		})
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

// fleetHolders are the numbers of instances holding the queried prompt.
var fleetHolders = []int{1, 10, 100, 1000}

// fleetRow is one server, index size and batch size.
type fleetRow struct {
	Server        string
	Blocks, Batch int
	CPUPerBlock   float64 // server ns per stored block
	Rate          float64 // blocks/s
	RSS           float64 // bytes, at the end of the ingest
	// QueryCPU is the server CPU per query (µs) by prompt length, and
	// QueryGC the collector's CPU in the cycles that ended during the
	// measured queries, per query (conductor only); empty when the row did
	// not query. A length the server did not answer is NaN.
	QueryCPU, QueryGC map[int]float64
}

// fleetHolding is the popular-prompt axis on one server: server CPU per 8k
// query (µs) by the number of instances holding the whole prompt.
type fleetHolding struct {
	Server string
	CPU    map[int]float64
}

// fleetTail is one server's tail-under-ingest run.
type fleetTail struct {
	Server string
	Run    tailRun
}

type fleetResults struct {
	Rows    []fleetRow
	Holders []fleetHolding
	Tails   []fleetTail
	Floor8k time.Duration // 512 × Sum256 of an encoded block
}

// runFleet starts the server named server (conductor with args, or the C++
// conductor), has engine-a store a prompt of the longest of queryTokens (8k
// without queries), streams blocks fresh blocks from engine-b in batches of
// batch, and then queries each length of queryTokens.
func runFleet(tb testing.TB, server string, blocks, batch int, queryTokens []int, args []string) fleetRow {
	tb.Helper()
	tb.(interface{ Setenv(k, v string) }).Setenv(tailBatchEnv, strconv.Itoa(batch))
	if blocks > core.DefaultMaxBlocksPerRegistration {
		// engine-b is one registration: past conductor's default bound it
		// would evict its oldest blocks (the C++ conductor has no bound).
		args = append(slices.Clip(args), "--max-blocks-per-registration", strconv.Itoa(blocks+loadBlocks))
	}
	s := startNamed(tb, server, args...)
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
	row := fleetRow{Server: server, Blocks: stored, Batch: batch, CPUPerBlock: float64(cpu.Nanoseconds()) / float64(stored),
		Rate: float64(stored) / elapsed.Seconds(), RSS: s.rss(tb)}
	if len(queryTokens) == 0 {
		return row
	}
	settle(tb, s)
	row.QueryCPU, row.QueryGC = map[int]float64{}, map[int]float64{}
	for _, n := range queryTokens {
		body, ct := queryBody("bin", prompt[:n])
		want := &Expect{Instance: "engine-a", LongestMatched: int64(n)}
		if err := answers(s, ct, body, want); err != nil {
			// Only a peer may refuse a length (a body limit, say); the
			// table shows the gap.
			if !s.cpp {
				tb.Fatal(err)
			}
			tb.Logf("%s, %d tokens: %v", server, n, err)
			row.QueryCPU[n], row.QueryGC[n] = math.NaN(), math.NaN()
			continue
		}
		// About half a second of server CPU per length at ~20 ns a token.
		reqs := max(40, 25_000_000/n)
		r := measure(tb, s, ct, body, want, 4, reqs)
		row.QueryCPU[n] = float64(r.CPUPerReq.Nanoseconds()) / 1e3
		row.QueryGC[n] = float64(r.GCPerReq.Nanoseconds()) / 1e3
	}
	return row
}

// answers posts one query and checks its answer.
func answers(s *serverProc, ct string, body []byte, want *Expect) error {
	resp, err := http.Post(s.url("/query"), ct, bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("/query: %d %.200q", resp.StatusCode, b)
	}
	return want.Check(ct, b)
}

// runHolders starts the server named server and, for each count of
// holders in ascending order, registers instances (holder-0000, …, each its
// own publisher without replay) until that many hold the whole 8k prompt on
// GPU, then measures the server CPU per cold 8k query (4 connections; every
// answer must give holder-0000 the whole prompt).
func runHolders(tb testing.TB, server string, holders []int, args []string) fleetHolding {
	tb.Helper()
	s := startNamed(tb, server, args...)
	prompt := make([]int32, loadBlocks*loadBS)
	for i := range prompt {
		prompt[i] = int32(1000 + i%120000)
	}
	body, ct := queryBody("bin", prompt)
	res := fleetHolding{Server: server, CPU: map[int]float64{}}
	var engines []*engine
	for _, n := range holders {
		for len(engines) < n {
			id := fmt.Sprintf("holder-%04d", len(engines))
			e := registerInstance(tb, s, id, PublisherOptions{NoReplay: true})
			e.store(tb, prompt, 0)
			engines = append(engines, e)
		}
		waitHolders(tb, s, engines, prompt)
		want := &Expect{Instance: "holder-0000", LongestMatched: int64(len(prompt))}
		// About two seconds of queries, from the time one takes; a query
		// of a second or more is measured alone (CPU ticks are 10 ms).
		c0, start := s.cpu(tb), time.Now()
		if err := answers(s, ct, body, want); err != nil {
			tb.Fatal(err)
		}
		one, cpu := time.Since(start), s.cpu(tb)-c0
		tb.Logf("%s, %d holders: one query in %v", server, n, one)
		if one >= time.Second {
			res.CPU[n] = float64(cpu.Nanoseconds()) / 1e3
			continue
		}
		r := measure(tb, s, ct, body, want, 4, int(min(20000, max(20, 2*time.Second/one))))
		res.CPU[n] = float64(r.CPUPerReq.Nanoseconds()) / 1e3
	}
	return res
}

// waitHolders waits until every engine's row matches the whole prompt,
// publishing the prompt again from those that do not yet (a batch sent
// before the subscription connected is lost).
func waitHolders(tb testing.TB, s *serverProc, engines []*engine, prompt []int32) {
	tb.Helper()
	body, ct := queryBody("bin", prompt)
	for deadline := time.Now().Add(waitBound); ; {
		_, resp := s.post(tb, "/query", ct, body)
		full, err := fullRows(resp, int64(len(prompt)))
		if err != nil {
			tb.Fatal(err)
		}
		if len(full) == len(engines) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d holders match the prompt", len(full), len(engines))
		}
		for i, e := range engines {
			if !full[fmt.Sprintf("holder-%04d", i)] {
				e.store(tb, prompt, 0)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fullRows reads a msgpack /query answer and returns the instances whose
// longest_matched is n.
func fullRows(b []byte, n int64) (map[string]bool, error) {
	full := map[string]bool{}
	err := msgpackRows(b, func(id []byte, longest int64, ok bool) {
		if ok && longest == n {
			full[string(id)] = true
		}
	})
	return full, err
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
	var md strings.Builder
	fmt.Fprintf(&md, "Conductor flags: `%s` (the tail run: the defaults). SHA-256 floor for 8k tokens (512 × Sum256 of one encoded block, in-process): %.1f µs.\n\n",
		strings.Join(args, " "), float64(r.Floor8k.Nanoseconds())/1e3)
	md.WriteString(r.sideBySide())
	md.WriteString("\n| server | index blocks | batch | ingest M blocks/s | server CPU per block | RSS | RSS per block |\n|---|---|---|---|---|---|---|\n")
	ingest := &Chart{Title: "ingest: server CPU per stored block", XLabel: "index blocks (log)", YLabel: "ns per block",
		LogX: true, XTick: func(v float64) string { return count(int(v)) }}
	rss := &Chart{Title: "RSS per indexed block at the end of the ingest", XLabel: "index blocks (log)", YLabel: "bytes per block",
		LogX: true, XTick: func(v float64) string { return count(int(v)) }}
	for _, row := range r.Rows {
		fmt.Fprintf(&md, "| %s | %s | %d | %.2f | %.0f ns | %.0f MB | %.1f B |\n", row.Server, count(row.Blocks), row.Batch, row.Rate/1e6,
			row.CPUPerBlock, row.RSS/1e6, row.RSS/float64(row.Blocks))
		name := fmt.Sprintf("%s, %d-block batches", row.Server, row.Batch)
		is, rs := chartSeries(ingest, name), chartSeries(rss, name)
		is.X, is.Y = append(is.X, float64(row.Blocks)), append(is.Y, row.CPUPerBlock)
		rs.X, rs.Y = append(rs.X, float64(row.Blocks)), append(rs.Y, row.RSS/float64(row.Blocks))
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
	query := &Chart{Title: "/query server CPU per request, cold (no memo), full hit", XLabel: "prompt tokens (log)",
		YLabel: "server CPU per query (log)", LogX: true, LogY: true, XTick: func(v float64) string { return count(int(v)) }, YTick: micros}
	if len(lengths) > 0 {
		md.WriteString("\nServer CPU per query by prompt length, measured once the server is idle after the ingest; in brackets conductor's collector CPU in the cycles that ended during the queries, per query.\n")
		md.WriteString("\n| server | index blocks | " + strings.Join(mapStrings(lengths, func(n int) string { return tokens(n) + " tokens" }), " | ") +
			" | 8k ÷ SHA-256 floor |\n|---|---|" + strings.Repeat("---|", len(lengths)+1) + "\n")
	}
	for _, row := range r.Rows {
		if row.QueryCPU == nil {
			continue
		}
		cells := mapStrings(lengths, func(n int) string {
			v, ok := row.QueryCPU[n]
			switch {
			case !ok || math.IsNaN(v):
				return "no answer"
			case row.Server == serverCpp:
				return micros(v)
			}
			return fmt.Sprintf("%s (GC %s)", micros(v), micros(row.QueryGC[n]))
		})
		fmt.Fprintf(&md, "| %s | %s | %s | %.2f× |\n", row.Server, count(row.Blocks), strings.Join(cells, " | "),
			row.QueryCPU[1<<13]*1e3/float64(r.Floor8k.Nanoseconds()))
		line := Series{Name: row.Server + ", " + count(row.Blocks) + " blocks"}
		for _, n := range lengths {
			if v, ok := row.QueryCPU[n]; ok && !math.IsNaN(v) {
				line.X, line.Y = append(line.X, float64(n)), append(line.Y, v)
			}
		}
		query.Series = append(query.Series, line)
	}
	holders := &Chart{Title: "/query 8k tokens, server CPU by instances holding the prompt", XLabel: "instances holding the prompt (log)",
		YLabel: "server CPU per query (log)", LogX: true, LogY: true, XTick: func(v float64) string { return count(int(v)) }, YTick: micros}
	if len(r.Holders) > 0 {
		hs := slices.Sorted(maps.Keys(r.Holders[0].CPU))
		md.WriteString("\nServer CPU per cold 8k query by the number of instances holding the whole prompt (a popular system prompt); the answer lists every holder.\n")
		md.WriteString("\n| server | " + strings.Join(mapStrings(hs, holdersName), " | ") +
			" |\n|---|" + strings.Repeat("---|", len(hs)) + "\n")
		for _, h := range r.Holders {
			line := Series{Name: h.Server}
			fmt.Fprintf(&md, "| %s | %s |\n", h.Server, strings.Join(mapStrings(hs, func(n int) string { return micros(h.CPU[n]) }), " | "))
			for _, n := range hs {
				line.X, line.Y = append(line.X, float64(n)), append(line.Y, h.CPU[n])
			}
			holders.Series = append(holders.Series, line)
		}
	}
	if len(r.Tails) > 0 {
		md.WriteString("\nQuery tails while engine-b streams fresh 64-block batches as fast as the server applies them, 4 connections querying the 8k prompt; the server's handler p99 and max are conductor's own histogram (bucket bounds).\n\n")
		md.WriteString(strings.Replace(tailHeader, "| case |", "| server |", 1) + "\n")
		for _, t := range r.Tails {
			md.WriteString(t.Run.row(t.Server) + "\n")
		}
	}
	charts := map[string]*Chart{"fleet-ingest.svg": ingest, "fleet-rss.svg": rss}
	if len(query.Series) > 0 {
		charts["fleet-query.svg"] = query
	}
	if len(holders.Series) > 0 {
		charts["fleet-holders.svg"] = holders
	}
	md.WriteString("\n![ingest CPU per block against index size](bench/curves/fleet-ingest.svg)\n" +
		"![RSS per block against index size](bench/curves/fleet-rss.svg)\n")
	if charts["fleet-query.svg"] != nil {
		md.WriteString("![query server CPU against prompt length](bench/curves/fleet-query.svg)\n")
	}
	if charts["fleet-holders.svg"] != nil {
		md.WriteString("![query server CPU against holders of the prompt](bench/curves/fleet-holders.svg)\n")
	}
	return writeReport(dir, "fleet.md", md.String(), charts)
}

// orNaN is f(p), or NaN when p is nil (a figure the run did not measure).
func orNaN[T any](p *T, f func(*T) float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return f(p)
}

// sideBySide is the goals table: each figure for conductor and, when the
// run had one, the C++ conductor, their ratio and the goal.
func (r *fleetResults) sideBySide() string {
	type line struct {
		figure   string
		us, them float64 // NaN: not measured
		unit     func(float64) string
		goal     string
	}
	var lines []line
	nan := math.NaN()
	ns := func(v float64) string { return fmt.Sprintf("%.0f ns", v) }
	bytesPer := func(v float64) string { return fmt.Sprintf("%.1f B", v) }
	rate := func(v float64) string { return fmt.Sprintf("%.2f M/s", v/1e6) }
	ms := func(v float64) string { return fmt.Sprintf("%.2f ms", v) }
	perS := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	find := func(server string, blocks, batch int) *fleetRow {
		for i := range r.Rows {
			if row := &r.Rows[i]; row.Server == server && row.Blocks == blocks && row.Batch == batch {
				return row
			}
		}
		return nil
	}
	var queried *fleetRow // conductor's largest queried index
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Server != serverConductor {
			continue
		}
		us, them := row, find(serverCpp, row.Blocks, row.Batch)
		lines = append(lines,
			line{fmt.Sprintf("ingest %s blocks, %d-block batches: server CPU per block", count(row.Blocks), row.Batch),
				us.CPUPerBlock, orNaN(them, func(x *fleetRow) float64 { return x.CPUPerBlock }), ns, "≤ 0.35×"},
			line{fmt.Sprintf("RSS per block at %s blocks (%d-block batches)", count(row.Blocks), row.Batch),
				us.RSS / float64(us.Blocks), orNaN(them, func(x *fleetRow) float64 { return x.RSS / float64(x.Blocks) }), bytesPer,
				map[bool]string{true: "≤ 100 B", false: ""}[row.Blocks == 10_000_000]})
		if row.QueryCPU != nil && (queried == nil || row.Blocks > queried.Blocks) {
			queried = row
		}
	}
	if queried != nil {
		them := find(serverCpp, queried.Blocks, queried.Batch)
		for _, n := range slices.Sorted(maps.Keys(queried.QueryCPU)) {
			goal := ""
			if n == 1<<10 {
				goal = "≤ 0.6×"
			}
			lines = append(lines, line{fmt.Sprintf("cold /query %s tokens at %s blocks: server CPU", tokens(n), count(queried.Blocks)),
				queried.QueryCPU[n], orNaN(them, func(x *fleetRow) float64 { return x.QueryCPU[n] }), micros, goal})
		}
		if v, ok := queried.QueryCPU[1<<13]; ok {
			lines = append(lines, line{"cold /query 8k ÷ the SHA-256 floor", v * 1e3 / float64(r.Floor8k.Nanoseconds()), nan,
				func(v float64) string { return fmt.Sprintf("%.2f×", v) }, "≤ 1.3 (conductor)"})
		}
	}
	holding := func(server string) *fleetHolding {
		for i := range r.Holders {
			if r.Holders[i].Server == server {
				return &r.Holders[i]
			}
		}
		return nil
	}
	if us := holding(serverConductor); us != nil {
		them := holding(serverCpp)
		for _, n := range slices.Sorted(maps.Keys(us.CPU)) {
			lines = append(lines, line{fmt.Sprintf("cold /query 8k, %s: server CPU", holdersName(n)), us.CPU[n],
				orNaN(them, func(h *fleetHolding) float64 { return h.CPU[n] }), micros, ""})
		}
	}
	tail := func(server string) *tailRun {
		for i := range r.Tails {
			if r.Tails[i].Server == server {
				return &r.Tails[i].Run
			}
		}
		return nil
	}
	if us := tail(serverConductor); us != nil {
		them := tail(serverCpp)
		rateOf := func(t *tailRun) float64 { return float64(t.Blocks) / t.Elapsed.Seconds() }
		msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
		lines = append(lines,
			line{"under ingest: ingest rate", rateOf(us), orNaN(them, rateOf), rate, "≥ 2×"},
			line{"under ingest: query client p99", msOf(us.Load.P99), orNaN(them, func(t *tailRun) float64 { return msOf(t.Load.P99) }), ms, "≤ 0.5×"},
			line{"under ingest: query client max", msOf(us.Load.Max), orNaN(them, func(t *tailRun) float64 { return msOf(t.Load.Max) }), ms, "≤ 0.5×"},
			line{"under ingest: queries per second", us.Load.RPS, orNaN(them, func(t *tailRun) float64 { return t.Load.RPS }), perS, ""},
			line{"under ingest: server handler p99 (bucket bound)", us.Metrics.HandlerP99 * 1e3, nan, ms, "≤ 1 ms (conductor)"})
	}
	peer := false
	for _, l := range lines {
		peer = peer || !math.IsNaN(l.them)
	}
	var md strings.Builder
	if peer {
		md.WriteString("| figure | conductor | C++ conductor | conductor ÷ C++ | goal |\n|---|---|---|---|---|\n")
	} else {
		md.WriteString("No C++ conductor in this run (BENCH_CPP_CONDUCTOR unset): conductor's figures alone.\n\n| figure | conductor | goal |\n|---|---|---|\n")
	}
	for _, l := range lines {
		if !peer {
			fmt.Fprintf(&md, "| %s | %s | %s |\n", l.figure, l.unit(l.us), l.goal)
			continue
		}
		them, ratio := "–", "–"
		if !math.IsNaN(l.them) {
			them = l.unit(l.them)
			if l.them > 0 {
				ratio = fmt.Sprintf("%.2f×", l.us/l.them)
				if l.us/l.them < 0.1 {
					ratio = fmt.Sprintf("%.2g×", l.us/l.them)
				}
			}
		}
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s |\n", l.figure, l.unit(l.us), them, ratio, l.goal)
	}
	return md.String()
}

// holdersName writes "1 holder", "10 holders", "1k holders".
func holdersName(n int) string {
	if n == 1 {
		return "1 holder"
	}
	return count(n) + " holders"
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
// answer), three holders each hold the prompt, and the report and its four
// curves are written.
func TestFleetHarness(t *testing.T) {
	qs := []int{1 << 10, 1 << 13}
	args := []string{"--hash-memo-bytes", "0"}
	row := runFleet(t, serverConductor, 64*100, 64, qs, args)
	t.Logf("%+v", row)
	if row.Blocks != 6400 || row.RSS <= 0 || row.Rate <= 0 || row.QueryCPU[1<<10] <= 0 || row.QueryCPU[1<<13] <= 0 {
		t.Fatalf("row: %+v", row)
	}
	h := runHolders(t, serverConductor, []int{1, 3}, args)
	if h.CPU[1] <= 0 || h.CPU[3] <= 0 {
		t.Fatalf("holders: %+v", h)
	}
	dir := t.TempDir()
	res := fleetResults{Rows: []fleetRow{row}, Holders: []fleetHolding{h}, Floor8k: sha256Floor(t, loadBlocks)}
	if err := res.write(dir, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fleet.md", "fleet-ingest.svg", "fleet-rss.svg", "fleet-query.svg", "fleet-holders.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestSideBySide: the goals table against hand-computed ratios, with a C++
// column and without one.
func TestSideBySide(t *testing.T) {
	us := fleetRow{Server: serverConductor, Blocks: 10_000_000, Batch: 64, CPUPerBlock: 1000, RSS: 800e6,
		QueryCPU: map[int]float64{1 << 10: 30, 1 << 13: 130}, QueryGC: map[int]float64{1 << 10: 0, 1 << 13: 0}}
	them := fleetRow{Server: serverCpp, Blocks: 10_000_000, Batch: 64, CPUPerBlock: 4000, RSS: 3200e6,
		QueryCPU: map[int]float64{1 << 10: 60, 1 << 13: math.NaN()}}
	r := fleetResults{Rows: []fleetRow{us, them}, Floor8k: 65 * time.Microsecond,
		Holders: []fleetHolding{{Server: serverConductor, CPU: map[int]float64{1: 100, 1000: 200}},
			{Server: serverCpp, CPU: map[int]float64{1: 150, 1000: 2e6}}}}
	got := r.sideBySide()
	for _, want := range []string{
		"| figure | conductor | C++ conductor | conductor ÷ C++ | goal |",
		"| ingest 10M blocks, 64-block batches: server CPU per block | 1000 ns | 4000 ns | 0.25× | ≤ 0.35× |",
		"| RSS per block at 10M blocks (64-block batches) | 80.0 B | 320.0 B | 0.25× | ≤ 100 B |",
		"| cold /query 1k tokens at 10M blocks: server CPU | 30 µs | 60 µs | 0.50× | ≤ 0.6× |",
		"| cold /query 8k tokens at 10M blocks: server CPU | 130 µs | – | – |  |",
		"| cold /query 8k ÷ the SHA-256 floor | 2.00× | – | – | ≤ 1.3 (conductor) |",
		"| cold /query 8k, 1 holder: server CPU | 100 µs | 150 µs | 0.67× |  |",
		"| cold /query 8k, 1k holders: server CPU | 200 µs | 2 s | 0.0001× |  |",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	r.Rows, r.Holders = r.Rows[:1], r.Holders[:1]
	got = r.sideBySide()
	for _, want := range []string{"| figure | conductor | goal |", "| ingest 10M blocks, 64-block batches: server CPU per block | 1000 ns | ≤ 0.35× |"} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// micros writes a time in µs with three significant digits, as ms from
// 1,000 µs and as s from 1,000 ms (51.2 µs, 174 µs, 3.37 ms, 125 ms, 43.4 s).
func micros(us float64) string {
	unit := "µs"
	if us >= 1e6 {
		us, unit = us/1e6, "s"
	} else if us >= 1000 {
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
		3368.4: "3.37 ms", 66000: "66 ms", 124750: "125 ms", 999_000: "999 ms", 1.5e6: "1.5 s", 4.336e7: "43.4 s"} {
		if got := micros(us); got != want {
			t.Errorf("micros(%g) = %q, want %q", us, got, want)
		}
	}
}
