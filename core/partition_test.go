package core

import (
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// Partition tests: the binding rule per identity (table and reference
// model), queries over several partitions against separate indexes,
// reclaim, RFC envelope routing and dump/restore. The concurrent test is in
// partition_stress_test.go.

// testProfiles are the profiles the partition tests name.
func testProfiles(t testing.TB) map[string]hash.Profile {
	t.Helper()
	pickle, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]hash.Profile{"cbor": cborProfile(t), "pickle": pickle, "xxh3": hash.DefaultProfile()}
}

// partReg is a registration of model m by identity owner: an engine, or a
// pool (Mooncake) when pool is set, with profile prof ("" names none).
func partReg(profs map[string]hash.Profile, owner, inst, prof string, pool bool) Registration {
	r := Registration{Endpoint: "tcp://127.0.0.1:4/" + inst, Type: PublisherVLLM, ModelName: "m",
		InstanceID: inst, BlockSize: testBS, Owner: owner}
	if pool {
		r.Type = PublisherMooncake
	}
	if prof != "" {
		r.Profile, r.ProfileExplicit = profs[prof], true
	}
	if !pool && (prof == "" || prof == "xxh3") {
		// Engine events carry no token ids in these tests: under xxh3 the
		// publisher is a standard one, whose hashes are the standard keys.
		r.Type = PublisherStandard
	}
	return r
}

// partLabel names a partition "profile@owner", or "-" while unbound.
func partLabel(profs map[string]hash.Profile, c *context) string {
	b := c.bind.Load()
	if !b.bound {
		return "-"
	}
	for name, p := range profs {
		if p == b.profile {
			return name + "@" + b.owner
		}
	}
	return "?@" + b.owner
}

// partitionsOf labels the partitions of context k, in list order.
func partitionsOf(ix *Index, profs map[string]hash.Profile, k ContextKey) []string {
	var out []string
	for c := ix.lookupContext(k); c != nil; c = c.next.Load() {
		out = append(out, partLabel(profs, c))
	}
	return out
}

var keyM = ContextKey{TenantID: "default", ModelName: "m", BlockSize: testBS}

// TestProfilePartitionRules: the binding rule, case by case: the same
// identity contradicting itself is a conflict (so with no tokens, or the
// admin alone, nothing changes); another identity gets a partition; a
// profile joins the partition that has it, whoever bound it; pool rules.
func TestProfilePartitionRules(t *testing.T) {
	profs := testProfiles(t)
	type step struct {
		owner, inst, prof string
		pool              bool
		want              string // label of the partition joined, or "conflict"
	}
	cases := []struct {
		name  string
		steps []step
		parts []string
	}{
		{"open surface: a contradicting profile is a conflict", []step{
			{"", "e1", "cbor", false, "cbor@"},
			{"", "e2", "pickle", false, "conflict"},
			{"", "e3", "", false, "conflict"}, // the xxh3 default
			{"", "e4", "cbor", false, "cbor@"},
		}, []string{"cbor@"}},
		{"admin alone: a contradicting profile is a conflict", []step{
			{"admin", "e1", "cbor", false, "cbor@admin"},
			{"admin", "e2", "pickle", false, "conflict"},
		}, []string{"cbor@admin"}},
		{"another identity gets a partition", []step{
			{"a", "e1", "pickle", false, "pickle@a"},
			{"b", "e2", "cbor", false, "cbor@b"},
			{"c", "e3", "", false, "xxh3@c"},
		}, []string{"pickle@a", "cbor@b", "xxh3@c"}},
		{"an identity contradicting itself after a split", []step{
			{"a", "e1", "pickle", false, "pickle@a"},
			{"b", "e2", "cbor", false, "cbor@b"},
			{"a", "e3", "xxh3", false, "conflict"},
			{"b", "e4", "", false, "conflict"},
		}, []string{"pickle@a", "cbor@b"}},
		{"a profile joins its partition, whoever bound it", []step{
			{"a", "e1", "pickle", false, "pickle@a"},
			{"b", "e2", "cbor", false, "cbor@b"},
			{"a", "e3", "cbor", false, "cbor@b"},
			{"b", "e4", "pickle", false, "pickle@a"},
			{"a", "e5", "xxh3", false, "conflict"},
		}, []string{"pickle@a", "cbor@b"}},
		{"the admin token and the configuration file are one identity", []step{
			{"config", "e1", "cbor", false, "cbor@config"},
			{"admin", "e2", "pickle", false, "conflict"},
			{"admin", "e3", "cbor", false, "cbor@config"},
			{"a", "e4", "pickle", false, "pickle@a"},
			{"admin", "e5", "pickle", false, "pickle@a"},
			{"admin", "s1", "", true, "cbor@config"},
		}, []string{"cbor@config", "pickle@a"}},
		{"the admin is one identity among others", []step{
			{"a", "e1", "pickle", false, "pickle@a"},
			{"admin", "e2", "cbor", false, "cbor@admin"},
			{"admin", "e3", "xxh3", false, "conflict"},
			{"", "e4", "xxh3", false, "xxh3@"},
		}, []string{"pickle@a", "cbor@admin", "xxh3@"}},
		{"pool first: the first engine profile binds its partition", []step{
			{"p", "s1", "", true, "-"},
			{"a", "e1", "cbor", false, "cbor@a"},
			{"b", "e2", "pickle", false, "pickle@b"},
			{"a", "e3", "pickle", false, "pickle@b"},
			{"p", "s2", "", true, "cbor@a"},
		}, []string{"cbor@a", "pickle@b"}},
		{"a pool without profile joins its identity's partition, else the first", []step{
			{"a", "e1", "pickle", false, "pickle@a"},
			{"b", "e2", "cbor", false, "cbor@b"},
			{"b", "s1", "", true, "cbor@b"},
			{"c", "s2", "", true, "pickle@a"},
		}, []string{"pickle@a", "cbor@b"}},
		{"an explicit pool profile joins by profile, else follows the rule", []step{
			{"a", "e1", "pickle", false, "pickle@a"},
			{"b", "s1", "cbor", true, "cbor@b"},
			{"b", "s2", "pickle", true, "pickle@a"},
			{"a", "s3", "xxh3", true, "conflict"},
			{"c", "s4", "xxh3", true, "xxh3@c"},
		}, []string{"pickle@a", "cbor@b", "xxh3@c"}},
		{"an explicit pool profile binds a pool-only context", []step{
			{"p", "s1", "", true, "-"},
			{"q", "s2", "cbor", true, "cbor@q"},
			{"q", "e1", "pickle", false, "conflict"},
			{"r", "e2", "pickle", false, "pickle@r"},
		}, []string{"cbor@q", "pickle@r"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := New(Options{})
			n := 0
			for i, st := range c.steps {
				before := partitionsOf(ix, profs, keyM)
				s, _, err := ix.Register(partReg(profs, st.owner, st.inst, st.prof, st.pool))
				switch {
				case st.want == "conflict":
					if !errors.Is(err, ErrConflict) {
						t.Fatalf("step %d %+v: %v, want a conflict", i, st, err)
					}
					if got := partitionsOf(ix, profs, keyM); !slices.Equal(got, before) {
						t.Fatalf("step %d: a conflict changed the partitions: %v → %v", i, before, got)
					}
				case err != nil:
					t.Fatalf("step %d %+v: %v", i, st, err)
				default:
					n++
					if got := partLabel(profs, s.home); got != st.want {
						t.Fatalf("step %d %+v: joined %s, want %s", i, st, got, st.want)
					}
				}
			}
			if got := partitionsOf(ix, profs, keyM); !slices.Equal(got, c.parts) {
				t.Fatalf("partitions %v, want %v", got, c.parts)
			}
			if got := len(ix.Services()); got != n {
				t.Fatalf("%d services, want %d", got, n)
			}
			gv := ix.GlobalView()
			if len(gv.Contexts) != len(c.parts) {
				t.Fatalf("global view: %d contexts, want %d", len(gv.Contexts), len(c.parts))
			}
			for i, cv := range gv.Contexts {
				if want := c.parts[i]; cv.ProfileBound != (want != "-") || (want != "-" && !strings.HasSuffix(want, "@"+cv.Owner)) {
					t.Fatalf("global view %d: %+v, want %s", i, cv, want)
				}
			}
		})
	}
}

// modelPart is a partition of the reference model of the binding rule.
type modelPart struct {
	prof, owner string
	bound       bool
	refs        int
}

// modelSame is the model's identity: the owner, "admin" and "config" being
// one (the operator).
func modelSame(a, b string) bool {
	op := func(o string) bool { return o == "admin" || o == "config" }
	return a == b || (op(a) && op(b))
}

// modelRegister is the binding rule written from partition.go's prose. It
// returns the index of the partition joined, or -1 for a conflict.
func modelRegister(parts *[]*modelPart, owner, prof string, pool bool) int {
	bind := !pool || prof != ""
	if prof == "" {
		prof = "xxh3" // the default profile
	}
	ps := *parts
	if len(ps) == 0 {
		p := &modelPart{prof: prof, bound: bind, refs: 1}
		if bind {
			p.owner = owner
		}
		*parts = append(ps, p)
		return 0
	}
	if !bind {
		for i, p := range ps {
			if p.bound && modelSame(p.owner, owner) {
				p.refs++
				return i
			}
		}
		ps[0].refs++
		return 0
	}
	for i, p := range ps {
		if !p.bound {
			p.prof, p.owner, p.bound = prof, owner, true
			p.refs++
			return i
		}
	}
	for i, p := range ps {
		if p.prof == prof {
			p.refs++
			return i
		}
	}
	for _, p := range ps {
		if modelSame(p.owner, owner) {
			return -1
		}
	}
	*parts = append(ps, &modelPart{prof: prof, owner: owner, bound: true, refs: 1})
	return len(ps)
}

func modelLabels(parts []*modelPart) []string {
	var out []string
	for _, p := range parts {
		if !p.bound {
			out = append(out, "-")
		} else {
			out = append(out, p.prof+"@"+p.owner)
		}
	}
	return out
}

// TestProfilePartitionModel: random registrations and unregistrations by
// five owners (core's default "", the operator's "admin" and "config", two
// clients), engines and pools,
// with and without profiles, against the reference model: the same
// outcome, the same partition joined, the same partitions in the same
// order, and reclaim as the model's references drop to zero.
func TestProfilePartitionModel(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	profs := testProfiles(t)
	owners := []string{"", "admin", "config", "a", "b"}
	names := []string{"", "cbor", "pickle", "xxh3"}
	for round := 0; round < 20; round++ {
		ix := New(Options{})
		var parts []*modelPart
		type live struct {
			s    *Subscription
			part *modelPart
		}
		var regs []live
		for i := 0; i < 100; i++ {
			if len(regs) > 0 && rng.Intn(3) == 0 {
				j := rng.Intn(len(regs))
				l := regs[j]
				regs = append(regs[:j], regs[j+1:]...)
				if _, err := ix.Unregister(l.s.Key()); err != nil {
					t.Fatal(err)
				}
				if l.part.refs--; l.part.refs == 0 {
					parts = slices.DeleteFunc(parts, func(p *modelPart) bool { return p == l.part })
				}
			} else {
				owner, prof, pool := owners[rng.Intn(len(owners))], names[rng.Intn(len(names))], rng.Intn(4) == 0
				s, _, err := ix.Register(partReg(profs, owner, fmt.Sprintf("i%d", i), prof, pool))
				want := modelRegister(&parts, owner, prof, pool)
				switch {
				case want < 0:
					if !errors.Is(err, ErrConflict) {
						t.Fatalf("round %d step %d (%q %q pool=%v): %v, want a conflict", round, i, owner, prof, pool, err)
					}
				case err != nil:
					t.Fatalf("round %d step %d (%q %q pool=%v): %v", round, i, owner, prof, pool, err)
				default:
					regs = append(regs, live{s, parts[want]})
					if got, w := partLabel(profs, s.home), modelLabels(parts[want : want+1])[0]; got != w {
						t.Fatalf("round %d step %d (%q %q pool=%v): joined %s, want %s", round, i, owner, prof, pool, got, w)
					}
				}
			}
			if got, want := partitionsOf(ix, profs, keyM), modelLabels(parts); !slices.Equal(got, want) {
				t.Fatalf("round %d step %d: partitions %v, model %v", round, i, got, want)
			}
		}
		for _, l := range regs {
			if _, err := ix.Unregister(l.s.Key()); err != nil {
				t.Fatal(err)
			}
		}
		if n := ix.contexts.Size(); n != 0 {
			t.Fatalf("round %d: %d context keys left", round, n)
		}
	}
}

// mergeNaive merges query rows of separate indexes by the documented rule:
// one row per instance with the union of its ranks, a rank in several
// taking the largest boundary per tier and medium, rows sorted by id.
func mergeNaive(parts ...[]InstanceResult) []InstanceResult {
	byID := map[string]map[int32]RankResult{}
	for _, rows := range parts {
		for _, r := range rows {
			m := byID[r.ID]
			if m == nil {
				m = map[int32]RankResult{}
				byID[r.ID] = m
			}
			for _, rk := range r.Ranks {
				old, ok := m[rk.Rank]
				if ok {
					rk.Device, rk.CPULocal = max(rk.Device, old.Device), max(rk.CPULocal, old.CPULocal)
					rk.CPUShare, rk.Disk = max(rk.CPUShare, old.CPUShare), max(rk.Disk, old.Disk)
					for k := range rk.Media {
						rk.Media[k] = max(rk.Media[k], old.Media[k])
					}
				}
				m[rk.Rank] = rk
			}
		}
	}
	var out []InstanceResult
	for id, m := range byID {
		row := InstanceResult{ID: id}
		for _, rk := range m {
			row.Ranks = append(row.Ranks, rk)
			row.Device, row.CPULocal = max(row.Device, rk.Device), max(row.CPULocal, rk.CPULocal)
			row.CPUShare, row.Disk = max(row.CPUShare, rk.CPUShare), max(row.Disk, rk.Disk)
			for k := range rk.Media {
				row.Media[k] = max(row.Media[k], rk.Media[k])
			}
		}
		row.LongestMatched = row.Disk
		sort.Slice(row.Ranks, func(i, j int) bool { return row.Ranks[i].Rank < row.Ranks[j].Rank })
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// copyRows deep-copies rows out of a reused QueryResult.
func copyRows(rows []InstanceResult) []InstanceResult {
	var out []InstanceResult
	for _, r := range rows {
		r.Ranks = slices.Clone(r.Ranks)
		out = append(out, r)
	}
	return out
}

// partSide is one identity's side of TestPartitionedQueryMatchesSeparateIndexes:
// its subscriptions in the partitioned index and in its own index.
type partSide struct {
	prof       hash.Profile
	joint, own []*Subscription
	pool       [2]*Subscription // joint, own
}

// TestPartitionedQueryMatchesSeparateIndexes: identity a binds model m to
// pickle, identity b to cbor (each with engines, a pool, and the instance
// id "x" registered by both at different ranks, plus a batch dp rank that
// puts x's rank 0 in both partitions). The same random events go to a
// partitioned index and to two separate indexes, one per identity; every
// query (by tokens and by hash of either profile, per medium or not, with
// and without instance filters) of the partitioned index equals the
// separate answers merged by the naive rule (mergeNaive).
func TestPartitionedQueryMatchesSeparateIndexes(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	profs := testProfiles(t)
	joint := New(Options{})
	sides := map[string]*partSide{}
	for _, side := range []struct {
		owner, prof string
		insts       []string
		ranks       []int32
	}{
		{"a", "pickle", []string{"a0", "a0", "x"}, []int32{0, 1, 0}},
		{"b", "cbor", []string{"b0", "x"}, []int32{0, 1}},
	} {
		own := New(Options{})
		ps := &partSide{prof: profs[side.prof]}
		for i, inst := range side.insts {
			r := partReg(profs, side.owner, inst, side.prof, false)
			r.DPRank = side.ranks[i]
			r.Endpoint += fmt.Sprintf("/%d", r.DPRank)
			ps.joint = append(ps.joint, mustRegister(t, joint, r))
			ps.own = append(ps.own, mustRegister(t, own, r))
		}
		pr := partReg(profs, side.owner, "pool-"+side.owner, "", true)
		ps.pool = [2]*Subscription{mustRegister(t, joint, pr), mustRegister(t, own, pr)}
		sides[side.owner] = ps
	}
	if got := partitionsOf(joint, profs, keyM); !slices.Equal(got, []string{"pickle@a", "cbor@b"}) {
		t.Fatalf("partitions %v", got)
	}
	own := func(owner string) *Index { return sides[owner].own[0].ix }

	// Prompts with shared prefixes; each side's keys under its profile.
	base := make([]int32, 8*testBS)
	for i := range base {
		base[i] = int32(rng.Intn(1000))
	}
	var prompts [][]int32
	for p := 0; p < 6; p++ {
		pr := slices.Clone(base[:rng.Intn(5)*testBS])
		for len(pr) < 8*testBS {
			pr = append(pr, int32(rng.Intn(1000)))
		}
		prompts = append(prompts, pr)
	}
	keysOf := func(p hash.Profile, tokens []int32) []uint64 {
		k, err := hash.AppendChain(nil, &p, tokens, testBS, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	media := []string{"GPU", "CPU", "DISK"}
	for i := 0; i < 400; i++ {
		side := sides[[]string{"a", "b"}[rng.Intn(2)]]
		keys := keysOf(side.prof, prompts[rng.Intn(len(prompts))])[:1+rng.Intn(8)]
		m := media[rng.Intn(len(media))]
		var b *Batch
		pair := [2]*Subscription{}
		if rng.Intn(5) == 0 {
			pair = side.pool
			b = poolStored([]string{"cpu", "disk"}[rng.Intn(2)], "s", keys...)
			if rng.Intn(3) == 0 {
				b.Events[0].Kind = EventRemoved
			}
		} else {
			j := rng.Intn(len(side.joint))
			pair = [2]*Subscription{side.joint[j], side.own[j]}
			switch rng.Intn(10) {
			case 0:
				b = cleared()
			case 1, 2:
				b = removed(m, keys[rng.Intn(len(keys))])
			default:
				b = stored(m, keys...)
			}
			if rng.Intn(4) == 0 {
				b.HasDPRank, b.DPRank = true, 0 // x's rank 0 from b's rank-1 registration
			}
		}
		sj, so := pair[0].Apply(b), pair[1].Apply(b)
		if sj != so {
			t.Fatalf("event %d applied differently: %+v vs %+v", i, sj, so)
		}
	}

	var rj, ra, rb QueryResult
	check := func(req *QueryRequest) {
		t.Helper()
		errJ := joint.Query(req, &rj)
		errA := own("a").Query(req, &ra)
		errB := own("b").Query(req, &rb)
		if errJ != nil || errA != nil || errB != nil {
			t.Fatalf("%+v: %v %v %v", req, errJ, errA, errB)
		}
		got, want := copyRows(rj.Instances), mergeNaive(copyRows(ra.Instances), copyRows(rb.Instances))
		if !reflect.DeepEqual(got, want) || !rj.ContextFound {
			t.Fatalf("query %+v:\n got %+v\nwant %+v", req, got, want)
		}
		limit := int64(len(req.Tokens))
		if req.ByHash {
			limit = int64(len(req.Hashes) * testBS)
		}
		checkInvariants(t, &rj, limit)
	}
	hits := 0
	for _, pr := range prompts {
		for _, n := range []int{testBS - 1, 3 * testBS, 5*testBS + 3, len(pr)} {
			for _, inst := range []string{"", "x", "a0", "b0", "zzz"} {
				for _, pm := range []bool{false, true} {
					check(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: pr[:n], Instance: inst, PerMedium: pm})
					for _, side := range sides {
						check(&QueryRequest{Model: "m", BlockSize: testBS, Hashes: keysOf(side.prof, pr[:n]), ByHash: true, Instance: inst, PerMedium: pm})
					}
					for _, r := range rj.Instances {
						if r.Disk > 0 {
							hits++
						}
					}
				}
			}
		}
	}
	if hits == 0 {
		t.Fatal("no query hit anything: the test checks nothing")
	}
	// The merge was exercised: x has rank 0 in both partitions.
	for c := joint.lookupContext(keyM); c != nil; c = c.next.Load() {
		m := c.snapshot()
		if !slices.Contains(m.slots, slot{"x", 0}) {
			t.Fatalf("partition %s has no slot (x, 0): %v", partLabel(profs, c), m.slots)
		}
	}
	if got, a, b := joint.TierBlocks(), own("a").TierBlocks(), own("b").TierBlocks(); got != [NumTiers]int{a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]} || got != joint.countHoldings() {
		t.Fatalf("holdings %v, separate %v + %v, walk %v", got, a, b, joint.countHoldings())
	}
	checkKeySets(t, append(append(slices.Clone(sides["a"].joint), sides["b"].joint...), sides["a"].pool[0], sides["b"].pool[0])...)
}

// TestPartitionQueryErrorIsolated: a partition whose profile cannot hash a
// query (a cache_salt that is not UTF-8 under vllm_v1) contributes no rows
// instead of failing the query for the other partitions; with that
// partition alone the query fails as before.
func TestPartitionQueryErrorIsolated(t *testing.T) {
	profs := testProfiles(t)
	ix := New(Options{})
	a := mustRegister(t, ix, partReg(profs, "a", "a0", "cbor", false))
	b := mustRegister(t, ix, partReg(profs, "b", "b0", "xxh3", false))
	tokens := nsTokens(4 * testBS)
	std := plainChain(tokens, testBS, 1337)
	salt := []byte{0xff, 0xfe}
	ns := saltNamespace(&b.home.bind.Load().profile, salt)
	keys := make([]uint64, len(std))
	for i, h := range std {
		keys[i] = ns.key(h)
	}
	b.Apply(stored("GPU", keys...))
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens, CacheSalt: salt}, res); err != nil {
		t.Fatal(err)
	}
	if r := row(res, "b0"); r == nil || r.Device != 4*testBS || row(res, "a0") != nil {
		t.Fatalf("%+v", res.Instances)
	}
	if _, err := ix.Unregister(b.Key()); err != nil {
		t.Fatal(err)
	}
	if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens, CacheSalt: salt}, res); !errors.Is(err, ErrInvalid) {
		t.Fatalf("one partition: %v", err)
	}
	_ = a
}

// TestPartitionReclaim: an empty, unreferenced partition is unlinked wherever
// it sits in its key's list (middle, head, last); the key's map entry goes
// with its last partition; queries answer the partitions left.
func TestPartitionReclaim(t *testing.T) {
	profs := testProfiles(t)
	ix := New(Options{})
	subs := map[string]*Subscription{}
	for _, r := range []struct{ owner, inst, prof string }{{"a", "a0", "pickle"}, {"b", "b0", "cbor"}, {"c", "c0", "xxh3"}, {"c", "c1", "xxh3"}} {
		s := mustRegister(t, ix, partReg(profs, r.owner, r.inst, r.prof, false))
		s.Apply(stored("GPU", seq(4)...))
		subs[r.inst] = s
	}
	unreg := func(inst string, want ...string) {
		t.Helper()
		if _, err := ix.Unregister(subs[inst].Key()); err != nil {
			t.Fatal(err)
		}
		if got := partitionsOf(ix, profs, keyM); !slices.Equal(got, want) {
			t.Fatalf("after unregistering %s: %v, want %v", inst, got, want)
		}
		if n := len(ix.GlobalView().Contexts); n != len(want) {
			t.Fatalf("global view: %d contexts, want %d", n, len(want))
		}
	}
	unreg("b0", "pickle@a", "xxh3@c") // the middle
	res := queryHashes(t, ix, "", seq(4)...)
	if len(res.Instances) != 3 || row(res, "b0") != nil || row(res, "c1").Device != 4*testBS {
		t.Fatalf("%+v", res.Instances)
	}
	unreg("a0", "xxh3@c") // the head
	unreg("c0", "xxh3@c") // still referenced by c1
	// b may bind again; a joins c's partition by its profile.
	subs["b1"] = mustRegister(t, ix, partReg(profs, "b", "b1", "cbor", false))
	subs["a1"] = mustRegister(t, ix, partReg(profs, "a", "a1", "xxh3", false))
	if got := partitionsOf(ix, profs, keyM); !slices.Equal(got, []string{"xxh3@c", "cbor@b"}) {
		t.Fatalf("%v", got)
	}
	unreg("c1", "xxh3@c", "cbor@b") // a1 still there
	unreg("a1", "cbor@b")
	unreg("b1")
	if n := ix.contexts.Size(); n != 0 || ix.lookupContext(keyM) != nil {
		t.Fatalf("%d context keys left", n)
	}
	if res := queryHashes(t, ix, "", seq(4)...); res.ContextFound {
		t.Fatalf("%+v", res)
	}
}

// TestRFCEnvelopePartitionRouting: an RFC event naming another context in
// its envelope goes to the partition with its subscription's home profile;
// to the key's only partition when it has one; nowhere (unknown_context)
// when it has several and none matches; and, once it holds state in a
// partition, on to that one (its removes find its stores).
func TestRFCEnvelopePartitionRouting(t *testing.T) {
	profs := testProfiles(t)
	ix := New(Options{})
	mustRegister(t, ix, partReg(profs, "a", "a0", "pickle", false))
	mustRegister(t, ix, partReg(profs, "b", "b0", "cbor", false))
	solo := partReg(profs, "a", "a9", "pickle", false)
	solo.ModelName = "solo"
	mustRegister(t, ix, solo)
	std := func(owner, inst, home, prof string) *Subscription {
		r := partReg(profs, owner, inst, prof, false)
		r.Type, r.ModelName = PublisherStandard, home
		return mustRegister(t, ix, r)
	}
	ev := func(kind EventKind, id uint64, model string, hashes ...uint64) *Batch {
		b := rfcEv(kind, id, "", "gpu", 0, hashes...)
		b.Events[0].ModelName = []byte(model)
		return b
	}
	// instancesOf lists the instances of each partition of model's context.
	instancesOf := func(model string) map[string][]string {
		out := map[string][]string{}
		for c := ix.lookupContext(ContextKey{TenantID: "default", ModelName: model, BlockSize: testBS}); c != nil; c = c.next.Load() {
			for _, sp := range c.snapshot().instances {
				out[partLabel(profs, c)] = append(out[partLabel(profs, c)], sp.id)
			}
		}
		return out
	}

	sb := std("b", "sb", "home-cbor", "cbor")
	if st := sb.Apply(ev(EventStored, 1, "m", seq(3)...)); st.Dropped != 0 {
		t.Fatalf("%+v", st)
	}
	if got := instancesOf("m"); !slices.Equal(got["cbor@b"], []string{"b0", "sb"}) || slices.Contains(got["pickle@a"], "sb") {
		t.Fatalf("home profile cbor: %v", got)
	}

	sx := std("c", "sx", "home-xxh3", "xxh3")
	if st := sx.Apply(ev(EventStored, 1, "m", seq(3)...)); st.Dropped != 1 {
		t.Fatalf("two partitions, none xxh3: %+v", st)
	}
	if got := ix.Counters().DroppedBy[DropUnknownContext].Load(); got != 1 {
		t.Fatalf("unknown_context drops %d", got)
	}
	if len(sx.state) != 1 || len(sx.rfc) != 0 {
		t.Fatalf("a dropped event created state: %d contexts, %d streams", len(sx.state), len(sx.rfc))
	}

	// One partition: the event goes there whatever its profile (as before
	// partitions). Then another identity splits "solo": sx stays where its
	// state is, a new xxh3 publisher goes to the xxh3 partition.
	if st := sx.Apply(ev(EventStored, 2, "solo", seq(3)...)); st.Dropped != 0 {
		t.Fatalf("%+v", st)
	}
	solo2 := partReg(profs, "d", "d0", "xxh3", false)
	solo2.ModelName = "solo"
	mustRegister(t, ix, solo2)
	if st := sx.Apply(ev(EventStored, 3, "solo", 2000)); st.Dropped != 0 {
		t.Fatalf("%+v", st)
	}
	sy := std("e", "sy", "home-xxh3-2", "xxh3")
	if st := sy.Apply(ev(EventStored, 1, "solo", seq(2)...)); st.Dropped != 0 {
		t.Fatalf("%+v", st)
	}
	if got := instancesOf("solo"); !slices.Equal(got["pickle@a"], []string{"a9", "sx"}) || !slices.Equal(got["xxh3@d"], []string{"d0", "sy"}) {
		t.Fatalf("solo: %v", got)
	}
	if st := sx.Apply(ev(EventRemoved, 4, "solo", seq(3)...)); st.Blocks != 3 {
		t.Fatalf("sticky removes: %+v", st)
	}
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "solo", BlockSize: testBS, Hashes: seq(3), ByHash: true}, res); err != nil {
		t.Fatal(err)
	}
	if r := row(res, "sx"); r == nil || r.Disk != 0 {
		t.Fatalf("sx after its removes: %+v", res.Instances)
	}
	if r := row(res, "sy"); r == nil || r.Device != 2*testBS {
		t.Fatalf("sy: %+v", res.Instances)
	}
}

// TestRestoreRecreatesPartitions: a dump of an index with two partitions
// (and an RFC publisher whose envelope names the partitioned context)
// restored into a fresh index whose registrations (with their owners) were
// made in the opposite order answers every query the same.
func TestRestoreRecreatesPartitions(t *testing.T) {
	profs := testProfiles(t)
	src := New(Options{})
	tokens := nsTokens(6 * testBS)
	keys := map[string][]uint64{}
	for _, name := range []string{"pickle", "cbor"} {
		p := profs[name]
		k, err := hash.AppendChain(nil, &p, tokens, testBS, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = k
	}
	a := mustRegister(t, src, partReg(profs, "a", "a0", "pickle", false))
	b := mustRegister(t, src, partReg(profs, "b", "b0", "cbor", false))
	r := partReg(profs, "b", "sb", "cbor", false)
	r.Type, r.ModelName = PublisherStandard, "home"
	sb := mustRegister(t, src, r)
	a.Apply(stored("GPU", keys["pickle"][:4]...))
	b.Apply(stored("CPU", keys["cbor"][:5]...))
	if st := sb.Apply(rfcEv(EventStored, 1, "", "disk", 0, keys["cbor"]...)); st.Dropped != 0 {
		t.Fatalf("%+v", st)
	}
	var dump collector
	if err := src.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	dst := New(Options{})
	regs := src.Services()
	slices.Reverse(regs)
	for _, reg := range regs {
		mustRegister(t, dst, reg)
	}
	dump.restore(t, dst)
	if got := partitionsOf(dst, profs, keyM); !slices.Equal(got, []string{"cbor@b", "pickle@a"}) {
		t.Fatalf("restored partitions %v", got)
	}
	var rs, rd QueryResult
	for _, req := range []*QueryRequest{
		{Model: "m", BlockSize: testBS, Tokens: tokens, PerMedium: true},
		{Model: "m", BlockSize: testBS, Tokens: tokens[:3*testBS]},
		{Model: "m", BlockSize: testBS, Hashes: keys["cbor"], ByHash: true},
		{Model: "m", BlockSize: testBS, Hashes: keys["pickle"], ByHash: true, Instance: "a0"},
	} {
		if err := src.Query(req, &rs); err != nil {
			t.Fatal(err)
		}
		if err := dst.Query(req, &rd); err != nil {
			t.Fatal(err)
		}
		if got, want := copyRows(rd.Instances), copyRows(rs.Instances); !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v:\n restored %+v\n   source %+v", req, got, want)
		}
	}
	if got, want := dst.TierBlocks(), src.TierBlocks(); got != want {
		t.Fatalf("holdings %v, source %v", got, want)
	}
}

// rebuildMeta is the reference for a context's meta: the slots (registered
// pairs and live rank owners' pairs) sorted from scratch, and each live rank
// owner's index among them.
func rebuildMeta(regs map[slot]int, owners []ownerInfo) ([]slot, []int32) {
	set := map[slot]bool{}
	for s, n := range regs {
		if n > 0 {
			set[s] = true
		}
	}
	for _, o := range owners {
		if o.live && !o.shared {
			set[slot{o.name, o.rank}] = true
		}
	}
	var slots []slot
	for s := range set {
		slots = append(slots, s)
	}
	slices.SortFunc(slots, func(a, b slot) int {
		if slotLess(a, b) {
			return -1
		}
		if slotLess(b, a) {
			return 1
		}
		return 0
	})
	pos := make([]int32, len(owners))
	for i, o := range owners {
		pos[i] = -1
		if o.live && !o.shared {
			pos[i] = int32(slices.Index(slots, slot{o.name, o.rank}))
		}
	}
	return slots, pos
}

// TestSlotsAgreeWithRebuild: a context's slots and its owners' slot indices,
// kept incrementally as registrations and owners come and go, equal a
// rebuild from scratch after every change, in the published meta too.
func TestSlotsAgreeWithRebuild(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	c := newContext(ContextKey{ModelName: "m", BlockSize: testBS}, &binding{}, 0)
	regs := map[slot]int{}
	var keys []ownerKey
	for step := 0; step < 3000; step++ {
		s := slot{fmt.Sprintf("i%02d", rng.Intn(20)), int32(rng.Intn(3))}
		switch r := rng.Intn(10); {
		case r < 3:
			c.addRegSlot(s, 1)
			regs[s]++
		case r < 5 && regs[s] > 0:
			c.addRegSlot(s, -1)
			regs[s]--
		case r < 8:
			k := ownerKey{sub: uint32(rng.Intn(4)), shared: rng.Intn(4) == 0, rank: s.rank, name: s.instance}
			c.internOwner(k, nil)
			keys = append(keys, k)
		case len(keys) > 0:
			i := rng.Intn(len(keys))
			if rng.Intn(2) == 0 {
				c.releaseOwner(keys[i])
			} else {
				c.releaseOwners(keys[i].sub)
			}
			keys = slices.Delete(keys, i, i+1)
		}
		wantSlots, wantPos := rebuildMeta(regs, c.owners)
		m := c.snapshot()
		if !slices.Equal(c.slots, wantSlots) || !slices.Equal(m.slots, wantSlots) {
			t.Fatalf("step %d: slots %v (meta %v), want %v", step, c.slots, m.slots, wantSlots)
		}
		for i := range c.owners {
			if c.owners[i].slot != wantPos[i] || m.owners[i].slot != wantPos[i] {
				t.Fatalf("step %d: owner %d at slot %d (meta %d), want %d", step, i, c.owners[i].slot, m.owners[i].slot, wantPos[i])
			}
		}
	}
}

// TestChangesCopyOncePerRead: registering into a context and interning its
// owners costs as little with thousands of owners as with a few, because
// the meta snapshot is rebuilt once per read after changes, not once per
// change (a fleet's registration storm otherwise copies every table once per
// registration: quadratic). A read after the changes sees all of them, and
// a read with nothing changed since returns the same snapshot.
func TestChangesCopyOncePerRead(t *testing.T) {
	c := newContext(ContextKey{ModelName: "m", BlockSize: testBS}, &binding{}, 0)
	add := func(i int) {
		s := slot{fmt.Sprintf("i%05d", i), 0}
		c.addRegSlot(s, 1)
		c.internOwner(ownerKey{sub: uint32(i), name: s.instance}, nil)
	}
	const have, more = 4000, 200
	for i := range have {
		add(i)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := have; i < have+more; i++ {
		add(i)
	}
	runtime.ReadMemStats(&after)
	// A snapshot of 4,000 owners and slots is over 400 KB; what one change
	// itself allocates (its share of the tables' and maps' growth) is a
	// few KB.
	per := (after.TotalAlloc - before.TotalAlloc) / more
	t.Logf("%d bytes per change", per)
	if per > 16<<10 {
		t.Fatalf("a registration and its owner allocate %d bytes at %d owners", per, have)
	}
	m := c.snapshot()
	if len(m.owners) != have+more || len(m.slots) != have+more || len(m.instances) != have+more {
		t.Fatalf("snapshot after %d changes: %d owners, %d slots, %d instances", have+more, len(m.owners), len(m.slots), len(m.instances))
	}
	if m.owners[have+more-1].slot != int32(have+more-1) {
		t.Fatalf("newest owner at slot %d", m.owners[have+more-1].slot)
	}
	if c.snapshot() != m {
		t.Fatal("a read with nothing changed rebuilt the snapshot")
	}
}
