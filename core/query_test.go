package core

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestTieredQueryFixtures runs testdata/tiered_query: each case stores the
// given holdings through real subscriptions and checks a/0's row.
func TestTieredQueryFixtures(t *testing.T) { bothApplies(t, tieredQueryFixtures) }

func tieredQueryFixtures(t *testing.T) {
	f, err := os.Open("testdata/tiered_query")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		lhs, rhs, ok := strings.Cut(text, "->")
		if !ok {
			t.Fatalf("line %d: missing ->", line)
		}
		var want [4]int64
		for i, w := range strings.Fields(rhs) {
			v, err := strconv.ParseInt(w, 10, 64)
			if err != nil || i >= 4 {
				t.Fatalf("line %d: bad expectation %q", line, rhs)
			}
			want[i] = v
		}
		blocks := strings.Fields(lhs)
		t.Run(strings.Join(blocks, "_"), func(t *testing.T) {
			ix := New(Options{})
			p := cborProfile(t)
			a := mustRegister(t, ix, engineReg(t, "a", 0, p))
			b := mustRegister(t, ix, engineReg(t, "b", 0, p))
			pool := mustRegister(t, ix, poolReg("pool"))
			hashes := seq(len(blocks))
			for i, hold := range blocks {
				for _, h := range strings.Split(hold, "+") {
					k := hashes[i]
					switch h {
					case "N":
						a.Apply(stored("GPU", k))
					case "L":
						a.Apply(stored("CPU", k))
					case "d":
						a.Apply(stored("DISK", k))
					case "X":
						b.Apply(stored("GPU", k))
					case "S":
						pool.Apply(poolStored("cpu", "store-1", k))
					case "D":
						pool.Apply(poolStored("disk", "store-1", k))
					case "-":
					default:
						t.Fatalf("line %d: unknown holding %q", line, h)
					}
				}
			}
			res := queryHashes(t, ix, "", hashes...)
			checkInvariants(t, res, int64(len(blocks)*testBS))
			r := row(res, "a")
			if r == nil {
				t.Fatalf("no row for a: %+v", res.Instances)
			}
			got := [4]int64{r.Device, r.CPULocal, r.CPUShare, r.Disk}
			if got != want {
				t.Fatalf("line %d %q: got %v, want %v", line, lhs, got, want)
			}
			if len(r.Ranks) != 1 || r.Ranks[0].Device != want[0] || r.Ranks[0].Disk != want[3] {
				t.Fatalf("rank row mismatch: %+v", r.Ranks)
			}
			// The pool subscription is never a query instance.
			if row(res, "pool") != nil {
				t.Fatalf("pool subscription appeared as a row")
			}
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
