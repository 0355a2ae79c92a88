package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
)

// fakeClient answers every query with one fixed row; odd-length prompts fail.
type fakeClient struct{}

func (fakeClient) Query(q *Query, a *Answer) error {
	a.Reset()
	if len(q.Tokens)%2 == 1 {
		return errors.New("odd")
	}
	a.Rows = append(a.Rows, Row{Instance: "x", Longest: int64(len(q.Tokens))})
	return nil
}
func (fakeClient) Close() {}

// TestQueryLoadCountsAndChecks: a count-bounded open-loop query load issues
// exactly the count, counts the Client's errors apart from Check's
// mismatches, and keeps at most maxKept mismatch reports.
func TestQueryLoadCountsAndChecks(t *testing.T) {
	var done atomic.Int64
	var checked atomic.Int64
	load := queryLoad{
		Factory: func() (Client, error) { return fakeClient{}, nil },
		Next:    func(w int, rng *rand.Rand) *Query { return &Query{Tokens: make([]int32, rng.IntN(6))} },
		Check: func(q *Query, a *Answer) error {
			checked.Add(1)
			if a.Rows[0].Longest != int64(len(q.Tokens)) {
				t.Errorf("answer %+v for %d tokens", a.Rows[0], len(q.Tokens))
			}
			if len(q.Tokens) == 4 {
				return errors.New("four")
			}
			return nil
		},
	}
	res, err := bench.RunLoad(context.Background(), bench.LoadOptions{NewWorker: load.worker, Connections: 3, Rate: 20000,
		Requests: 90, KeepGoing: true, Done: &done})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 90 || done.Load() != 90 || res.Count != 90 {
		t.Fatalf("requests %d, done %d, histogram %d; want 90", res.Requests, done.Load(), res.Count)
	}
	if res.Errors == 0 || res.Errors+checked.Load() != 90 || res.FirstError != "odd" {
		t.Fatalf("errors %d + checked %d != 90 (first %q)", res.Errors, checked.Load(), res.FirstError)
	}
	if res.Mismatches == 0 || len(res.Mismatch) == 0 || len(res.Mismatch) > maxKept || !strings.HasSuffix(res.Mismatch[0], "four") {
		t.Fatalf("mismatches %d, kept %q", res.Mismatches, res.Mismatch)
	}
	if l := res.Latency; !(l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Fatalf("percentiles out of order: %+v", l)
	}
}

// TestPlotSVG: the plot has one series per percentile with a point per
// sweep rate, at the achieved rate and the percentile's latency (drawing is
// bench.TestChartSVG's), and renders; an empty sweep is refused.
func TestPlotSVG(t *testing.T) {
	r := &Report{Sweep: []SweepPoint{
		{Rate: 1000, QPS: 1000, P50: 100, P90: 200, P99: 400, P999: 900},
		{Rate: 2000, QPS: 1990, P50: 120, P90: 260, P99: 800, P999: 3000},
		{Rate: 4000, QPS: 3100, P50: 9000, P90: 20000, P99: 50000, P999: 80000},
	}}
	c, err := r.chart("t")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float64{"p50": {100, 120, 9000}, "p90": {200, 260, 20000}, "p99": {400, 800, 50000}, "p99.9": {900, 3000, 80000}}
	if len(c.Series) != len(want) {
		t.Fatalf("%d series, want %d", len(c.Series), len(want))
	}
	for _, s := range c.Series {
		if !slices.Equal(s.Y, want[s.Name]) || !slices.Equal(s.X, []float64{1000, 1990, 3100}) {
			t.Errorf("series %s: x %v y %v", s.Name, s.X, s.Y)
		}
	}
	var b strings.Builder
	if err := r.PlotSVG(&b, "t <&>"); err != nil || !strings.Contains(b.String(), "t &lt;&amp;&gt;") {
		t.Fatalf("render: %v", err)
	}
	if err := (&Report{}).PlotSVG(&b, ""); err == nil {
		t.Fatal("empty sweep plotted")
	}
}

// hitClient reports a full device hit on instance "b" only.
type hitClient struct{ ids []string }

func (c hitClient) Query(q *Query, a *Answer) error {
	a.Reset()
	for _, id := range c.ids {
		r := Row{Instance: id, Ranks: []RankRow{{Rank: 0}}}
		if id == "b" {
			r.Ranks[0].Tiers = [numTiers]int64{16, 16, 16, 16}
		}
		a.Rows = append(a.Rows, r)
	}
	return nil
}
func (hitClient) Close() {}

// TestCacheAwareRouting: the rank the indexer reports a hit on gets the
// requests, but never more than 1.5× its fair share of the recent window
// (4 targets → 6 of the last 16), so the others still get load.
func TestCacheAwareRouting(t *testing.T) {
	var engines []EngineConfig
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		engines = append(engines, EngineConfig{ID: id, Dialect: VLLMMap, Device: 64})
	}
	g, err := NewGroup(GroupConfig{Model: "m", Policy: CacheAware, Engines: engines})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	prompt := make([]int32, 32)
	for i := 0; i < 160; i++ {
		if _, err := g.Serve(prompt, hitClient{ids}); err != nil {
			t.Fatal(err)
		}
	}
	if g.recentN[1] != 6 {
		t.Fatalf("b got %d of the last 16 requests, want 6 (counts %v)", g.recentN[1], g.recentN)
	}
	for i, n := range g.recentN {
		if n == 0 {
			t.Fatalf("target %s got nothing in the last window: %v", ids[i], g.recentN)
		}
	}
	if g.Stats.RouteErrors != 0 {
		t.Fatalf("route errors %d", g.Stats.RouteErrors)
	}
}
