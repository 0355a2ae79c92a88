package core

import (
	"math/rand"
	"reflect"
	"testing"
)

// TestEngineMapSlot: an entry whose count is 1 and whose plain hash is its
// key takes one slot of the key map, 16 bytes with the engine hash, and
// nothing in the other two (a slot that kept the plain hash and the count
// too took 32 bytes: about half as much memory again per block,
// BENCHMARKS.md).
func TestEngineMapSlot(t *testing.T) {
	var e engineMap
	if mt := reflect.TypeOf(e.keys); mt.Key().Size()+mt.Elem().Size() != 16 {
		t.Fatalf("key map slot is %d bytes, want 16", mt.Key().Size()+mt.Elem().Size())
	}
	for h := uint64(1); h <= 1000; h++ {
		e.put(h, engineRef{key: h * 3, plain: h * 3, n: 1})
	}
	if len(e.counts) != 0 || len(e.plains) != 0 {
		t.Fatalf("plain single-copy entries kept %d counts and %d plain hashes", len(e.counts), len(e.plains))
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
		if len(e.plains) > len(e.keys) || len(e.counts) > len(e.keys) {
			t.Fatalf("step %d: %d plain hashes and %d counts kept for %d entries", i, len(e.plains), len(e.counts), len(e.keys))
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
