package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestJSONNumber(t *testing.T) {
	f := func(lit string, want Number, wantErr error) {
		t.Helper()
		n, rest, err := JSONNumber([]byte(lit + ","))
		if !errors.Is(err, wantErr) || (err == nil && (n != want || string(rest) != ",")) {
			t.Fatalf("%s: %+v %q %v, want %+v %v", lit, n, rest, err, want, wantErr)
		}
	}
	f("0", Number{}, nil)
	f("-0", Number{Neg: true}, nil)
	f("7", Number{Mag: 7}, nil)
	f("-9223372036854775808", Number{Mag: 1 << 63, Neg: true}, nil)
	f("18446744073709551615", Number{Mag: math.MaxUint64}, nil)
	f("18446744073709551616", Number{Big: true}, nil)
	f("-184467440737095516150", Number{Big: true, Neg: true}, nil)
	f("1.5", Number{Float: true}, nil)
	f("1E+5", Number{Float: true}, nil)
	f("-1.0e-5", Number{Float: true, Neg: true}, nil)
	f("1.", Number{}, ErrSyntax)
	f(".5", Number{}, ErrSyntax)
	f("-", Number{}, ErrSyntax)
	f("+1", Number{}, ErrSyntax)
	f("1e", Number{}, ErrSyntax)
	if _, _, err := JSONNumber([]byte("1.")); !errors.Is(err, ErrTruncated) {
		t.Fatalf("1. at the end: %v", err)
	}
	for _, c := range []struct {
		n      Number
		i      int64
		fitted bool
	}{{Number{Mag: 1 << 63, Neg: true}, math.MinInt64, true}, {Number{Mag: 1<<63 + 1, Neg: true}, 0, false},
		{Number{Mag: math.MaxInt64}, math.MaxInt64, true}, {Number{Mag: 1 << 63}, 0, false}, {Number{Float: true}, 0, false}} {
		if i, ok := c.n.Int64(); ok != c.fitted || (ok && i != c.i) {
			t.Fatalf("%+v.Int64() = %d %v", c.n, i, ok)
		}
	}
}

// TestJSONString checks unescaping against encoding/json and that earlier
// arena views stay intact while later strings grow the arena.
func TestJSONString(t *testing.T) {
	arena := make([]byte, 0, 4)
	var views []string
	var got [][]byte
	for _, lit := range []string{
		`""`, `"abc"`, `"a\"b"`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u0041"`, `"\u00e9"`, `"é"`,
		`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"x\u0000y"`, `"日本語"`,
	} {
		s, rest, err := JSONString([]byte(lit+"]"), &arena)
		var want string
		if uerr := json.Unmarshal([]byte(lit), &want); err != nil || uerr != nil || string(s) != want || string(rest) != "]" {
			t.Fatalf("%s: got %q %q %v, want %q", lit, s, rest, err, want)
		}
		views, got = append(views, want), append(got, s)
	}
	for i := range got {
		if string(got[i]) != views[i] {
			t.Fatalf("view %d overwritten: %q", i, got[i])
		}
	}
	for lit, want := range map[string]error{`"abc`: ErrTruncated, `"\x"`: ErrSyntax, `"\u12`: ErrTruncated, `"\u12zz"`: ErrSyntax,
		"\"a\nb\"": ErrSyntax, "\"\xff\"": ErrSyntax, "\"\xc3\"": ErrSyntax, `"\`: ErrTruncated} {
		if _, _, err := JSONString([]byte(lit), &arena); !errors.Is(err, want) {
			t.Fatalf("%q: %v, want %v", lit, err, want)
		}
	}
	if _, _, err := JSONString([]byte(`1`), &arena); err != ErrWrongType {
		t.Fatalf("number as string: %v", err)
	}
}

func TestJSONSkip(t *testing.T) {
	for _, ok := range []string{`{}`, ` [ ] `, `{"a":[1,{"b":null}],"c":"\u00e9"}`, `true`, `-1.5e3`, `"x"`,
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)} {
		if rest, err := JSONSkip([]byte(ok + ",")); err != nil || string(JSONWS(rest)) != "," {
			t.Fatalf("%s: %q %v", ok, rest, err)
		}
	}
	for bad, want := range map[string]error{`{"a" 1}`: ErrSyntax, `{1:2}`: ErrSyntax, `[1 2]`: ErrSyntax, `[1,`: ErrTruncated,
		`{"a":`: ErrTruncated, `tru`: ErrTruncated, `trux`: ErrSyntax, `x`: ErrSyntax, ``: ErrTruncated,
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1): ErrTooLarge} {
		if _, err := JSONSkip([]byte(bad)); !errors.Is(err, want) {
			t.Fatalf("%q: %v, want %v", bad, err, want)
		}
	}
}

// TestJSONInt32s: ranges, the first bad element's index and error, and that
// the fast path and the general path agree on the same elements.
func TestJSONInt32s(t *testing.T) {
	dst := make([]int32, 0, 4)
	f := func(in string, max int, want []int32, wantBad int, wantErr error) {
		t.Helper()
		got, _, bad, err := JSONInt32s(dst[:1], []byte(in), max)
		if !errors.Is(err, wantErr) || (err != nil && bad != wantBad) || (err == nil && !slices.Equal(got[1:], want)) {
			t.Fatalf("%s: got %v bad %d err %v; want %v %d %v", in, got, bad, err, want, wantBad, wantErr)
		}
	}
	f(`[]`, 8, nil, 0, nil)
	f("[ 1 ,\n2\t, 3 ]", 8, []int32{1, 2, 3}, 0, nil)
	f(`[-2147483648,4294967295,0,-0,1000000000]`, 8, []int32{math.MinInt32, -1, 0, 0, 1000000000}, 0, nil)
	f(`[1,2,3]`, 2, nil, 2, ErrTooLarge)
	f(`[0,-2147483649]`, 8, nil, 1, ErrOutOfRange)
	f(`[0,0,4294967296]`, 8, nil, 2, ErrOutOfRange)
	f(`[0,99999999999999999999999]`, 8, nil, 1, ErrOutOfRange)
	f(`[0,1e2]`, 8, nil, 1, ErrWrongType)
	f(`[0,"1"]`, 8, nil, 1, ErrWrongType)
	f(`[1,]`, 8, nil, 1, ErrWrongType) // not a value: the caller's re-skip reports the syntax error
	f(`[01]`, 8, nil, -1, ErrSyntax)   // "0", then "1" where a separator belongs
	f(`[1`, 8, nil, -1, ErrTruncated)
}

func TestJSONUint64s(t *testing.T) {
	var arena []byte
	f := func(in string, mode Mode, want []uint64, wantBad int, wantErr error) {
		t.Helper()
		got, _, bad, err := JSONUint64s(nil, []byte(in), 4, mode, &arena)
		if !errors.Is(err, wantErr) || (err != nil && bad != wantBad) || (err == nil && !slices.Equal(got, want)) {
			t.Fatalf("%s: got %v bad %d err %v; want %v %d %v", in, got, bad, err, want, wantBad, wantErr)
		}
	}
	f(`[0, 18446744073709551615, -0]`, Unsigned, []uint64{0, math.MaxUint64, 0}, 0, nil)
	f(`[1,-1]`, Unsigned, nil, 1, ErrOutOfRange)
	f(`[1,-1,-9223372036854775808]`, Bits, []uint64{1, math.MaxUint64, 1 << 63}, 0, nil)
	f(`[-9223372036854775809]`, Bits, nil, 0, ErrOutOfRange)
	f(`[18446744073709551616]`, Bits, nil, 0, ErrOutOfRange)
	f(`[1,2,3.0]`, Unsigned, nil, 2, ErrWrongType)
	f(`[1,2,3,4,5]`, Unsigned, nil, 4, ErrTooLarge)
	f(`["0x10", "18446744073709551615", "\u0031", -1]`, Hash, []uint64{16, math.MaxUint64, 1, math.MaxUint64}, 0, nil)
	f(`[1, "0x10"]`, Bits, nil, 1, ErrWrongType)
	f(`[1, "0xg"]`, Hash, nil, 1, ErrWrongType)
	f(`[1 2]`, Hash, nil, -1, ErrSyntax)
}

// TestScanUint31s pins the fast path's contract: what it takes, where it
// stops (unconsumed, for the general path), and that it honours the limit.
func TestScanUint31s(t *testing.T) {
	for _, simd := range jsonPaths(t) {
		useJSONWindowAVX512 = simd
		scanUint31sCases(t)
	}
}

func scanUint31sCases(t *testing.T) {
	f := func(in string, max int, want []int32, wantPos int, wantDone bool) {
		t.Helper()
		dst := []int32{-7}
		got, pos, done := scanUint31s(dst, []byte(in), 0, max+1) // the limit bounds len(dst), which starts at 1
		if !slices.Equal(got[1:], want) || got[0] != -7 || pos != wantPos || done != wantDone {
			t.Fatalf("avx512=%v %q max=%d: got %v pos %d done %v; want %v pos %d done %v", useJSONWindowAVX512, in, max, got[1:], pos, done, want, wantPos, wantDone)
		}
	}
	f(`1,22,333]`, 10, []int32{1, 22, 333}, 9, true)
	f(`1, 2,`+"\n\t"+`3]`, 10, []int32{1, 2, 3}, 9, true)
	f(`999999999,1]`, 10, []int32{999999999, 1}, 12, true)
	f(`1,1000000000]`, 10, []int32{1}, 2, false) // 10 digits: general path
	f(`0,7]`, 10, []int32{0, 7}, 4, true)
	f(`1,01]`, 10, []int32{1}, 2, false) // leading zero: general path rejects
	f(`1,-2]`, 10, []int32{1}, 2, false) // sign
	f(`1,2.5]`, 10, []int32{1}, 2, false)
	f(`1,2e3]`, 10, []int32{1}, 2, false)
	f(`1,2 ]`, 10, []int32{1}, 2, false) // space before ']'
	f(`1,2`, 10, []int32{1}, 2, false)   // end of input
	f(`1,2,3]`, 2, []int32{1, 2}, 4, false)
	f(`]`, 10, nil, 0, false)
	f(strings.Repeat("9", 70)+`]`, 10, nil, 0, false) // a run longer than the window
}

// TestScanUint31sWindows runs TestScanUint31s' shapes behind k leading
// elements, so that each lands at every offset of the 64-byte windows and
// across their edges: the window path must take and stop exactly where the
// byte loop does.
func TestScanUint31sWindows(t *testing.T) {
	cases := []string{`1,22,333]`, `1, 2,` + "\n\t" + `3]`, `999999999,1]`, `12345678,1]`, `1,1000000000]`, `0,7]`, `1,01]`, `1,-2]`,
		`1,2.5]`, `1,2e3]`, `1,2 ]`, `1,2`, `1,2,3]`, `]`, `1,` + strings.Repeat(" ", 80) + `2]`, `1,x]`}
	for _, simd := range jsonPaths(t) {
		useJSONWindowAVX512 = simd
		for _, tail := range cases {
			for _, lead := range []string{"5,", "5, ", "12345678,", "0, "} {
				for k := 0; k < 48; k++ {
					in := strings.Repeat(lead, k) + tail
					for _, max := range []int{k + 2, k + 40, 1 << 20} {
						want, wantPos, wantDone := refScanUint31s([]int32{-7}, []byte(in), 0, max+1)
						got, pos, done := scanUint31s([]int32{-7}, []byte(in), 0, max+1)
						if !slices.Equal(got, want) || pos != wantPos || done != wantDone {
							t.Fatalf("avx512=%v %q max=%d: got %v pos %d done %v; want %v pos %d done %v", simd, in, max, got, pos, done, want, wantPos, wantDone)
						}
					}
				}
			}
		}
	}
}

// jsonPaths lists the scanUint31s paths this CPU can run (the scalar loops
// alone, and the AVX-512 window where the CPU has it) and restores the
// default when the test ends.
func jsonPaths(t *testing.T) []bool {
	t.Cleanup(func() { useJSONWindowAVX512 = haveJSONWindowAVX512 })
	if haveJSONWindowAVX512 {
		return []bool{false, true}
	}
	t.Log("no AVX-512 VBMI/VBMI2 on this CPU: scalar loops only")
	return []bool{false}
}

// TestScanUint31sRandom compares scanUint31s with refScanUint31s (the byte
// loop alone) on random arrays mixing the fast shape with everything that
// must stop it: long, zero-led, signed, fractional and exponent numbers,
// whitespace of every kind before and after separators, stray bytes, limits
// and truncation.
func TestScanUint31sRandom(t *testing.T) {
	for _, simd := range jsonPaths(t) {
		useJSONWindowAVX512 = simd
		scanUint31sRandom(t)
	}
}

func scanUint31sRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	elems := []func() string{
		func() string { return strconv.Itoa(rng.IntN(10)) },
		func() string { return strconv.Itoa(rng.IntN(1_000_000)) },
		func() string { return strconv.Itoa(rng.IntN(100_000_000)) }, // up to 8 digits
		func() string { return strconv.Itoa(rng.IntN(1_000_000_000)) },
		func() string { return strconv.Itoa(100_000_000 + rng.IntN(900_000_000)) }, // 9 digits
		func() string { return strconv.FormatUint(rng.Uint64(), 10) },
		func() string { return "0" + strconv.Itoa(rng.IntN(1000)) },
		func() string { return "-" + strconv.Itoa(rng.IntN(1000)) },
		func() string { return strconv.Itoa(rng.IntN(1000)) + ".5" },
		func() string { return strconv.Itoa(rng.IntN(1000)) + "e2" },
		func() string { return string(rune(rng.IntN(128))) },
	}
	seps := []string{",", ",", ", ", ", ", ",\n", ", \n\t\r ", " ,", ",,", "]", " ]", ""}
	for iter := 0; iter < 20000; iter++ {
		var sb strings.Builder
		size, odd := rng.IntN(400), 1+rng.IntN(60) // one element in odd is of any kind
		widths := 1 + rng.IntN(4)                  // fast-shape kinds used: up to 1, 6, 8 or 9 digits
		for sb.Len() < size {
			if rng.IntN(odd) == 0 {
				sb.WriteString(elems[rng.IntN(len(elems))]())
			} else {
				sb.WriteString(elems[rng.IntN(widths)]())
			}
			if rng.IntN(odd) == 0 {
				sb.WriteString(seps[rng.IntN(len(seps))])
			} else {
				sb.WriteString(seps[rng.IntN(4)])
			}
		}
		in := []byte(sb.String())
		if rng.IntN(4) == 0 {
			in = in[:rng.IntN(len(in)+1)]
		}
		limit := 1 << 20
		if rng.IntN(4) == 0 {
			limit = 1 + rng.IntN(60)
		}
		want, wantPos, wantDone := refScanUint31s([]int32{-7}, in, 0, limit)
		got, pos, done := scanUint31s([]int32{-7}, in, 0, limit)
		if !slices.Equal(got, want) || pos != wantPos || done != wantDone {
			t.Fatalf("avx512=%v %q limit=%d: got %v pos %d done %v; want %v pos %d done %v", useJSONWindowAVX512, in, limit, got, pos, done, want, wantPos, wantDone)
		}
	}
}

// refScanUint31s is the model: scanUint31s' contract written with the
// standard library (the digit run by bytes.TrimLeft, its value by strconv).
func refScanUint31s(dst []int32, b []byte, p, limit int) ([]int32, int, bool) {
	for len(dst) < limit {
		end := len(b) - len(bytes.TrimLeft(b[p:], "0123456789"))
		n := end - p
		if n == 0 || n > 9 || end == len(b) || (n > 1 && b[p] == '0') {
			return dst, p, false
		}
		v, err := strconv.ParseUint(string(b[p:end]), 10, 32)
		if err != nil {
			panic(err)
		}
		switch b[end] {
		case ']':
			return append(dst, int32(v)), end + 1, true
		case ',':
			dst = append(dst, int32(v))
			p = len(b) - len(bytes.TrimLeft(b[end+1:], " \n\t\r"))
		default:
			return dst, p, false
		}
	}
	return dst, p, false
}

// TestNonDigits64: every byte value at every position, among digits and
// among other non-digits, against isDigit.
func TestNonDigits64(t *testing.T) {
	var w [64]byte
	for _, fill := range []byte{'0', '9', ',', 0xff} {
		for pos := 0; pos < 64; pos++ {
			for c := 0; c < 256; c++ {
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				var want uint64
				for i, x := range w {
					if !isDigit(x) {
						want |= 1 << i
					}
				}
				if got := nonDigits64(w[:]); got != want {
					t.Fatalf("fill %q, byte %d = %#x: got %064b want %064b", fill, pos, c, got, want)
				}
			}
		}
	}
}

// TestDigits8: every length 1..8 of random digits, as scanUint31s lays them
// out (most significant first, shifted to the top), against strconv.
func TestDigits8(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 100000; iter++ {
		n := 1 + rng.IntN(8)
		s := strconv.FormatUint(rng.Uint64N(100_000_000), 10)
		s = strings.Repeat("0", 8)[:max(0, n-len(s))] + s
		s = s[len(s)-n:]
		var t8 uint64
		for i := 0; i < n; i++ {
			t8 |= uint64(s[i]-'0') << (8 * i)
		}
		want, _ := strconv.ParseUint(s, 10, 32)
		if got := digits8(t8 << (64 - 8*uint(n))); uint64(got) != want {
			t.Fatalf("%q: got %d", s, got)
		}
	}
}

// TestPrintableASCII: never true when a byte is outside 0x20..0x7f (checked
// against a byte loop on every single-byte deviation at every position), and
// true for base64 text.
func TestPrintableASCII(t *testing.T) {
	naive := func(s []byte) bool {
		for _, c := range s {
			if c < 0x20 || c >= 0x80 {
				return false
			}
		}
		return true
	}
	raw := make([]byte, 400)
	for i := range raw {
		raw[i] = byte(i * 7)
	}
	if b64 := []byte(base64.StdEncoding.EncodeToString(raw)); !printableASCII(b64) {
		t.Fatal("base64 text refused")
	}
	for n := 0; n <= 19; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				s := []byte(strings.Repeat("A", n))
				s[pos] = byte(c)
				// with 'A' around the deviation no borrow crosses bytes: exact
				if got, want := printableASCII(s), naive(s); got != want {
					t.Fatalf("printableASCII(%q) = %v, want %v", s, got, want)
				}
			}
		}
	}
}

// JSON hashes are exact: 2^64-1 survives, where a float64 detour would not.
func ExampleJSONUint64s() {
	hs, _, _, err := JSONUint64s(nil, []byte(`[9007199254740993, 18446744073709551615]`), 100, Unsigned, nil)
	fmt.Println(hs, err)
	_, _, bad, err := JSONUint64s(nil, []byte(`[1, -2]`), 100, Unsigned, nil)
	fmt.Println(bad, err)
	// Output:
	// [9007199254740993 18446744073709551615] <nil>
	// 1 conductor: value out of range
}

// BenchmarkJSONInt32s reads a 131,072-token array (about 0.9 MB) as the
// /query JSON body carries it: ids drawn at random below 152,064 (a
// Qwen2-size vocabulary, 1–6 digits, the realistic case), or sequential
// 6-digit ids (one width throughout, the byte loop's best case), separated by
// "," (compact encoders) or ", " (Python's json.dumps). Reported per token.
func BenchmarkJSONInt32s(b *testing.B) {
	const n = 131072
	for _, ids := range []string{"random", "sequential"} {
		for _, sep := range []string{",", ", "} {
			rng := rand.New(rand.NewPCG(1, 1))
			buf := []byte{'['}
			for i := 0; i < n; i++ {
				if i > 0 {
					buf = append(buf, sep...)
				}
				v := 100000 + i
				if ids == "random" {
					v = rng.IntN(152064)
				}
				buf = strconv.AppendInt(buf, int64(v), 10)
			}
			buf = append(buf, ']')
			dst := make([]int32, 0, n)
			b.Run(fmt.Sprintf("ids=%s/sep=%q", ids, sep), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for i := 0; i < b.N; i++ {
					out, _, _, err := JSONInt32s(dst[:0], buf, n)
					if err != nil || len(out) != n {
						b.Fatal(err, len(out))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/token")
			})
		}
	}
}

// TestJSONTokenPath: the name follows the path in use.
func TestJSONTokenPath(t *testing.T) {
	for _, simd := range jsonPaths(t) {
		useJSONWindowAVX512 = simd
		if got, want := JSONTokenPath(), map[bool]string{false: "scalar", true: "avx512"}[simd]; got != want {
			t.Errorf("avx512=%v: %q, want %q", simd, got, want)
		}
	}
}
