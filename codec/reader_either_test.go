package codec

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestEitherOrNil: StrOrNil, Int64OrNil and Uint64OrNil are Nil and then,
// unless it read a nil, the value's reader, on the format's own reader: the
// same value, nil-ness, error and cursor, in both formats, for every kind of
// value, malformed and cut-short ones included.
func TestEitherOrNil(t *testing.T) {
	jsDocs := []string{`null`, `nul`, `nullx`, `""`, `"a\u00e9"`, `"0x10"`, `7`, ` -7`,
		`18446744073709551615`, `-9223372036854775808`, `1.5`, `1e3`, `[1]`, `{}`, ``, `true`, `"`, `-`}
	mpDocs := [][]byte{enc(nil), enc(""), enc("abc"), enc(strings.Repeat("x", 40)), enc(7), enc(-7),
		enc(uint64(math.MaxUint64)), enc(uint8(200)), enc(int64(math.MinInt64)), enc(2.5),
		enc(make([]byte, 8)), enc(make([]byte, 4)), enc([]any{1}), {0xcf, 1, 2}, {0xc1}, {},
		{0xa5, 'a'}, {0xd9}, enc(true), ext(3, 2)}
	// show renders a result: the value only where one was read.
	show := func(v any, isNil bool, err error, off int) string {
		if err != nil || isNil {
			v = nil
		}
		if s, ok := v.([]byte); ok {
			v = fmt.Sprintf("%q (nil slice %v)", s, s == nil)
		}
		return fmt.Sprintf("%v nil=%v err=%v @%d", v, isNil, err, off)
	}
	// The readers under test and the reference, Nil then the value reader.
	fns := map[string]struct {
		either func(*EitherReader) (any, bool, error)
		value  func(Reader) (any, error)
	}{
		"Str": {func(r *EitherReader) (any, bool, error) {
			s, err := r.StrOrNil()
			return s, s == nil && err == nil, err
		},
			func(r Reader) (any, error) { return r.Str() }},
		"Int64": {func(r *EitherReader) (any, bool, error) { return r.Int64OrNil() },
			func(r Reader) (any, error) { return r.Int64() }},
		"Unsigned": {func(r *EitherReader) (any, bool, error) { return r.Uint64OrNil(Unsigned) },
			func(r Reader) (any, error) { return r.Uint64(Unsigned) }},
		"Hash": {func(r *EitherReader) (any, bool, error) { return r.Uint64OrNil(Hash) },
			func(r Reader) (any, error) { return r.Uint64(Hash) }},
	}
	var arena []byte
	var e EitherReader
	var j JSONReader
	var m MsgpackReader
	check := func(format string, doc any, ref Reader) {
		for name, fn := range fns {
			switch d := doc.(type) {
			case string:
				e.ResetJSON([]byte(d), &arena)
				j.Reset([]byte(d), &arena)
			case []byte:
				e.ResetMsgpack(d)
				m.Reset(d)
			}
			v, isNil, err := fn.either(&e)
			got := show(v, isNil, err, e.Offset())
			var want string
			if isNil, err := ref.Nil(); isNil || err != nil {
				want = show(nil, isNil, err, ref.Offset())
			} else {
				v, err := fn.value(ref)
				want = show(v, false, err, ref.Offset())
			}
			if got != want {
				t.Errorf("%s %s(%q): %s, want %s", format, name, doc, got, want)
			}
		}
	}
	for _, d := range jsDocs {
		check("json", d, &j)
	}
	for _, d := range mpDocs {
		check("msgpack", d, &m)
	}
}

// TestEitherPlainStr: in JSON mode PlainStr is JSONReader's (string, ok and
// cursor); in msgpack mode it reads nothing.
func TestEitherPlainStr(t *testing.T) {
	var e EitherReader
	var j JSONReader
	for _, d := range []string{`"abc"`, `""`, `"a\"b"`, `"é"`, `"abc`, `7`, ``} {
		e.ResetJSON([]byte(d), nil)
		j.Reset([]byte(d), nil)
		s, ok := e.PlainStr()
		ws, wok := j.PlainStr()
		if string(s) != string(ws) || ok != wok || e.Offset() != j.Offset() {
			t.Errorf("%q: %q %v @%d, want %q %v @%d", d, s, ok, e.Offset(), ws, wok, j.Offset())
		}
	}
	e.ResetMsgpack(enc("abc"))
	if s, ok := e.PlainStr(); ok || s != nil || e.Offset() != 0 {
		t.Errorf("msgpack: %q %v @%d", s, ok, e.Offset())
	}
}
