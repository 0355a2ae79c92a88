package codec

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// enc encodes v with tinylib/msgp, the reference encoder.
func enc(v any) []byte {
	b, err := msgp.AppendIntf(nil, v)
	if err != nil {
		panic(err)
	}
	return b
}

func ext(typ int8, n int) []byte {
	b, err := msgp.AppendExtension(nil, &msgp.RawExtension{Type: typ, Data: make([]byte, n)})
	if err != nil {
		panic(err)
	}
	return b
}

// nestedArrays is n single-element arrays around a fixint.
func nestedArrays(n int) []byte { return append(bytes.Repeat([]byte{0x91}, n), 0) }

// TestSkip: Skip consumes exactly what msgp.Skip does on every encoding,
// rejects every truncation, 0xc1, counts beyond the bytes left and nesting
// deeper than MaxDepth.
func TestSkip(t *testing.T) {
	values := [][]byte{
		enc(nil), enc(true), enc(false), enc(1), enc(200), enc(70000), enc(uint64(1) << 40), enc(uint64(math.MaxUint64)),
		enc(-1), enc(-100), enc(-40000), enc(int64(-1) << 40), enc(int64(math.MinInt64)), enc(1.5), enc(float32(2)),
		enc(""), enc(strings.Repeat("x", 31)), enc(strings.Repeat("x", 32)), enc(strings.Repeat("x", 300)), enc(strings.Repeat("x", 70000)),
		enc([]byte{}), enc(make([]byte, 300)), enc(make([]byte, 70000)),
		enc([]any{}), enc([]any{1, "a", []any{nil}}), enc(make([]any, 20)), enc(make([]any, 70000)),
		enc(map[string]any{}), enc(map[string]any{"a": 1, "b": map[string]any{"c": []any{}}}),
		ext(5, 1), ext(5, 2), ext(5, 4), ext(5, 8), ext(5, 16), ext(5, 3), ext(5, 300), ext(5, 70000),
		{0xdc, 0, 2, 1, 2}, {0xdd, 0, 0, 0, 1, 1}, {0xde, 0, 1, 1, 2}, {0xdf, 0, 0, 0, 1, 1, 2},
		nestedArrays(MaxDepth),
	}
	for i, v := range values {
		in := append(append([]byte{}, v...), 0xAB)
		rest, err := Skip(in)
		want, merr := msgp.Skip(in)
		if err != nil || merr != nil || !bytes.Equal(rest, want) || len(rest) != 1 {
			t.Errorf("value %d (%x…): rest=%d err=%v; msgp rest=%d err=%v", i, v[:min(len(v), 8)], len(rest), err, len(want), merr)
		}
		for cut := 0; cut < len(v); cut++ {
			if _, err := Skip(v[:cut]); !errors.Is(err, ErrTruncated) {
				t.Errorf("value %d cut at %d: err=%v", i, cut, err)
				break
			}
		}
	}
	if _, err := Skip([]byte{0xc1}); !errors.Is(err, ErrSyntax) {
		t.Errorf("0xc1: %v", err)
	}
	if _, err := Skip(nestedArrays(MaxDepth + 1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("nesting %d: %v", MaxDepth+1, err)
	}
	// 100 000 levels: refused at level 65, without recursion
	if _, err := Skip(bytes.Repeat([]byte{0x91}, 100000)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("deep nesting: %v", err)
	}
	// an array claiming more elements than bytes left is refused up front
	if _, err := Skip([]byte{0xdd, 0xff, 0xff, 0xff, 0xff, 1}); !errors.Is(err, ErrTruncated) {
		t.Errorf("huge count: %v", err)
	}
}

func TestReadArrayMap(t *testing.T) {
	f := func(in []byte, max, wantN int, wantErr error) {
		t.Helper()
		n, _, err := ReadArray(in, max)
		if n != wantN || err != wantErr {
			t.Fatalf("%x max %d: n=%d err=%v, want %d %v", in, max, n, err, wantN, wantErr)
		}
	}
	f(enc([]any{1, 2}), 2, 2, nil)
	f(enc([]any{1, 2, 3}), 2, 0, ErrTooLarge)
	f([]byte{0xdd, 0, 0, 0, 9, 1}, 100, 0, ErrTruncated) // a count the bytes cannot hold
	f([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, 100, 0, ErrTooLarge)
	f(enc("x"), 2, 0, ErrWrongType)
	f([]byte{0xc1}, 2, 0, ErrSyntax)
	f(nil, 2, 0, ErrTruncated)
	if _, _, err := ReadMap([]byte{0x82, 1, 2, 3}); err != ErrTruncated {
		t.Fatalf("map of 2 in 3 bytes: %v", err)
	}
}

func TestReadScalars(t *testing.T) {
	for _, v := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxInt32, math.MaxInt64, -1, -32, -33, -128, -129, math.MinInt32, math.MinInt64} {
		got, rest, err := ReadInt(enc(v))
		if err != nil || got != v || len(rest) != 0 {
			t.Fatalf("ReadInt(%d) = %d %v", v, got, err)
		}
		u, _, err := ReadUint(enc(v))
		if v < 0 && err != ErrOutOfRange || v >= 0 && (err != nil || u != uint64(v)) {
			t.Fatalf("ReadUint(%d) = %d %v", v, u, err)
		}
	}
	if _, _, err := ReadInt(enc(uint64(math.MaxUint64))); err != ErrOutOfRange {
		t.Fatalf("ReadInt(2^64-1): %v", err)
	}
	if s, _, err := ReadStr(enc(strings.Repeat("y", 40))); err != nil || string(s) != strings.Repeat("y", 40) {
		t.Fatalf("ReadStr: %q %v", s, err)
	}
	// nil and "" stay apart: a nil slice is "absent" to the decoders (Nil), ""
	// a non-nil empty one.
	var r MsgpackReader
	if r.Reset(enc(nil)); !must(r.Nil()) {
		t.Fatal("Nil(nil) = false")
	}
	if r.Reset(enc("")); must(r.Nil()) || must(r.Str()) == nil {
		t.Fatal(`"" read as nil`)
	}
	if _, _, err := ReadStr([]byte{0xa3, 'a'}); err != ErrTruncated {
		t.Fatalf("short fixstr: %v", err)
	}
	if f, _, err := readFloat(enc(float32(2.5))); err != nil || f != 2.5 {
		t.Fatalf("readFloat: %v %v", f, err)
	}
	if b, _, err := ReadBin(enc([]byte{1, 2})); err != nil || !bytes.Equal(b, []byte{1, 2}) {
		t.Fatalf("ReadBin: %v %v", b, err)
	}
}

// TestReadInt32s: every integer encoding, both ranges, and where each error
// leaves its index and rest.
func TestReadInt32s(t *testing.T) {
	body := func(vs ...any) []byte {
		var b []byte
		for _, v := range vs {
			b = append(b, enc(v)...)
		}
		return b
	}
	vals := []any{int64(5), int64(-5), int64(-100), int64(200), int64(-30000), int64(60000), int64(math.MinInt32), int64(math.MaxInt32),
		uint8(7), uint16(300), uint32(70000), int8(-7), int16(-300), int32(-70000), int64(1)}
	want := []int32{5, -5, -100, 200, -30000, 60000, math.MinInt32, math.MaxInt32, 7, 300, 70000, -7, -300, -70000, 1}
	in := body(vals...)
	for cut := len(in); cut >= 0; cut-- { // the fast path's 5-byte window must not matter
		dst := make([]int32, len(want))
		rest, bad, err := ReadInt32s(dst, in[:cut], math.MaxInt32)
		if cut == len(in) {
			if err != nil || len(rest) != 0 {
				t.Fatalf("full: %v", err)
			}
			for i := range want {
				if dst[i] != want[i] {
					t.Fatalf("element %d = %d, want %d", i, dst[i], want[i])
				}
			}
		} else if err != ErrTruncated || bad >= len(want) {
			t.Fatalf("cut at %d: bad %d err %v", cut, bad, err)
		}
	}
	f := func(in []byte, hi int64, wantBad int, wantErr error) {
		t.Helper()
		dst := make([]int32, 3)
		rest, bad, err := ReadInt32s(dst, in, hi)
		if err != wantErr || (err != nil && bad != wantBad) {
			t.Fatalf("%x: bad %d err %v, want %d %v", in, bad, err, wantBad, wantErr)
		}
		if err != nil && !bytes.Equal(rest, in[len(in)-len(rest):]) {
			t.Fatal("rest is not a suffix")
		}
	}
	f(body(1, uint32(math.MaxUint32), 2), math.MaxUint32, 0, nil)
	f(body(1, uint32(math.MaxInt32+1), 2), math.MaxInt32, 1, ErrOutOfRange)
	f(body(1, 2, int64(math.MinInt32)-1), math.MaxUint32, 2, ErrOutOfRange)
	f(body(1, uint64(math.MaxUint64), 2), math.MaxUint32, 1, ErrOutOfRange)
	f(body(1, "x", 2), math.MaxInt32, 1, ErrWrongType)
	f(body(1.5, 1, 2), math.MaxInt32, 0, ErrWrongType)
	f(append(body(1), 0xc1, 1, 2), math.MaxInt32, 1, ErrSyntax)
}

// TestReadUint64s: the three modes on every integer form and on digests.
func TestReadUint64s(t *testing.T) {
	digest := []byte{9, 9, 1, 2, 3, 4, 5, 6, 7, 8}
	in := append(append(append(append(enc(uint64(math.MaxUint64)), enc(int64(-1))...), enc(int8(-2))...), enc(7)...), enc(digest)...)
	f := func(mode Mode, want []uint64, wantBad int, wantErr error) {
		t.Helper()
		dst := make([]uint64, 5)
		rest, bad, err := ReadUint64s(dst, in, mode)
		switch {
		case err != wantErr || (err != nil && bad != wantBad):
			t.Fatalf("mode %d: bad %d err %v, want %d %v", mode, bad, err, wantBad, wantErr)
		case err == nil && (len(rest) != 0 || !slices.Equal(dst, want)):
			t.Fatalf("mode %d: %x rest %d", mode, dst, len(rest))
		}
	}
	f(Unsigned, nil, 1, ErrOutOfRange)
	f(Bits, nil, 4, ErrWrongType)
	f(Hash, []uint64{math.MaxUint64, math.MaxUint64, math.MaxUint64 - 1, 7, 0x0102030405060708}, 0, nil)
	if _, _, err := readUint64(enc([]byte{1, 2, 3}), Hash); err != ErrBadHash {
		t.Fatalf("short digest: %v", err)
	}
	if _, _, err := readUint64([]byte{0xc1}, Hash); err != ErrSyntax {
		t.Fatalf("0xc1: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
