package core

import (
	"bufio"
	"fmt"
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

// TestQueryRunsOfSameHolders: a popular prefix, every block held by the same
// owners in the same order, where the walk skips blocks whose owner set
// repeats the last one. Worked by hand: twelve instances store 20 blocks on
// GPU; i03 drops block 7 (7 blocks on device), i05 moves blocks 12..19 to
// CPU (12 on device, 20 up to cpu_local), i08 drops block 19 (19 blocks),
// and the shared pool holds blocks 0..3 on disk (no row changes: every
// instance holds them on device). Then the same prefix stored in an
// interleaved order (so the owner words of blocks 10..19 differ in order from
// those of 0..9) gives the same rows.
func TestQueryRunsOfSameHolders(t *testing.T) {
	bothApplies(t, func(t *testing.T) {
		p := cborProfile(t)
		hashes := seq(20)
		want := func(t *testing.T, ix *Index, special map[string][2]int64) {
			t.Helper()
			res := queryHashes(t, ix, "", hashes...)
			checkInvariants(t, res, 20*testBS)
			if len(res.Instances) != 12 {
				t.Fatalf("%d rows, want 12", len(res.Instances))
			}
			for i := range 12 {
				id := fmt.Sprintf("i%02d", i)
				dev, cpu := int64(20), int64(20)
				if s, ok := special[id]; ok {
					dev, cpu = s[0], s[1]
				}
				r := row(res, id)
				if r == nil || r.Device != dev*testBS || r.CPULocal != cpu*testBS || r.LongestMatched != cpu*testBS {
					t.Fatalf("%s: %+v, want device %d cpu_local %d blocks", id, r, dev, cpu)
				}
			}
		}

		ix := New(Options{})
		subs := make([]*Subscription, 12)
		for i := range subs {
			subs[i] = mustRegister(t, ix, engineReg(t, fmt.Sprintf("i%02d", i), 0, p))
		}
		pool := mustRegister(t, ix, poolReg("pool"))
		for _, s := range subs {
			s.Apply(stored("GPU", hashes...))
		}
		pool.Apply(poolStored("disk", "store-1", hashes[:4]...))
		want(t, ix, nil)
		subs[3].Apply(removed("GPU", hashes[7]))
		subs[5].Apply(removed("GPU", hashes[12:]...))
		subs[5].Apply(stored("CPU", hashes[12:]...))
		subs[8].Apply(removed("GPU", hashes[19]))
		want(t, ix, map[string][2]int64{"i03": {7, 7}, "i05": {12, 20}, "i08": {19, 19}})

		ix = New(Options{})
		for i := range subs {
			subs[i] = mustRegister(t, ix, engineReg(t, fmt.Sprintf("i%02d", i), 0, p))
		}
		for _, s := range subs[:6] {
			s.Apply(stored("GPU", hashes[:10]...))
		}
		for _, s := range subs[6:] {
			s.Apply(stored("GPU", hashes...))
		}
		for _, s := range subs[:6] {
			s.Apply(stored("GPU", hashes[10:]...))
		}
		want(t, ix, nil)
	})
}

// TestWalkHashesLittlePastItsEnd: the walk looks blocks up a window ahead
// (walkAhead), hashing them first, and the window grows with the walk, so a
// prompt whose first k blocks are held hashes at most min(k, walkAhead-1)
// blocks past block k, the first one missing; a full hit hashes the prompt
// once. The answers are the exact prefixes either way.
func TestWalkHashesLittlePastItsEnd(t *testing.T) {
	const n = 200
	tokens := make([]int32, n*testBS)
	for i := range tokens {
		tokens[i] = int32(i*31 + 7)
	}
	prof := cborProfile(t)
	for _, k := range []int{0, 1, 2, 3, 4, 6, 7, 8, 14, 15, 16, 30, 31, 47, 100, n} {
		ix := benchIndex(t, prof, 2, k, tokens)
		var res QueryResult
		if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens}, &res); err != nil {
			t.Fatal(err)
		}
		if k > 0 && (len(res.Instances) != 2 || res.Instances[0].Device != int64(k*testBS) || res.Instances[1].Device != int64(k*testBS)) {
			t.Fatalf("k=%d: %+v, want 2 rows of %d tokens", k, res.Instances, k*testBS)
		}
		want := min(n, k+1+min(k, walkAhead-1))
		if got := res.chain.Computed(); got > want || got < min(n, k+1) {
			t.Fatalf("k=%d: %d blocks hashed, want %d..%d", k, got, min(n, k+1), want)
		}
	}
}
