package apitest

import (
	"strconv"
	"strings"
	"testing"
)

// MissReasons are the reason labels of conductor_query_context_misses_total,
// in their order of precedence.
var MissReasons = []string{"unknown_tenant", "unknown_model", "unknown_block_size", "unknown_lora"}

// MissCounts reads conductor_query_context_misses_total{reason} from a
// /metrics text: every reason of MissReasons must have exactly one series,
// and no other reason may appear.
func MissCounts(t testing.TB, text string) map[string]int {
	t.Helper()
	const prefix = `conductor_query_context_misses_total{reason="`
	got := map[string]int{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			if strings.HasPrefix(line, "conductor_query_context_misses_total") {
				t.Fatalf("unlabelled miss series %q", line)
			}
			continue
		}
		reason, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			t.Fatalf("malformed miss series %q", line)
		}
		if _, dup := got[reason]; dup {
			t.Fatalf("miss series for %q twice", reason)
		}
		n, err := strconv.Atoi(value)
		if err != nil {
			t.Fatalf("miss series %q: %v", line, err)
		}
		got[reason] = n
	}
	if len(got) != len(MissReasons) {
		t.Fatalf("miss series %v, want one for each of %v", got, MissReasons)
	}
	for _, r := range MissReasons {
		if _, ok := got[r]; !ok {
			t.Fatalf("no miss series for %q: %v", r, got)
		}
	}
	return got
}
