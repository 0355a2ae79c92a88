package server

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// writeSample writes one document exercising every Encoder method.
func writeSample(e *Encoder) {
	e.MapHeader(5)
	e.Str("a")
	e.ArrayHeader(3)
	e.Int(-1)
	e.Uint(math.MaxUint64)
	e.MapHeader(0)
	e.Str("b")
	e.MapHeader(2)
	e.DecKey(7)
	e.Null()
	e.DecKey(-3)
	e.ArrayHeader(0)
	e.StrBytes([]byte("k\"\n"))
	e.Float(1.5)
	e.Str("nan")
	e.Float(math.NaN())
	e.Str("t")
	e.Str("\x00é\xff")
}

func TestEncoderDialectsAgree(t *testing.T) {
	var e Encoder
	e.Reset(true)
	writeSample(&e)
	js := string(e.buf)
	want := `{"a":[-1,18446744073709551615,{}],"b":{"7":null,"-3":[]},"k\"\n":1.5,"nan":null,"t":"\u0000é\ufffd"}`
	if js != want {
		t.Fatalf("json %s\nwant %s", js, want)
	}
	if !json.Valid(e.buf) {
		t.Fatal("invalid JSON")
	}
	e.Reset(false)
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
	var e Encoder
	e.Reset(true)
	e.ArrayHeader(1)
	e.Int(1)
	e.Int(2)
}
