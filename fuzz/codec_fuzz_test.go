package fuzz

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/codec"
)

// Fuzz targets for package codec, the JSON and msgpack readers under every
// event decoder (wire) and request parser (httpd). Each reader is fuzzed here
// once, against an independent implementation: encoding/json + strconv for
// JSON, tinylib/msgp's own Skip and Read*Bytes for msgpack.

const codecMaxInput = 64 << 10

// jsonInts decodes src with encoding/json into its number texts, or ok=false
// when src is not a JSON array of numbers.
func jsonInts(src []byte) ([]json.Number, bool) {
	d := json.NewDecoder(bytes.NewReader(src))
	d.UseNumber()
	var v []any
	if err := d.Decode(&v); err != nil || v == nil || d.More() { // nil: a JSON null, which is not an array
		return nil, false
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, false
	}
	out := make([]json.Number, len(v))
	for i, x := range v {
		n, ok := x.(json.Number)
		if !ok {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

func isIntegerLiteral(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// wholeArray runs read on src, one JSON array surrounded by optional
// whitespace: err is read's error, or a syntax error for anything else.
func wholeArray(src []byte, read func(b []byte) ([]byte, error)) error {
	b := codec.JSONWS(src)
	if len(b) == 0 || b[0] != '[' {
		return codec.ErrSyntax
	}
	rest, err := read(b)
	if err == nil && len(codec.JSONWS(rest)) != 0 {
		err = codec.ErrSyntax
	}
	return err
}

// FuzzJSONInt32s: codec.JSONInt32s agrees with encoding/json + strconv. On
// any array it accepts, encoding/json sees the same integers (in
// -2^31..2^32-1, as 32-bit patterns); every array of such integer literals is
// accepted; it appends after dst's contents; every error is categorised.
func FuzzJSONInt32s(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2,3]`, ` [ -2147483648 , 2147483647 ] `, `[-0]`, `[2147483648]`, `[4294967295]`, `[4294967296]`, `[1.0]`, `[1e3]`,
		`[01]`, `[1,]`, `["1"]`, `[null]`, `null`, `[1 2]`, `[99999999999999999999999]`, `[-]`, "[1]\n", `[1]x`, `[1, 2,` + "\n" + `3]`} {
		f.Add([]byte(s))
	}
	// long enough for scanUint31s' 64-byte windows, with faults deep inside
	long := strings.Repeat("123456, 7, 99999999, ", 8)
	for _, s := range []string{`[` + long + `0]`, `[` + long + `012]`, `[` + long + `1.5]`, `[` + long + `123456789, 1234567890]`, `[` + long + "\n-3 ]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > codecMaxInput {
			return
		}
		got := append(make([]int32, 0, 8), 7, 8)
		err := wholeArray(src, func(b []byte) (rest []byte, err error) {
			got, rest, _, err = codec.JSONInt32s(got, b, math.MaxInt)
			return rest, err
		})
		nums, valid := jsonInts(src)
		allInt32 := valid
		var want []int32
		for _, n := range nums {
			v, perr := strconv.ParseInt(n.String(), 10, 64)
			if perr != nil || !isIntegerLiteral(n.String()) || v < math.MinInt32 || v > math.MaxUint32 {
				allInt32 = false
				break
			}
			want = append(want, int32(uint32(v)))
		}
		if err != nil {
			if allInt32 {
				t.Fatalf("%q rejected (%v) but encoding/json reads int32s %v", src, err, want)
			}
			if c := codec.Cause(err); c != codec.ErrSyntax && c != codec.ErrTruncated && c != codec.ErrWrongType && c != codec.ErrOutOfRange {
				t.Fatalf("%q: uncategorised error %v", src, err)
			}
			return
		}
		if !allInt32 {
			t.Fatalf("%q accepted as %v but encoding/json disagrees", src, got)
		}
		if len(got) != 2+len(want) || got[0] != 7 || got[1] != 8 {
			t.Fatalf("%q: got %v, want [7 8 %v]", src, got, want)
		}
		for i, w := range want {
			if got[2+i] != w {
				t.Fatalf("%q: element %d = %d, want %d", src, i, got[2+i], w)
			}
		}
	})
}

// FuzzJSONUint64s: codec.JSONUint64s is exact over 0..2^64-1 (Unsigned) and
// -2^63..2^64-1 as bit patterns (Bits), and agrees with encoding/json +
// strconv. (Hash mode's strings are ParseU64Text's, exercised through
// FuzzDecodeStandardJSON.)
func FuzzJSONUint64s(f *testing.F) {
	for _, s := range []string{`[]`, `[0,18446744073709551615]`, `[18446744073709551616]`, `[9007199254740993]`, `[-1]`, `[-0]`,
		`[-9223372036854775808]`, `[-9223372036854775809]`, `[1.0]`, `[1E2]`, `["1"]`, `[1,2`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, src []byte, signed bool) {
		mode := codec.Unsigned
		if signed {
			mode = codec.Bits
		}
		if len(src) > codecMaxInput {
			return
		}
		var got []uint64
		err := wholeArray(src, func(b []byte) (rest []byte, err error) {
			got, rest, _, err = codec.JSONUint64s(got, b, math.MaxInt, mode, nil)
			return rest, err
		})
		nums, valid := jsonInts(src)
		ok := valid
		var want []uint64
		for _, n := range nums {
			s := n.String()
			if s == "-0" {
				s = "0"
			}
			if !isIntegerLiteral(s) {
				ok = false
				break
			}
			v, perr := strconv.ParseUint(s, 10, 64)
			if perr != nil && signed {
				var i int64
				i, perr = strconv.ParseInt(s, 10, 64)
				v = uint64(i)
			}
			if perr != nil {
				ok = false
				break
			}
			want = append(want, v)
		}
		switch {
		case err != nil && ok:
			t.Fatalf("%q rejected (%v) but encoding/json reads %v", src, err, want)
		case err == nil && !ok:
			t.Fatalf("%q accepted as %v but encoding/json disagrees", src, got)
		case err == nil:
			if len(got) != len(want) {
				t.Fatalf("%q: got %v, want %v", src, got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%q: element %d = %d, want %d", src, i, got[i], want[i])
				}
			}
		}
	})
}

// jsonDepth is the deepest container nesting in a valid JSON text.
func jsonDepth(src []byte) int {
	d := json.NewDecoder(bytes.NewReader(src))
	depth, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

// FuzzJSONValue: codec.JSONSkip accepts exactly the JSON texts encoding/json
// finds valid (json.Valid, and valid UTF-8), except those nested deeper than codec.MaxDepth,
// which it refuses with ErrTooLarge; and on a string value codec.JSONString
// yields what json.Unmarshal does.
func FuzzJSONValue(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,-2.5e3,"x\u00e9\ud83d\ude00",true,false,null]}`, `"a\"b\\c\/\b\f\n\r\t"`,
		`"\ud83d"`, `"\ude00x"`, "\"\xff\"", `[1,]`, `{"a" 1}`, `01`, `1.`, `-`, `tru`, `[[[[[[]]]]]]`, `"\u12"`, " 7 "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > codecMaxInput {
			return
		}
		rest, err := codec.JSONSkip(src)
		if err == nil && len(codec.JSONWS(rest)) != 0 {
			err = codec.ErrSyntax // not one value
		}
		valid := json.Valid(src) && utf8.Valid(src) // encoding/json lets invalid UTF-8 through; RFC 8259 §8.1 does not
		switch {
		case err == nil && !valid:
			t.Fatalf("%q accepted, encoding/json disagrees", src)
		case err != nil && valid && !(errors.Is(err, codec.ErrTooLarge) && jsonDepth(src) > codec.MaxDepth):
			t.Fatalf("%q rejected (%v), encoding/json accepts it", src, err)
		case err != nil && !valid && errors.Is(err, codec.ErrTooLarge) && jsonDepth(src) <= codec.MaxDepth:
			t.Fatalf("%q: ErrTooLarge below the depth limit", src)
		}
		if b := codec.JSONWS(src); valid && len(b) != 0 && b[0] == '"' {
			var arena []byte
			s, _, err := codec.JSONString(b, &arena)
			var want string
			if uerr := json.Unmarshal(src, &want); err != nil || uerr != nil || string(s) != want {
				t.Fatalf("%q: got %q (%v), want %q (%v)", src, s, err, want, uerr)
			}
		}
	})
}

// FuzzMsgpackValue: codec.Skip consumes exactly what msgp.Skip does (unless
// nesting is deeper than codec.MaxDepth: then ErrTooLarge), never accepts
// what msgp.Skip refuses; over an array of n values, codec.ReadInt32s agrees
// with msgp.ReadInt64Bytes on each, and codec.ReadUint64s with
// msgp.ReadUint64Bytes (Unsigned) and msgp.ReadInt64Bytes (Bits).
func FuzzMsgpackValue(f *testing.F) {
	seed := func(v any) []byte {
		b, err := msgp.AppendIntf(nil, v)
		if err != nil {
			panic(err)
		}
		return b
	}
	for _, v := range []any{nil, true, 1, -1, int64(math.MinInt64), uint64(math.MaxUint64), 1.5, "a", []byte{1, 2},
		[]any{1, "a", []any{nil}}, map[string]any{"a": 1, "b": []any{}}, []any{int64(1) << 31, -300, 70000, uint64(1) << 40}} {
		f.Add(seed(v))
	}
	f.Add([]byte{0xc1})
	f.Add(bytes.Repeat([]byte{0x91}, 70))
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > codecMaxInput {
			return
		}
		rest, err := codec.Skip(src)
		want, merr := msgp.Skip(src)
		switch {
		case err == nil && (merr != nil || !bytes.Equal(rest, want)):
			t.Fatalf("%x: codec rest %d, msgp rest %d (%v)", src, len(rest), len(want), merr)
		case err != nil && merr == nil && !errors.Is(err, codec.ErrTooLarge):
			t.Fatalf("%x: codec refuses (%v), msgp skips it", src, err)
		}
		n, p, err := codec.ReadArray(src, 1<<16)
		if err != nil {
			return
		}
		for _, hi := range []int64{math.MaxInt32, math.MaxUint32} {
			dst := make([]int32, n)
			_, bad, err := codec.ReadInt32s(dst, p, hi)
			q := p
			for i := 0; i < n; i++ {
				v, r, merr := msgp.ReadInt64Bytes(q)
				inRange := merr == nil && v >= math.MinInt32 && v <= hi
				if !inRange {
					if err == nil || bad != i {
						t.Fatalf("%x hi=%d: element %d (%d, %v) accepted or misplaced (bad %d, %v)", src, hi, i, v, merr, bad, err)
					}
					break
				}
				if err != nil && bad == i {
					t.Fatalf("%x hi=%d: element %d = %d refused: %v", src, hi, i, v, err)
				}
				if err == nil && dst[i] != int32(v) {
					t.Fatalf("%x hi=%d: element %d = %d, want %d", src, hi, i, dst[i], int32(v))
				}
				q = r
			}
		}
		for _, mode := range []codec.Mode{codec.Unsigned, codec.Bits} {
			dst := make([]uint64, n)
			_, bad, err := codec.ReadUint64s(dst, p, mode)
			q := p
			for i := 0; i < n; i++ {
				v, r, merr := msgp.ReadUint64Bytes(q)
				if merr != nil && mode == codec.Bits {
					var s int64
					s, r, merr = msgp.ReadInt64Bytes(q)
					v = uint64(s)
				}
				if merr != nil {
					if err == nil || bad != i {
						t.Fatalf("%x mode %d: element %d (%v) accepted or misplaced (bad %d, %v)", src, mode, i, merr, bad, err)
					}
					break
				}
				if (err != nil && bad == i) || (err == nil && dst[i] != v) {
					t.Fatalf("%x mode %d: element %d = %d (%v), want %d", src, mode, i, dst[i], err, v)
				}
				q = r
			}
		}
	})
}

// readerTree walks the value at r's cursor through the codec.Reader interface
// into the shape encoding/json and msgp.ReadIntfBytes decode to: maps as
// map[string]any (a repeated key: the last wins), arrays as []any, integers as
// sign and decimal magnitude ("big" beyond 64 bits), floats as "float",
// strings as string, bins as binTree, extensions as "ext". keyErr reports a map key that
// is not a string (NextKey's ok=true with an error).
func readerTree(r codec.Reader) (v any, keyErr bool, err error) {
	switch r.Kind() {
	case codec.KindMap:
		if _, err := r.EnterMap(); err != nil {
			return nil, false, err
		}
		m := map[string]any{}
		for {
			k, ok, err := r.NextKey()
			if err != nil {
				return nil, ok, err
			}
			if !ok {
				return m, false, nil
			}
			if m[string(k)], keyErr, err = readerTree(r); err != nil {
				return nil, keyErr, err
			}
		}
	case codec.KindArray:
		if _, err := r.EnterArray(math.MaxInt); err != nil {
			return nil, false, err
		}
		a := []any{}
		for {
			ok, err := r.Next()
			if err != nil || !ok {
				return a, false, err
			}
			e, keyErr, err := readerTree(r)
			if err != nil {
				return nil, keyErr, err
			}
			a = append(a, e)
		}
	}
	val, err := r.Value()
	if err != nil {
		return nil, false, err
	}
	switch val.Kind {
	case codec.KindNil:
		return nil, false, nil
	case codec.KindBool:
		return val.Bool, false, nil
	case codec.KindInt:
		switch n := val.Num; {
		case n.Big:
			return "big", false, nil
		case n.Neg && n.Mag != 0:
			return "-" + strconv.FormatUint(n.Mag, 10), false, nil
		default:
			return strconv.FormatUint(n.Mag, 10), false, nil
		}
	case codec.KindFloat:
		return "float", false, nil
	case codec.KindStr:
		return string(val.Bytes), false, nil
	case codec.KindBin:
		return binTree(val.Bytes), false, nil
	}
	return "ext", false, nil
}

// binTree is a bin's bytes in a tree (nil and empty alike).
type binTree string

// modelTree normalises what encoding/json (numbers as json.Number) or
// msgp.ReadIntfBytes decoded to readerTree's shape.
func modelTree(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = modelTree(e)
		}
	case []any:
		for i, e := range v {
			v[i] = modelTree(e)
		}
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			return "float"
		}
		// sign and magnitude, as codec.Number: a magnitude up to 2^64-1 either way
		mag, neg := strings.CutPrefix(string(v), "-")
		u, err := strconv.ParseUint(mag, 10, 64)
		switch {
		case err != nil:
			return "big"
		case neg && u != 0:
			return "-" + strconv.FormatUint(u, 10)
		}
		return strconv.FormatUint(u, 10)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float32, float64:
		return "float"
	case []byte:
		return binTree(v)
	case nil, bool, string:
	default:
		return "ext"
	}
	return v
}

// FuzzReaderJSON: codec.JSONReader, walked through the Reader interface,
// reads exactly the JSON texts codec.JSONSkip accepts (the model of
// FuzzJSONValue), ends where the text ends, and sees what encoding/json
// decodes: the same keys, strings, exact integers and nesting.
func FuzzReaderJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,-2.5e3,"x\u00e9\ud83d\ude00",true,false,null],"b":{"c":{}}}`,
		`{"a":1,"a":2}`, `[18446744073709551615,-9223372036854775808,18446744073709551616,-0]`, `{"a" 1}`, `[1,]`,
		` {"k\"ey":"v"} `, `[[[[[[]]]]]]`, `{"a":[`, `"\ud83d"`, "[\"\xff\"]", `7`, `{"a":1}x`,
		`[-9227000000000000000]`} { // below MinInt64, a magnitude within 64 bits
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > codecMaxInput {
			return
		}
		var r codec.JSONReader
		var arena []byte
		r.Reset(src, &arena)
		got, _, err := readerTree(&r)
		if err == nil && !r.End() {
			err = codec.ErrSyntax // not one value
		}
		rest, serr := codec.JSONSkip(src)
		if serr == nil && len(codec.JSONWS(rest)) != 0 {
			serr = codec.ErrSyntax
		}
		if (err == nil) != (serr == nil) {
			t.Fatalf("%q: reader %v, JSONSkip %v", src, err, serr)
		}
		if err != nil {
			return
		}
		d := json.NewDecoder(bytes.NewReader(src))
		d.UseNumber()
		var want any
		if err := d.Decode(&want); err != nil {
			t.Fatalf("%q: encoding/json: %v", src, err)
		}
		if want = modelTree(want); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nreader  %#v\nencoding/json %#v", src, got, want)
		}
	})
}

// FuzzReaderMsgpack: codec.MsgpackReader, walked through the Reader
// interface, reads what codec.Skip accepts (but for map keys that are not
// strings, which NextKey refuses), ends where Skip does, and sees what
// msgp.ReadIntfBytes decodes.
func FuzzReaderMsgpack(f *testing.F) {
	seed := func(v any) []byte {
		b, err := msgp.AppendIntf(nil, v)
		if err != nil {
			panic(err)
		}
		return b
	}
	for _, v := range []any{nil, true, -1, int64(math.MinInt64), uint64(math.MaxUint64), 1.5, float32(2), "a", []byte{1, 2},
		[]any{1, "a", []any{nil}}, map[string]any{"a": 1, "b": []any{map[string]any{}}}} {
		f.Add(seed(v))
	}
	f.Add([]byte{0x81, 0x01, 0x02})                                 // a non-str key
	f.Add([]byte{0xc4, 0x00})                                       // an empty bin
	f.Add(append(bytes.Repeat([]byte{0x91}, codec.MaxDepth), 0x90)) // an empty container below the depth limit
	f.Add([]byte{0xc1})
	f.Add(bytes.Repeat([]byte{0x91}, 70))
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > codecMaxInput {
			return
		}
		var r codec.MsgpackReader
		r.Reset(src)
		got, keyErr, err := readerTree(&r)
		rest, serr := codec.Skip(src)
		switch {
		case err == nil && (serr != nil || r.Offset() != len(src)-len(rest)):
			t.Fatalf("%x: reader ends at %d, Skip at %d (%v)", src, r.Offset(), len(src)-len(rest), serr)
		case err != nil && serr == nil && !keyErr:
			t.Fatalf("%x: reader refuses (%v), Skip accepts", src, err)
		case err != nil:
			return
		}
		want, _, merr := msgp.ReadIntfBytes(src)
		if merr != nil {
			return // msgp refuses what codec reads: extension types it has no decoder for
		}
		if want = modelTree(want); !reflect.DeepEqual(got, want) {
			t.Fatalf("%x:\nreader %#v\nmsgp   %#v", src, got, want)
		}
	})
}
