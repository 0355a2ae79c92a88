package hash

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// refCBORInts is the straightforward CBOR int encoder: one shortest-form head per
// token through the generic appendCBORHead.
func refCBORInts(dst []byte, tokens []int32) []byte {
	for _, t := range tokens {
		if t < 0 {
			dst = appendCBORHead(dst, cborNeg, uint64(-1-int64(t)))
		} else {
			dst = appendCBORHead(dst, cborUint, uint64(t))
		}
	}
	return dst
}

// refPickleInts is the straightforward pickle int encoder, opcode by opcode.
func refPickleInts(dst []byte, tokens []int32) []byte {
	for _, t := range tokens {
		switch {
		case t >= 0 && t <= 0xff:
			dst = append(dst, opBinInt1, byte(t))
		case t >= 0 && t <= 0xffff:
			dst = append(dst, opBinInt2, byte(t), byte(t>>8))
		default:
			dst = binary.LittleEndian.AppendUint32(append(dst, opBinInt), uint32(t))
		}
	}
	return dst
}

// intTokens draws n tokens mixing every width class of both encoders and their
// boundaries: CBOR 0..23 inline, 24..255, 256..65535, above, and negatives of
// each size; pickle's 255/256 and 65535/65536 edges; the int32 extremes.
func intTokens(r *rand.Rand, n int) []int32 {
	edges := []int32{0, 1, 23, 24, 25, 0xff, 0x100, 0xffff, 0x10000, math.MaxInt32,
		-1, -24, -25, -0x100, -0x101, -0x10000, -0x10001, math.MinInt32}
	out := make([]int32, n)
	for i := range out {
		switch r.IntN(7) {
		case 0:
			out[i] = int32(r.IntN(24))
		case 1:
			out[i] = int32(24 + r.IntN(256-24))
		case 2:
			out[i] = int32(256 + r.IntN(65536-256))
		case 3:
			out[i] = int32(65536 + r.IntN(math.MaxInt32-65536))
		case 4:
			out[i] = -1 - int32(r.IntN(70000)) // negatives: inline, 1- and 2-byte, 4-byte
		case 5:
			out[i] = int32(r.Uint32())
		default:
			out[i] = edges[r.IntN(len(edges))]
		}
	}
	return out
}

// TestPutCBORInts: the branch-free encoder against refCBORInts over random
// mixes of every width class (lengths 0..70, so tails and the 8-byte slack are
// exercised), the boundaries one by one, and through appendCBORTokens into a
// reused, dirty buffer.
func TestPutCBORInts(t *testing.T) {
	forEachIntsPath(t, func(t *testing.T) {
		r := testPutInts(t, putCBORInts, refCBORInts, 3)
		buf := make([]byte, 0, 8)
		for range 200 {
			tokens := intTokens(r, r.IntN(600))
			buf = appendCBORTokens(append(buf[:0], 0xaa), tokens)
			want := refCBORInts(appendCBORHead([]byte{0xaa}, cborArray, uint64(len(tokens))), tokens)
			if !bytes.Equal(buf, want) {
				t.Fatalf("appendCBORTokens(%d tokens) differs from the reference", len(tokens))
			}
		}
	})
}

// TestPutPickleInts: the branch-free pickle encoder against refPickleInts, the
// same way.
func TestPutPickleInts(t *testing.T) {
	forEachIntsPath(t, func(t *testing.T) { testPutInts(t, putPickleInts, refPickleInts, 4) })
}

// forEachIntsPath runs f on the scalar encoders, the AVX ones (4 tokens per
// step) and the AVX-512 ones (8 per step, the AVX ones for the rest), each
// where the CPU has it.
func forEachIntsPath(t *testing.T, f func(t *testing.T)) {
	defer restoreIntsPaths()()
	for _, p := range intsPaths {
		if !p.have {
			t.Logf("this CPU lacks the %s path", p.name)
			continue
		}
		useIntsAVX512, useIntsAVX = p.avx512, p.avx
		t.Run(p.name, f)
	}
}

// intsPaths are the token encoders' paths, by the switches that select them.
var intsPaths = []struct {
	name        string
	have        bool // this CPU has it
	avx512, avx bool
}{
	{"scalar", true, false, false},
	{"avx", haveIntsAVX, false, true},
	{"avx512", haveIntsAVX512 && haveIntsAVX, true, true},
}

// restoreIntsPaths returns a function that sets the path switches back to
// what they are now.
func restoreIntsPaths() func() {
	v512, v := useIntsAVX512, useIntsAVX
	return func() { useIntsAVX512, useIntsAVX = v512, v }
}

// testPutInts checks put against ref: random token mixes into a dirty
// buffer, every value in -70000..70000 alone and eight at a time (the vector
// path). It returns its random source for further checks.
func testPutInts(t *testing.T, put func([]byte, []int32) int, ref func([]byte, []int32) []byte, stream uint64) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, stream))
	out := make([]byte, 5*80+cborIntSlack)
	for round := range 3000 {
		tokens := intTokens(r, round%71)
		for i := range out {
			out[i] = 0xee
		}
		n := put(out[:5*len(tokens)+cborIntSlack], tokens)
		if want := ref(nil, tokens); !bytes.Equal(out[:n], want) {
			t.Fatalf("tokens %v:\n got % x\nwant % x", tokens, out[:n], want)
		}
	}
	for v := int64(-70000); v <= 70000; v++ {
		tok := []int32{int32(v)}
		n := put(out[:5+cborIntSlack], tok)
		if want := ref(nil, tok); !bytes.Equal(out[:n], want) {
			t.Fatalf("token %d: got % x, want % x", v, out[:n], want)
		}
	}
	// Every assignment of the width classes (both signs, each class's edges)
	// to a group of four tokens: every row of the 4-token paths' pair tables,
	// in either pair of a group.
	classes := []int32{0, 23, 24, 0xff, 0x100, 0xffff, 0x10000, math.MaxInt32,
		-1, -24, -25, -0x100, -0x101, -0x10000, -0x10001, math.MinInt32}
	var five [5]int32
	for i := range 1 << 16 {
		for j := range 4 {
			five[j+1] = classes[i>>(4*j)&15]
		}
		five[0] = classes[i&15]
		// Four tokens alone, and five: a group, then the scalar loop after it.
		for _, tok := range [][]int32{five[1:], five[:]} {
			n := put(out[:5*len(tok)+cborIntSlack], tok)
			if want := ref(nil, tok); !bytes.Equal(out[:n], want) {
				t.Fatalf("tokens %v: got % x, want % x", tok, out[:n], want)
			}
		}
	}
	// Eight near-equal tokens per value: every value through the vector path too.
	var eight [8]int32
	for v := int64(-70000); v <= 70000; v++ {
		for i := range eight {
			eight[i] = int32(v) + int32(i&1)
		}
		n := put(out[:40+cborIntSlack], eight[:])
		if want := ref(nil, eight[:]); !bytes.Equal(out[:n], want) {
			t.Fatalf("tokens %v: got % x, want % x", eight, out[:n], want)
		}
	}
	return r
}
