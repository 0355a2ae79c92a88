package hash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestPadSHA256 checks the padding against FIPS 180-4 §5.1.1 worked by hand for
// the boundary lengths (55 bytes still fit one block, 56 need two) and,
// structurally, for every length up to 200, with garbage in the spare capacity.
func TestPadSHA256(t *testing.T) {
	f := func(n, wantLen int) {
		t.Helper()
		b := make([]byte, n, n+sha256PadMax)
		full := b[:cap(b)]
		for i := n; i < len(full); i++ {
			full[i] = 0xa5 // garbage the padding must overwrite
		}
		p := padSHA256(b)
		if len(p) != wantLen {
			t.Fatalf("n=%d: padded to %d bytes, want %d", n, len(p), wantLen)
		}
		if &p[0] != &full[0] {
			t.Errorf("n=%d: padded out of place despite capacity", n)
		}
		if p[n] != 0x80 {
			t.Errorf("n=%d: byte %d = %#x, want 0x80", n, n, p[n])
		}
		for i := n + 1; i < wantLen-8; i++ {
			if p[i] != 0 {
				t.Fatalf("n=%d: pad byte %d = %#x, want 0", n, i, p[i])
			}
		}
		if got := binary.BigEndian.Uint64(p[wantLen-8:]); got != uint64(8*n) {
			t.Errorf("n=%d: length field %d, want %d", n, got, 8*n)
		}
	}
	f(0, 64)
	f(1, 64)
	f(55, 64)
	f(56, 128)
	f(63, 128)
	f(64, 128)
	f(119, 128)
	f(120, 192)
	for n := 0; n <= 200; n++ {
		f(n, 64*((n+8)/64+1))
	}
	// Without spare capacity it still pads correctly (by reallocating).
	b := []byte("abc")
	if p := padSHA256(b[:3:3]); len(p) != 64 || p[3] != 0x80 || p[63] != 24 {
		t.Errorf("no capacity: % x", p)
	}
}

// TestSHA256NI compares the shani backend with crypto/sha256 on every message
// length from 0 to 1100 bytes (every padding case, 1 to 18 blocks) and on random
// lengths up to 70 KB, with random contents and a dirty scratch tail.
func TestSHA256NI(t *testing.T) {
	if !haveSHANI {
		t.Log("this CPU lacks the SHA extensions: sha256NI is unreachable, padding checked by TestPadSHA256")
		return
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, 0, 70_000+sha256PadMax)
	check := func(n int) {
		t.Helper()
		msg := buf[:n]
		for i := range buf[:cap(buf)] {
			buf[:cap(buf)][i] = byte(r.Uint32())
		}
		want := sha256.Sum256(msg)
		saved := bytes.Clone(msg)
		got := sum256(backendSHANI, msg)
		if got != want {
			t.Fatalf("len %d: shani %x, want %x", n, got, want)
		}
		if !bytes.Equal(msg, saved) {
			t.Fatalf("len %d: message modified", n)
		}
	}
	for n := 0; n <= 1100; n++ {
		check(n)
	}
	for range 50 {
		check(r.IntN(70_000))
	}
	// Known answer (FIPS 180-2 appendix B.1), independent of crypto/sha256.
	d := sum256(backendSHANI, append(make([]byte, 0, 80), "abc"...))
	if hexOf(d[:]) != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("sha256(abc) = %x", d)
	}
}
