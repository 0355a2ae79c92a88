package dump_test

import (
	"bufio"
	"bytes"
	"math/rand"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// TestDumpCarriesGapMarks: under the gap policy "expire", the main form
// carries the deadline of each holding held at a pending gap mark
// ("gap_expires_ns") and every pending mark, one of no block included
// ("gap_marks"), and an index restored from it expires what the source
// expires, mark by mark, for the restore of a state directory's snapshot
// and of a peer's dump alike.
func TestDumpCarriesGapMarks(t *testing.T) {
	for _, prior := range []bool{false, true} {
		rng := rand.New(rand.NewSource(1))
		opts := core.Options{GapPolicy: core.GapExpire, GapExpireAfter: time.Hour}
		reg := core.Registration{Endpoint: "tcp://127.0.0.1:1", Type: core.PublisherVLLM, ModelName: "m", InstanceID: "i", BlockSize: 4}
		src := core.New(opts)
		s, _, err := src.Register(reg)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(0)
		var stored [][]uint64
		apply := func(n int) {
			for range n {
				b := &core.Batch{Seq: seq, HasSeq: true}
				seq++
				e := b.NextEvent()
				if len(stored) > 0 && rng.Intn(4) == 0 { // store an earlier prompt again
					e.Kind, e.BlockSize, e.Hashes = core.EventStored, 4, stored[rng.Intn(len(stored))]
					e.Tokens, e.HasTokens = make([]int32, 4*len(e.Hashes)), true
					for j := range e.Tokens {
						e.Tokens[j] = int32(e.Hashes[j/4] % 1000)
					}
					s.Apply(b)
					continue
				}
				k := 1 + rng.Intn(4)
				e.Kind, e.BlockSize, e.HasTokens = core.EventStored, 4, true
				for j := 0; j < k; j++ {
					h := rng.Uint64()
					e.Hashes = append(e.Hashes, h)
					e.Tokens = append(e.Tokens, int32(h%1000), int32(h%1000), int32(h%1000), int32(h%1000))
				}
				stored = append(stored, e.Hashes)
				s.Apply(b)
			}
		}
		s.Gap("test: a gap while nothing is held") // a mark of no block
		apply(100)
		s.Gap("test: first gap")
		apply(40)
		time.Sleep(time.Millisecond)
		s.Gap("test: second gap")
		apply(40)
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		if err := dump.Write(src, w); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(out.Bytes(), []byte(`"gap_expires_ns":`)) || !bytes.Contains(out.Bytes(), []byte(`"gap_marks":[`)) {
			t.Fatal("no gap_expires_ns or gap_marks in the dump")
		}
		dst := core.New(opts)
		d, _, err := dst.Register(reg)
		if err != nil {
			t.Fatal(err)
		}
		restore := dump.Restore
		if prior {
			restore = dump.RestorePrior
		}
		if _, err := restore(dst, bytes.NewReader(out.Bytes()), nil); err != nil {
			t.Fatal(err)
		}
		for step := range 4 {
			if got, want := dst.TierBlocks(), src.TierBlocks(); got != want {
				t.Fatalf("prior=%v, after %d expiries: restored %v, source %v", prior, step, got, want)
			}
			ns, nd := s.ExpireOldest(), d.ExpireOldest()
			if ns != nd || (step == 1 || step == 2) != (ns > 0) {
				t.Fatalf("prior=%v, expiry %d: source dropped %d, restored %d", prior, step, ns, nd)
			}
		}
	}
}
