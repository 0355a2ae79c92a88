package server

import (
	"strconv"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// BenchmarkQueryMiss is the cost of naming a miss's reason on an index of n
// contexts of 8 instances each: QueryMiss (its keys read once, then a walk
// of them per miss) beside the walk of the index's GlobalView on every miss
// that missKeys spares (index_each_miss). A hit never pays either.
func BenchmarkQueryMiss(b *testing.B) {
	for _, n := range []int{1, 64, 256} {
		c, ix, _ := missCore(b)
		c.missKeys.clock = nil
		for m := 0; m < n; m++ {
			for i := 0; i < 8; i++ {
				if _, err := c.Gate().Register(AdminPrincipal, missReg("m"+strconv.Itoa(m), "e"+strconv.Itoa(m)+"-"+strconv.Itoa(i), 16)); err != nil {
					b.Fatal(err)
				}
			}
		}
		q := &core.QueryRequest{TenantID: "default", Model: "m0", BlockSize: 32}
		b.Run("contexts="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := c.QueryMiss(q); r != MissUnknownBlockSize {
					b.Fatal(r)
				}
			}
		})
		b.Run("contexts="+strconv.Itoa(n)+"/index_each_miss", func(b *testing.B) {
			b.ReportAllocs()
			var keys []core.ContextKey
			for b.Loop() {
				keys = keys[:0]
				for _, cv := range ix.GlobalView().Contexts {
					keys = append(keys, cv.ContextKey)
				}
				if r := missReason(keys, q); r != MissUnknownBlockSize {
					b.Fatal(r)
				}
			}
		})
	}
}
