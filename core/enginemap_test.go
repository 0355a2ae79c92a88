package core

import (
	"math/rand"
	"testing"
	"unsafe"

	"github.com/seed-c7a81618/conductor/hash"
)

// TestEngineMapSlot: an unsalted entry takes a 16-byte slot beside its
// 8-byte engine hash, and only a salted one keeps its plain hash (one map of
// slots that all kept it took 32 bytes a slot: about a fifth more memory per
// block, BENCHMARKS.md).
func TestEngineMapSlot(t *testing.T) {
	if n := unsafe.Sizeof(engineSlot{}); n != 16 {
		t.Fatalf("engineSlot is %d bytes, want 16", n)
	}
	var e engineMap
	for h := uint64(1); h <= 1000; h++ {
		e.put(h, engineRef{key: h * 3, plain: h * 3, n: uint32(h%3 + 1)})
	}
	e.put(1001, engineRef{key: 7, plain: 8, n: 1})
	if len(e.plain) != 1000 || len(e.salted) != 1 {
		t.Fatalf("1000 unsalted entries and 1 salted: %d plain-keyed, %d salted", len(e.plain), len(e.salted))
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
		for h := range e.salted {
			if _, dup := e.plain[h]; dup {
				t.Fatalf("step %d: hash %d in both maps", i, h)
			}
		}
	}
	n := 0
	for h, r := range e.all() {
		if ref[h] != r {
			t.Fatalf("all: %d = %+v, want %+v", h, r, ref[h])
		}
		n++
	}
	if n != len(ref) {
		t.Fatalf("all visited %d, want %d", n, len(ref))
	}
}

// TestEngineMapBoundedByBlockBound: a default-profile engine that never
// removes blocks, under a block bound, has its oldest blocks evicted, and
// its engine map (engine hash → standard key) is pruned with them instead
// of growing with every block it ever stored; the entries of held blocks
// stay, so a remove of the newest block still reaches it.
func TestEngineMapBoundedByBlockBound(t *testing.T) {
	const bound, n = 100, 3 * engineSlack
	ix := New(Options{MaxBlocksPerRegistration: bound, Logger: quietLogger()})
	r := engineReg(t, "a", 0, hash.Profile{})
	r.ProfileExplicit = false
	s := mustRegister(t, ix, r)
	for i := 0; i < n; i++ {
		b := stored("GPU", uint64(1000+i))
		b.Events[0].Tokens, b.Events[0].HasTokens = seqTokens(i*testBS, testBS), true
		if st := s.Apply(b); st.Dropped != 0 {
			t.Fatalf("block %d: %+v", i, st)
		}
	}
	sc := s.state[s.home]
	if held := s.HeldBlocks(); held > bound {
		t.Fatalf("held %d blocks, bound %d", held, bound)
	}
	if got, most := sc.engine.len(), 2*bound+engineSlack; got > most {
		t.Fatalf("engine map holds %d entries after %d stores, want at most %d", got, n, most)
	}
	held := s.HeldBlocks()
	if st := s.Apply(removed("GPU", uint64(1000+n-1))); st.Blocks != 1 || s.HeldBlocks() != held-1 {
		t.Fatalf("remove of the newest block: %+v, held %d -> %d", st, held, s.HeldBlocks())
	}
}

// TestEngineMapPruneKeepsPoolHeldParents: a default-profile engine's block P
// evicted by its block bound while a shared pool still holds P's key keeps
// its engine map entry through the prune: the pool's copy extends the
// engine's cpu_share and disk prefixes through P, so the engine's next block
// (parent P) is filed and found there, not dropped as unknown_parent.
func TestEngineMapPruneKeepsPoolHeldParents(t *testing.T) {
	ix := New(Options{MaxBlocksPerRegistration: 100, Logger: quietLogger()})
	r := engineReg(t, "a", 0, hash.Profile{})
	r.ProfileExplicit = false
	s := mustRegister(t, ix, r)
	pool := mustRegister(t, ix, poolReg("pool"))
	tok := seqTokens(1<<20, 2*testBS)
	keys := plainChain(tok, testBS, hash.DefaultXXH3Seed)
	pool.Apply(poolStored("cpu", "be", keys[0]))
	p := stored("GPU", 0xBEEF)
	p.Events[0].Tokens, p.Events[0].HasTokens = tok[:testBS], true
	s.Apply(p)
	for i := 0; i < 3*engineSlack; i++ { // evicts P from the engine, prunes the map
		b := stored("GPU", uint64(1000+i))
		b.Events[0].Tokens, b.Events[0].HasTokens = seqTokens(i*testBS, testBS), true
		s.Apply(b)
	}
	c := stored("GPU", 0xCAFE)
	c.Events[0].Tokens, c.Events[0].HasTokens = tok[testBS:], true
	c.Events[0].Parent, c.Events[0].HasParent = 0xBEEF, true
	if st := s.Apply(c); st.Dropped != 0 || st.Blocks != 1 {
		t.Fatalf("child of the pool-held parent: %+v", st)
	}
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tok}, res); err != nil {
		t.Fatal(err)
	}
	if a := row(res, "a"); a == nil || a.Device != 0 || a.CPUShare != 2*testBS || a.Disk != 2*testBS {
		t.Fatalf("row of a: %+v, want device 0, cpu_share and disk %d", a, 2*testBS)
	}
}
