package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// Trace replay: Mooncake's conversation trace (one hash id per 512-token block,
// equal ids = equal prefixes) expanded to tokens and sent to conductor in trace
// order over one keep-alive connection. The engine holds every block of the
// replayed requests (an unbounded prefix cache), so every query walks its whole
// prompt and the memo's hit ratio is exactly the trace's prefix reuse, limited
// by the memo's size.

const (
	traceSlice       = "testdata/mooncake_conversation_trace_head400.jsonl"
	traceIDTokens    = 512
	traceBlockSize   = 16
	traceBlocksPerID = traceIDTokens / traceBlockSize
)

// loadTrace reads up to limit requests' hash ids (limit <= 0: all).
func loadTrace(tb testing.TB, path string, limit int) [][]uint64 {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var reqs [][]uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() && (limit <= 0 || len(reqs) < limit) {
		var r struct {
			HashIDs []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatalf("%s line %d: %v", path, len(reqs)+1, err)
		}
		reqs = append(reqs, r.HashIDs)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return reqs
}

// expandIDs appends the tokens of hash ids: 512 per id, a function of the id
// and the position only (equal ids give equal tokens), in [1, 150000].
func expandIDs(dst []int32, ids []uint64) []int32 {
	for _, id := range ids {
		for j := uint64(0); j < traceIDTokens; j++ {
			x := id*0x9e3779b97f4a7c15 + j*0xbf58476d1ce4e5b9 + 1
			x ^= x >> 31
			x *= 0x94d049bb133111eb
			x ^= x >> 29
			dst = append(dst, int32(x%150000)+1)
		}
	}
	return dst
}

// traceRun is the outcome of one replay.
type traceRun struct {
	Queries, Blocks, UniqueBlocks int
	CPUPerQuery                   time.Duration
	MemoHits, MemoMisses          float64
	PromptHits                    float64 // the part of MemoHits served from recent prompts
	MemoEvictions                 float64 // digests the memo table replaced during the replay
	Elapsed                       time.Duration
	P99                           time.Duration
}

// replayTrace starts conductor with args, stores every block of reqs at the
// engine, then replays reqs in order and measures the replay only.
func replayTrace(tb testing.TB, reqs [][]uint64, args ...string) traceRun {
	tb.Helper()
	s := startServer(tb, args...)
	run := storeTrace(tb, s, reqs)
	replayStored(tb, s, reqs, &run)
	return run
}

// storeTrace registers the engine and stores every block of reqs.
func storeTrace(tb testing.TB, s *serverProc, reqs [][]uint64) traceRun {
	tb.Helper()
	e := registerEngine(tb, s)

	// Store: each request's blocks past those already stored (chain keys
	// depend on the whole prefix, so new blocks are a suffix).
	stored := make(map[uint64]struct{})
	var tokens []int32
	var last []uint64
	run := traceRun{Queries: len(reqs)}
	for _, ids := range reqs {
		tokens = expandIDs(tokens[:0], ids)
		keys, err := hash.AppendChain(nil, &e.p, tokens, traceBlockSize, nil, nil)
		if err != nil {
			tb.Fatal(err)
		}
		run.Blocks += len(keys)
		from := 0
		for from < len(keys) {
			if _, ok := stored[keys[from]]; !ok {
				break
			}
			from++
		}
		if from == len(keys) {
			continue
		}
		for _, k := range keys[from:] {
			stored[k] = struct{}{}
		}
		e.store(tb, tokens, from)
		last = keys
	}
	run.UniqueBlocks = len(stored)
	waitMatchedByHash(tb, s, last)
	return run
}

// replayStored replays reqs over one connection, in trace order, and fills in
// the server's CPU, memo counters and latency of the replay alone.
func replayStored(tb testing.TB, s *serverProc, reqs [][]uint64, run *traceRun) {
	tb.Helper()
	var tokens []int32
	c := NewConn(s.addr, 0)
	defer c.Close()
	m0 := s.scrape(tb)
	lat := make([]time.Duration, 0, len(reqs))
	var busy time.Duration
	c0 := s.cpu(tb)
	for _, ids := range reqs {
		tokens = expandIDs(tokens[:0], ids)
		body, ct := queryBody("bin", tokens)
		t0 := time.Now()
		if _, err := c.Post("/query", ct, body); err != nil {
			tb.Fatal(err)
		}
		d := time.Since(t0)
		busy += d
		lat = append(lat, d)
	}
	c1 := s.cpu(tb)
	run.CPUPerQuery = (c1 - c0) / time.Duration(len(reqs))
	d := memoCounts(tb, m0, s.scrape(tb))
	run.MemoHits, run.MemoMisses, run.PromptHits, run.MemoEvictions = d.Hits, d.Misses, d.PromptHits, d.Evictions
	run.Elapsed = busy
	slices.Sort(lat)
	run.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
}

// waitMatchedByHash polls /query_by_hash (which hashes nothing, so the memo
// stays cold) until engine-a matches every key.
func waitMatchedByHash(tb testing.TB, s *serverProc, keys []uint64) {
	tb.Helper()
	var sb strings.Builder
	sb.WriteString(`{"model":"m","block_size":16,"block_hash":[`)
	for i, k := range keys {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.FormatUint(k, 10))
	}
	sb.WriteString("]}")
	want := len(keys) * traceBlockSize
	deadline := time.Now().Add(waitBound)
	for {
		_, resp := s.post(tb, "/query_by_hash", "application/json", []byte(sb.String()))
		if (&Expect{Instance: "engine-a", LongestMatched: int64(want)}).Check("application/json", resp) == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("stored blocks never all applied: %.300s", resp)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tracePath is the trace to replay: $CONDUCTOR_TRACE (e.g. the full
// shared/traces/mooncake_conversation_trace.jsonl) or the 400-request slice.
func tracePath() string {
	if p := os.Getenv("CONDUCTOR_TRACE"); p != "" {
		return p
	}
	return traceSlice
}

// BenchmarkServerTrace replays the conversation trace against conductor as a
// child process with the memo off and on (64 MiB, hash.DefaultMemoBytes), reporting the
// server's CPU per query and the memo's hit ratio (hits = SHA-256 block
// computations saved). The replay runs once whatever b.N is; run with
// -benchtime 1x. $CONDUCTOR_TRACE_LIMIT caps the requests replayed;
// $CONDUCTOR_TRACE_MEMO_BYTES lists the --hash-memo-bytes values to run
// (default "0,67108864").
//
//	CONDUCTOR_TRACE=/work/shared/traces/mooncake_conversation_trace.jsonl CONDUCTOR_TRACE_LIMIT=3000 \
//	  go test -run '^$' -bench BenchmarkServerTrace -benchtime 1x ./bench/
func BenchmarkServerTrace(b *testing.B) {
	limit, _ := strconv.Atoi(os.Getenv("CONDUCTOR_TRACE_LIMIT"))
	reqs := loadTrace(b, tracePath(), limit)
	sizes := []string{"0", strconv.Itoa(hash.DefaultMemoBytes)}
	if v := os.Getenv("CONDUCTOR_TRACE_MEMO_BYTES"); v != "" {
		sizes = strings.Split(v, ",")
	}
	for _, memo := range sizes {
		name := "memo=off"
		if memo != "0" {
			name = "memo=" + memo
		}
		b.Run(name, func(b *testing.B) {
			r := replayTrace(b, reqs, "--hash-memo-bytes", memo)
			b.ReportMetric(float64(r.CPUPerQuery.Nanoseconds())/1e3, "server-µs/query")
			b.ReportMetric(float64(r.Blocks)/float64(r.Queries), "blocks/query")
			b.ReportMetric(float64(r.P99.Microseconds()), "p99-µs")
			if r.MemoHits+r.MemoMisses > 0 {
				b.ReportMetric(r.MemoHits/(r.MemoHits+r.MemoMisses), "memo-hit-ratio")
				b.ReportMetric(1-float64(r.UniqueBlocks)/float64(r.Blocks), "reuse-ratio")
			}
			b.Logf("%d queries, %d blocks (%d unique), memo hits %.0f (from recent prompts %.0f) misses %.0f, server CPU %v/query, p99 %v",
				r.Queries, r.Blocks, r.UniqueBlocks, r.MemoHits, r.PromptHits, r.MemoMisses, r.CPUPerQuery, r.P99)
		})
	}
}

// TestServerTraceReplay replays the first 120 requests of the trace slice.
// Every block is looked up once per query: hits + misses = blocks, counted
// independently on the client. Each distinct block misses once; a repeat hits
// unless the table replaced its digest in between. The table is 4-way
// set-associative and its bucket of a key depends on the per-process random
// memo seed, so which keys share a full bucket, and whether a replaced one is
// asked for again, differs from run to run: a repeat may miss, but only as
// often as the table evicted (misses − unique ≤ evictions), and a run without
// evictions is exact. With the memo off nothing is counted.
func TestServerTraceReplay(t *testing.T) {
	reqs := loadTrace(t, traceSlice, 120)
	on := replayTrace(t, reqs, "--hash-memo-bytes", strconv.Itoa(hash.DefaultMemoBytes))
	unique, blocks := float64(on.UniqueBlocks), float64(on.Blocks)
	if on.MemoHits+on.MemoMisses != blocks || on.MemoMisses < unique || on.MemoMisses-unique > on.MemoEvictions {
		t.Fatalf("memo on: hits %v misses %v evictions %v; want hits+misses = %d blocks and %d unique ≤ misses ≤ unique + evictions",
			on.MemoHits, on.MemoMisses, on.MemoEvictions, on.Blocks, on.UniqueBlocks)
	}
	// A roomy table evicts only where a bucket overflows: a few blocks of
	// 100k, never a share that would make the bound above loose.
	if on.MemoEvictions > unique/100 {
		t.Fatalf("memo on: %v evictions for %d distinct blocks in a %d-byte table", on.MemoEvictions, on.UniqueBlocks, hash.DefaultMemoBytes)
	}
	if on.MemoHits == 0 {
		t.Fatal("the slice has no prefix reuse: the check is vacuous")
	}
	off := replayTrace(t, reqs, "--hash-memo-bytes", "0")
	if off.MemoHits+off.MemoMisses != 0 {
		t.Fatalf("memo off but counted: %+v", off)
	}
	t.Logf("memo on: %+v", on)
	t.Logf("memo off: %+v", off)
}
