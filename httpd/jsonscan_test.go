package httpd

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

// scanOne reads the value of key "v" in {"v": <lit>}.
func scanOne(t *testing.T, r *jsonReader, scratch *[]byte, lit string) value {
	t.Helper()
	r.init([]byte(`{"v":`+lit+`}`), scratch, true)
	if _, ok := r.nextKey(); !ok {
		t.Fatalf("%s: no key: %v", lit, r.err())
	}
	v := r.value()
	if _, ok := r.nextKey(); ok {
		t.Fatalf("%s: extra key", lit)
	}
	return v
}

func TestJSONNumbers(t *testing.T) {
	var r jsonReader
	var scratch []byte
	f := func(lit string, want value, wantErr bool) {
		t.Helper()
		v := scanOne(t, &r, &scratch, lit)
		if (r.err() != nil) != wantErr {
			t.Fatalf("%s: err %v, want error %v", lit, r.err(), wantErr)
		}
		if !wantErr && (v.kind != want.kind || v.i != want.i || v.u != want.u || v.neg != want.neg) {
			t.Fatalf("%s: got %+v, want %+v", lit, v, want)
		}
	}
	f("0", value{kind: kindInt}, false)
	f("-0", value{kind: kindInt}, false)
	f("7", value{kind: kindInt, i: 7}, false)
	f("-7", value{kind: kindInt, i: -7}, false)
	f("9223372036854775807", value{kind: kindInt, i: math.MaxInt64}, false)
	f("-9223372036854775808", value{kind: kindInt, i: math.MinInt64}, false)
	f("-9223372036854775809", value{kind: kindBigInt, neg: true}, false)
	f("9223372036854775808", value{kind: kindUint, u: 1 << 63}, false)
	f("18446744073709551615", value{kind: kindUint, u: math.MaxUint64}, false)
	f("18446744073709551616", value{kind: kindBigInt}, false)
	f("184467440737095516150", value{kind: kindBigInt}, false)
	f("1.5", value{kind: kindFloat}, false)
	f("1e5", value{kind: kindFloat}, false)
	f("1E+5", value{kind: kindFloat}, false)
	f("-1.0e-5", value{kind: kindFloat}, false)
	f("1.", value{}, true)
	f(".5", value{}, true)
	f("-", value{}, true)
	f("--1", value{}, true)
	f("+1", value{}, true)
	f("01", value{}, true)
	f("1e", value{}, true)
	f("0x10", value{}, true)
	f("NaN", value{}, true)
	f("Infinity", value{}, true)
}

func TestJSONObjectSyntax(t *testing.T) {
	var r jsonReader
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
		r.init([]byte(c.body), &scratch, true)
		for {
			if _, ok := r.nextKey(); !ok {
				break
			}
			r.skip()
		}
		if (r.err() == nil) != c.ok {
			t.Errorf("%q: err %v, want ok=%v", c.body, r.err(), c.ok)
		}
		if c.ok != json.Valid([]byte(c.body)) && c.body != `` {
			t.Errorf("%q: encoding/json disagrees", c.body)
		}
	}
}

func TestJSONInt32s(t *testing.T) {
	var r jsonReader
	var scratch []byte
	buf := make([]int32, 0, 4)
	f := func(lit string, want []int32, reason string, index int) {
		t.Helper()
		r.init([]byte(`{"t":`+lit+`}`), &scratch, true)
		r.nextKey()
		got, fe := r.int32s(&buf, "token_ids", 6)
		r.nextKey()
		switch {
		case reason == "syntax":
			if r.err() == nil {
				t.Fatalf("%s: no syntax error", lit)
			}
			return
		case r.err() != nil:
			t.Fatalf("%s: %v", lit, r.err())
		case reason != "":
			if fe == nil || ReasonOf(fe) != reason || fe.Index != index {
				t.Fatalf("%s: got %v, want %s at %d", lit, fe, reason, index)
			}
			return
		case fe != nil:
			t.Fatalf("%s: %v", lit, fe)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: got %v, want %v", lit, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: got %v, want %v", lit, got, want)
			}
		}
	}
	f(`[]`, nil, "", 0)
	f(`[ ]`, nil, "", 0)
	f(`[1,2,3]`, []int32{1, 2, 3}, "", 0)
	f("[ 1 ,\n2\t, 3 ]", []int32{1, 2, 3}, "", 0)
	f(`[-2147483648,2147483647,0,-0]`, []int32{math.MinInt32, math.MaxInt32, 0, 0}, "", 0)
	f(`[1,2,3,4,5,6]`, []int32{1, 2, 3, 4, 5, 6}, "", 0)
	f(`[1,2,3,4,5,6,7]`, nil, "out_of_range", -1)
	// token ids are u32 in the hashing standard: 2^31..2^32-1 are accepted
	// and kept as their 32-bit pattern (#17 item 8)
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
	var r jsonReader
	var scratch []byte
	var buf []uint64
	lits := []string{"0", "1", "9007199254740993", "9223372036854775807", "9223372036854775808", "18446744073709551614", "18446744073709551615"}
	body := `{"h":[` + lits[0]
	for _, l := range lits[1:] {
		body += "," + l
	}
	body += "]}"
	r.init([]byte(body), &scratch, true)
	r.nextKey()
	got, fe := r.uint64s(&buf, "seq_hashes", 100)
	if fe != nil || r.err() != nil || len(got) != len(lits) {
		t.Fatalf("%v %v %v", fe, r.err(), got)
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
		r.init([]byte(`{"h":`+c.lit+`}`), &scratch, true)
		r.nextKey()
		_, fe := r.uint64s(&buf, "seq_hashes", 100)
		r.nextKey()
		if r.err() != nil || fe == nil || ReasonOf(fe) != c.reason || fe.Index != c.index {
			t.Fatalf("%s: %v %v", c.lit, r.err(), fe)
		}
	}
}
