package ingest

import (
	"bytes"
	"strings"
	"testing"
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
	m := newStreamMetrics(set, k, wire.DialectVLLM)
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
