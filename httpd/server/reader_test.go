package server

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
)

// scanOne reads the value of key "v" in {"v": <lit>}.
func scanOne(t *testing.T, r *Reader, scratch *[]byte, lit string) Value {
	t.Helper()
	r.reset([]byte(`{"v":`+lit+`}`), true, scratch)
	if _, ok := r.NextKey(); !ok {
		t.Fatalf("%s: no key: %v", lit, r.Err())
	}
	v := r.Value()
	if _, ok := r.NextKey(); ok {
		t.Fatalf("%s: extra key", lit)
	}
	return v
}

func TestJSONNumbers(t *testing.T) {
	var r Reader
	var scratch []byte
	f := func(lit string, want Value, wantErr bool) {
		t.Helper()
		v := scanOne(t, &r, &scratch, lit)
		if (r.Err() != nil) != wantErr {
			t.Fatalf("%s: err %v, want error %v", lit, r.Err(), wantErr)
		}
		if !wantErr && (v.Kind != want.Kind || v.Int != want.Int || v.Uint != want.Uint || v.Neg != want.Neg) {
			t.Fatalf("%s: got %+v, want %+v", lit, v, want)
		}
	}
	f("0", Value{Kind: KindInt}, false)
	f("-0", Value{Kind: KindInt}, false)
	f("7", Value{Kind: KindInt, Int: 7}, false)
	f("-7", Value{Kind: KindInt, Int: -7}, false)
	f("9223372036854775807", Value{Kind: KindInt, Int: math.MaxInt64}, false)
	f("-9223372036854775808", Value{Kind: KindInt, Int: math.MinInt64}, false)
	f("-9223372036854775809", Value{Kind: KindBigInt, Neg: true}, false)
	f("9223372036854775808", Value{Kind: KindUint, Uint: 1 << 63}, false)
	f("18446744073709551615", Value{Kind: KindUint, Uint: math.MaxUint64}, false)
	f("18446744073709551616", Value{Kind: KindBigInt}, false)
	f("184467440737095516150", Value{Kind: KindBigInt}, false)
	f("1.5", Value{Kind: KindFloat}, false)
	f("1e5", Value{Kind: KindFloat}, false)
	f("1E+5", Value{Kind: KindFloat}, false)
	f("-1.0e-5", Value{Kind: KindFloat}, false)
	f("1.", Value{}, true)
	f(".5", Value{}, true)
	f("-", Value{}, true)
	f("--1", Value{}, true)
	f("+1", Value{}, true)
	f("01", Value{}, true)
	f("1e", Value{}, true)
	f("0x10", Value{}, true)
	f("NaN", Value{}, true)
	f("Infinity", Value{}, true)
}

func TestJSONObjectSyntax(t *testing.T) {
	var r Reader
	var scratch []byte
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{}`, true}, {` { } `, true}, {`{"a":1}`, true}, {`{"a":[1,{"b":[]}],"c":{"d":null}}`, true},
		{`{"a":true,"b":false,"c":null}`, true},
		{``, false}, {`{`, false}, {`}`, false}, {`{"a"}`, false}, {`{"a":}`, false}, {`{"a":1,}`, false},
		{`{,"a":1}`, false}, {`{"a":1 "b":2}`, false}, {`{"a":1}x`, false}, {`{"a":tru}`, false},
		{`{"a":[1,]}`, false}, {`{"a":{"b"}}`, false}, {`{a:1}`, false}, {`{"a":1}{}`, false},
		{`{"a":nul}`, false}, {`{"a":[}`, false},
	} {
		r.reset([]byte(c.body), true, &scratch)
		for {
			if _, ok := r.NextKey(); !ok {
				break
			}
			r.Skip()
		}
		if (r.Err() == nil) != c.ok {
			t.Errorf("%q: err %v, want ok=%v", c.body, r.Err(), c.ok)
		}
		if c.ok != json.Valid([]byte(c.body)) && c.body != `` {
			t.Errorf("%q: encoding/json disagrees", c.body)
		}
	}
}

func TestJSONInt32s(t *testing.T) {
	var r Reader
	var scratch []byte
	buf := make([]int32, 0, 4)
	f := func(lit string, want []int32, reason string, index int) {
		t.Helper()
		r.reset([]byte(`{"t":`+lit+`}`), true, &scratch)
		checkInt32s(t, &r, &buf, lit, want, reason, index)
	}
	f(`[]`, nil, "", 0)
	f(`[ ]`, nil, "", 0)
	f(`[1,2,3]`, []int32{1, 2, 3}, "", 0)
	f("[ 1 ,\n2\t, 3 ]", []int32{1, 2, 3}, "", 0)
	f(`[-2147483648,2147483647,0,-0]`, []int32{math.MinInt32, math.MaxInt32, 0, 0}, "", 0)
	f(`[1,2,3,4,5,6]`, []int32{1, 2, 3, 4, 5, 6}, "", 0)
	f(`[1,2,3,4,5,6,7]`, nil, "out_of_range", -1)
	// token ids are u32 in the hashing standard: 2^31..2^32-1 are accepted
	// and kept as their 32-bit pattern
	f(`[2147483648,4294967295]`, []int32{math.MinInt32, -1}, "", 0)
	f(`[0,-2147483649]`, nil, "out_of_range", 1)
	f(`[0,0,4294967296]`, nil, "out_of_range", 2)
	f(`[0,0,0,99999999999999999999999999]`, nil, "out_of_range", 3)
	f(`[1.0]`, nil, "invalid_type", 0)
	f(`[0,1e2]`, nil, "invalid_type", 1)
	f(`[0,"1"]`, nil, "invalid_type", 1)
	f(`[0,[1]]`, nil, "invalid_type", 1)
	f(`[0,{}]`, nil, "invalid_type", 1)
	f(`[true]`, nil, "invalid_type", 0)
	f(`"x"`, nil, "invalid_type", -1)
	f(`null`, nil, "invalid_type", -1)
	f(`[1.5, 2]`, nil, "invalid_type", 0)
	f(`[1,]`, nil, "syntax", 0)
	f(`[1 2]`, nil, "syntax", 0)
	f(`[01]`, nil, "syntax", 0)
	f(`[1.]`, nil, "syntax", 0)
	f(`[-]`, nil, "syntax", 0)
	f(`[1.5, ]`, nil, "syntax", 0)
	f(`[1`, nil, "syntax", 0)
}

// TestJSONUint64sAgreeWithStrconv: every integer literal round-trips exactly.
func TestJSONUint64s(t *testing.T) {
	var r Reader
	var scratch []byte
	var buf []uint64
	lits := []string{"0", "1", "9007199254740993", "9223372036854775807", "9223372036854775808", "18446744073709551614", "18446744073709551615"}
	body := `{"h":[` + lits[0]
	for _, l := range lits[1:] {
		body += "," + l
	}
	body += "]}"
	r.reset([]byte(body), true, &scratch)
	r.NextKey()
	got, fe := r.Uint64s(&buf, "seq_hashes", 100)
	if fe != nil || r.Err() != nil || len(got) != len(lits) {
		t.Fatalf("%v %v %v", fe, r.Err(), got)
	}
	for i, l := range lits {
		want, _ := strconv.ParseUint(l, 10, 64)
		if got[i] != want {
			t.Fatalf("%s: got %d", l, got[i])
		}
	}
	for _, c := range []struct {
		lit    string
		reason string
		index  int
	}{
		{`[18446744073709551616]`, "out_of_range", 0},
		{`[1,-1]`, "out_of_range", 1},
		{`[-9223372036854775809]`, "out_of_range", 0},
		{`[1,2,3.0]`, "invalid_type", 2},
		{`[1e0]`, "invalid_type", 0},
		{`["1"]`, "invalid_type", 0},
		{`{}`, "invalid_type", -1},
	} {
		r.reset([]byte(`{"h":`+c.lit+`}`), true, &scratch)
		r.NextKey()
		_, fe := r.Uint64s(&buf, "seq_hashes", 100)
		r.NextKey()
		if r.Err() != nil || fe == nil || ReasonOf(fe) != c.reason || fe.Index != c.index {
			t.Fatalf("%s: %v %v", c.lit, r.Err(), fe)
		}
	}
}

func TestMPInt32s(t *testing.T) {
	var r Reader
	buf := make([]int32, 0, 2)
	f := func(v any, want []int32, reason string, index int) {
		t.Helper()
		r.reset(mp(obj{"t", v}), false, nil)
		checkInt32s(t, &r, &buf, fmt.Sprint(v), want, reason, index)
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
	var r Reader
	var buf []uint64
	in := []any{0, 1, int64(math.MaxInt64), uint64(math.MaxUint64), uint64(1 << 63)}
	r.reset(mp(obj{"h", in}), false, nil)
	r.NextKey()
	got, fe := r.Uint64s(&buf, "seq_hashes", 10)
	if fe != nil || r.Err() != nil || len(got) != 5 || got[3] != math.MaxUint64 || got[4] != 1<<63 || got[2] != math.MaxInt64 {
		t.Fatalf("%v %v %v", fe, r.Err(), got)
	}
}

func TestMPReaderBody(t *testing.T) {
	var r Reader
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
		r.reset(c.body, false, nil)
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

// checkInt32s reads the value of the one key of the object r was reset to
// with Int32s (at most 6 elements) and checks the elements, or the field
// error's reason and index, or (reason "syntax") a syntax error.
func checkInt32s(t *testing.T, r *Reader, buf *[]int32, what string, want []int32, reason string, index int) {
	t.Helper()
	r.NextKey()
	got, fe := r.Int32s(buf, "token_ids", 6)
	r.NextKey()
	switch {
	case reason == "syntax":
		if r.Err() == nil {
			t.Fatalf("%s: no syntax error", what)
		}
		return
	case r.Err() != nil:
		t.Fatalf("%s: %v", what, r.Err())
	case reason != "":
		if fe == nil || ReasonOf(fe) != reason || fe.Index != index {
			t.Fatalf("%s: got %v, want %s at %d", what, fe, reason, index)
		}
		return
	case fe != nil:
		t.Fatalf("%s: %v", what, fe)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
