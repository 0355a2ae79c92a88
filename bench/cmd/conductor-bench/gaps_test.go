package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tableRow returns the cells of the Markdown row of out that starts with
// prefix (cells trimmed, the leading and trailing empty ones dropped).
func tableRow(t *testing.T, out, prefix string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			return cells
		}
	}
	t.Fatalf("no row %q in:\n%s", prefix, out)
	return nil
}

// TestGapsDriver runs `conductor-bench gaps` (its loss table) on a few
// trace records against a conductor binary and checks the table against
// what each loss can and cannot touch: losing store messages leaves the
// engines' own tiers exact; losing engine messages leaves the shared tier
// exact (every block an engine computes is written through to a store that
// evicts nothing in so short a run). The crash case's runs are
// TestCrashRestart's.
func TestGapsDriver(t *testing.T) {
	bin := conductorBinary(t)
	trace := filepath.Join("..", "..", "testdata", "mooncake_conversation_trace_head400.jsonl")
	var out, logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code := run(ctx, []string{"gaps", "-conductor", bin, "-trace", trace, "-trace-limit", "48", "-rates", "0.2",
		"-snapshot-intervals", "", "-fault-seed", "3"}, &out, &logs)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, logs.String())
	}
	s := out.String()
	// | policy | stream | loss | lost | exact answers | device | cpu_local | cpu_share | disk |
	store := tableRow(t, s, "| clear | store | 0.2 |")
	engines := tableRow(t, s, "| clear | engines | 0.2 |")
	if len(store) != 9 || len(engines) != 9 {
		t.Fatalf("rows %q, %q", store, engines)
	}
	if strings.HasPrefix(store[3], "0 of") || strings.HasPrefix(engines[3], "0 of") {
		t.Fatalf("nothing lost: %q, %q", store[3], engines[3])
	}
	for _, c := range []struct {
		row  []string
		cell int
	}{{store, 5}, {store, 6}, {engines, 7}} {
		if c.row[c.cell] != "100.0% / 0 / 0" {
			t.Errorf("row %q cell %d = %q, want exact", c.row, c.cell, c.row[c.cell])
		}
	}
	if store[7] == "100.0% / 0 / 0" || engines[5] == "100.0% / 0 / 0" {
		t.Errorf("the lost stream's tier is exact: store row %q, engines row %q", store, engines)
	}
}
