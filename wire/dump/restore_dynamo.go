package dump

import (
	"strconv"
	"strings"

	"github.com/seed-c7a81618/conductor/core"
)

// Reading the Dynamo form (WriteDynamo): per indexer, RouterEvents whose
// conductor_* members carry what the main form carries.

// dynamoIndexer restores one indexer member "model:group": {"block_size",
// "events": [RouterEvent...]}.
func (rs *restoreState) dynamoIndexer(name string) {
	sc := &rs.sc
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		sc.fail("indexer key %q is not model:group", name)
		return
	}
	in := Indexer{Model: name[:i], Group: name[i+1:]}
	if !sc.expect('{') {
		return
	}
	rs.endCur()
	for first := true; sc.more('}', first); first = false {
		switch sc.key() {
		case "block_size":
			raw := sc.value()
			n, err := strconv.Atoi(string(raw))
			if err != nil || n <= 0 || n > 1<<31-1 {
				sc.fail("%s: block_size %q", name, raw)
				return
			}
			in.BlockSize = n
			if rs.idx != nil {
				if err := rs.idx.AddIndexer(in.Model, in.Group, n); err != nil && sc.err == nil {
					sc.err = err
					return
				}
			}
		case "events":
			if in.BlockSize <= 0 {
				sc.fail("%s: events before block_size", name)
				return
			}
			ck := in.Context()
			if !sc.expect('[') {
				return
			}
			for f2 := true; sc.more(']', f2); f2 = false {
				raw := sc.value()
				if sc.err != nil {
					return
				}
				rs.routerEvent(ck, raw)
			}
		default:
			sc.value()
		}
		if sc.err != nil {
			return
		}
	}
}

// routerEvent restores one RouterEvent (see WriteDynamo): a stream's header
// (conductor_stream), a group of engine hashes, or a group of holdings.
// Nested objects are read in place (enter), so each byte is scanned once.
func (rs *restoreState) routerEvent(ck core.ContextKey, raw []byte) {
	rs.scratch = rs.scratch[:0] // strings are copied out of each event
	r := openObject(raw, &rs.scratch)
	var ev routerEvent
	ev.copies = 1
	rs.keys = rs.keys[:0]
	for {
		k, ok := r.next()
		if !ok {
			break
		}
		if string(k) == "event" {
			if body, ok := r.enter(); ok {
				rs.readEventBody(&body, &ev)
				r.leave(&body)
			}
			continue
		}
		ev.member(k, r.value())
	}
	if r.err != nil {
		rs.sc.fail("RouterEvent: %v", r.err)
		return
	}
	if len(ev.stream) > 0 && ev.stream[0] == '{' {
		rs.routerStream(ck, &ev)
		return
	}
	if len(ev.lora) > 0 {
		ck.LoraName = string(ev.lora) // an adapter's context (conductor_lora)
	}
	if rs.cur == nil {
		// A RouterEvent of a stream without a conductor_stream header (e.g.
		// from a Dynamo process: its tokens_hash is a local block hash, not
		// a conductor prefix key) cannot be attributed.
		rs.st.Skipped++
		return
	}
	if len(ev.engine) > 0 {
		rs.engineEntries(ck, ev.engine)
		return
	}
	t, ok := parseDynamoTier(ev.tier)
	if !ok || !ev.stored {
		rs.st.Skipped++
		return
	}
	h := core.Holding{Context: ck, Tier: t, Rank: ev.rank, Copies: max(ev.copies, 1)}
	if ev.hasBackend {
		h.Shared, h.Name = true, string(ev.backend)
	}
	if len(ev.owner) > 0 {
		if h.Stream = rs.streamDims(ev.owner); h.Stream == nil {
			return
		}
	}
	rs.holdings(&h, rs.keys)
}

// routerEvent is what one RouterEvent of the Dynamo form carries.
type routerEvent struct {
	tier           string
	stream, engine []byte // conductor_stream, conductor_engine_hashes
	backend, owner []byte // conductor_backend, conductor_stream_owner
	lora           []byte // conductor_lora
	hasBackend     bool
	copies         uint32
	eventID        uint64
	rank           int32
	stored         bool // event.data.stored.blocks was present
}

// member records one top-level member of the RouterEvent (but "event").
func (ev *routerEvent) member(k []byte, v member) {
	switch string(k) {
	case "storage_tier":
		ev.tier = string(v.s)
	case "conductor_stream":
		ev.stream = v.s
	case "conductor_engine_hashes":
		ev.engine = v.s
	case "conductor_backend":
		ev.backend, ev.hasBackend = v.s, v.kind == mString
	case "conductor_stream_owner":
		if v.kind == mObject {
			ev.owner = v.s
		}
	case "conductor_lora":
		if v.kind == mString {
			ev.lora = v.s
		}
	case "conductor_copies":
		c, _ := v.u64()
		ev.copies = uint32(min(c, 1<<16-1))
	}
}

// routerStream begins the stream a conductor_stream header names.
func (rs *restoreState) routerStream(ck core.ContextKey, ev *routerEvent) {
	info := core.StreamInfo{Reg: core.Registration{TenantID: ck.TenantID, ModelName: ck.ModelName,
		LoraName: ck.LoraName, BlockSize: ck.BlockSize}, Seq: ev.eventID}
	sr := openObject(ev.stream, &rs.scratch)
	for {
		k, ok := sr.next()
		if !ok {
			break
		}
		v := sr.value()
		switch string(k) {
		case "instance_id":
			info.Reg.InstanceID = string(v.s)
		case "dp_rank":
			info.Reg.DPRank, _ = v.int32()
		case "has_seq":
			info.HasSeq = v.kind == mBool && v.b
		}
	}
	if sr.err != nil {
		rs.sc.fail("conductor_stream: %v", sr.err)
		return
	}
	rs.begin(&info)
}

// readEventBody reads RouterEvent.event: event_id, dp_rank and
// data.stored.blocks[].tokens_hash (into rs.keys).
func (rs *restoreState) readEventBody(body *object, ev *routerEvent) {
	for {
		k, ok := body.next()
		if !ok {
			return
		}
		if string(k) != "data" {
			v := body.value()
			switch string(k) {
			case "event_id":
				ev.eventID, _ = v.u64()
			case "dp_rank":
				ev.rank, _ = v.int32()
			}
			continue
		}
		data, ok := body.enter()
		if !ok {
			continue // "cleared"
		}
		for {
			k2, ok := data.next()
			if !ok {
				break
			}
			if string(k2) != "stored" {
				data.skip()
				continue
			}
			stored, ok := data.enter()
			if !ok {
				continue
			}
			for {
				k3, ok := stored.next()
				if !ok {
					break
				}
				if string(k3) != "blocks" {
					stored.skip()
					continue
				}
				ev.stored = true
				rs.readBlocks(&stored)
			}
			data.leave(&stored)
		}
		body.leave(&data)
	}
}

// readBlocks reads [{"block_hash", "tokens_hash", ...}, ...] at r's position.
func (rs *restoreState) readBlocks(r *object) {
	empty, ok := r.arrayStart()
	if !ok {
		r.fail("blocks must be an array")
		return
	}
	for !empty {
		b, ok := r.enter()
		if !ok {
			r.fail("blocks: want objects")
			return
		}
		found := false
		for {
			k, ok := b.next()
			if !ok {
				break
			}
			v := b.value()
			if string(k) == "tokens_hash" {
				var key uint64
				if key, found = v.u64(); found {
					rs.keys = append(rs.keys, key)
				}
			}
		}
		if !found && b.err == nil {
			b.fail("block without a u64 tokens_hash")
		}
		r.leave(&b)
		if r.err != nil || !r.arrayNext() {
			return
		}
	}
}
