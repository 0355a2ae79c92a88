package fuzz

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/hash"
)

// Property fuzzing of the hash package, one target per strategy. Every target checks,
// on random tokens / block size / LoRA / salt:
//   - lazy == eager: a Chain walked out of order equals AppendChain;
//   - prefix consistency: the chain of a prompt cut after k blocks is the first k keys;
//   - backend agreement: stdlib and simd SHA-256 give the same keys;
//   - errors are the documented sentinels, identical from Reset and AppendChain.
//
// The vLLM targets (each over its SHA-256 and its XXH3-128 algorithm) also rebuild
// the chain block by block from the exported encoders and a reference digest
// (crypto/sha256, or zeebo/xxh3's Hash128 in canonical byte order), NONE_HASH
// included, and decode every encoding back (a canonical-CBOR reader, a
// pickle opcode walker with frame checks) to the tokens and extras that went in.
// Inputs are capped (fuzzMaxTokens, fuzzMaxName) so one run stays cheap.

const (
	fuzzMaxTokens = 2048
	fuzzMaxName   = 300 // crosses the CBOR 23/24 and pickle 255/256 length boundaries
)

// fuzzInput turns raw fuzz bytes into chain inputs: 4 bytes per token (LE),
// block size 1..64.
func fuzzInput(raw []byte, bs uint8, lora, salt string) ([]int32, int, []byte, []byte) {
	if len(raw) > 4*fuzzMaxTokens {
		raw = raw[:4*fuzzMaxTokens]
	}
	tokens := make([]int32, len(raw)/4)
	for i := range tokens {
		tokens[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	if len(lora) > fuzzMaxName {
		lora = lora[:fuzzMaxName]
	}
	if len(salt) > fuzzMaxName {
		salt = salt[:fuzzMaxName]
	}
	return tokens, int(bs%64) + 1, []byte(lora), []byte(salt)
}

func le32(ts ...int32) []byte {
	var b []byte
	for _, t := range ts {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return b
}

// addSeeds seeds a target with vector-like inputs (shared/vectors via hash/testdata).
func addSeeds(f *testing.F) {
	f.Add(le32(1, 2, 3, 4, 5, 6, 7, 8), uint8(3), "", "")
	f.Add(le32(1, 2, 3, 4, 5, 6, 7, 8), uint8(3), "adapter-A", "tenant-salt")
	f.Add(le32(1, 2, 3, 4, 5, 6), uint8(3), "", "salty")
	f.Add(le32(-2147483648, -257, -256, -25, -24, -1, 0, 23, 24, 255, 256, 2147483647), uint8(11), "", "")
	f.Add(le32(-2147483648, -1, 0, 255, 256, 65535, 65536, 2147483647), uint8(7), "模型-适配器", "盐值-🚀")
	f.Add(le32(785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 44801, 2266, 25, 8287, 1411, 27217), uint8(15), "", "")
	f.Add(le32(11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34, 41, 42, 43, 44), uint8(3), "", "")
	f.Add(le32(10, 20, 30, 40), uint8(3), "aaaaaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaa")
	f.Add([]byte{}, uint8(0), "", "")
	f.Add(le32(7), uint8(0), "\xff", "")
	f.Add(le32(256, 70000), uint8(0xf5), "", "") // pickle: one block past 64 KiB
	f.Add(le32(1, 2, 3, 4), uint8(3), "é", "é")  // pickle: shared str -> BINGET
}

// FuzzCBORChain: the canonical-CBOR algorithms, sha256_cbor and xxhash_cbor.
func FuzzCBORChain(f *testing.F) {
	addSeeds(f)
	profiles := []hash.Profile{
		resolve(f, hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}),
		resolve(f, hash.Spec{Strategy: "vllm_v1", Algorithm: "xxhash_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}),
	}
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, lora, salt string) {
		tokens, b, l, s := fuzzInput(raw, bs, lora, salt)
		for i := range profiles {
			p := &profiles[i]
			if keys, ok := checkChain(t, p, tokens, b, l, s); ok {
				checkVLLM(t, p, tokens, b, l, s, keys, hash.AppendCBORSeed, hash.AppendCBORBlock, decodeCBORBlock)
			}
		}
	})
}

// FuzzPickleChain: the pickle algorithms, sha256 and xxhash.
func FuzzPickleChain(f *testing.F) {
	addSeeds(f)
	profiles := []hash.Profile{
		resolve(f, hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "random", IndexProjection: "low64_be"}),
		resolve(f, hash.Spec{Strategy: "vllm_v1", Algorithm: "xxhash", PythonHashSeed: "random", IndexProjection: "low64_be"}),
	}
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, lora, salt string) {
		tokens, b, l, s := fuzzInput(raw, bs, lora, salt)
		if bs >= 0xf0 && len(tokens) > 0 {
			// One block of >= 33,000 tokens: its pickle passes 64 KiB even with 2-byte
			// ints, so the FRAME commit-early path runs (checked by the walker).
			for len(tokens) < 33000 {
				tokens = append(tokens, tokens...)
			}
			b = len(tokens)
		}
		for i := range profiles {
			p := &profiles[i]
			if keys, ok := checkChain(t, p, tokens, b, l, s); ok {
				checkVLLM(t, p, tokens, b, l, s, keys, hash.AppendPickleSeed, hash.AppendPickleBlock, decodePickleBlock)
			}
		}
	})
}

func FuzzSGLangChain(f *testing.F) {
	addSeeds(f)
	sg := resolve(f, hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"})
	bi := resolve(f, hash.Spec{Strategy: "sglang_bigram", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"})
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, lora, salt string) {
		tokens, b, l, s := fuzzInput(raw, bs, lora, salt)
		for _, p := range []*hash.Profile{&sg, &bi} {
			keys, ok := checkChain(t, p, tokens, b, l, s)
			if !ok {
				continue
			}
			// Reference: SHA-256 over parent || u32le payload, first 8 bytes BE.
			var parent []byte
			if len(s) > 0 {
				r := sha256.Sum256(append([]byte("sglang-cache-salt-v1\x00"), s...))
				parent = r[:]
			}
			logical := len(tokens)
			if p.Strategy == hash.StrategySGLangBigram {
				logical = max(len(tokens)-1, 0)
			}
			for i, k := range keys {
				msg := append([]byte{}, parent...)
				for q := i * b; q < min((i+1)*b, logical); q++ {
					msg = append(msg, le32(tokens[q])...)
					if p.Strategy == hash.StrategySGLangBigram {
						msg = append(msg, le32(tokens[q+1])...)
					}
				}
				d := sha256.Sum256(msg)
				if want := binary.BigEndian.Uint64(d[:8]); k != want {
					t.Fatalf("%v block %d: %#x, want %#x", p.Strategy, i, k, want)
				}
				parent = d[:]
			}
			// LoRA never enters the SGLang hash.
			other, err := hash.AppendChain(nil, p, tokens, b, []byte("other-lora"), s)
			if err != nil || !equal(other, keys) {
				t.Fatalf("%v: LoRA changed the chain", p.Strategy)
			}
		}
	})
}

func FuzzXXH3Chain(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, lora, salt string) {
		tokens, b, l, s := fuzzInput(raw, bs, lora, salt)
		p := hash.DefaultProfile()
		p.XXH3Seed = uint64(bs) * 0x9e3779b97f4a7c15 // vary the base seed too
		keys, ok := checkChain(t, &p, tokens, b, l, s)
		if !ok {
			t.Fatal("xxh3 chain must accept any input")
		}
		local, seq := p.XXH3Seeds(l, s)
		if got := hash.AppendXXH3ChainSeeds(nil, local, seq, 0, false, tokens, b); !equal(got, keys) {
			t.Fatalf("AppendXXH3ChainSeeds %v, want %v", got, keys)
		}
		// Rebuild from the primitives.
		for i, k := range keys {
			h := hash.XXH3Local(tokens[i*b:(i+1)*b], local)
			if i > 0 {
				h = hash.XXH3Seq(keys[i-1], h, seq)
			}
			if h != k {
				t.Fatalf("block %d: primitives %d, chain %d", i, h, k)
			}
		}
		// Continuing from any block with hasParent equals the one-shot chain.
		if n := len(keys); n > 1 {
			k := n / 2
			tail := hash.AppendXXH3ChainSeeds(nil, local, seq, keys[k-1], true, tokens[k*b:], b)
			if !equal(tail, keys[k:]) {
				t.Fatalf("continuation from block %d differs", k)
			}
		}
		if len(l) == 0 && len(s) == 0 {
			if got := hash.AppendXXH3Chain(nil, p.XXH3Seed, 0, false, tokens, b); !equal(got, keys) {
				t.Fatal("AppendXXH3Chain differs without namespace")
			}
		}
	})
}

func resolve(f *testing.F, s hash.Spec) hash.Profile {
	p, err := hash.Resolve(s)
	if err != nil {
		f.Fatal(err)
	}
	return p
}

// checkChain runs the strategy-independent properties and returns the keys, or
// ok=false when the input is (correctly) rejected.
func checkChain(t *testing.T, p *hash.Profile, tokens []int32, bs int, lora, salt []byte) ([]uint64, bool) {
	t.Helper()
	defer hash.SetBackend("auto")
	var ref []uint64
	var refErr error
	for i, be := range []string{"stdlib", "simd", "shani"} {
		if err := hash.SetBackend(be); err != nil {
			if be == "shani" {
				continue // this CPU lacks the SHA extensions
			}
			t.Fatal(err)
		}
		keys, err := hash.AppendChain(nil, p, tokens, bs, lora, salt)
		if i == 0 {
			ref, refErr = keys, err
		} else if !equal(keys, ref) || !sameErr(err, refErr) {
			t.Fatalf("%v: backends disagree: %v (%v) vs %v (%v)", p.Strategy, keys, err, ref, refErr)
		}
	}
	var c hash.Chain
	resetErr := c.Reset(p, tokens, bs, lora, salt)
	if !sameErr(resetErr, refErr) {
		t.Fatalf("%v: Reset error %v, AppendChain error %v", p.Strategy, resetErr, refErr)
	}
	if refErr != nil {
		want := expectedErr(p, tokens, lora, salt)
		if want == nil || !errors.Is(refErr, want) {
			t.Fatalf("%v: unexpected error %v (want %v)", p.Strategy, refErr, want)
		}
		if c.Blocks() != 0 {
			t.Fatal("rejected chain has blocks")
		}
		return nil, false
	}
	if want := expectedErr(p, tokens, lora, salt); want != nil {
		t.Fatalf("%v: accepted input that should fail with %v", p.Strategy, want)
	}
	if c.Blocks() != len(ref) || c.Computed() != 0 {
		t.Fatalf("%v: Blocks %d, eager %d, computed %d", p.Strategy, c.Blocks(), len(ref), c.Computed())
	}
	// Lazy, out of order: the middle block first, then everything.
	if n := len(ref); n > 0 {
		if c.At(n/2) != ref[n/2] || c.Computed() != n/2+1 {
			t.Fatalf("%v: At(%d) wrong or computed %d", p.Strategy, n/2, c.Computed())
		}
	}
	for i := range ref {
		if c.At(i) != ref[i] {
			t.Fatalf("%v: lazy block %d differs", p.Strategy, i)
		}
	}
	// Prefix consistency at a few cut points.
	for _, k := range []int{0, 1, len(ref) / 3, len(ref) - 1, len(ref)} {
		if k < 0 || k > len(ref) {
			continue
		}
		n := c.MatchedTokens(k)
		if k > 0 && p.Strategy == hash.StrategySGLangBigram {
			n++ // position q covers tokens q and q+1
		}
		pre, err := hash.AppendChain(nil, p, tokens[:n], bs, lora, salt)
		if err != nil || !equal(pre, ref[:k]) {
			t.Fatalf("%v: prefix of %d blocks (%d tokens): %v (%v), want %v", p.Strategy, k, n, pre, err, ref[:k])
		}
	}
	return ref, true
}

// expectedErr is the documented rejection for an input, or nil.
func expectedErr(p *hash.Profile, tokens []int32, lora, salt []byte) error {
	switch p.Strategy {
	case hash.StrategyVLLMv1:
		if !utf8.Valid(lora) || !utf8.Valid(salt) {
			return hash.ErrInvalidUTF8
		}
	case hash.StrategySGLang, hash.StrategySGLangBigram:
		for _, t := range tokens {
			if t < 0 {
				return hash.ErrNegativeToken
			}
		}
	}
	return nil
}

// checkVLLM rebuilds the chain from the encoders and a reference digest
// (crypto/sha256, or XXH3-128 in canonical byte order) and decodes each
// encoding back to its inputs.
func checkVLLM(t *testing.T, p *hash.Profile, tokens []int32, bs int, lora, salt []byte, keys []uint64,
	encSeed func([]byte, string) []byte, enc func([]byte, []byte, []int32, [][]byte) []byte, dec func([]byte) (block, error)) {
	t.Helper()
	digest := refDigest(p.Algorithm)
	parent := digest(encSeed(nil, p.Spec.PythonHashSeed)) // NONE_HASH
	if root := p.RootDigest; !bytes.Equal(parent, root[:len(parent)]) {
		t.Fatalf("%v: root %x, want %x", p.Algorithm, root, parent)
	}
	var buf []byte
	for i, k := range keys {
		var extras [][]byte
		if len(lora) > 0 {
			extras = append(extras, lora)
		}
		if i == 0 && len(salt) > 0 {
			extras = append(extras, salt)
		}
		blk := tokens[i*bs : (i+1)*bs]
		buf = enc(buf[:0], parent, blk, extras)
		got, err := dec(buf)
		if err != nil {
			t.Fatalf("%v block %d: decode: %v\n%x", p.Algorithm, i, err, buf)
		}
		if !bytes.Equal(got.parent, parent) || !equal32(got.tokens, blk) || !equalExtras(got.extras, extras) {
			t.Fatalf("%v block %d: round trip %+v, want parent %x tokens %v extras %q", p.Algorithm, i, got, parent, blk, extras)
		}
		parent = digest(buf)
		if want := binary.BigEndian.Uint64(parent[len(parent)-8:]); k != want {
			t.Fatalf("%v block %d: chain %d, encoder+digest %d", p.Algorithm, i, k, want)
		}
	}
}

// refDigest is the reference block hash of a vLLM algorithm: SHA-256, or
// XXH3-128 as python-xxhash's xxh3_128_digest lays it out (high 64 bits,
// then low 64 bits, big-endian; 16 bytes).
func refDigest(a hash.Algorithm) func([]byte) []byte {
	switch a {
	case hash.AlgoXXHashCBOR, hash.AlgoXXHashPickle:
		return func(b []byte) []byte {
			h := xxh3.Hash128(b)
			return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, h.Hi), h.Lo)
		}
	}
	return func(b []byte) []byte {
		d := sha256.Sum256(b)
		return d[:]
	}
}

// block is a decoded vLLM block value; extras nil means None/null.
type block struct {
	parent []byte
	tokens []int32
	extras [][]byte
}

// decodeCBORBlock reads [bytes, [int...], null | [text...]] and rejects any
// non-shortest head, so it also checks canonical form.
func decodeCBORBlock(b []byte) (block, error) {
	var out block
	pos := 0
	head := func() (major byte, arg uint64, err error) {
		if pos >= len(b) {
			return 0, 0, errors.New("truncated head")
		}
		major, info := b[pos]>>5, b[pos]&31
		pos++
		var n int
		switch {
		case info < 24:
			return major, uint64(info), nil
		case info == 24:
			n = 1
		case info == 25:
			n = 2
		case info == 26:
			n = 4
		case info == 27:
			n = 8
		default:
			return major, uint64(info), nil // simple values (null) are checked by the caller
		}
		if pos+n > len(b) {
			return 0, 0, errors.New("truncated argument")
		}
		for _, c := range b[pos : pos+n] {
			arg = arg<<8 | uint64(c)
		}
		pos += n
		if least := map[int]uint64{1: 24, 2: 1 << 8, 4: 1 << 16, 8: 1 << 32}[n]; arg < least {
			return 0, 0, fmt.Errorf("non-canonical head %d for %d", n, arg)
		}
		return major, arg, nil
	}
	take := func(n uint64) ([]byte, error) {
		if uint64(len(b)-pos) < n {
			return nil, errors.New("truncated payload")
		}
		s := b[pos : pos+int(n)]
		pos += int(n)
		return s, nil
	}
	if m, a, err := head(); err != nil || m != 4 || a != 3 {
		return out, fmt.Errorf("outer: %d %d %v", m, a, err)
	}
	m, a, err := head()
	if err != nil || m != 2 {
		return out, fmt.Errorf("parent: %d %v", m, err)
	}
	if out.parent, err = take(a); err != nil {
		return out, err
	}
	m, n, err := head()
	if err != nil || m != 4 {
		return out, fmt.Errorf("tokens: %d %v", m, err)
	}
	out.tokens = []int32{}
	for range n {
		m, a, err := head()
		switch {
		case err != nil:
			return out, err
		case m == 0 && a <= 1<<31-1:
			out.tokens = append(out.tokens, int32(a))
		case m == 1 && a <= 1<<31-1:
			out.tokens = append(out.tokens, int32(-1-int64(a)))
		default:
			return out, fmt.Errorf("token: major %d arg %d", m, a)
		}
	}
	if pos < len(b) && b[pos] == 0xf6 {
		pos++
	} else {
		m, n, err := head()
		if err != nil || m != 4 || n == 0 {
			return out, fmt.Errorf("extras: %d %d %v", m, n, err)
		}
		for range n {
			m, a, err := head()
			if err != nil || m != 3 {
				return out, fmt.Errorf("extra: %d %v", m, err)
			}
			s, err := take(a)
			if err != nil {
				return out, err
			}
			out.extras = append(out.extras, s)
		}
	}
	if pos != len(b) {
		return out, fmt.Errorf("%d trailing bytes", len(b)-pos)
	}
	return out, nil
}

// decodePickleBlock walks the opcodes the block pickle may use, checking frame
// accounting (each FRAME's length ends exactly on an opcode boundary, no opcode or
// payload straddles a frame end, frames under 4 bytes are never written, payloads of
// 64 KiB or more sit outside frames) and that every bytes/str/tuple is memoized once
// or, for CPython's shared one-character strings, referenced with BINGET.
func decodePickleBlock(b []byte) (block, error) {
	var out block
	if len(b) < 3 || b[0] != 0x80 || b[1] != 5 {
		return out, errors.New("missing PROTO 5")
	}
	pos, frameEnd := 2, -1 // frameEnd: end offset of the current frame, -1 outside
	type mark struct{}
	var stack, memo []any
	refs := 0 // BINGETs
	need := func(n int) ([]byte, error) {
		if n < 0 || len(b)-pos < n {
			return nil, errors.New("truncated")
		}
		if frameEnd >= 0 && pos+n > frameEnd {
			return nil, errors.New("read straddles frame end")
		}
		s := b[pos : pos+n]
		pos += n
		return s, nil
	}
	payload := func(lenBytes int) ([]byte, error) {
		lb, err := need(lenBytes)
		if err != nil {
			return nil, err
		}
		var n uint64
		for i := len(lb) - 1; i >= 0; i-- {
			n = n<<8 | uint64(lb[i])
		}
		if n >= 64*1024 && frameEnd >= 0 {
			return nil, errors.New("large payload inside a frame")
		}
		if n > uint64(len(b)) {
			return nil, errors.New("payload length beyond input")
		}
		return need(int(n))
	}
	popTuple := func(n int) ([]any, error) {
		if len(stack) < n {
			return nil, errors.New("stack underflow")
		}
		t := append([]any{}, stack[len(stack)-n:]...)
		stack = stack[:len(stack)-n]
		return t, nil
	}
	for {
		if frameEnd >= 0 && pos == frameEnd {
			frameEnd = -1
		}
		op, err := need(1)
		if err != nil {
			return out, err
		}
		switch op[0] {
		case 0x95: // FRAME
			if frameEnd >= 0 {
				return out, errors.New("FRAME inside a frame")
			}
			lb, err := need(8)
			if err != nil {
				return out, err
			}
			n := binary.LittleEndian.Uint64(lb)
			if n < 4 || n > uint64(len(b)-pos) {
				return out, fmt.Errorf("bad frame length %d", n)
			}
			frameEnd = pos + int(n)
		case 0x43, 0x42, 0x8e: // SHORT_BINBYTES, BINBYTES, BINBYTES8
			s, err := payload(map[byte]int{0x43: 1, 0x42: 4, 0x8e: 8}[op[0]])
			if err != nil {
				return out, err
			}
			stack = append(stack, s)
		case 0x8c, 0x58, 0x8d: // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
			s, err := payload(map[byte]int{0x8c: 1, 0x58: 4, 0x8d: 8}[op[0]])
			if err != nil {
				return out, err
			}
			stack = append(stack, string(s))
		case 0x4b, 0x4d, 0x4a: // BININT1, BININT2, BININT
			w := map[byte]int{0x4b: 1, 0x4d: 2, 0x4a: 4}[op[0]]
			s, err := need(w)
			if err != nil {
				return out, err
			}
			var v int32
			switch w {
			case 1:
				v = int32(s[0])
			case 2:
				v = int32(binary.LittleEndian.Uint16(s))
			default:
				v = int32(binary.LittleEndian.Uint32(s))
				if v >= 0 && v <= 0xffff {
					return out, fmt.Errorf("BININT for %d: not the shortest form", v)
				}
			}
			stack = append(stack, v)
		case 0x94: // MEMOIZE
			if len(stack) == 0 {
				return out, errors.New("MEMOIZE on empty stack")
			}
			memo = append(memo, stack[len(stack)-1])
		case 0x68: // BINGET: only for strings CPython shares ("" or one char < U+0100)
			s, err := need(1)
			if err != nil {
				return out, err
			}
			if int(s[0]) >= len(memo) {
				return out, fmt.Errorf("BINGET %d of %d", s[0], len(memo))
			}
			str, ok := memo[s[0]].(string)
			if r := []rune(str); !ok || len(r) > 1 || len(r) == 1 && r[0] > 0xff {
				return out, fmt.Errorf("BINGET of a non-shared object %q", memo[s[0]])
			}
			stack = append(stack, str)
			refs++
		case 0x28: // MARK
			stack = append(stack, mark{})
		case 0x74: // TUPLE
			i := len(stack) - 1
			for i >= 0 {
				if _, ok := stack[i].(mark); ok {
					break
				}
				i--
			}
			if i < 0 {
				return out, errors.New("TUPLE without MARK")
			}
			t := append([]any{}, stack[i+1:]...)
			if len(t) <= 3 {
				return out, errors.New("MARK/TUPLE for a tuple of 3 or fewer")
			}
			stack = append(stack[:i], t)
		case 0x85, 0x86, 0x87: // TUPLE1..3
			t, err := popTuple(int(op[0]-0x85) + 1)
			if err != nil {
				return out, err
			}
			stack = append(stack, t)
		case 0x29: // EMPTY_TUPLE
			stack = append(stack, []any{})
		case 0x4e: // NONE
			stack = append(stack, nil)
		case 0x2e: // STOP
			if pos != len(b) || frameEnd >= 0 && pos != frameEnd {
				return out, errors.New("STOP before the end")
			}
			if len(stack) != 1 {
				return out, fmt.Errorf("stack has %d items at STOP", len(stack))
			}
			return toBlock(stack[0], len(memo)+refs)
		default:
			return out, fmt.Errorf("unexpected opcode %#x at %d", op[0], pos-1)
		}
	}
}

// toBlock converts the unpickled value; memo is the number of MEMOIZE plus BINGET
// opcodes, which must be one per bytes/str/non-empty tuple.
func toBlock(v any, memo int) (block, error) {
	var out block
	top, ok := v.([]any)
	if !ok || len(top) != 3 {
		return out, errors.New("not a 3-tuple")
	}
	if out.parent, ok = top[0].([]byte); !ok {
		return out, errors.New("parent is not bytes")
	}
	toks, ok := top[1].([]any)
	if !ok {
		return out, errors.New("tokens is not a tuple")
	}
	out.tokens = []int32{}
	for _, x := range toks {
		i, ok := x.(int32)
		if !ok {
			return out, errors.New("token is not an int")
		}
		out.tokens = append(out.tokens, i)
	}
	wantMemo := 2 // parent, outer tuple
	if len(toks) > 0 {
		wantMemo++ // the empty tuple is a singleton and is not memoized
	}
	if top[2] != nil {
		ex, ok := top[2].([]any)
		if !ok || len(ex) == 0 {
			return out, errors.New("extras is not None or a non-empty tuple")
		}
		for _, x := range ex {
			s, ok := x.(string)
			if !ok {
				return out, errors.New("extra is not a str")
			}
			out.extras = append(out.extras, []byte(s))
		}
		wantMemo += 1 + len(ex)
	}
	if memo != wantMemo {
		return out, fmt.Errorf("%d MEMOIZE, want %d", memo, wantMemo)
	}
	return out, nil
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equal32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalExtras(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// fuzzMemo is shared by every FuzzMemoChain input: one small memo (4 KiB, 64
// digests, and 16 KiB of recent prompts) that keeps evicting, so inputs meet
// entries of earlier inputs under other profiles, LoRAs, salts and block sizes.
var fuzzMemo = hash.NewMemoWithPrompts(4096, 16<<10)

// FuzzMemoChain: a chain reading and filling a shared memo returns the keys
// and errors of a chain without one, for every memo-served profile, walked
// three times (cold, from the digest table, from the recent prompt it was
// stored as), then on a one-token-longer prompt (served in part) and on one
// whose middle token differs (diverging from the stored one).
func FuzzMemoChain(f *testing.F) {
	addSeeds(f)
	profiles := []hash.Spec{
		{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"},
		{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "00", IndexProjection: "low64_be"},
		{Strategy: "vllm_v1", Algorithm: "xxhash_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}, // memo skipped
		{Strategy: "vllm_v1", Algorithm: "xxhash", PythonHashSeed: "00", IndexProjection: "low64_be"},     // memo skipped
		{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"},
		{Strategy: "sglang_bigram", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"},
	}
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, lora, salt string) {
		tokens, blockSize, l, s := fuzzInput(raw, bs, lora, salt)
		var on hash.Chain
		on.SetMemo(fuzzMemo)
		for _, sp := range profiles {
			p, err := hash.Resolve(sp)
			if err != nil {
				t.Fatal(err)
			}
			longer := append(tokens[:len(tokens):len(tokens)], 42)
			diverged := slices.Clone(tokens)
			if len(diverged) > 0 {
				diverged[len(diverged)/2]++
			}
			for _, toks := range [][]int32{tokens, longer, diverged} {
				want, werr := hash.AppendChain(nil, &p, toks, blockSize, l, s)
				for pass := 0; pass < 3; pass++ {
					err := on.Reset(&p, toks, blockSize, l, s)
					if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
						t.Fatalf("%v: memo chain error %v, plain %v", sp, err, werr)
					}
					if err != nil {
						continue
					}
					for i := 0; i < on.Blocks(); i++ {
						if k := on.At(i); i >= len(want) || k != want[i] {
							t.Fatalf("%v pass %d: block %d differs with the memo", sp, pass, i)
						}
					}
					if on.Blocks() != len(want) {
						t.Fatalf("%v: %d blocks with the memo, %d without", sp, on.Blocks(), len(want))
					}
				}
			}
		}
	})
}
