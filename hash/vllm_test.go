package hash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/zeebo/xxh3"
)

// TestVLLMSeedRoots: every seed root vector of the goldens and of the derived
// xxhash vectors — encoder bytes equal the pinned canonical_cbor_hex /
// pickle_hex / encoded_hex and Resolve derives root_digest at its length.
func TestVLLMSeedRoots(t *testing.T) {
	xx := loadXXHashDerived(t)
	forEachBackend(t, func(t *testing.T) {
		for _, tc := range []struct {
			file string
			g    *vllmGolden
			algo string
			enc  func([]byte, string) []byte
			h    func([]byte) []byte
		}{
			{"cbor", loadCBORGolden(t), "sha256_cbor", AppendCBORSeed, sha256Digest},
			{"pickle", loadPickleGolden(t), "sha256", AppendPickleSeed, sha256Digest},
			{"xxhash_cbor", &xx.XXHashCBOR, "xxhash_cbor", AppendCBORSeed, xxh128Digest},
			{"xxhash", &xx.XXHashPickle, "xxhash", AppendPickleSeed, xxh128Digest},
		} {
			if len(tc.g.SeedRootVectors) == 0 || tc.g.Profile.Algorithm != tc.algo {
				t.Fatalf("%s: no seed vectors or algorithm %q", tc.file, tc.g.Profile.Algorithm)
			}
			buf := make([]byte, 0, 64)
			for _, v := range tc.g.SeedRootVectors {
				want := v.CanonicalCBORHex + v.PickleHex + v.EncodedHex
				buf = tc.enc(buf[:0], v.PythonHashSeed) // dst == src[:0] reuse
				if got := hexOf(buf); got != want {
					t.Errorf("%s seed %q: encoded %s, want %s", tc.file, v.PythonHashSeed, got, want)
				}
				if got := tc.h(buf); hexOf(got) != v.RootDigest {
					t.Errorf("%s seed %q: digest %x, want %s", tc.file, v.PythonHashSeed, got, v.RootDigest)
				}
				p := mustResolve(t, Spec{"vllm_v1", tc.algo, v.PythonHashSeed, "low64_be"})
				if p.RootHex() != v.RootDigest {
					t.Errorf("%s seed %q: Resolve root %s, want %s", tc.file, v.PythonHashSeed, p.RootHex(), v.RootDigest)
				}
				if n := p.Algorithm.DigestSize(); !allZero(p.RootDigest[n:]) {
					t.Errorf("%s seed %q: root digest has bytes past its %d", tc.file, v.PythonHashSeed, n)
				}
			}
			if p := mustResolve(t, tc.g.spec()); p.RootHex() != tc.g.Profile.RootDigest {
				t.Errorf("%s profile root %s, want %s", tc.file, p.RootHex(), tc.g.Profile.RootDigest)
			}
		}
	})
}

func TestVLLMCBORGolden(t *testing.T) {
	g := loadCBORGolden(t)
	forEachBackend(t, func(t *testing.T) { checkVLLMGolden(t, g, AppendCBORBlock, sha256Digest) })
}

func TestVLLMPickleGolden(t *testing.T) {
	g := loadPickleGolden(t)
	forEachBackend(t, func(t *testing.T) { checkVLLMGolden(t, g, AppendPickleBlock, sha256Digest) })
}

// TestVLLMXXHashDerived: every Mooncake golden case re-hashed under xxhash_cbor
// and xxhash (derived_vllm_xxhash_vectors.json: CPython pickle, a CBOR encoder
// proven on the sha256_cbor golden, the xxHash C library). The pickle and CBOR
// bytes are the ones TestVLLMPickleGolden and TestVLLMCBORGolden prove with a
// 16-byte parent in place of the 32-byte one; encoded_len pins their length.
func TestVLLMXXHashDerived(t *testing.T) {
	xx := loadXXHashDerived(t)
	t.Run("xxhash_cbor", func(t *testing.T) { checkVLLMGolden(t, &xx.XXHashCBOR, AppendCBORBlock, xxh128Digest) })
	t.Run("xxhash", func(t *testing.T) { checkVLLMGolden(t, &xx.XXHashPickle, AppendPickleBlock, xxh128Digest) })
}

// TestXXH128Lengths pins the XXH3-128 the chain uses (zeebo/xxh3) and its
// canonical byte order against the xxHash C library at lengths crossing every
// XXH3 size class (0, 1-3, 4-8, 9-16, 17-128, 129-240, stripes, blocks).
func TestXXH128Lengths(t *testing.T) {
	xx := loadXXHashDerived(t)
	if xx.LengthPattern != "byte i = (i*131 + 7) mod 256" || len(xx.Lengths) < 30 {
		t.Fatalf("pattern %q, %d lengths", xx.LengthPattern, len(xx.Lengths))
	}
	var d [32]byte
	for _, v := range xx.Lengths {
		b := make([]byte, v.Len)
		for i := range b {
			b[i] = byte(i*131 + 7)
		}
		putXXH128(&d, xxh3.Hash128(b))
		if hexOf(d[:16]) != v.Digest || hexOf(xxh128Digest(b)) != v.Digest {
			t.Errorf("len %d: %x, want %s", v.Len, d[:16], v.Digest)
		}
	}
}

// checkVLLMGolden runs every case of a golden file through the encoder (bytes and
// digest under h) and through a reused Chain (keys and full parent digests).
func checkVLLMGolden(t *testing.T, g *vllmGolden, enc func([]byte, []byte, []int32, [][]byte) []byte, h func([]byte) []byte) {
	p := mustResolve(t, g.spec())
	n := p.Algorithm.DigestSize()
	var c Chain // one chain reused across cases
	var buf []byte
	checked := 0
	for _, tc := range g.Cases {
		tokens, lora, salt := tc.tokens(t), tc.lora(t), tc.salt()
		if err := c.Reset(&p, tokens, tc.BlockSize, lora, salt); err != nil {
			t.Fatalf("%s: Reset: %v", tc.Name, err)
		}
		if c.Blocks() != len(tc.Expected) {
			t.Fatalf("%s: Blocks()=%d, want %d", tc.Name, c.Blocks(), len(tc.Expected))
		}
		parent := p.RootDigest[:n]
		for i, want := range tc.Expected {
			blk := tokens[i*tc.BlockSize : (i+1)*tc.BlockSize]
			buf = enc(buf[:0], parent, blk, vllmExtras(i, lora, salt))
			switch {
			case want.PickleHex != "":
				if got := hexOf(buf); got != want.PickleHex {
					t.Errorf("%s block %d: encoded\n%s\nwant\n%s", tc.Name, i, got, want.PickleHex)
				}
			case want.PickleLen != 0 || want.EncodedLen != 0:
				if len(buf) != want.PickleLen+want.EncodedLen {
					t.Errorf("%s block %d: encoded %d bytes, want %d", tc.Name, i, len(buf), want.PickleLen+want.EncodedLen)
				}
			}
			d := h(buf)
			if hexOf(d) != want.Digest || len(d) != n {
				t.Errorf("%s block %d: digest %x, want %s", tc.Name, i, d, want.Digest)
			}
			key := c.At(i)
			if !bytes.Equal(c.parent[:n], d) || !allZero(c.parent[n:]) {
				t.Errorf("%s block %d: chain digest %x, want %x", tc.Name, i, c.parent, d)
			}
			if key != parseU64(t, want.ProjectedDecimal) {
				t.Errorf("%s block %d: key %d, want %s", tc.Name, i, key, want.ProjectedDecimal)
			}
			if got := strconv.FormatUint(key, 16); parseHexU64(t, want.ProjectedHex) != key {
				t.Errorf("%s block %d: key %s, want %s", tc.Name, i, got, want.ProjectedHex)
			}
			if key != binary.BigEndian.Uint64(d[n-8:]) {
				t.Errorf("%s block %d: key is not low64_be of the digest", tc.Name, i)
			}
			parent = d
			checked++
		}
		if tc.IncorrectLow64 != "" {
			checkIncorrectLow64(t, &tc, &p, enc)
		}
	}
	if checked == 0 {
		t.Fatal("no blocks checked")
	}
}

// checkIncorrectLow64 proves the fixture's "wrong parent" digest is what chaining from
// the 8-byte big-endian projection (bytes, not an int) gives, and that the real block-1
// digest differs from it.
func checkIncorrectLow64(t *testing.T, tc *vllmCase, p *Profile, enc func([]byte, []byte, []int32, [][]byte) []byte) {
	t.Helper()
	tokens, lora, salt := tc.tokens(t), tc.lora(t), tc.salt()
	var c Chain
	if err := c.Reset(p, tokens, tc.BlockSize, lora, salt); err != nil {
		t.Fatal(err)
	}
	c.At(0)
	d0 := c.parent
	c.At(1)
	if hexOf(c.parent[:]) == tc.IncorrectLow64 {
		t.Fatalf("%s: real block-1 digest equals incorrect_low64_parent_digest", tc.Name)
	}
	wrong := sha256.Sum256(enc(nil, d0[24:], tokens[tc.BlockSize:2*tc.BlockSize], vllmExtras(1, lora, salt)))
	if hexOf(wrong[:]) != tc.IncorrectLow64 {
		t.Errorf("%s: low64-parent digest %x, want %s", tc.Name, wrong, tc.IncorrectLow64)
	}
}

func allZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

func parseHexU64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) != 16 {
		t.Fatalf("bad projected_hex %q: %v", s, err)
	}
	return v
}

// TestVLLMAlgorithmsDiffer: identical inputs under the four vLLM algorithms never agree.
func TestVLLMAlgorithmsDiffer(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8}
		chains := map[string][]uint64{}
		for _, algo := range []string{"sha256_cbor", "sha256", "xxhash_cbor", "xxhash"} {
			p := mustResolve(t, Spec{"vllm_v1", algo, "0", "low64_be"})
			keys, err := AppendChain(nil, &p, tokens, 4, nil, nil)
			if err != nil || len(keys) != 2 {
				t.Fatalf("%s: %v %v", algo, keys, err)
			}
			for other, ok := range chains {
				for i := range keys {
					if keys[i] == ok[i] {
						t.Errorf("block %d: %s and %s both give %d", i, algo, other, keys[i])
					}
				}
			}
			chains[algo] = keys
		}
		// The literal keys from shared/reference §3 / wire-formats doc.
		if b := chains["sha256"]; b[0] != 10362225831949560093 || b[1] != 12472515041799373675 {
			t.Errorf("pickle keys %v", b)
		}
		if a := chains["sha256_cbor"]; a[0] != 2164874634404590027 || a[1] != 17270480062156288726 {
			t.Errorf("cbor keys %v", a)
		}
	})
}

// TestLoxilbVectors: the loxilb sha256_cbor and xxhash_cbor fixtures (cbor_hex,
// digest, u64) including the Qwen2.5 real-token blocks from a vLLM 0.17.0
// deployment, and the two-block chains they form from NONE_HASH.
func TestLoxilbVectors(t *testing.T) {
	var v loxilbVectors
	loadJSON(t, "loxilb_vllm_kv_hash_vectors.json", &v)
	roots := map[string]Profile{
		"sha256_cbor": mustResolve(t, Spec{"vllm_v1", "sha256_cbor", v.NoneHashSeed, "low64_be"}),
		"xxhash_cbor": mustResolve(t, Spec{"vllm_v1", "xxhash_cbor", v.NoneHashSeed, "low64_be"}),
	}
	for algo, want := range map[string]string{"sha256_cbor": v.NoneHashSHA256Hex, "xxhash_cbor": v.NoneHashXXHashHex} {
		if p := roots[algo]; p.RootHex() != want {
			t.Fatalf("%s NONE_HASH %s, want %s", algo, p.RootHex(), want)
		}
	}
	fixtures := v.Fixtures
	qwen, ok := v.Models["Qwen/Qwen2.5-7B-Instruct"]
	if !ok || len(qwen.Fixtures) == 0 {
		t.Fatal("no Qwen fixtures")
	}
	if qwen.NoneHashSHA256Hex != v.NoneHashSHA256Hex || qwen.NoneHashXXHashHex != v.NoneHashXXHashHex || qwen.BlockSize != v.BlockSize {
		t.Fatal("Qwen fixtures use another root or block size")
	}
	fixtures = append(fixtures, qwen.Fixtures...)
	forEachBackend(t, func(t *testing.T) {
		checked := map[string]int{}
		for _, f := range fixtures {
			var h func([]byte) []byte
			switch f.HashAlgo {
			case "sha256_cbor":
				h = sha256Digest
			case "xxhash_cbor":
				h = xxh128Digest
			default:
				t.Fatalf("%s: unexpected hash_algo %q", f.Name, f.HashAlgo)
			}
			parent := unhex(t, f.ParentHashHex)
			enc := AppendCBORBlock(nil, parent, f.Tokens, nil)
			if f.CBORHex != "" && hexOf(enc) != f.CBORHex {
				t.Errorf("%s: cbor %x, want %s", f.Name, enc, f.CBORHex)
			}
			if d := h(enc); hexOf(d) != f.DigestHex {
				t.Errorf("%s: digest %x, want %s", f.Name, d, f.DigestHex)
			}
			want := parseU64(t, f.HashUint64.String())
			// The same block through a Chain whose root is the fixture's parent.
			p := roots[f.HashAlgo]
			p.RootDigest = [32]byte{}
			copy(p.RootDigest[:], parent)
			keys, err := AppendChain(nil, &p, f.Tokens, v.BlockSize, nil, nil)
			if err != nil || len(keys) != 1 || keys[0] != want {
				t.Errorf("%s: chain keys %v (%v), want [%d]", f.Name, keys, err, want)
			}
			checked[f.HashAlgo]++
		}
		if checked["sha256_cbor"] != 6 || checked["xxhash_cbor"] != 6 { // 4 generic + 2 Qwen each
			t.Errorf("checked %v fixtures, want 6 of each", checked)
		}
		// block0 + block1 of each seed-rooted pair form a 2-block chain from NONE_HASH.
		for _, pair := range [][3]string{
			{"sha256_cbor", "sha256_cbor_block0_noneHashSeed0_parent_16tokens", "sha256_cbor_block1_chained_from_block0_noneHashSeed0"},
			{"sha256_cbor", "sha256_cbor_block0_noneHashSeed0_qwen25_7b", "sha256_cbor_block1_chained_from_block0_qwen25_7b"},
			{"xxhash_cbor", "xxhash_cbor_block0_noneHashSeed0_parent_16tokens", "xxhash_cbor_block1_chained_from_block0_noneHashSeed0"},
			{"xxhash_cbor", "xxhash_cbor_block0_noneHashSeed0_qwen25_7b", "xxhash_cbor_block1_chained_from_block0_qwen25_7b"},
		} {
			f0, f1 := findFixture(t, fixtures, pair[1]), findFixture(t, fixtures, pair[2])
			root := roots[pair[0]]
			if f0.ParentHashHex != root.RootHex() || f1.ParentHashHex != f0.DigestHex {
				t.Fatalf("%s does not chain from NONE_HASH through %s", pair[2], pair[1])
			}
			tokens := append(append([]int32(nil), f0.Tokens...), f1.Tokens...)
			var c Chain
			if err := c.Reset(&root, tokens, v.BlockSize, nil, nil); err != nil {
				t.Fatal(err)
			}
			if c.Blocks() != 2 || c.At(0) != parseU64(t, f0.HashUint64.String()) || hexOf(c.parent[:root.Algorithm.DigestSize()]) != f0.DigestHex ||
				c.At(1) != parseU64(t, f1.HashUint64.String()) || hexOf(c.parent[:root.Algorithm.DigestSize()]) != f1.DigestHex {
				t.Errorf("%s chain: %d blocks, last digest %x", pair[1], c.Blocks(), c.parent)
			}
		}
	})
}

func findFixture(t *testing.T, fs []loxilbFixture, name string) loxilbFixture {
	t.Helper()
	for _, f := range fs {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("fixture %s missing", name)
	return loxilbFixture{}
}

// TestCBORHeads pins every head width at its boundaries, including the reference §2.2
// examples (array 24 -> 98 18, text 23 -> 77, text 24 -> 78 18).
func TestCBORHeads(t *testing.T) {
	f := func(tokens []int32, want string) {
		t.Helper()
		got := appendCBORTokens(nil, tokens)
		if hexOf(got) != want {
			t.Errorf("tokens %v: %x, want %s", tokens, got, want)
		}
	}
	f(nil, "80")
	f([]int32{0, 23, 24, 255, 256, 65535, 65536}, "870017181818ff19010019ffff1a00010000")
	f([]int32{-1, -24, -25, -256, -257, -65536, -65537, -2147483648, 2147483647},
		"89"+"20"+"37"+"3818"+"38ff"+"390100"+"39ffff"+"3a00010000"+"3a7fffffff"+"1a7fffffff")
	head := func(major byte, v uint64, want string) {
		t.Helper()
		if got := hexOf(appendCBORHead(nil, major, v)); got != want {
			t.Errorf("head(%x,%d)=%s, want %s", major, v, got, want)
		}
	}
	head(cborArray, 24, "9818")
	head(cborText, 23, "77")
	head(cborText, 24, "7818")
	head(cborBytes, 32, "5820")
	head(cborText, 1<<32, "7b0000000100000000")
	got := AppendCBORBlock(nil, []byte{0xaa}, []int32{1}, [][]byte{[]byte("a"), []byte("bc")})
	if want := "8341aa8101826161626263"; hexOf(got) != want {
		t.Errorf("block %x, want %s", got, want)
	}
}

// TestPickleFramedMatchesSmall: the general framed encoder and the single-frame fast
// path agree wherever the fast path applies, for every tuple arity and int width.
func TestPickleFramedMatchesSmall(t *testing.T) {
	parent := bytes.Repeat([]byte{7}, 32)
	vals := []int32{0, 1, 255, 256, 65535, 65536, -1, -2147483648, 2147483647}
	for n := 0; n <= 6; n++ {
		tokens := make([]int32, n)
		for i := range tokens {
			tokens[i] = vals[(i*5+n)%len(vals)]
		}
		for _, extras := range [][][]byte{nil, {[]byte("l")}, {[]byte("l"), []byte("s")}, {{}, []byte("x"), []byte("y"), []byte("z")}} {
			a := appendPickleBlockSmall(nil, parent, tokens, extras)
			b := appendPickleBlockFramed(nil, parent, tokens, extras)
			if !bytes.Equal(a, b) {
				t.Errorf("n=%d extras=%q:\nsmall  %x\nframed %x", n, extras, a, b)
			}
		}
	}
	// Empty token tuple is EMPTY_TUPLE without MEMOIZE.
	if got := hexOf(AppendPickleBlock(nil, nil, nil, nil)); got != "8005950800000000000000430094294e87942e" {
		t.Errorf("empty block %s", got)
	}
}

// TestPickleFrameShort covers CPython's rule that a frame body under 4 bytes loses
// its FRAME header (unreachable through the block shapes, reachable for a bare str).
func TestPickleFrameShort(t *testing.T) {
	p := pickler{frameStart: -1}
	p.b = append(p.b, opProto, 5)
	p.op(opNone)
	p.op(opStop)
	p.commit()
	if got := hexOf(p.b); got != "80054e2e" {
		t.Errorf("short frame: %s", got)
	}
	// A >= 64 KiB str goes out unframed; the 3 trailing bytes (MEMOIZE, STOP) form a
	// frame too short for a header.
	big := bytes.Repeat([]byte("a"), frameTarget)
	got := AppendPickleSeed(nil, string(big))
	want := append([]byte{opProto, 5, opBinUnicode, 0, 0, 1, 0}, big...)
	want = append(want, opMemoize, opStop)
	if !bytes.Equal(got, want) {
		t.Errorf("large seed: head %x tail %x", got[:8], got[len(got)-4:])
	}
}

// TestPickleSharedLatin1: expected bytes from CPython 3.11 pickle.dumps((bytes(32),
// (1, 2, 3, 4), (lora, salt)), protocol=5) with lora and salt decoded separately
// (json.loads), as vLLM receives them. One-character strings below U+0100 are shared
// objects in CPython, so the salt becomes BINGET 2; anything else is written twice.
func TestPickleSharedLatin1(t *testing.T) {
	parent := make([]byte, 32)
	f := func(lora, salt, want string) {
		t.Helper()
		ex := [][]byte{[]byte(lora), []byte(salt)}
		small := AppendPickleBlock(nil, parent, []int32{1, 2, 3, 4}, ex)
		framed := appendPickleBlockFramed(nil, parent, []int32{1, 2, 3, 4}, ex)
		if hexOf(small) != want || hexOf(framed) != want {
			t.Errorf("lora %q salt %q:\nsmall  %x\nframed %x\nwant   %s", lora, salt, small, framed, want)
		}
	}
	const head = "80059539000000000000004320" + "0000000000000000000000000000000000000000000000000000000000000000" + "94284b014b024b034b047494"
	f("a", "a", head+"8c0161946802869487942e")
	f("é", "é", "8005953a000000000000004320"+head[26:]+"8c02c3a9946802869487942e")
	f("ab", "ab", "8005953d000000000000004320"+head[26:]+"8c026162948c02616294869487942e")
	f("a", "b", "8005953b000000000000004320"+head[26:]+"8c0161948c016294869487942e")
	f("€", "€", "8005953f000000000000004320"+head[26:]+"8c03e282ac948c03e282ac94869487942e")
	// With an empty token tuple the shared string is memo 1.
	if got := hexOf(AppendPickleBlock(nil, nil, nil, [][]byte{[]byte("z"), []byte("z")})); got != "8005950f00000000000000430094298c017a946801869487942e" {
		t.Errorf("empty tokens: %s", got)
	}
}
