package ingest

import (
	"bytes"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// TestEscapeLabel: label values keep printable text and escape the rest, so
// a scrape never carries a raw control byte or invalid UTF-8.
func TestEscapeLabel(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := escapeLabel(in); got != want {
			t.Errorf("escapeLabel(%q) = %q, want %q", in, got, want)
		}
	}
	f("engine-0", "engine-0")
	f("équipe 节点", "équipe 节点")
	f(`a"b\c`, `a\"b\\c`)
	f("a\nb", `a\nb`)
	f("a\x00b", `a\\x00b`)
	f("\x1b[31mred", `\\x1b[31mred`)
	f("del\x7f", `del\\x7f`)
	f("c1\u009b", `c1\\xc2\\x9b`)
	f("bad\xff", `bad\\xff`)
	f("cut\xc3", `cut\\xc3`)
	f("\ufffd", "\ufffd") // a real U+FFFD is text
}

// TestStreamMetricsExposition: a stream whose identity carries control bytes
// and invalid UTF-8 is exposed with them escaped: the scrape is valid UTF-8
// with no control byte but the line ends.
func TestStreamMetricsExposition(t *testing.T) {
	set := metrics.NewSet()
	k := core.ServiceKey{InstanceID: "a\x00\x1b[2Jb\xff", TenantID: "t\x07", DPRank: 1}
	m := newStreamSeries(set).newStreamMetrics(k, wire.DialectVLLM)
	m.stored.Inc()
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	out := buf.String()
	if !utf8.ValidString(out) {
		t.Fatalf("exposition is not UTF-8:\n%q", out)
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && c != '\n') || c == 0x7f {
			t.Fatalf("control byte 0x%02x at %d:\n%q", c, i, out)
		}
	}
	want := `conductor_ingest_events_total{instance="a\\x00\\x1b[2Jb\\xff",tenant="t\\x07",dp_rank="1",type="stored"} 1`
	if !strings.Contains(out, want+"\n") {
		t.Fatalf("no line %s in\n%s", want, out)
	}
	m.unregister()
}

// TestStreamSeriesAgreesWithSet: the streams' writer exposes exactly what a
// metrics.Set holding the same series writes (the implementation it
// replaced, kept here as the reference): same lines, families together and
// sorted, series sorted by full name, gauges formatted alike. Identities
// carry escapes, ranks of one and two digits (dp_rank="1" against "10"),
// counters any 64-bit value, gauges integral, fractional and not a number;
// some streams have no applier gauges yet, and unregistered ones are gone.
func TestStreamSeriesAgreesWithSet(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	ix := core.New(core.Options{})
	got, ref := metrics.NewSet(), metrics.NewSet()
	series := newStreamSeries(got)
	ids := []string{"engine-0", "engine-1", `q"uote`, `back\\slash`, "ctl\x01", "节点", "engine-0a", "e"}
	seen := map[core.ServiceKey]bool{}
	for i := 0; i < 60; i++ {
		k := core.ServiceKey{InstanceID: ids[rng.Intn(len(ids))] + strconv.Itoa(rng.Intn(3)),
			TenantID: []string{"default", "t\"x", "a"}[rng.Intn(3)], DPRank: int32(rng.Intn(13))}
		if seen[k] {
			continue // one listener per key
		}
		seen[k] = true
		m := series.newStreamMetrics(k, wire.DialectVLLM)
		if rng.Intn(5) == 0 {
			m.unregister() // never exposed again, whatever it counts
			m.batches.Add(7)
			continue
		}
		if rng.Intn(3) > 0 {
			sub, _, err := ix.Register(core.Registration{Endpoint: "tcp://127.0.0.1:" + strconv.Itoa(10000+i), Type: core.PublisherVLLM,
				ModelName: "m", InstanceID: "x" + strconv.Itoa(i), BlockSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			m.applierGauges(sub)
		}
		m.lastSeq.Store(rng.Uint64() >> 11)
		lag := []float64{0, 1.5, -0.25, 3, math.NaN(), rng.Float64() * 100}[rng.Intn(6)]
		m.lagBits.Store(math.Float64bits(lag))
		for _, f := range streamFamilies {
			for _, v := range f.series {
				name := f.name + "{" + m.labels + v.extra + "}"
				switch {
				case v.counter != nil:
					n := rng.Uint64() >> uint(rng.Intn(64))
					v.counter(m).v.Store(n)
					ref.GetOrCreateCounter(name).Set(n)
				default:
					if _, ok := v.gauge(m); ok {
						gauge := v.gauge
						ref.GetOrCreateGauge(name, func() float64 { x, _ := gauge(m); return x })
					}
				}
			}
		}
	}
	var a, b bytes.Buffer
	got.WritePrometheus(&a)
	ref.WritePrometheus(&b)
	var lines []string // the writer's, without the set's own dialect series
	for _, line := range strings.SplitAfter(a.String(), "\n") {
		if !strings.HasPrefix(line, mDialectBlocks) {
			lines = append(lines, line)
		}
	}
	if x, y := strings.Join(lines, ""), b.String(); x != y || y == "" {
		t.Fatalf("the writer's exposition differs from the set's:\n--- writer\n%s\n--- set\n%s", x, y)
	}
}
