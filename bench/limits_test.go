package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// limit is one line of limits.txt.
type limit struct {
	suite, bench, metric string
	ceiling              float64
}

func readLimits(t *testing.T) []limit {
	t.Helper()
	f, err := os.Open("limits.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []limit
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("limits.txt: %q: want SUITE BENCHMARK METRIC CEILING", line)
		}
		c, err := strconv.ParseFloat(f[3], 64)
		if err != nil || c <= 0 {
			t.Fatalf("limits.txt: %q: ceiling %q", line, f[3])
		}
		out = append(out, limit{f[0], f[1], f[2], c})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBenchLimits runs report.sh's ceiling check on go test -bench output
// written from limits.txt itself: samples whose median sits at each ceiling
// pass; one figure whose median is over its ceiling, or one line without a
// sample, fails naming that figure and nothing else.
func TestBenchLimits(t *testing.T) {
	lims := readLimits(t)
	var footprint []limit
	for _, l := range lims {
		if l.suite == "footprint" {
			footprint = append(footprint, l)
		}
	}
	if len(footprint) == 0 {
		t.Fatal("limits.txt has no footprint ceilings")
	}
	dir := t.TempDir()
	// write renders three samples of every footprint figure; over raises the
	// median of limit i above its ceiling, skip leaves limit i out.
	write := func(name string, over, skip int) string {
		var b strings.Builder
		b.WriteString("goos: linux\n")
		for s := 0; s < 3; s++ {
			for i, l := range footprint {
				if i == skip {
					continue
				}
				v := l.ceiling
				switch {
				case s == 0: // below the median: never decides it
					v = l.ceiling / 2
				case i == over:
					v = l.ceiling * 1.01
				case s == 2:
					v = l.ceiling * 10 // one wild sample is not the median
				}
				fmt.Fprintf(&b, "%s-2 \t 1\t 123 ns/op\t %g %s\n", l.bench, v, l.metric)
			}
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(raw string) (string, int) {
		cmd := exec.Command("bash", "report.sh", "limits", "footprint", raw)
		cmd.Env = append(os.Environ(), "LIMITS=bench/limits.txt", "OUT="+filepath.Join(dir, "out"))
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, rc := check(write("ok.txt", -1, -1)); rc != 0 || out != "" {
		t.Fatalf("every median at its ceiling: rc %d, %q", rc, out)
	}
	for i, l := range footprint {
		fig := l.bench + " " + l.metric + ":"
		out, rc := check(write("over.txt", i, -1))
		if rc != 1 || !strings.Contains(out, fig+" median") || strings.Count(out, "\n") != 1 {
			t.Errorf("%s over its ceiling: rc %d, %q", fig, rc, out)
		}
		out, rc = check(write("skip.txt", -1, i))
		if rc != 1 || !strings.Contains(out, fig+" no sample") || strings.Count(out, "\n") != 1 {
			t.Errorf("%s without a sample: rc %d, %q", fig, rc, out)
		}
	}
}
