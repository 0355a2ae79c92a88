package core

import (
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// TestXXH3RehashesEngineEvents: under the default (xxh3 standard) profile a
// vLLM publisher's events are re-hashed from their token ids; removes and
// parent links resolve through the engine hashes.
func TestXXH3RehashesEngineEvents(t *testing.T) {
	ix := New(Options{})
	r := engineReg(t, "a", 0, hash.Profile{})
	r.ProfileExplicit = false
	s := mustRegister(t, ix, r)

	tokens := make([]int32, 3*testBS)
	for i := range tokens {
		tokens[i] = int32(i * 7)
	}
	// Engine hashes are opaque to conductor: any values work.
	b := stored("GPU", 0xA1, 0xA2)
	b.Events[0].Tokens = append(b.Events[0].Tokens, tokens[:2*testBS]...)
	b.Events[0].HasTokens = true
	s.Apply(b)
	// A child event links to its parent by engine hash.
	c := stored("GPU", 0xA3)
	c.Events[0].Parent, c.Events[0].HasParent = 0xA2, true
	c.Events[0].Tokens = append(c.Events[0].Tokens, tokens[2*testBS:]...)
	c.Events[0].HasTokens = true
	s.Apply(c)

	q := func(salt []byte) *InstanceResult {
		res := &QueryResult{}
		if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens, CacheSalt: salt}, res); err != nil {
			t.Fatal(err)
		}
		return row(res, "a")
	}
	if r := q(nil); r.Device != 48 {
		t.Fatalf("re-hashed chain: %+v", r)
	}
	// The index keys are the RFC #1527 standard chain.
	p := hash.DefaultProfile()
	std := hash.AppendXXH3Chain(nil, p.XXH3Seed, 0, false, tokens, testBS)
	if res := queryHashes(t, ix, "a", std...); row(res, "a").Device != 48 {
		t.Fatalf("query by standard seq hashes: %+v", res.Instances)
	}
	if r := q([]byte("w8a8")); r.Device != 0 {
		t.Fatalf("salted query must miss: %+v", r)
	}
	// Remove by engine hash resolves to the standard key.
	s.Apply(removed("GPU", 0xA2))
	if r := q(nil); r.Device != 16 {
		t.Fatalf("after removing block 1: %+v", r)
	}
	// An event whose parent engine hash is unknown cannot be placed.
	d := stored("GPU", 0xB2)
	d.Events[0].Parent, d.Events[0].HasParent = 0xB1, true
	d.Events[0].Tokens = append(d.Events[0].Tokens, tokens[:testBS]...)
	d.Events[0].HasTokens = true
	if st := s.Apply(d); st.Dropped != 1 || ix.Counters().UnknownParents.Load() != 1 {
		t.Fatalf("unknown parent: %+v", st)
	}
}

// TestXXH3RegistrationSalt: a registration's additionalsalt namespaces its
// re-hashed blocks; queries with the matching cache_salt hit.
func TestXXH3RegistrationSalt(t *testing.T) {
	ix := New(Options{})
	r := engineReg(t, "a", 0, hash.Profile{})
	r.ProfileExplicit = false
	r.AdditionalSalt = "w8a8"
	s := mustRegister(t, ix, r)
	tokens := make([]int32, 3*testBS)
	for i := range tokens {
		tokens[i] = int32(i)
	}
	b := stored("GPU", 1, 2, 3)
	b.Events[0].Tokens, b.Events[0].HasTokens = append(b.Events[0].Tokens, tokens...), true
	s.Apply(b)
	for _, c := range []struct {
		salt []byte
		want int64
	}{{nil, 0}, {[]byte("w8a8"), 48}, {[]byte("other"), 0}} {
		res := &QueryResult{}
		if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens, CacheSalt: c.salt}, res); err != nil {
			t.Fatal(err)
		}
		if got := row(res, "a").Device; got != c.want {
			t.Fatalf("salt %q: device %d want %d", c.salt, got, c.want)
		}
	}
}

func rfcStored(id uint64, hashes ...uint64) *Batch {
	b := stored("gpu", hashes...)
	e := &b.Events[0]
	e.HasEventID, e.EventID = true, id
	e.BackendID = []byte("worker-0")
	return b
}

// TestRFCEventOrder: standardized events apply in consecutive event_id order;
// early ones are held, duplicates dropped, and a stuck gap is eventually
// accepted (under GapClear: the stream is cleared first).
func TestRFCEventOrder(t *testing.T) {
	ix := New(Options{MaxHeldEvents: 2, GapPolicy: GapClear})
	r := engineReg(t, "a", 0, hash.Profile{})
	r.Type, r.ProfileExplicit = PublisherStandard, false
	s := mustRegister(t, ix, r)

	s.Apply(rfcStored(10, 1))
	s.Apply(rfcStored(12, 3)) // held: 11 missing
	if r := row(queryHashes(t, ix, "a", 1, 2, 3), "a"); r.Device != 16 {
		t.Fatalf("event 12 applied before 11: %+v", r)
	}
	rm := rfcStored(11, 1)
	rm.Events[0].Kind = EventRemoved
	s.Apply(rm) // 11 arrives: removes block 1, then 12 drains
	if r := row(queryHashes(t, ix, "a", 3), "a"); r.Device != 16 {
		t.Fatalf("held event not drained: %+v", r)
	}
	if r := row(queryHashes(t, ix, "a", 1), "a"); r.Device != 0 {
		t.Fatalf("remove 11 not applied in order: %+v", r)
	}
	s.Apply(rfcStored(12, 9)) // duplicate id
	if r := row(queryHashes(t, ix, "a", 9), "a"); r.Device != 0 || ix.Counters().DuplicateIDs.Load() != 1 {
		t.Fatalf("duplicate applied: %+v", r)
	}
	// 13 never comes: once more than MaxHeldEvents are held the gap cannot
	// heal, so the stream's blocks are cleared (block 3 of event 12 may have
	// been removed by the lost event 13) and the held events apply in order.
	s.Apply(rfcStored(14, 14))
	s.Apply(rfcStored(15, 15))
	s.Apply(rfcStored(16, 16))
	if r := row(queryHashes(t, ix, "a", 14), "a"); r.Device != 16 || ix.Counters().EventIDGaps.Load() != 1 {
		t.Fatalf("held events not applied after the gap: %+v gaps=%d", r, ix.Counters().EventIDGaps.Load())
	}
	if r := row(queryHashes(t, ix, "a", 3), "a"); r.Device != 0 || ix.Counters().StreamGapClears.Load() != 1 {
		t.Fatalf("block from before the unhealed gap kept: %+v clears=%d", r, ix.Counters().StreamGapClears.Load())
	}
}

// TestPoolEventsFollowTheirEnvelope: a Mooncake master event names its own
// tenant; blocks for contexts nobody registered are dropped, not created.
func TestPoolEventsFollowTheirEnvelope(t *testing.T) {
	ix := New(Options{})
	a := engineReg(t, "a", 0, cborProfile(t))
	a.TenantID = "t2"
	mustRegister(t, ix, a)
	pool := mustRegister(t, ix, poolReg("pool")) // home tenant "default"
	b := poolStored("cpu", "s", 5)
	b.Events[0].TenantID = []byte("t2")
	pool.Apply(b)
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{TenantID: "t2", Model: "m", BlockSize: testBS, Hashes: []uint64{5}, ByHash: true}, res); err != nil {
		t.Fatal(err)
	}
	if row(res, "a").CPUShare != 16 {
		t.Fatalf("pool block in t2: %+v", res.Instances)
	}
	c := poolStored("cpu", "s", 6)
	c.Events[0].TenantID = []byte("nobody")
	if st := pool.Apply(c); st.Dropped != 1 {
		t.Fatalf("unknown context: %+v", st)
	}
	if n := len(ix.GlobalView().Contexts); n != 2 {
		t.Fatalf("contexts: %d", n)
	}
	// The pool's cleared event for backend "s" removes its holdings in t2.
	cl := cleared()
	cl.Events[0].TenantID, cl.Events[0].BackendID = []byte("t2"), []byte("s")
	pool.Apply(cl)
	if err := ix.Query(&QueryRequest{TenantID: "t2", Model: "m", BlockSize: testBS, Hashes: []uint64{5}, ByHash: true}, res); err != nil {
		t.Fatal(err)
	}
	if row(res, "a").CPUShare != 0 {
		t.Fatalf("after pool clear: %+v", res.Instances)
	}
}

func TestDumpRestoreRoundTrip(t *testing.T) {
	build := func() (*Index, *Subscription, *Subscription) {
		ix := New(Options{})
		p := cborProfile(t)
		a := mustRegister(t, ix, engineReg(t, "a", 0, p))
		pool := mustRegister(t, ix, poolReg("pool"))
		return ix, a, pool
	}
	src, a, pool := build()
	h := seq(4)
	a.Apply(stored("GPU", h[:2]...))
	a.Apply(stored("GPU", h[0])) // two copies
	a.Apply(stored("CPU", h[2]))
	pool.Apply(poolStored("disk", "pool", h...))
	var dump collector
	if err := src.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, hs := range dump.holds {
		n += len(hs)
	}
	if len(dump.streams) != 2 || n != 7 {
		t.Fatalf("dump: %d streams, %d holdings: %+v", len(dump.streams), n, dump.holds)
	}
	dst, _, _ := build()
	dump.restore(t, dst)
	want := queryHashes(t, src, "", h...)
	got := queryHashes(t, dst, "", h...)
	if row(got, "a").Device != row(want, "a").Device || row(got, "a").Disk != 64 || row(got, "a").CPULocal != 48 {
		t.Fatalf("restored %+v want %+v", got.Instances, want.Instances)
	}
	// Copies survive: one remove leaves the second copy.
	var da *Subscription
	da, _ = dst.Lookup(ServiceKey{InstanceID: "a", TenantID: "default"})
	da.Apply(removed("GPU", h[0]))
	if r := row(queryHashes(t, dst, "a", h...), "a"); r.Device != 32 {
		t.Fatalf("copies lost in restore: %+v", r)
	}
}

// TestSGLangPartialPages: under an SGLang profile the final partial page is a
// real block of the chain (keyed by its hash); under the xxh3 profile it has
// no standard key and is ignored while the complete pages are re-hashed.
func TestSGLangPartialPages(t *testing.T) {
	sg, err := hash.Resolve(hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"})
	if err != nil {
		t.Fatal(err)
	}
	ix := New(Options{})
	r := engineReg(t, "a", 0, sg)
	r.Type = PublisherSGLang
	s := mustRegister(t, ix, r)
	tokens := make([]int32, 2*testBS+5)
	for i := range tokens {
		tokens[i] = int32(i + 1)
	}
	keys, err := hash.AppendChain(nil, &sg, tokens, testBS, nil, nil)
	if err != nil || len(keys) != 3 {
		t.Fatal(keys, err)
	}
	s.Apply(stored("GPU", keys[:2]...))
	part := stored("GPU", keys[2])
	part.Events[0].BlockSize = 5
	s.Apply(part)
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens}, res); err != nil {
		t.Fatal(err)
	}
	if got := row(res, "a").Device; got != int64(len(tokens)) {
		t.Fatalf("sglang partial page: device %d want %d", got, len(tokens))
	}

	// xxh3: tokens of two full pages plus a short third → two standard blocks.
	ix2 := New(Options{})
	r2 := engineReg(t, "a", 0, hash.Profile{})
	r2.Type, r2.ProfileExplicit = PublisherSGLang, false
	s2 := mustRegister(t, ix2, r2)
	b := stored("GPU", 11, 12, 13)
	b.Events[0].Tokens, b.Events[0].HasTokens, b.Events[0].Partial = append([]int32(nil), tokens...), true, true
	if st := s2.Apply(b); st.Blocks != 2 {
		t.Fatalf("xxh3 partial: %+v", st)
	}
	if err := ix2.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens}, res); err != nil {
		t.Fatal(err)
	}
	if got := row(res, "a").Device; got != 2*testBS {
		t.Fatalf("xxh3 partial: device %d", got)
	}
}
