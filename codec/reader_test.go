package codec

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// walk renders the value at r's cursor through the Reader interface alone,
// the same way for both formats: maps as {"k":v,…}, arrays as […], integers
// exactly (big for beyond 64 bits), floats as "float", bins as b"…".
func walk(r Reader, sb *strings.Builder) error {
	switch r.Kind() {
	case KindMap:
		if _, err := r.EnterMap(); err != nil {
			return err
		}
		sb.WriteByte('{')
		for i := 0; ; i++ {
			k, ok, err := r.NextKey()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Quote(string(k)) + ":")
			if err := walk(r, sb); err != nil {
				return err
			}
		}
		sb.WriteByte('}')
		return nil
	case KindArray:
		if _, err := r.EnterArray(math.MaxInt); err != nil {
			return err
		}
		sb.WriteByte('[')
		for i := 0; ; i++ {
			ok, err := r.Next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if i > 0 {
				sb.WriteByte(',')
			}
			if err := walk(r, sb); err != nil {
				return err
			}
		}
		sb.WriteByte(']')
		return nil
	}
	v, err := r.Value()
	if err != nil {
		return err
	}
	sb.WriteString(renderValue(v))
	return nil
}

func renderValue(v Value) string {
	switch v.Kind {
	case KindNil:
		return "null"
	case KindBool:
		return strconv.FormatBool(v.Bool)
	case KindInt:
		switch {
		case v.Num.Big:
			return "big"
		case v.Num.Neg && v.Num.Mag != 0:
			return "-" + strconv.FormatUint(v.Num.Mag, 10)
		}
		return strconv.FormatUint(v.Num.Mag, 10)
	case KindFloat:
		return `"float"`
	case KindStr:
		return strconv.Quote(string(v.Bytes))
	case KindBin:
		return "b" + strconv.Quote(string(v.Bytes))
	case KindExt:
		return "ext"
	}
	return fmt.Sprintf("kind%d", v.Kind)
}

// readers returns a JSON and a msgpack reader over the same document, and an
// EitherReader in each format, keyed by format (isJSON).
func readers(js string, mp []byte) map[string]Reader {
	var arena []byte
	j := new(JSONReader)
	j.Reset([]byte(js), &arena)
	m := new(MsgpackReader)
	m.Reset(mp)
	ej, em := new(EitherReader), new(EitherReader)
	ej.ResetJSON([]byte(js), &arena)
	em.ResetMsgpack(mp)
	return map[string]Reader{"json": j, "msgpack": m, "json (EitherReader)": ej, "msgpack (EitherReader)": em}
}

func isJSON(format string) bool { return strings.HasPrefix(format, "json") }

// TestReaderWalk: both readers present the same document the same way through
// the interface, and end where it ends.
func TestReaderWalk(t *testing.T) {
	const want = `{"a":[1,-2,18446744073709551615,-9223372036854775808,"float",null,true,false],` +
		`"b":{"c":"x\ty","d":[]},"e":{},"é":""}`
	js := ` {"a": [1, -2, 18446744073709551615, -9223372036854775808, 1.5, null, true, false],
		"b": {"c": "x\ty", "d": [ ]}, "e": {}, "\u00e9": ""} `
	mp := msgp.AppendMapHeader(nil, 4)
	mp = msgp.AppendString(mp, "a")
	mp = msgp.AppendArrayHeader(mp, 8)
	mp = msgp.AppendInt(mp, 1)
	mp = msgp.AppendInt(mp, -2)
	mp = msgp.AppendUint64(mp, math.MaxUint64)
	mp = msgp.AppendInt64(mp, math.MinInt64)
	mp = msgp.AppendFloat32(mp, 1.5)
	mp = msgp.AppendNil(mp)
	mp = msgp.AppendBool(mp, true)
	mp = msgp.AppendBool(mp, false)
	mp = msgp.AppendString(mp, "b")
	mp = msgp.AppendMapHeader(mp, 2)
	mp = msgp.AppendString(mp, "c")
	mp = msgp.AppendString(mp, "x\ty")
	mp = msgp.AppendString(mp, "d")
	mp = msgp.AppendArrayHeader(mp, 0)
	mp = msgp.AppendString(mp, "e")
	mp = msgp.AppendMapHeader(mp, 0)
	mp = msgp.AppendString(mp, "é")
	mp = msgp.AppendString(mp, "")
	for name, r := range readers(js, mp) {
		var sb strings.Builder
		if err := walk(r, &sb); err != nil || sb.String() != want || !r.End() {
			t.Errorf("%s: %v end=%v\n%s\nwant\n%s", name, err, r.End(), sb.String(), want)
		}
	}
}

// TestReaderScalars: each scalar reader on each kind of value, in both
// formats: a value of another type or range is ErrWrongType or ErrOutOfRange
// and leaves the cursor at the value, which Skip then consumes.
func TestReaderScalars(t *testing.T) {
	vals := map[string]struct {
		js string // "": JSON has no such value
		mp []byte
	}{
		"nil":   {`null`, enc(nil)},
		"true":  {`true`, enc(true)},
		"str":   {` "0x10"`, enc("0x10")},
		"neg":   {`-5`, enc(-5)},
		"min":   {`-9223372036854775808`, enc(int64(math.MinInt64))},
		"u64":   {`18446744073709551615`, enc(uint64(math.MaxUint64))},
		"float": {`2.5`, enc(2.5)},
		"bin":   {``, enc(make([]byte, 8))},
		"arr":   {`[1]`, enc([]any{1})},
	}
	read := map[string]func(Reader) (any, error){
		"Str":      func(r Reader) (any, error) { v, err := r.Str(); return string(v), err },
		"Int64":    func(r Reader) (any, error) { return r.Int64() },
		"Unsigned": func(r Reader) (any, error) { return r.Uint64(Unsigned) },
		"Bits":     func(r Reader) (any, error) { return r.Uint64(Bits) },
		"Hash":     func(r Reader) (any, error) { return r.Uint64(Hash) },
		"Float64":  func(r Reader) (any, error) { return r.Float64() },
		"Nil":      func(r Reader) (any, error) { return r.Nil() },
	}
	for _, c := range []struct {
		fn, val string
		v       any   // the value read, both formats
		err     error // or the error
		mpErr   error // msgpack's error where it differs
	}{
		{"Str", "str", "0x10", nil, nil},
		{"Str", "nil", nil, ErrWrongType, nil},
		{"Str", "neg", nil, ErrWrongType, nil},
		{"Str", "arr", nil, ErrWrongType, nil},
		{"Int64", "neg", int64(-5), nil, nil},
		{"Int64", "min", int64(math.MinInt64), nil, nil},
		{"Int64", "u64", nil, ErrOutOfRange, nil},
		{"Int64", "float", nil, ErrWrongType, nil},
		{"Int64", "str", nil, ErrWrongType, nil},
		{"Int64", "nil", nil, ErrWrongType, nil},
		{"Unsigned", "u64", uint64(math.MaxUint64), nil, nil},
		{"Unsigned", "neg", nil, ErrOutOfRange, nil},
		{"Unsigned", "float", nil, ErrWrongType, nil},
		{"Unsigned", "str", nil, ErrWrongType, nil},
		{"Bits", "neg", uint64(1<<64 - 5), nil, nil},
		{"Bits", "min", uint64(1 << 63), nil, nil},
		{"Bits", "str", nil, ErrWrongType, nil},
		{"Hash", "neg", uint64(1<<64 - 5), nil, nil},
		{"Hash", "str", uint64(16), nil, ErrWrongType}, // text is JSON's form of a hash
		{"Hash", "bin", uint64(0), nil, nil},           // a digest is msgpack's
		{"Hash", "float", nil, ErrWrongType, nil},
		{"Float64", "float", 2.5, nil, nil},
		{"Float64", "neg", nil, ErrWrongType, nil},
		{"Float64", "str", nil, ErrWrongType, nil},
		{"Nil", "nil", true, nil, nil},
		{"Nil", "neg", false, nil, nil},
		{"Nil", "str", false, nil, nil},
	} {
		v := vals[c.val]
		for format, r := range readers(v.js, v.mp) {
			if isJSON(format) && v.js == "" {
				continue
			}
			want, wantErr := c.v, c.err
			if !isJSON(format) && c.mpErr != nil {
				want, wantErr = nil, c.mpErr
			}
			got, err := read[c.fn](r)
			if !errors.Is(err, wantErr) || (err == nil && got != want) {
				t.Errorf("%s %s(%s): %v %v, want %v %v", format, c.fn, c.val, got, err, want, wantErr)
				continue
			}
			if err != nil || got == false { // not consumed: Skip takes the value
				start := 0
				if isJSON(format) {
					start = len(v.js) - len(strings.TrimLeft(v.js, " "))
				}
				if r.Offset() != start {
					t.Errorf("%s %s(%s): cursor moved to %d on %v", format, c.fn, c.val, r.Offset(), err)
				}
				if err := r.Skip(); err != nil {
					t.Errorf("%s %s(%s): skip: %v", format, c.fn, c.val, err)
				}
			}
			if !r.End() {
				t.Errorf("%s %s(%s): not at the end", format, c.fn, c.val)
			}
		}
	}
}

// TestReaderArrays: the integer array readers in both formats: appended
// elements, the element at fault, and the cursor left at the array on a type
// or range error.
func TestReaderArrays(t *testing.T) {
	f := func(js string, mp []byte, max int, want []int32, wantBad int, wantErr error) {
		t.Helper()
		for format, r := range readers(js, mp) {
			dst := []int32{7}
			got, bad, err := r.Int32s(dst, max, math.MaxUint32)
			if !errors.Is(err, wantErr) || bad != wantBad || (err == nil && !slices.Equal(got[1:], want)) || (err != nil && len(got) != 1) {
				t.Fatalf("%s %s: %v bad %d err %v; want %v %d %v", format, js, got, bad, err, want, wantBad, wantErr)
			}
			if err == nil && !r.End() {
				t.Fatalf("%s %s: not at the end", format, js)
			}
			if isValueErr(err) && (r.Offset() != 0 || r.Skip() != nil || !r.End()) {
				t.Fatalf("%s %s: cursor not left at the array", format, js)
			}
		}
	}
	f(`[1,-2,4294967295]`, enc([]any{1, -2, uint32(math.MaxUint32)}), 8, []int32{1, -2, -1}, -1, nil)
	f(`[]`, enc([]any{}), 8, nil, -1, nil)
	f(`[1,2,3]`, enc([]any{1, 2, 3}), 2, nil, -1, ErrTooLarge)
	f(`[1,4294967296]`, enc([]any{1, int64(1) << 32}), 8, nil, 1, ErrOutOfRange)
	f(`[1,"x"]`, enc([]any{1, "x"}), 8, nil, 1, ErrWrongType)
	f(`{}`, enc(map[string]any{}), 8, nil, -1, ErrWrongType)
	f(`[1,2`, enc([]any{1, 2})[:2], 8, nil, -1, ErrTruncated)

	for format, r := range readers(`[1,2]`, enc([]any{1, 2})) {
		got, _, err := r.Int32s(nil, 8, math.MaxInt32)
		if err != nil || !slices.Equal(got, []int32{1, 2}) {
			t.Fatalf("%s hi=MaxInt32: %v %v", format, got, err)
		}
	}
	for format, r := range readers(`[2147483648]`, enc([]any{uint32(1) << 31})) {
		if _, bad, err := r.Int32s(nil, 8, math.MaxInt32); err != ErrOutOfRange || bad != 0 {
			t.Fatalf("%s hi=MaxInt32: %d %v", format, bad, err)
		}
	}
	for format, r := range readers(`[1,-1,"0x10"]`, enc([]any{1, -1, "0x10"})) {
		got, bad, err := r.Uint64s(nil, 8, Hash)
		switch {
		case isJSON(format):
			if err != nil || !slices.Equal(got, []uint64{1, math.MaxUint64, 16}) {
				t.Fatalf("json Uint64s: %v %v", got, err)
			}
		default:
			if err != ErrWrongType || bad != 2 {
				t.Fatalf("msgpack Uint64s: %d %v", bad, err)
			}
		}
	}
}

// TestReaderContainers: counts, the JSON element limit, NextKey's two kinds
// of error, depth, Mark and Restore.
func TestReaderContainers(t *testing.T) {
	for format, r := range readers(`{"a":1,"b":[1,2]}`, enc(map[string]any{"a": 1})) {
		start := r.Mark()
		n, err := r.EnterMap()
		if err != nil || (isJSON(format)) != (n == -1) || (!isJSON(format) && n != 1) {
			t.Fatalf("%s EnterMap: %d %v", format, n, err)
		}
		if k, ok, err := r.NextKey(); string(k) != "a" || !ok || err != nil {
			t.Fatalf("%s NextKey: %q %v %v", format, k, ok, err)
		}
		r.Restore(start)
		if k, err := r.Str(); err != ErrWrongType || k != nil {
			t.Fatalf("%s after Restore: %q %v", format, k, err)
		}
		if err := r.Skip(); err != nil || !r.End() {
			t.Fatalf("%s skip: %v", format, err)
		}
	}
	// JSON states no count: the limit is met at the element past it.
	for format, r := range readers(`[1,2,3]`, enc([]any{1, 2, 3})) {
		n, err := r.EnterArray(2)
		if !isJSON(format) {
			if err != ErrTooLarge || r.Offset() != 0 {
				t.Fatalf("msgpack EnterArray over max: %d %v", n, err)
			}
			continue
		}
		for i := 0; i < 2; i++ {
			if ok, err := r.Next(); !ok || err != nil {
				t.Fatalf("json element %d: %v %v", i, ok, err)
			}
			r.Skip()
		}
		if ok, err := r.Next(); ok || err != ErrTooLarge {
			t.Fatalf("json element 3: %v %v", ok, err)
		}
	}
	// ok=false with an error: the map itself; ok=true: the entry's key.
	for _, c := range []struct {
		js   string
		mp   []byte
		ok   bool
		want error
	}{
		{`{"a":1 "b":2}`, nil, false, ErrSyntax},
		{`{"a":1,`, nil, false, ErrTruncated},
		{`{`, nil, false, ErrTruncated},
		{`{"a":1,2:3}`, nil, true, ErrSyntax},
		{`{"a":1,"b"}`, nil, true, ErrSyntax},
		{``, []byte{0x82, 0xa1, 'a', 1, 2, 3}, true, ErrWrongType},
		{``, []byte{0x82, 0xa1, 'a', 1, 0xc1, 3}, true, ErrSyntax},
	} {
		r := Reader(new(JSONReader))
		in := []byte(c.js)
		if c.mp != nil {
			m := new(MsgpackReader)
			m.Reset(c.mp)
			r = m
		} else {
			r.(*JSONReader).Reset(in, nil)
		}
		r.EnterMap()
		var ok bool
		var err error
		for i := 0; i < 3 && err == nil; i++ {
			if _, ok, err = r.NextKey(); err == nil && ok {
				err = r.Skip()
			}
		}
		if ok != c.ok || !errors.Is(err, c.want) {
			t.Errorf("%q %x: ok %v err %v, want %v %v", c.js, c.mp, ok, err, c.ok, c.want)
		}
	}
	// Entering more than MaxDepth containers is the nesting limit.
	deepJSON := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	for format, r := range readers(deepJSON, nestedArrays(MaxDepth+1)) {
		var err error
		for i := 0; i <= MaxDepth && err == nil; i++ {
			if _, err = r.EnterArray(1); err == nil {
				_, err = r.Next()
			}
		}
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s depth: %v", format, err)
		}
	}
}

// TestReaderValue: Value's classification in both formats.
func TestReaderValue(t *testing.T) {
	f := func(js string, mp []byte, want Value) {
		t.Helper()
		for format, r := range readers(js, mp) {
			if isJSON(format) && js == "" || !isJSON(format) && mp == nil {
				continue
			}
			v, err := r.Value()
			if err != nil || v.Kind != want.Kind || v.Bool != want.Bool || v.Num != want.Num || string(v.Bytes) != string(want.Bytes) || !r.End() {
				t.Fatalf("%s %s: %+v %v, want %+v", format, js, v, err, want)
			}
		}
	}
	f(`null`, enc(nil), Value{Kind: KindNil})
	f(`true`, enc(true), Value{Kind: KindBool, Bool: true})
	f(`-7`, enc(-7), Value{Kind: KindInt, Num: Number{Mag: 7, Neg: true}})
	f(`-9223372036854775808`, enc(int64(math.MinInt64)), Value{Kind: KindInt, Num: Number{Mag: 1 << 63, Neg: true}})
	f(`18446744073709551615`, enc(uint64(math.MaxUint64)), Value{Kind: KindInt, Num: Number{Mag: math.MaxUint64}})
	f(`18446744073709551616`, nil, Value{Kind: KindInt, Num: Number{Big: true}})
	f(`1e3`, enc(1e3), Value{Kind: KindFloat, Num: Number{Float: true}})
	f(`"a\u00e9"`, enc("aé"), Value{Kind: KindStr, Bytes: []byte("aé")})
	f(``, enc([]byte("ab")), Value{Kind: KindBin, Bytes: []byte("ab")})
	f(``, ext(3, 2), Value{Kind: KindExt})
	f(`[1, {}]`, nil, Value{Kind: KindArray, Bytes: []byte(`[1, {}]`)})
	f(``, enc([]any{1}), Value{Kind: KindArray, Bytes: enc([]any{1})})
	f(`{"a":[]}`, nil, Value{Kind: KindMap, Bytes: []byte(`{"a":[]}`)})
}
