package fuzz

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/replica"
)

// FuzzReplicaMessage: the replica's message decoder (NATS JetStream bodies)
// never panics; what it accepts re-encodes to the same bytes (the encoding
// is canonical) and decodes again to the same message; what it rejects is
// ErrMessage. Seeds: a batch with every field set, each key message, a gap,
// a registration.
func FuzzReplicaMessage(f *testing.F) {
	k := core.ServiceKey{InstanceID: "vllm-0", TenantID: "acme", DPRank: 1}
	b := core.Batch{TimestampF: 1.5, Seq: 42, HasSeq: true, DPRank: 1, HasDPRank: true}
	e := b.NextEvent()
	e.Kind, e.Hashes, e.Parent, e.HasParent = core.EventStored, []uint64{1, 2}, 9, true
	e.Tokens, e.HasTokens, e.BlockSize, e.Medium = []int32{1, 2, 3, 4, -5, 6, 7, 8}, true, 4, []byte("GPU")
	e.LoraName, e.CacheSalt, e.HasEventID, e.EventID = []byte{}, []byte("s"), true, 7
	e2 := b.NextEvent()
	e2.Kind, e2.Hashes, e2.Standard = core.EventRemoved, []uint64{2}, true
	f.Add(replica.AppendBatch(nil, k, &b))
	for _, kind := range []replica.Kind{replica.KindClear, replica.KindFlush, replica.KindUnregister, replica.KindExpire} {
		f.Add(replica.AppendKeyMessage(nil, kind, k))
	}
	f.Add(replica.AppendGap(nil, k, core.GapExpire))
	f.Add([]byte(`` + "\x01R" + `{"endpoint":"tcp://h:1","type":"vLLM","model_name":"m","tenant_id":"t","instance_id":"i","block_size":16,"dp_rank":0,"hash_profile":{"Strategy":"xxh3","Algorithm":"xxh3_64","PythonHashSeed":"1337","IndexProjection":"seq64"}}`))
	f.Add(replica.AppendSection(nil, k, &replica.Section{Begin: true, End: true, HasSeq: true, Seq: 9, Marks: []int64{1_800_000_000_000_000_000},
		Holdings: []replica.SectionHoldings{{H: core.Holding{Context: core.ContextKey{TenantID: "t", ModelName: "m", BlockSize: 16},
			Name: "vllm-0", Tier: core.TierCPULocal, Copies: 2, Stream: &core.StreamDims{Salt: "s"}, Expires: 1_800_000_000_000_000_000}, Keys: []uint64{1, 2}}},
		Engine: []core.EngineEntry{{Context: core.ContextKey{TenantID: "t", ModelName: "m", BlockSize: 16}, Hash: 5, Key: 6, Plain: 7, Count: 1}}}))
	var d, d2 replica.Decoder
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64<<10 {
			return
		}
		m, err := d.Decode(in)
		if err != nil {
			if !errors.Is(err, replica.ErrMessage) {
				t.Fatalf("error %v does not wrap ErrMessage", err)
			}
			return
		}
		var again []byte
		switch m.Kind {
		case replica.KindBatch:
			again = replica.AppendBatch(nil, m.Key, &m.Batch)
		case replica.KindClear, replica.KindFlush, replica.KindUnregister, replica.KindExpire:
			again = replica.AppendKeyMessage(nil, m.Kind, m.Key)
		case replica.KindGap:
			again = replica.AppendGap(nil, m.Key, m.Policy)
		case replica.KindSection:
			// Records may be regrouped: the section must survive a round trip.
			again = replica.AppendSection(nil, m.Key, m.Section)
			want := sectionOf(m.Section)
			m2, err := d2.Decode(again)
			if err != nil || m2.Key != m.Key || !reflect.DeepEqual(sectionOf(m2.Section), want) {
				t.Fatalf("section round trip: %+v → %+v (%v)", want, m2, err)
			}
			return
		case replica.KindRegister:
			// JSON: not canonical byte for byte; the registration must
			// survive a round trip.
			again = replica.AppendRegister(nil, &m.Reg)
			m2, err := d2.Decode(again)
			if err != nil || m2.Reg.Key() != m.Reg.Key() || m2.Reg.Endpoint != m.Reg.Endpoint {
				t.Fatalf("registration round trip: %+v → %+v (%v)", m.Reg, m2, err)
			}
			return
		default:
			t.Fatalf("kind %q accepted", m.Kind)
		}
		if !bytes.Equal(again, in) {
			t.Fatalf("accepted input does not re-encode to itself:\n in %x\nout %x", in, again)
		}
	})
}

// sectionOf copies a decoded section (it aliases its decoder), empty slices nil.
func sectionOf(s *replica.Section) replica.Section {
	c := *s
	c.Holdings = append([]replica.SectionHoldings(nil), s.Holdings...)
	c.Engine = append([]core.EngineEntry(nil), s.Engine...)
	c.Marks = append([]int64(nil), s.Marks...)
	return c
}
