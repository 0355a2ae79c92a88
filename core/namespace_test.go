package core

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/hash"
)

// plainChain is the seed's hashing standard written out from its prose
// (independent of package hash): local = XXH3(u32le tokens, S), seq_0 =
// local_0, seq_i = XXH3(le64(seq_{i-1}) || le64(local_i), S).
func plainChain(tokens []int32, bs int, seed uint64) []uint64 {
	var out []uint64
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		buf := make([]byte, 0, 4*bs)
		for _, t := range tokens[i*bs : (i+1)*bs] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		local := xxh3.HashSeed(buf, seed)
		if i == 0 {
			out = append(out, local)
			continue
		}
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], out[i-1])
		binary.LittleEndian.PutUint64(b[8:], local)
		out = append(out, xxh3.HashSeed(b[:], seed))
	}
	return out
}

func nsTokens(n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(i*31 + 5)
	}
	return t
}

func stdReg(inst, lora, salt string) Registration {
	return Registration{Endpoint: "tcp://127.0.0.1:3/" + inst + lora + salt, Type: PublisherStandard,
		ModelName: "m", LoraName: lora, InstanceID: inst, BlockSize: testBS, AdditionalSalt: salt}
}

func nsQuery(t *testing.T, ix *Index, lora string, salt []byte, tokens []int32, hashes []uint64, inst string) int64 {
	t.Helper()
	res := &QueryResult{}
	req := &QueryRequest{Model: "m", LoraName: lora, BlockSize: testBS, CacheSalt: salt, Instance: inst, PerMedium: true}
	if hashes != nil {
		req.ByHash, req.Hashes = true, hashes
	} else {
		req.Tokens = tokens
	}
	if err := ix.Query(req, res); err != nil {
		t.Fatal(err)
	}
	if r := row(res, inst); r != nil {
		return r.LongestMatched
	}
	return -1
}

// TestNamespacePlainFormulaUnderLoraAndSalt (seed "Hashing standard" and
// "Identity dimensions": lora_name and additional_salt/cache_salt separate
// namespaces, the formula has no salt): an RFC publisher in a LoRA context
// with a salt publishes the plain seq_hashes; /query by tokens and
// /query_by_hash with the matching cache_salt both find them, other salts and
// the unsalted namespace do not.
func TestNamespacePlainFormulaUnderLoraAndSalt(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "sql-adapter", "w8a8"))
	tokens := nsTokens(3 * testBS)
	std := plainChain(tokens, testBS, 1337)

	b := stored("gpu", std...)
	b.Events[0].LoraName = []byte("sql-adapter")
	if st := s.Apply(b); st.Dropped != 0 || st.Blocks != 3 {
		t.Fatalf("apply: %+v", st)
	}
	for _, c := range []struct {
		salt string
		want int64
	}{{"w8a8", 48}, {"", 0}, {"other", 0}} {
		var salt []byte
		if c.salt != "" {
			salt = []byte(c.salt)
		}
		if got := nsQuery(t, ix, "sql-adapter", salt, tokens, nil, "a"); got != c.want {
			t.Errorf("/query cache_salt %q: %d want %d", c.salt, got, c.want)
		}
		if got := nsQuery(t, ix, "sql-adapter", salt, nil, std, "a"); got != c.want {
			t.Errorf("/query_by_hash cache_salt %q: %d want %d", c.salt, got, c.want)
		}
	}
	// The event's own additional_salt overrides the registration's.
	b = stored("gpu", std...)
	b.Events[0].LoraName = []byte("sql-adapter")
	b.Events[0].AdditionalSalt = []byte("fp8")
	s.Apply(b)
	if got := nsQuery(t, ix, "sql-adapter", []byte("fp8"), nil, std[:2], "a"); got != 32 {
		t.Errorf("event additional_salt namespace: %d want 32", got)
	}
	// Removes resolve in the same namespace.
	rm := removed("gpu", std[2])
	rm.Events[0].LoraName = []byte("sql-adapter")
	s.Apply(rm)
	if got := nsQuery(t, ix, "sql-adapter", []byte("w8a8"), tokens, nil, "a"); got != 32 {
		t.Errorf("after remove: %d want 32", got)
	}
}

// saltedEngine registers engine "e", a vLLM publisher under the default
// profile with the registration salt "w8a8", in LoRA context lora.
func saltedEngine(t *testing.T, lora string) (*Index, *Subscription) {
	ix := New(Options{})
	r := stdReg("e", lora, "w8a8")
	r.Type = PublisherVLLM
	return ix, mustRegister(t, ix, r)
}

// TestNamespaceEngineRehashIsPlain: a vLLM engine under the default profile,
// in a LoRA context with a registration salt, is re-hashed with the plain
// formula; a client computing the seed's formula gets the hit from
// /query_by_hash with the salt.
func TestNamespaceEngineRehashIsPlain(t *testing.T) {
	ix, s := saltedEngine(t, "sql-adapter")
	tokens := nsTokens(2 * testBS)
	b := stored("GPU", 0xE1, 0xE2) // engine hashes: opaque
	e := &b.Events[0]
	e.LoraName = []byte("sql-adapter")
	e.Tokens, e.HasTokens = append(e.Tokens, tokens...), true
	s.Apply(b)
	std := plainChain(tokens, testBS, 1337)
	if got := nsQuery(t, ix, "sql-adapter", []byte("w8a8"), nil, std, "e"); got != 32 {
		t.Fatalf("by hash, salted: %d want 32", got)
	}
	if got := nsQuery(t, ix, "sql-adapter", nil, nil, std, "e"); got != 0 {
		t.Fatalf("by hash, unsalted namespace: %d want 0", got)
	}
	if got := nsQuery(t, ix, "sql-adapter", []byte("w8a8"), tokens, nil, "e"); got != 32 {
		t.Fatalf("by tokens, salted: %d want 32", got)
	}
	// Remove by engine hash resolves to the namespaced key.
	s.Apply(removed("GPU", 0xE2))
	if got := nsQuery(t, ix, "sql-adapter", []byte("w8a8"), nil, std, "e"); got != 16 {
		t.Fatalf("after remove: %d want 16", got)
	}
}

// TestNamespaceEngineParentIsPlain: a vLLM engine under the default profile
// with a registration salt stores two blocks, then a third whose parent is
// the second's engine hash and whose tokens are its own only. The chain goes
// on from the second block's plain hash (not its salted key), so the
// salted query of all three blocks' tokens matches 48 tokens.
func TestNamespaceEngineParentIsPlain(t *testing.T) {
	ix, s := saltedEngine(t, "")
	tokens := nsTokens(3 * testBS)
	b := stored("GPU", 0xE1, 0xE2)
	b.Events[0].Tokens, b.Events[0].HasTokens = append(b.Events[0].Tokens, tokens[:2*testBS]...), true
	s.Apply(b)
	c := stored("GPU", 0xE3)
	c.Events[0].Parent, c.Events[0].HasParent = 0xE2, true
	c.Events[0].Tokens, c.Events[0].HasTokens = append(c.Events[0].Tokens, tokens[2*testBS:]...), true
	s.Apply(c)
	if got := nsQuery(t, ix, "", []byte("w8a8"), tokens, nil, "e"); got != 3*testBS {
		t.Fatalf("by tokens, salted: %d want %d", got, 3*testBS)
	}
	// Removing the third block by its engine hash leaves two.
	s.Apply(removed("GPU", 0xE3))
	if got := nsQuery(t, ix, "", []byte("w8a8"), tokens, nil, "e"); got != 2*testBS {
		t.Fatalf("after remove: %d want %d", got, 2*testBS)
	}
}

// TestSaltNeedsXXH3Profile: a registration's additionalsalt names a namespace
// of the xxh3 profile; with an explicit engine profile (which has none: the
// engine hashes a request's cache_salt into its own chain) it is refused as
// a field error on additionalsalt rather than accepted and ignored. The xxh3
// default, an explicit xxh3 profile and a pool without a profile keep it.
func TestSaltNeedsXXH3Profile(t *testing.T) {
	ix := New(Options{})
	r := engineReg(t, "cbor", 0, cborProfile(t))
	r.AdditionalSalt = "w8a8"
	_, _, err := ix.Register(r)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "additionalsalt" || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cache_salt") {
		t.Fatalf("engine profile with a salt: %v", err)
	}
	if len(ix.Services()) != 0 {
		t.Fatal("the refused registration was kept")
	}
	ok := []Registration{engineReg(t, "plain", 0, hash.Profile{}), engineReg(t, "xxh3", 0, hash.DefaultProfile()), poolReg("pool")}
	ok[0].ProfileExplicit = false
	for i := range ok {
		ok[i].AdditionalSalt = "w8a8"
		if _, _, err := ix.Register(ok[i]); err != nil {
			t.Errorf("%s: %v", ok[i].InstanceID, err)
		}
	}
}
