package core

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// engineSim is a vLLM-like publisher under the xxh3 profile: prompts share
// prefixes, the engine hash of a block is a hash of its token prefix (not the
// standard chain, so conductor must re-hash and keep the engine map), stores
// may repeat (copies) and removes are per copy.
type engineSim struct {
	rng     *rand.Rand
	bs      int
	prompts [][]int32
	cached  map[uint64]int // engine hash → copies
	order   []uint64
}

func newEngineSim(seed int64, bs int) *engineSim {
	e := &engineSim{rng: rand.New(rand.NewSource(seed)), bs: bs, cached: map[uint64]int{}}
	base := make([]int32, 8*bs)
	for i := range base {
		base[i] = int32(e.rng.Intn(50))
	}
	for p := 0; p < 12; p++ {
		keep := e.rng.Intn(5) * bs
		pr := append([]int32(nil), base[:keep]...)
		for len(pr) < 8*bs {
			pr = append(pr, int32(e.rng.Intn(50)))
		}
		e.prompts = append(e.prompts, pr)
	}
	return e
}

func (e *engineSim) engineHash(prefix []int32) uint64 {
	b := make([]byte, 0, 4*len(prefix))
	for _, t := range prefix {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return xxh3.HashSeed(b, 7)
}

// next returns the next batch (one event).
func (e *engineSim) next(seq uint64) *Batch {
	b := &Batch{Seq: seq, HasSeq: true}
	ev := b.NextEvent()
	if len(e.order) > 0 && e.rng.Intn(3) == 0 {
		i := e.rng.Intn(len(e.order))
		h := e.order[i]
		ev.Kind = EventRemoved
		ev.Hashes = append(ev.Hashes, h)
		if e.cached[h]--; e.cached[h] == 0 {
			delete(e.cached, h)
			e.order = append(e.order[:i], e.order[i+1:]...)
		}
		return b
	}
	pr := e.prompts[e.rng.Intn(len(e.prompts))]
	n := 1 + e.rng.Intn(len(pr)/e.bs)
	ev.Kind = EventStored
	ev.BlockSize = e.bs
	ev.HasTokens = true
	ev.Tokens = append(ev.Tokens, pr[:n*e.bs]...)
	if e.rng.Intn(4) == 0 {
		ev.Medium = []byte("CPU")
	}
	for i := 0; i < n; i++ {
		h := e.engineHash(pr[:(i+1)*e.bs])
		ev.Hashes = append(ev.Hashes, h)
		if ev.Medium == nil { // removes below are device-tier
			if e.cached[h] == 0 {
				e.order = append(e.order, h)
			}
			e.cached[h]++
		}
	}
	return b
}

// collector keeps a dump in memory.
type collector struct {
	streams []StreamInfo
	holds   [][]Holding
	engine  [][]EngineEntry
}

func (c *collector) Stream(i *StreamInfo) error {
	c.streams = append(c.streams, *i)
	c.holds = append(c.holds, nil)
	c.engine = append(c.engine, nil)
	return nil
}
func (c *collector) Holding(h *Holding) error {
	c.holds[len(c.holds)-1] = append(c.holds[len(c.holds)-1], *h)
	return nil
}
func (c *collector) Engine(e *EngineEntry) error {
	c.engine[len(c.engine)-1] = append(c.engine[len(c.engine)-1], *e)
	return nil
}
func (c *collector) EndStream(*StreamInfo) error { return nil }

func (c *collector) restore(t testing.TB, ix *Index) {
	t.Helper()
	for i := range c.streams {
		r, err := ix.RestoreStream(&c.streams[i])
		if err != nil {
			t.Fatal(err)
		}
		for j := range c.holds[i] {
			if !r.Holding(&c.holds[i][j]) {
				t.Fatalf("holding %+v not restored", c.holds[i][j])
			}
		}
		for j := range c.engine[i] {
			if !r.Engine(&c.engine[i][j]) {
				t.Fatalf("engine entry %+v not restored", c.engine[i][j])
			}
		}
		r.End()
	}
}

func xxh3Reg(inst string) Registration {
	return Registration{Endpoint: "tcp://127.0.0.1:1/" + inst, Type: PublisherVLLM, ModelName: "m",
		InstanceID: inst, BlockSize: 4}
}

// answers queries every prompt prefix of sim and returns the rows.
func answers(t testing.TB, ix *Index, sim *engineSim) []string {
	t.Helper()
	var out []string
	var res QueryResult
	for _, pr := range sim.prompts {
		for n := sim.bs; n <= len(pr); n += sim.bs {
			if err := ix.Query(&QueryRequest{Model: "m", BlockSize: sim.bs, Tokens: pr[:n]}, &res); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%+v", res.Instances))
		}
	}
	return append(out, fmt.Sprint(ix.TierBlocks()))
}

// TestRestoreStreamSkipsDumpedBatches: replica B subscribes (its batches are
// buffered from seq `from`), restores A's dump taken at watermark W ≥ from,
// then applies its buffer: batches ≤ W are skipped (not counted twice) and the
// rest apply, so B ends exactly like A and like a third index that saw every
// batch; in particular a block stored before W and removed after W is gone.
func TestRestoreStreamSkipsDumpedBatches(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	sim := newEngineSim(seed, 4)
	const total, W, from = 600, 400, 250
	batches := make([]*Batch, total)
	for i := range batches {
		batches[i] = sim.next(uint64(i))
	}
	a, ref, b := New(Options{}), New(Options{}), New(Options{})
	sa, sref := mustRegister(t, a, xxh3Reg("1")), mustRegister(t, ref, xxh3Reg("1"))
	for i := 0; i <= W; i++ {
		sa.Apply(batches[i])
	}
	var dump collector
	if err := a.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	if len(dump.streams) != 1 || dump.streams[0].Seq != W || !dump.streams[0].HasSeq || len(dump.engine[0]) == 0 {
		t.Fatalf("dump header %+v, %d engine entries", dump.streams, len(dump.engine[0]))
	}
	release := b.HoldApplies()
	sb := mustRegister(t, b, xxh3Reg("1"))
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for i := from; i < total; i++ { // the listener's buffer, behind the gate
			sb.Apply(batches[i])
		}
	}()
	select {
	case <-applied:
		t.Fatal("Apply ran while the gate was held")
	case <-time.After(20 * time.Millisecond):
	}
	dump.restore(t, b)
	release()
	<-applied
	for i := W + 1; i < total; i++ {
		sa.Apply(batches[i])
	}
	for i := 0; i < total; i++ {
		sref.Apply(batches[i])
	}
	want := answers(t, ref, sim)
	if got := answers(t, a, sim); !reflect.DeepEqual(got, want) {
		t.Fatal("A differs from the reference")
	}
	if got := answers(t, b, sim); !reflect.DeepEqual(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("replica differs at answer %d:\n got %s\nwant %s", i, got[i], want[i])
			}
		}
	}
	if n := b.Counters().RecoveredSkips.Load(); n != W-from+1 {
		t.Fatalf("skipped %d batches, want %d", n, W-from+1)
	}
}

// TestRestoreKeepsGapMarks: under the gap policy "expire", a dump taken
// while two gap marks are pending carries each block's deadline, and the
// restored index expires exactly what the source does, mark by mark: the
// blocks held at the first gap and not announced again, then those held at
// the second. Blocks stored after a gap, or stored again after it, stay.
func TestRestoreKeepsGapMarks(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	sim := newEngineSim(seed, 4)
	opts := Options{GapPolicy: GapExpire, GapExpireAfter: time.Hour}
	a := New(opts)
	sa := mustRegister(t, a, xxh3Reg("1"))
	seq := uint64(0)
	apply := func(n int) {
		for range n {
			sa.Apply(sim.next(seq))
			seq++
		}
	}
	apply(150)
	if r := sa.Gap("test: first gap"); r.Blocks == 0 {
		t.Fatal("the first gap marked nothing")
	}
	apply(60)
	time.Sleep(time.Millisecond) // two distinct deadlines
	if r := sa.Gap("test: second gap"); r.Blocks == 0 {
		t.Fatal("the second gap marked nothing")
	}
	apply(60)
	var dump collector
	if err := a.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	expiring := 0
	for _, h := range dump.holds[0] {
		if h.Expires != 0 {
			expiring++
		}
	}
	if expiring == 0 || expiring == len(dump.holds[0]) {
		t.Fatalf("%d of %d dumped holdings carry a deadline; want some, not all", expiring, len(dump.holds[0]))
	}
	b := New(opts)
	sb := mustRegister(t, b, xxh3Reg("1"))
	dump.restore(t, b)
	at, ok := sa.NextExpiry()
	if bt, bok := sb.NextExpiry(); !ok || !bok || !at.Equal(bt) {
		t.Fatalf("next expiry: source %v %v, restored %v %v", at, ok, bt, bok)
	}
	for step := range 3 {
		want := answers(t, a, sim)
		if got := answers(t, b, sim); !reflect.DeepEqual(got, want) {
			t.Fatalf("after %d expiries the restored index answers differently", step)
		}
		na, nb := sa.ExpireOldest(), sb.ExpireOldest()
		if na != nb || (step < 2) != (na > 0) {
			t.Fatalf("expiry %d dropped %d blocks in the source, %d in the restored index", step, na, nb)
		}
	}
}

// TestFirstLiveAfterPriorRestore: an index restores a snapshot of an earlier
// run (StreamInfo.Prior) at watermark W, and the publisher restarted
// meanwhile: its new incarnation numbers from 0 again. A first live sequence
// at or below W clears the old incarnation's blocks and ends skipping, so the
// new incarnation's batches (all below W) apply: the index answers like one
// that saw only the new incarnation. A first live sequence above W, a
// second call, and a peer's dump (not Prior) change nothing: batches at or
// below W stay skipped and the restored blocks stay.
func TestFirstLiveAfterPriorRestore(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	const W, K = 300, 120
	old, inc := newEngineSim(seed, 4), newEngineSim(seed+1, 4)
	oldB, newB := make([]*Batch, W+1), make([]*Batch, K)
	for i := range oldB {
		oldB[i] = old.next(uint64(i))
	}
	for i := range newB {
		newB[i] = inc.next(uint64(i))
	}
	a := New(Options{})
	sa := mustRegister(t, a, xxh3Reg("1"))
	for _, b := range oldB {
		sa.Apply(b)
	}
	var dump collector
	if err := a.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	// fresh: only the new incarnation; kept: the snapshot, nothing applied
	fresh, kept := New(Options{}), New(Options{})
	sf := mustRegister(t, fresh, xxh3Reg("1"))
	for _, b := range newB {
		sf.Apply(b)
	}
	mustRegister(t, kept, xxh3Reg("1"))
	dump.restore(t, kept)
	rows := func(ix *Index) []string { return append(answers(t, ix, old), answers(t, ix, inc)...) }
	wantFresh, wantKept := rows(fresh), rows(kept)

	check := func(name string, prior bool, firsts []uint64, restarted bool) {
		t.Helper()
		ix := New(Options{})
		s := mustRegister(t, ix, xxh3Reg("1"))
		dump.streams[0].Prior = prior
		dump.restore(t, ix)
		for i, seq := range firsts {
			n, ok := s.FirstLive(seq)
			if want := restarted && i == 0; ok != want || (ok && n == 0) {
				t.Fatalf("%s: FirstLive(%d) call %d = %d, %v; want restarted %v", name, seq, i, n, ok, want)
			}
		}
		for _, b := range newB {
			s.Apply(b)
		}
		want := wantKept
		if restarted {
			want = wantFresh
		}
		if got := rows(ix); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: answers differ from the index that saw %s", name, map[bool]string{true: "only the new incarnation", false: "only the snapshot"}[restarted])
		}
		if seq, ok := s.EndSkip(); restarted && (!ok || seq != K-1) || !restarted && (!ok || seq != W) {
			t.Fatalf("%s: watermark %d, %v", name, seq, ok)
		}
	}
	check("prior, first live at W", true, []uint64{W}, true)
	check("prior, first live at 0, then again", true, []uint64{0, 0}, true)
	check("prior, first live above W", true, []uint64{W + 1, 0}, false)
	check("peer dump", false, []uint64{0}, false)
}

// TestRestoreStreamRemovedAfterDump: the ordering rule on one block: stored
// (in the dump), removed live after the dump was taken — it must not
// reappear on the replica.
func TestRestoreStreamRemovedAfterDump(t *testing.T) {
	a, b := New(Options{}), New(Options{})
	sa := mustRegister(t, a, xxh3Reg("1"))
	sim := newEngineSim(1, 4)
	store := &Batch{Seq: 5, HasSeq: true}
	ev := store.NextEvent()
	ev.Kind, ev.BlockSize, ev.HasTokens = EventStored, 4, true
	ev.Tokens = append(ev.Tokens, sim.prompts[0][:4]...)
	ev.Hashes = append(ev.Hashes, 77)
	sa.Apply(store)
	var dump collector
	if err := a.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	remove := &Batch{Seq: 6, HasSeq: true}
	rv := remove.NextEvent()
	rv.Kind = EventRemoved
	rv.Hashes = append(rv.Hashes, 77)

	release := b.HoldApplies()
	sb := mustRegister(t, b, xxh3Reg("1"))
	done := make(chan struct{})
	go func() { sb.Apply(store); sb.Apply(remove); close(done) }()
	dump.restore(t, b)
	if got := b.TierBlocks()[TierDevice]; got != 1 {
		t.Fatalf("restored %d device holdings, want 1", got)
	}
	release()
	<-done
	if got := b.TierBlocks()[TierDevice]; got != 0 {
		t.Fatalf("block reappeared: %d device holdings", got)
	}
	if gv := b.GlobalView(); gv.Contexts[0].PrefixCount != 0 {
		t.Fatalf("prefixes left: %d", gv.Contexts[0].PrefixCount)
	}
}

// TestRestoreStreamNeedsRegistration: a section without a matching
// registration (or in another context) is refused with ErrNotFound.
func TestRestoreStreamNeedsRegistration(t *testing.T) {
	b := New(Options{})
	mustRegister(t, b, xxh3Reg("1"))
	for _, r := range []Registration{xxh3Reg("2"), {InstanceID: "1", ModelName: "other", BlockSize: 4}} {
		if _, err := b.RestoreStream(&StreamInfo{Reg: r}); err == nil {
			t.Fatalf("restore of %+v accepted", r)
		}
	}
}

// TestHoldAppliesNests: the gate opens when the last hold is released.
func TestHoldAppliesNests(t *testing.T) {
	ix := New(Options{})
	r1, r2 := ix.HoldApplies(), ix.HoldApplies()
	r1()
	r1() // idempotent
	if !ix.Gated() {
		t.Fatal("gate opened with a hold left")
	}
	r2()
	if ix.Gated() {
		t.Fatal("gate still closed")
	}
}

// TestRestoreStreamGapAfterWatermark: when the first batch a restored
// subscription receives is beyond watermark+1, the batches in between are in
// neither the dump nor the stream: the gap is counted and the gap policy
// decides what stays of the restored blocks: under GapClear none (true if
// incomplete), under GapKeep all, under GapExpire all until the expiry.
func TestRestoreStreamGapAfterWatermark(t *testing.T) {
	a := New(Options{})
	sa := mustRegister(t, a, xxh3Reg("1"))
	sim := newEngineSim(3, 4)
	for i := 0; i < 50; i++ {
		sa.Apply(sim.next(uint64(i)))
	}
	var dump collector
	if err := a.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	for _, p := range []GapPolicy{GapClear, GapKeep, GapExpire} {
		t.Run(p.String(), func(t *testing.T) {
			b := New(Options{GapPolicy: p})
			sb := mustRegister(t, b, xxh3Reg("1"))
			dump.restore(t, b)
			if b.TierBlocks() != a.TierBlocks() {
				t.Fatalf("restored %v, source %v", b.TierBlocks(), a.TierBlocks())
			}
			sb.Apply(&Batch{Seq: 51, HasSeq: true}) // seq 50 was lost
			want := a.TierBlocks()
			if p == GapClear {
				want = [NumTiers]int{}
			}
			if tb := b.TierBlocks(); tb != want || b.Counters().RecoveryGaps.Load() != 1 {
				t.Fatalf("after the gap: holdings %v, want %v; gaps %d", tb, want, b.Counters().RecoveryGaps.Load())
			}
			at, pending := sb.NextExpiry()
			if pending != (p == GapExpire) {
				t.Fatalf("pending expiry %v", pending)
			}
			if pending {
				sb.ExpireDue(at)
				if b.TierBlocks() != [NumTiers]int{} {
					t.Fatalf("after the expiry: %v", b.TierBlocks())
				}
			}
		})
	}
}

// TestAbortWakesGatedApply: an Apply waiting on the closed gate returns
// (Closed, nothing applied) when its subscription is aborted, so a receiver
// can be stopped during recovery; the gate itself stays closed for others.
func TestAbortWakesGatedApply(t *testing.T) {
	ix := New(Options{})
	release := ix.HoldApplies()
	defer release()
	s := mustRegister(t, ix, xxh3Reg("1"))
	other := mustRegister(t, ix, xxh3Reg("2"))
	sim := newEngineSim(5, 4)
	b0, b1 := sim.next(0), sim.next(1)
	res := make(chan ApplyStats, 1)
	go func() { res <- s.Apply(b0) }()
	otherDone := make(chan struct{})
	go func() { other.Apply(b1); close(otherDone) }()
	s.Abort()
	select {
	case st := <-res:
		if !st.Closed || st.Stored != 0 {
			t.Fatalf("aborted Apply: %+v", st)
		}
	case <-time.After(2 * time.Minute): // a failure bound only
		t.Fatal("Abort did not wake the gated Apply")
	}
	select {
	case <-otherDone:
		t.Fatal("another subscription's Apply passed the closed gate")
	case <-time.After(20 * time.Millisecond):
	}
	release()
	<-otherDone
	if _, err := ix.Unregister(s.Key()); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreStreamKeepsStreamOwners: holdings of RFC #1527 stream owners
// are dumped with their stream's salt, backend_id and medium, and the
// restored index re-creates the same owners: a later `cleared` of one stream
// purges exactly that stream's restored blocks (as on the source), key sets
// stay exact, and unregistering returns every holding.
func TestRestoreStreamKeepsStreamOwners(t *testing.T) {
	src := New(Options{})
	s := mustRegister(t, src, stdReg("a", "", ""))
	s.Apply(rfcEv(EventStored, 1, "worker-0", "GPU", 0, 1, 2))
	s.Apply(rfcEv(EventStored, 1, "worker-0", "disk", 0, 1, 2))
	s.Apply(rfcEv(EventStored, 1, "worker-1", "disk", 0, 1))
	salted := rfcEv(EventStored, 1, "worker-0", "gpu", 0, 7)
	salted.Events[0].AdditionalSalt = []byte("x")
	s.Apply(salted)

	var dump collector
	if err := src.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	want := map[StreamDims]int{
		{BackendID: "worker-0", Medium: "gpu"}:            2,
		{BackendID: "worker-0", Medium: "disk"}:           2,
		{BackendID: "worker-1", Medium: "disk"}:           1,
		{Salt: "x", BackendID: "worker-0", Medium: "gpu"}: 1,
	}
	got := map[StreamDims]int{}
	for _, h := range dump.holds[0] {
		if h.Stream == nil {
			t.Fatalf("stream owner's holding dumped without its stream: %+v", h)
		}
		got[*h.Stream]++
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dumped streams %v want %v", got, want)
	}

	dst := New(Options{})
	d := mustRegister(t, dst, stdReg("a", "", ""))
	dump.restore(t, dst)
	checkKeySets(t, d)
	if g, w := dst.TierBlocks(), src.TierBlocks(); g != w {
		t.Fatalf("restored holdings %v want %v", g, w)
	}
	// Same stream clear on both: worker-0's disk blocks go, worker-1's
	// disk block 1 and the GPU blocks stay (hand-worked: gpu 2 blocks = 32
	// tokens, disk only block 1 = 16).
	for _, ix := range []*Index{src, dst} {
		sub := s
		if ix == dst {
			sub = d
		}
		sub.Apply(rfcEv(EventCleared, 2, "worker-0", "DISK", 0))
		if dv, _, dk := deviceOf(t, ix, "a", 1, 2); dv != 32 || dk != 16 {
			t.Fatalf("after worker-0 disk clear: device %d disk %d, want 32 16", dv, dk)
		}
		cl := rfcEv(EventCleared, 2, "worker-0", "gpu", 0) // the salted stream's next id
		cl.Events[0].AdditionalSalt = []byte("x")
		sub.Apply(cl)
		if dv, _, _ := deviceOf(t, ix, "a", 1, 2); dv != 32 {
			t.Fatalf("salted clear purged the unsalted stream: %d", dv)
		}
		checkKeySets(t, sub)
		if g, w := ix.TierBlocks(), ix.countHoldings(); g != w {
			t.Fatalf("TierBlocks %v, walk %v", g, w)
		}
	}
	if g, w := dst.TierBlocks(), src.TierBlocks(); g != w {
		t.Fatalf("after clears: restored %v source %v", g, w)
	}
	if _, err := dst.Unregister(d.Key()); err != nil {
		t.Fatal(err)
	}
	if g := dst.TierBlocks(); g != [NumTiers]int{} || dst.countHoldings() != g {
		t.Fatalf("holdings left after unregister: %v (walk %v)", g, dst.countHoldings())
	}
}

// TestRestoreStreamDefersClear: a transport Clear (a stale stream, a
// publisher restart) that arrives while a restored stream is still below
// its dump's watermark is decided by the next batch: a gap that ends at or
// below watermark+1 lost only batches the dump holds (nothing cleared; the
// batch is skipped as recovered); a sequence that went back is a restart
// (cleared, then the batch applies); a batch past watermark+1 is a gap past
// the dump (cleared, counted).
func TestRestoreStreamDefersClear(t *testing.T) {
	a := New(Options{})
	sa := mustRegister(t, a, xxh3Reg("1"))
	sim := newEngineSim(3, 4)
	for i := 0; i < 50; i++ {
		sa.Apply(sim.next(uint64(i)))
	}
	var dump collector
	if err := a.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	if dump.streams[0].Seq != 49 {
		t.Fatalf("watermark %d", dump.streams[0].Seq)
	}
	restored := func() (*Index, *Subscription) {
		b := New(Options{GapPolicy: GapClear})
		sb := mustRegister(t, b, xxh3Reg("1"))
		dump.restore(t, b)
		if sb.Apply(&Batch{Seq: 30, HasSeq: true}); b.TierBlocks() != a.TierBlocks() {
			t.Fatalf("restored %v, source %v", b.TierBlocks(), a.TierBlocks())
		}
		return b, sb
	}
	// Lost 31..39 (in the dump): nothing cleared.
	b, sb := restored()
	if n := sb.Clear("stale: seq 31..39 lost"); n != 0 || b.TierBlocks() != a.TierBlocks() {
		t.Fatalf("clear below the watermark removed %d blocks: %v", n, b.TierBlocks())
	}
	if st := sb.Apply(&Batch{Seq: 40, HasSeq: true}); !st.Recovered || b.TierBlocks() != a.TierBlocks() {
		t.Fatalf("batch after a gap inside the dump: %+v, holdings %v", st, b.TierBlocks())
	}
	// Lost 31..50 (past the dump): cleared when seq 51 comes.
	b, sb = restored()
	sb.Clear("stale: seq 31..50 lost")
	if st := sb.Apply(&Batch{Seq: 51, HasSeq: true}); st.Recovered || b.TierBlocks() != [NumTiers]int{} ||
		b.Counters().RecoveryGaps.Load() != 1 {
		t.Fatalf("gap past the dump: %+v, holdings %v", st, b.TierBlocks())
	}
	// A restart: the sequence goes back; the new incarnation's batch applies.
	b, sb = restored()
	sb.Clear("publisher restart: live seq=0 after seq=30")
	fresh := newEngineSim(9, 4).next(0)
	if st := sb.Apply(fresh); st.Recovered || st.Stored == 0 {
		t.Fatalf("restart: %+v", st)
	}
	want := New(Options{})
	mustRegister(t, want, xxh3Reg("1")).Apply(newEngineSim(9, 4).next(0))
	if b.TierBlocks() != want.TierBlocks() {
		t.Fatalf("after the restart: holdings %v, want only the new incarnation's %v", b.TierBlocks(), want.TierBlocks())
	}
}

// TestDumpWalksAgree: a section dumped by looking up its owners' key sets
// holds exactly the holdings of a walk of every block of the context, for
// owners of every kind sharing one context: engines whose ranks share
// blocks, in two tiers, with removes and a clear (a new owner generation
// in blocks that still carry the old one's words until reused), a
// Mooncake pool, RFC stream owners, and an xxh3 engine that re-hashes.
// The dump of the default choice restores into an index that agrees with
// the source.
func TestDumpWalksAgree(t *testing.T) {
	src := New(Options{})
	prof := cborProfile(t)
	rng := rand.New(rand.NewSource(5))
	var engines []*Subscription
	for i := range 4 {
		engines = append(engines, mustRegister(t, src, engineReg(t, fmt.Sprintf("e%d", i), int32(i%2), prof)))
	}
	for round := range 200 {
		s := engines[rng.Intn(len(engines))]
		hs := make([]uint64, 1+rng.Intn(6))
		for j := range hs {
			hs[j] = 1 + uint64(rng.Intn(300)) // shared among the engines
		}
		switch r := rng.Intn(10); {
		case r < 6:
			s.Apply(stored("GPU", hs...))
		case r < 8:
			s.Apply(stored("CPU", hs...))
		default:
			s.Apply(removed("GPU", hs...))
		}
		if round == 120 {
			engines[1].Apply(cleared())
		}
	}
	pool := mustRegister(t, src, poolReg("pool"))
	pool.Apply(poolStored("mooncake", "node-1", seq(40)...))
	// Standard streams serve a context of their own (one hash profile
	// per context), two registrations sharing it.
	for i, inst := range []string{"std", "std2"} {
		r := stdReg(inst, "", "")
		r.ModelName = "m2"
		std := mustRegister(t, src, r)
		std.Apply(rfcEv(EventStored, 1, "worker-0", "GPU", 0, 1, 2, 3))
		std.Apply(rfcEv(EventStored, 2, "worker-1", "disk", 0, uint64(2+i), 3))
	}
	sim := newEngineSim(3, 4)
	x := mustRegister(t, src, xxh3Reg("x"))
	for i := range uint64(60) {
		x.Apply(sim.next(i + 1))
	}

	dumped := func(walk int) collector {
		t.Helper()
		defer func(w int) { dumpWalk = w }(dumpWalk)
		dumpWalk = walk
		var c collector
		if err := src.DumpStreams(nil, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	walked, looked := dumped(dumpWalkRange), dumped(dumpWalkKeys)
	if len(walked.holds) != 8 || len(looked.holds) != 8 {
		t.Fatalf("%d and %d sections, want 8", len(walked.holds), len(looked.holds))
	}
	for i := range walked.holds {
		w, l := sortedHoldings(walked.holds[i]), sortedHoldings(looked.holds[i])
		if len(w) == 0 {
			t.Fatalf("section %v holds nothing", walked.streams[i].Reg.Key())
		}
		if !reflect.DeepEqual(w, l) {
			t.Fatalf("section %v: walk %d holdings, key sets %d:\n%v\n%v", walked.streams[i].Reg.Key(), len(w), len(l), w, l)
		}
	}

	auto := dumped(dumpWalkAuto)
	dst := New(Options{})
	for _, s := range auto.streams {
		mustRegister(t, dst, s.Reg)
	}
	auto.restore(t, dst)
	if g, w := dst.TierBlocks(), src.TierBlocks(); g != w {
		t.Fatalf("restored holdings %v want %v", g, w)
	}
	if g, w := answers(t, dst, sim), answers(t, src, sim); !reflect.DeepEqual(g, w) {
		t.Fatalf("restored answers differ:\n%v\n%v", g, w)
	}
}

// sortedHoldings returns hs as comparable strings in order.
func sortedHoldings(hs []Holding) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		st := ""
		if h.Stream != nil {
			st = fmt.Sprintf("%+v", *h.Stream)
		}
		out[i] = fmt.Sprintf("%v %s %d %v %d %d %d %s", h.Context, h.Name, h.Rank, h.Shared, h.Tier, h.Key, h.Copies, st)
	}
	slices.Sort(out)
	return out
}
