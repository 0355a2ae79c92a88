//go:build !race

package codec

import (
	"math"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// TestReadersZeroAllocs: valid input, and errors too (preallocated), cost no
// allocation once the caller's buffers have grown.
func TestReadersZeroAllocs(t *testing.T) {
	// A []byte, as bodies and payloads are: JSONInt32s hands its input to
	// assembly (jsonWindowAVX512), so a string converted in the call would be
	// copied (the compiler cannot prove the input is not written).
	tokens := []byte(`[` + strings.Repeat(`12345, `, 100) + `-1, 4000000000]`)
	hashes := `[` + strings.Repeat(`18446744073709551615,`, 50) + `-5]`
	obj := []byte(`{"a":[1,{"b":"x\ty\u00e9"}],"c":null,"d":-1.5e3}`)
	var mp []byte
	mp = msgp.AppendArrayHeader(mp, 300)
	for i := 0; i < 300; i++ {
		mp = msgp.AppendInt64(mp, int64(i*977-100000))
	}
	i32 := make([]int32, 0, 400)
	u64 := make([]uint64, 0, 100)
	arena := make([]byte, 0, 64)
	ints := make([]int32, 300)
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, _, err := JSONInt32s(i32[:0], tokens, 1000); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := JSONUint64s(u64[:0], []byte(hashes), 1000, Bits, &arena); err != nil {
			t.Fatal(err)
		}
		if _, err := JSONSkip(obj); err != nil {
			t.Fatal(err)
		}
		if _, _, err := JSONString([]byte(`"x\ty\u00e9"`), &arena); err != nil {
			t.Fatal(err)
		}
		arena = arena[:0]
		if _, err := JSONSkip([]byte(`[1,`)); err == nil {
			t.Fatal("truncated accepted")
		}
		if _, err := Skip(mp); err != nil {
			t.Fatal(err)
		}
		n, p, err := ReadArray(mp, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadInt32s(ints[:n], p, math.MaxInt32); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run, want 0", allocs)
	}
}
