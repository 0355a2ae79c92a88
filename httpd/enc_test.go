package httpd

import (
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"
)

// writeSample writes one document exercising every encoder method.
func writeSample(e *encoder) {
	e.mapHeader(5)
	e.str("a")
	e.arrayHeader(3)
	e.int(-1)
	e.uint(math.MaxUint64)
	e.mapHeader(0)
	e.str("b")
	e.mapHeader(2)
	e.decKey(7)
	e.null()
	e.decKey(-3)
	e.arrayHeader(0)
	e.strBytes([]byte("k\"\n"))
	e.float(1.5)
	e.str("nan")
	e.float(math.NaN())
	e.str("t")
	e.str("\x00é\xff")
}

func TestEncoderDialectsAgree(t *testing.T) {
	var e encoder
	e.reset(true)
	writeSample(&e)
	js := string(e.buf)
	want := `{"a":[-1,18446744073709551615,{}],"b":{"7":null,"-3":[]},"k\"\n":1.5,"nan":null,"t":"\u0000é\ufffd"}`
	if js != want {
		t.Fatalf("json %s\nwant %s", js, want)
	}
	if !json.Valid(e.buf) {
		t.Fatal("invalid JSON")
	}
	e.reset(false)
	writeSample(&e)
	v, rest, err := msgp.ReadIntfBytes(e.buf)
	if err != nil || len(rest) != 0 {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["k\"\n"] != 1.5 || m["t"] != "\x00é\xff" || len(m["b"].(map[string]any)) != 2 || m["a"].([]any)[1] != uint64(math.MaxUint64) {
		t.Fatalf("%#v", m)
	}
	if e.depth != 0 {
		t.Fatal("open containers")
	}
}

func TestEncoderMisuse(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		}
	}()
	var e encoder
	e.reset(true)
	e.arrayHeader(1)
	e.int(1)
	e.int(2)
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "abc", "\"\\", "\u2028", "\x7f", "\x01\x1f", "日本", "\xff\xfe", "a\xc3", "\U0001F600"} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q → %s: %v", s, got, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = string([]rune(s)) // invalid bytes → U+FFFD each
		}
		if back != want {
			t.Fatalf("%q → %s → %q", s, got, back)
		}
	}
	// dst == src[:0] style reuse
	buf := make([]byte, 0, 64)
	out := appendJSONString(buf[:0], "x")
	if &out[0] != &buf[:1][0] {
		t.Fatal("did not append in place")
	}
}
