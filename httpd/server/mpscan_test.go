package server

import (
	"math"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

func TestMPInt32s(t *testing.T) {
	var r mpReader
	buf := make([]int32, 0, 2)
	f := func(v any, want []int32, reason string, index int) {
		t.Helper()
		r.init(mp(obj{"t", v}), true)
		r.NextKey()
		got, fe := r.Int32s(&buf, "token_ids", 6)
		r.NextKey()
		switch {
		case reason == "syntax":
			if r.Err() == nil {
				t.Fatalf("%v: no syntax error", v)
			}
			return
		case r.Err() != nil:
			t.Fatalf("%v: %v", v, r.Err())
		case reason != "":
			if fe == nil || ReasonOf(fe) != reason || fe.Index != index {
				t.Fatalf("%v: got %v, want %s at %d", v, fe, reason, index)
			}
			return
		case fe != nil:
			t.Fatalf("%v: %v", v, fe)
		}
		if len(got) != len(want) {
			t.Fatalf("%v: got %v want %v", v, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%v: got %v want %v", v, got, want)
			}
		}
	}
	f([]int32{}, nil, "", 0)
	f([]int32{1, -1, 300, -300, 70000, -70000}, []int32{1, -1, 300, -300, 70000, -70000}, "", 0)
	f([]any{int64(math.MinInt32), uint64(math.MaxInt32)}, []int32{math.MinInt32, math.MaxInt32}, "", 0)
	f(leBin(5, -5, math.MaxInt32), []int32{5, -5, math.MaxInt32}, "", 0)
	f([]byte{}, nil, "", 0)
	f([]byte{0xff, 0xff, 0xff, 0xff}, []int32{-1}, "", 0)
	f(make([]byte, 7), nil, "invalid_value", -1)
	f(make([]byte, 28), nil, "out_of_range", -1)
	f(make([]int32, 7), nil, "out_of_range", -1)
	f([]any{1, int64(math.MaxInt32) + 1}, nil, "out_of_range", 1)
	f([]any{uint64(math.MaxUint64)}, nil, "out_of_range", 0)
	f([]any{1, 2, 1.0}, nil, "invalid_type", 2)
	f([]any{"1"}, nil, "invalid_type", 0)
	f("x", nil, "invalid_type", -1)
	f(nil, nil, "invalid_type", -1)
	f(mpRaw{0x92, 0x01}, nil, "syntax", 0)             // count beyond the bytes
	f(mpRaw{0x92, 0x01, 0xcd, 0x01}, nil, "syntax", 0) // truncated element
	f(mpRaw{0xc4, 0x08, 0x01}, nil, "syntax", 0)       // truncated bin
	f(mpRaw{0x92, 0xa1, 0x78, 0xc1}, nil, "syntax", 0) // bad element after a type error
}

func TestMPUint64s(t *testing.T) {
	var r mpReader
	var buf []uint64
	in := []any{0, 1, int64(math.MaxInt64), uint64(math.MaxUint64), uint64(1 << 63)}
	r.init(mp(obj{"h", in}), true)
	r.NextKey()
	got, fe := r.Uint64s(&buf, "seq_hashes", 10)
	if fe != nil || r.Err() != nil || len(got) != 5 || got[3] != math.MaxUint64 || got[4] != 1<<63 || got[2] != math.MaxInt64 {
		t.Fatalf("%v %v %v", fe, r.Err(), got)
	}
}

func TestMPReaderBody(t *testing.T) {
	var r mpReader
	for _, c := range []struct {
		body []byte
		msg  string
	}{
		{nil, msgInvalidMsgpack},
		{mp([]any{}), msgNotAMap},
		{[]byte{0x81}, msgInvalidMsgpack},
		{mp(obj{1, 2}), msgKeysNotStrings},
		{[]byte{0x81, 0xc1}, msgInvalidMsgpack},
		{append(mp(obj{}), 0), "trailing bytes after the msgpack map"},
	} {
		r.init(c.body, true)
		for {
			if _, ok := r.NextKey(); !ok {
				break
			}
			r.Skip()
		}
		if r.Err() == nil || r.Err().Msg != c.msg {
			t.Fatalf("%x: %v, want %q", c.body, r.Err(), c.msg)
		}
	}
}

// BenchmarkDecodeInt32Array decodes 131072 token ids in the encodings clients
// use: tinylib/msgp (signed int16/int32 forms) and Python msgpack (unsigned).
func BenchmarkDecodeInt32Array(b *testing.B) {
	tokens := seqTokens(131072, 1000)
	signed := mp(tokens)
	unsigned := msgp.AppendArrayHeader(nil, uint32(len(tokens)))
	for _, t := range tokens {
		unsigned = msgp.AppendUint32(unsigned, uint32(t))
	}
	for _, c := range []struct {
		name string
		body []byte
	}{{"msgp_signed", signed}, {"python_unsigned", unsigned}} {
		b.Run(c.name, func(b *testing.B) {
			var r mpReader
			buf := make([]int32, 0, len(tokens))
			body := mp(obj{"t", mpRaw(c.body)})
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r.init(body, true)
				r.NextKey()
				if _, fe := r.Int32s(&buf, "token_ids", 1<<20); fe != nil || r.Err() != nil {
					b.Fatal(fe, r.Err())
				}
			}
		})
	}
}
