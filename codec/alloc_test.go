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

// TestReaderZeroAllocs: walking a document through the Reader interface, in
// both formats, with each format's reader and with EitherReader, costs no
// allocation once the caller's buffers have grown — errors included (a type
// error, then Skip).
func TestReaderZeroAllocs(t *testing.T) {
	js := []byte(`{"a":[1,-2,18446744073709551615,1.5,null,true],"b":{"c":"x\ty\u00e9","d":[]},` +
		`"tokens":[` + strings.Repeat(`12345, `, 100) + `7],"hashes":[1,-1,"0x10"],"e":"plain"}`)
	var mp []byte
	mp = msgp.AppendMapHeader(mp, 4)
	mp = msgp.AppendString(mp, "a")
	mp = msgp.AppendArrayHeader(mp, 4)
	mp = msgp.AppendInt(mp, -2)
	mp = msgp.AppendUint64(mp, math.MaxUint64)
	mp = msgp.AppendFloat64(mp, 1.5)
	mp = msgp.AppendNil(mp)
	mp = msgp.AppendString(mp, "b")
	mp = msgp.AppendMapHeader(mp, 1)
	mp = msgp.AppendString(mp, "c")
	mp = msgp.AppendString(mp, "xy")
	mp = msgp.AppendString(mp, "tokens")
	mp = msgp.AppendArrayHeader(mp, 300)
	for i := 0; i < 300; i++ {
		mp = msgp.AppendInt64(mp, int64(i*977))
	}
	mp = msgp.AppendString(mp, "hashes")
	mp = msgp.AppendArrayHeader(mp, 2)
	mp = msgp.AppendUint64(mp, math.MaxUint64)
	mp = msgp.AppendInt64(mp, -1)
	arena := make([]byte, 0, 64)
	i32 := make([]int32, 0, 400)
	u64 := make([]uint64, 0, 8)
	var jr JSONReader
	var mr MsgpackReader
	var ej, em EitherReader
	// consume reads every value of the map at r's cursor, the arrays named
	// tokens and hashes with the array readers, everything else by kind.
	var consume func(r Reader) error
	consume = func(r Reader) error {
		if _, err := r.EnterMap(); err != nil {
			return err
		}
		for {
			k, ok, err := r.NextKey()
			if !ok || err != nil {
				return err
			}
			switch {
			case string(k) == "tokens":
				_, _, err = r.Int32s(i32[:0], 1000, math.MaxUint32)
			case string(k) == "hashes":
				if _, err = r.Str(); err == ErrWrongType { // a type error leaves the value for Skip
					_, _, err = r.Uint64s(u64[:0], 8, Hash)
				}
			case r.Kind() == KindMap:
				err = consume(r)
			default:
				_, err = r.Value()
			}
			if err != nil {
				return err
			}
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		arena = arena[:0]
		jr.Reset(js, &arena)
		mr.Reset(mp)
		ej.ResetJSON(js, &arena)
		em.ResetMsgpack(mp)
		for _, r := range [...]Reader{&jr, &mr, &ej, &em} {
			if err := consume(r); err != nil || !r.End() {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run, want 0", allocs)
	}
}
