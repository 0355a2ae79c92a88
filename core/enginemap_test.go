package core

import (
	"math/rand"
	"testing"
	"unsafe"
)

// TestEngineMapSlot: an engine map slot is 16 bytes, so with its 8-byte key
// it fits the map's 24-byte slot (a slot that kept the plain hash too took
// 32 bytes: about a fifth more memory per block, BENCHMARKS.md).
func TestEngineMapSlot(t *testing.T) {
	if n := unsafe.Sizeof(engineSlot{}); n != 16 {
		t.Fatalf("engineSlot is %d bytes, want 16", n)
	}
}

// TestEngineMapAgreesWithMap drives engineMap and a Go map of whole
// engineRefs with the same random puts (salted entries, whose plain hash is
// not their key, and unsalted ones, the same hash turning from one to the
// other), gets, deletes and resets, and compares every get and a full walk.
func TestEngineMapAgreesWithMap(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	var e engineMap
	ref := map[uint64]engineRef{}
	for i := 0; i < 200000; i++ {
		h := uint64(rng.Intn(3000))
		switch r := rng.Intn(100); {
		case r < 50:
			v := engineRef{key: rng.Uint64(), n: uint32(1 + rng.Intn(3))}
			v.plain = v.key
			if rng.Intn(4) == 0 {
				v.plain = rng.Uint64() // salted
			}
			e.put(h, v)
			ref[h] = v
		case r < 80:
			got, ok := e.get(h)
			want, wok := ref[h]
			if ok != wok || got != want {
				t.Fatalf("step %d: get(%d) = %+v %v, want %+v %v", i, h, got, ok, want, wok)
			}
		case r < 99:
			e.del(h)
			delete(ref, h)
		default:
			e.reset()
			clear(ref)
		}
		if e.len() != len(ref) {
			t.Fatalf("step %d: len %d want %d", i, e.len(), len(ref))
		}
		if len(e.plains) > len(e.m) {
			t.Fatalf("step %d: %d plain hashes kept for %d entries", i, len(e.plains), len(e.m))
		}
	}
	n := 0
	e.each(func(h uint64, r engineRef) bool {
		if ref[h] != r {
			t.Fatalf("each: %d = %+v, want %+v", h, r, ref[h])
		}
		n++
		return true
	})
	if n != len(ref) {
		t.Fatalf("each visited %d, want %d", n, len(ref))
	}
}
