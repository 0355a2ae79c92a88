package replica

import (
	"errors"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

func randBytes(rng *rand.Rand) []byte {
	switch rng.Intn(3) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, 1+rng.Intn(12))
	rng.Read(b)
	return b
}

// randBatch sets every field of a batch at random (nil and empty byte
// fields both).
func randBatch(rng *rand.Rand) core.Batch {
	b := core.Batch{TimestampF: rng.Float64() * 1e9, TimestampU: rng.Uint64(), DPRank: rng.Uint32(),
		HasDPRank: rng.Intn(2) == 0, Seq: rng.Uint64() >> 1, HasSeq: rng.Intn(2) == 0, Skipped: rng.Intn(3)}
	for n := rng.Intn(4); n > 0; n-- {
		e := core.Event{Kind: core.EventKind(1 + rng.Intn(3)), Standard: rng.Intn(2) == 0,
			Parent: rng.Uint64(), HasParent: rng.Intn(2) == 0, HasTokens: rng.Intn(2) == 0, Bigram: rng.Intn(2) == 0,
			BlockSize: rng.Intn(64), Partial: rng.Intn(2) == 0, HasLoraID: rng.Intn(2) == 0, LoraID: rng.Int63() - rng.Int63(),
			HasGroupIdx: rng.Intn(2) == 0, GroupIdx: -rng.Int63n(5), HasSlidingWindow: rng.Intn(2) == 0,
			ExtraKeysPresent: rng.Intn(2) == 0, HasEventID: rng.Intn(2) == 0, EventID: rng.Uint64(), Timestamp: rng.Uint64(),
			HasModelName: rng.Intn(2) == 0, HasBlockSize: rng.Intn(2) == 0, HasDPRank: rng.Intn(2) == 0, DPRank: rng.Uint32(),
			HasBaseIdx: rng.Intn(2) == 0, BaseBlockIdx: rng.Uint32()}
		for i := rng.Intn(5); i > 0; i-- {
			e.Hashes = append(e.Hashes, rng.Uint64())
		}
		for i := rng.Intn(9); i > 0; i-- {
			e.Tokens = append(e.Tokens, int32(rng.Uint32()))
		}
		for _, p := range byteFields(&e) {
			*p = randBytes(rng)
		}
		b.Events = append(b.Events, e)
	}
	return b
}

// canonical makes a batch comparable with a decoded one: empty hash and
// token slices are nil on both sides (the decoder appends to its scratch).
func canonical(b core.Batch) core.Batch {
	b.Errors = nil
	if len(b.Events) == 0 {
		b.Events = nil
	}
	for i := range b.Events {
		e := &b.Events[i]
		if len(e.Hashes) == 0 {
			e.Hashes = nil
		}
		if len(e.Tokens) == 0 {
			e.Tokens = nil
		}
	}
	return b
}

func TestBatchRoundTrip(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	var d Decoder // one decoder across cases: scratch reuse must not leak
	for i := 0; i < 500; i++ {
		b := randBatch(rng)
		k := core.ServiceKey{InstanceID: string(randBytes(rng)), TenantID: "t", DPRank: int32(rng.Intn(8))}
		body := AppendBatch(nil, k, &b)
		m, err := d.Decode(body)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if m.Kind != KindBatch || m.Key != k {
			t.Fatalf("case %d: kind %q key %+v, want %+v", i, m.Kind, m.Key, k)
		}
		got, want := canonical(m.Batch), canonical(b)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d:\n got %+v\nwant %+v", i, got, want)
		}
		// Nil and empty byte fields stay apart (absent vs present-empty).
		for j := range b.Events {
			gf, wf := byteFields(&m.Batch.Events[j]), byteFields(&b.Events[j])
			for f := range gf {
				if (*gf[f] == nil) != (*wf[f] == nil) {
					t.Fatalf("case %d event %d field %d: nil-ness lost", i, j, f)
				}
			}
		}
		// Every strict prefix is malformed (an error, never a panic or a
		// shorter batch taken for the whole).
		for cut := 0; cut < len(body); cut += 1 + rng.Intn(7) {
			if _, err := d.Decode(body[:cut]); !errors.Is(err, ErrMessage) {
				t.Fatalf("case %d: prefix %d/%d decoded (err %v)", i, cut, len(body), err)
			}
		}
	}
}

func TestKeyMessages(t *testing.T) {
	var d Decoder
	k := core.ServiceKey{InstanceID: "vllm-1", TenantID: "acme", DPRank: 3}
	for _, kind := range []Kind{KindClear, KindFlush, KindUnregister, KindExpire} {
		m, err := d.Decode(AppendKeyMessage(nil, kind, k))
		if err != nil || m.Kind != kind || m.Key != k {
			t.Fatalf("%q: %+v %v", kind, m, err)
		}
	}
	// hand-made: version 1, 'C', "a", "b", rank -1 (zigzag 1)
	m, err := d.Decode([]byte{1, 'C', 1, 'a', 1, 'b', 1})
	if err != nil || m.Key != (core.ServiceKey{InstanceID: "a", TenantID: "b", DPRank: -1}) {
		t.Fatalf("hand-made clear: %+v %v", m, err)
	}
	// A gap carries the policy the relay applied: one byte after the key.
	for _, p := range []core.GapPolicy{core.GapKeep, core.GapClear, core.GapExpire} {
		m, err := d.Decode(AppendGap(nil, k, p))
		if err != nil || m.Kind != KindGap || m.Key != k || m.Policy != p {
			t.Fatalf("gap %v: %+v %v", p, m, err)
		}
	}
	if m, err := d.Decode([]byte{1, 'G', 1, 'a', 1, 'b', 1, 3}); err != nil || m.Policy != core.GapExpire {
		t.Fatalf("hand-made gap: %+v %v", m, err)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 'C', 0, 0, 0}, {1, 'X', 0, 0, 0}, {1, 'C', 0, 0, 0, 0}, {1, 'C', 5, 'a'},
		{1, 'G', 0, 0, 0}, {1, 'G', 0, 0, 0, 0}, {1, 'G', 0, 0, 0, 4}, {1, 'G', 0, 0, 0, 2, 2}} {
		if _, err := d.Decode(bad); !errors.Is(err, ErrMessage) {
			t.Errorf("%v: err %v, want ErrMessage", bad, err)
		}
	}
}

func TestRegisterRoundTrip(t *testing.T) {
	vp, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	cg := int64(0)
	regs := []core.Registration{
		{Endpoint: "tcp://10.0.0.1:5557", ReplayEndpoint: "tcp://10.0.0.1:5558", Type: core.PublisherVLLM, ModelName: "meta/llama-3.1",
			LoraName: "l", TenantID: "acme", InstanceID: "i1", BlockSize: 16, DPRank: 2, AdditionalSalt: "s", CacheGroup: &cg,
			Profile: vp, ProfileExplicit: true, Origin: "", Owner: "alice"},
		{Endpoint: "tcp://h:1", Type: core.PublisherSGLang, ModelName: "m", TenantID: "default", InstanceID: "7", BlockSize: 4,
			Profile: hash.DefaultProfile(), Origin: "dynamo", AdaptersFromEvents: true},
	}
	var d Decoder
	for _, r := range regs {
		m, err := d.Decode(AppendRegister(nil, &r))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m.Reg, r) || m.Key != r.Key() {
			t.Fatalf("\n got %+v\nwant %+v", m.Reg, r)
		}
	}
	if _, err := d.Decode([]byte("\x01R{\"type\":\"nope\"}")); !errors.Is(err, ErrMessage) {
		t.Fatalf("bad type: %v", err)
	}
}

func TestSubjectToken(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		got := SubjectToken(in)
		if got != want {
			t.Fatalf("SubjectToken(%q) = %q, want %q", in, got, want)
		}
		back, err := ParseSubjectToken(got)
		if err != nil || back != in {
			t.Fatalf("ParseSubjectToken(%q) = %q, %v", got, back, err)
		}
	}
	f("", "%")
	f("default", "default")
	f("meta-llama/Llama-3.1-8B", "meta-llama%2FLlama-3%2E1-8B")
	f("a b*c>d", "a%20b%2Ac%3Ed")
	f("%", "%25")
	f("é", "%C3%A9")
	for _, bad := range []string{"", "%2", "%zz", "a.b", "a%2e", "%%"} {
		if _, err := ParseSubjectToken(bad); err == nil {
			t.Errorf("ParseSubjectToken(%q) accepted", bad)
		}
	}
	if s := Subject("conductor.events", "", "m/x"); s != "conductor.events.default.m%2Fx" {
		t.Fatal(s)
	}
	for _, c := range []struct{ t, m, want string }{
		{"", "", "p.>"}, {"acme", "", "p.acme.>"}, {"acme", "m.1", "p.acme.m%2E1"},
	} {
		if got := FilterSubject("p", c.t, c.m); got != c.want {
			t.Errorf("FilterSubject(%q,%q) = %q, want %q", c.t, c.m, got, c.want)
		}
	}
}

// TestMinimalEvent: the smallest events (an AllBlocksCleared: no hashes, no
// tokens, every number zero) decode, alone and many to a batch; one byte
// less is malformed. (A size check once refused them: a replica missed an
// engine's clear.)
func TestMinimalEvent(t *testing.T) {
	var d Decoder
	k := core.ServiceKey{InstanceID: "i", TenantID: "t"}
	for _, n := range []int{1, 2, 100} {
		b := core.Batch{Seq: 2, HasSeq: true}
		for i := 0; i < n; i++ {
			b.NextEvent().Kind = core.EventCleared
		}
		body := AppendBatch(nil, k, &b)
		head := len(AppendBatch(nil, k, &core.Batch{Seq: 2, HasSeq: true})) - 1 // without the event count byte
		if per := (len(body) - head - 1) / n; per != minEventBytes {
			t.Fatalf("a cleared event encodes in %d bytes, minEventBytes is %d", per, minEventBytes)
		}
		m, err := d.Decode(body)
		if err != nil || len(m.Batch.Events) != n || m.Batch.Events[0].Kind != core.EventCleared {
			t.Fatalf("%d cleared events: %v", n, err)
		}
		if _, err := d.Decode(body[:len(body)-1]); !errors.Is(err, ErrMessage) {
			t.Fatalf("one byte short decoded: %v", err)
		}
	}
}
