package core

import (
	"strings"
	"sync"
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// Tests of binding a pool-only partition (rebind.go): a pool registered
// before the engines files blocks under the xxh3 default; the engine's
// registration binds the partition to its profile.

// poolRemoved is poolStored's remove.
func poolRemoved(medium, backend string, hashes ...uint64) *Batch {
	b := poolStored(medium, backend, hashes...)
	b.Events[0].Kind = EventRemoved
	b.Events[0].BlockSize = 0
	return b
}

// unsalted makes a pool event name the empty additional_salt, overriding
// the registration's.
func unsalted(b *Batch) *Batch {
	b.Events[0].AdditionalSalt = []byte{}
	return b
}

func withTokens(b *Batch, tokens []int32) *Batch {
	b.Events[0].Tokens, b.Events[0].HasTokens = tokens, true
	return b
}

// cborKeys is the chain a cbor engine publishes for tokens (and the pool,
// keying its objects by the engine's hashes).
func cborKeys(t *testing.T, tokens []int32) []uint64 {
	t.Helper()
	p := cborProfile(t)
	k, err := hash.AppendChain(nil, &p, tokens, testBS, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// bindState is what the tests compare after each step: the context's
// prefix keys, the pool's held (owner, block) pairs, and engine a's row
// for the query of tokens.
type bindState struct {
	prefix, held     int
	cpuShare, disk   int64
	rebinds, cleared uint64
}

func stateOf(t *testing.T, ix *Index, pool *Subscription, tokens []int32) bindState {
	t.Helper()
	var st bindState
	gv := ix.GlobalView()
	if len(gv.Contexts) != 1 {
		t.Fatalf("contexts %+v", gv.Contexts)
	}
	st.prefix, st.held = gv.Contexts[0].PrefixCount, pool.HeldBlocks()
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens, Instance: "a"}, res); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, res, int64(len(tokens)))
	if r := row(res, "a"); r != nil {
		st.cpuShare, st.disk = r.CPUShare, r.Disk
	}
	c := ix.Counters()
	st.rebinds, st.cleared = c.RebindClears.Load(), c.ClearedBlocks.Load()
	if got, want := ix.TierBlocks(), ix.countHoldings(); got != want {
		t.Fatalf("TierBlocks %v, walk %v", got, want)
	}
	checkKeySets(t, pool)
	return st
}

func wantState(t *testing.T, step string, got, want bindState) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got %+v\nwant %+v", step, got, want)
	}
}

// TestPoolBindingSaltNamespace: a pool registered with additionalsalt
// before any engine files its blocks in the salt's namespace of the xxh3
// default (key XXH3(hash, tag(salt))), which no vllm_v1 query computes.
// When the cbor engine registers, that owner's block is cleared (counted,
// logged once); the owner whose events name the empty salt filed the
// published hashes and keeps them. After the binding the same object is
// filed under its hash, and removing everything leaves nothing.
func TestPoolBindingSaltNamespace(t *testing.T) {
	logger, logs := checkLog()
	ix := New(Options{Logger: logger})
	tokens := seqTokens(1, 2*testBS)
	k := cborKeys(t, tokens)
	pr := poolReg("pool")
	pr.AdditionalSalt = "w8a8"
	pool := mustRegister(t, ix, pr)
	pool.Apply(poolStored("cpu", "s", k[0]))                  // owner cpu/w8a8: key ns(k0)
	pool.Apply(unsalted(poolStored("disk", "s", k[0], k[1]))) // owner disk/"": keys k0, k1
	wantState(t, "pool alone", stateOf(t, ix, pool, tokens), bindState{prefix: 3, held: 3})

	mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	wantState(t, "engine bound the partition", stateOf(t, ix, pool, tokens),
		bindState{prefix: 2, held: 2, disk: 32, rebinds: 1, cleared: 1})
	if n := strings.Count(logs.String(), "hash profile was bound cleared"); n != 1 || !strings.Contains(logs.String(), "cleared_blocks=1") {
		t.Fatalf("%d clear WARNs:\n%s", n, logs)
	}

	pool.Apply(poolStored("cpu", "s", k[0])) // now filed under k0
	wantState(t, "cpu copy stored after binding", stateOf(t, ix, pool, tokens),
		bindState{prefix: 2, held: 3, cpuShare: 16, disk: 32, rebinds: 1, cleared: 1})

	pool.Apply(poolRemoved("cpu", "s", k[0]))
	pool.Apply(unsalted(poolRemoved("disk", "s", k[0], k[1])))
	wantState(t, "pool removed everything", stateOf(t, ix, pool, tokens), bindState{rebinds: 1, cleared: 1})
}

// TestPoolBindingRehashedTokens: a pool registered before any engine stores
// an object with token_ids; the xxh3 default re-hashes them (keys s0, s1 ≠
// the published k0, k1) and maps k0, k1 to them. When the cbor engine
// registers, that owner's two blocks are cleared and the map is reset; a
// block filed under its published hash (0xD0, no tokens) stays. A disk copy
// of the object stored afterwards without tokens is filed under k0, not
// through the old map, and removing everything leaves nothing.
func TestPoolBindingRehashedTokens(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	tokens := seqTokens(1, 2*testBS)
	k := cborKeys(t, tokens)
	pool := mustRegister(t, ix, poolReg("pool"))
	pool.Apply(withTokens(poolStored("cpu", "s", k[0], k[1]), tokens)) // keys s0, s1
	pool.Apply(poolStored("disk", "s", 0xD0))                          // key 0xD0
	wantState(t, "pool alone", stateOf(t, ix, pool, tokens), bindState{prefix: 3, held: 3})

	mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	wantState(t, "engine bound the partition", stateOf(t, ix, pool, tokens),
		bindState{prefix: 1, held: 1, rebinds: 1, cleared: 2})
	if r := row(queryHashes(t, ix, "a", 0xD0), "a"); r == nil || r.Disk != testBS {
		t.Fatalf("block filed under its published hash: %+v, want disk %d", r, testBS)
	}

	pool.Apply(poolStored("disk", "s", k[0]))
	wantState(t, "disk copy stored after binding", stateOf(t, ix, pool, tokens),
		bindState{prefix: 2, held: 2, disk: 16, rebinds: 1, cleared: 2})
	pool.Apply(withTokens(poolStored("cpu", "s", k[0], k[1]), tokens))
	wantState(t, "cpu copy stored after binding", stateOf(t, ix, pool, tokens),
		bindState{prefix: 3, held: 4, cpuShare: 32, disk: 32, rebinds: 1, cleared: 2})

	pool.Apply(poolRemoved("cpu", "s", k[0], k[1]))
	pool.Apply(poolRemoved("disk", "s", k[0], 0xD0))
	wantState(t, "pool removed everything", stateOf(t, ix, pool, tokens), bindState{rebinds: 1, cleared: 2})
}

// TestPoolBindingClearedByApplier: between the binding (under ix.mu) and
// Register's clear, the pool's next event finds the binding changed and
// clears first, so the object it stores again is filed under its hash and
// the salted copy is gone.
func TestPoolBindingClearedByApplier(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	tokens := seqTokens(1, 2*testBS)
	k := cborKeys(t, tokens)
	pr := poolReg("pool")
	pr.AdditionalSalt = "w8a8"
	pool := mustRegister(t, ix, pr)
	pool.Apply(poolStored("cpu", "s", k[0]))
	if _, _, _, err := ix.register(engineReg(t, "a", 0, cborProfile(t))); err != nil { // no rebindEarly
		t.Fatal(err)
	}
	wantState(t, "bound, not yet cleared", stateOf(t, ix, pool, tokens), bindState{prefix: 1, held: 1})
	pool.Apply(poolStored("cpu", "s", k[0]))
	wantState(t, "the pool's next event", stateOf(t, ix, pool, tokens),
		bindState{prefix: 1, held: 1, cpuShare: 16, disk: 16, rebinds: 1, cleared: 1})
	pool.Apply(poolRemoved("cpu", "s", k[0]))
	wantState(t, "pool removed everything", stateOf(t, ix, pool, tokens), bindState{rebinds: 1, cleared: 1})
}

// TestPoolBindingSameProfile: an engine without a hash_profile binds the
// pool-only partition to the xxh3 default it already ran under: every key
// stands, nothing is cleared.
func TestPoolBindingSameProfile(t *testing.T) {
	ix := New(Options{})
	tokens := nsTokens(2 * testBS)
	pr := poolReg("pool")
	pr.AdditionalSalt = "w8a8"
	pool := mustRegister(t, ix, pr)
	pool.Apply(withTokens(poolStored("cpu", "s", 0xE1, 0xE2), tokens))
	sr := stdReg("a", "", "w8a8")
	sr.Endpoint = "tcp://127.0.0.1:3/engine"
	mustRegister(t, ix, sr)
	if got := nsQuery(t, ix, "", []byte("w8a8"), tokens, nil, "a"); got != 2*testBS {
		t.Fatalf("salted pool blocks after an xxh3 binding: %d, want %d", got, 2*testBS)
	}
	if n := ix.Counters().RebindClears.Load(); n != 0 || pool.HeldBlocks() != 2 {
		t.Fatalf("rebind clears %d, held %d; want 0, 2", n, pool.HeldBlocks())
	}
}

// TestPoolBindingAfterRestore: a dump of a pool-only partition restored into
// another pool-only partition keeps which keys are the xxh3 default's (the
// salted stream's, and the one a token re-hash mapped); the later binding
// clears those and keeps the one filed under its published hash.
func TestPoolBindingAfterRestore(t *testing.T) {
	tokens := seqTokens(1, 2*testBS)
	k := cborKeys(t, tokens)
	pr := poolReg("pool")
	pr.AdditionalSalt = "w8a8"
	src := New(Options{})
	sp := mustRegister(t, src, pr)
	sp.Apply(poolStored("cpu", "s", k[0]))                                      // salted: ns(k0)
	sp.Apply(unsalted(withTokens(poolStored("disk", "s", k[0], k[1]), tokens))) // re-hashed: s0, s1
	sp.Apply(unsalted(poolStored("disk", "t", 0xD0)))                           // published: 0xD0
	var dump collector
	if err := src.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	dst := New(Options{Logger: quietLogger()})
	pool := mustRegister(t, dst, pr)
	dump.restore(t, dst)
	wantState(t, "restored", stateOf(t, dst, pool, tokens), bindState{prefix: 4, held: 4})
	mustRegister(t, dst, engineReg(t, "a", 0, cborProfile(t)))
	wantState(t, "engine bound the partition", stateOf(t, dst, pool, tokens),
		bindState{prefix: 1, held: 1, rebinds: 1, cleared: 3})
	pool.Apply(unsalted(poolStored("disk", "s", k[0])))
	wantState(t, "disk copy stored after binding", stateOf(t, dst, pool, tokens),
		bindState{prefix: 2, held: 2, disk: 16, rebinds: 1, cleared: 3})
}

// TestPoolBindingConcurrentApply: the pool's applier stores salted objects,
// a quarter before the engine's registration binds the partition and the
// rest while it does (run under -race).
// Whatever each store read, every block filed under the salt namespace is
// cleared, the objects stored after the binding are found, and once the
// pool removed every object nothing is held.
func TestPoolBindingConcurrentApply(t *testing.T) {
	const n = 400
	for round := range 10 {
		ix := New(Options{Logger: quietLogger()})
		pr := poolReg("pool")
		pr.AdditionalSalt = "w8a8"
		pool := mustRegister(t, ix, pr)
		for i := range n / 4 {
			pool.Apply(poolStored("cpu", "s", uint64(1000+i)))
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := n / 4; i < n; i++ {
				pool.Apply(poolStored("cpu", "s", uint64(1000+i)))
			}
		}()
		mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
		wg.Wait()
		pool.Apply(poolStored("cpu", "s", 1000+n))
		if r := row(queryHashes(t, ix, "a", 1000+n), "a"); r == nil || r.CPUShare != testBS {
			t.Fatalf("round %d: object stored after the binding: %+v", round, r)
		}
		for i := range n + 1 {
			pool.Apply(poolRemoved("cpu", "s", uint64(1000+i)))
		}
		if gv, held := ix.GlobalView(), pool.HeldBlocks(); gv.Contexts[0].PrefixCount != 0 || held != 0 {
			t.Fatalf("round %d: after removing every object: prefix_count %d, held %d", round, gv.Contexts[0].PrefixCount, held)
		}
		if got := ix.TierBlocks(); got != ([NumTiers]int{}) {
			t.Fatalf("round %d: holdings %v", round, got)
		}
		checkKeySets(t, pool)
		if testing.Short() {
			break
		}
	}
}
