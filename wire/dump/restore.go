package dump

import (
	"bufio"
	"errors"
	"io"
	"math"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// ErrFormat wraps a dump that cannot be parsed.
var ErrFormat = errors.New("conductor: malformed dump")

// Indexers receives the Dynamo indexers (and their block sizes) a
// Dynamo-form dump names; the Dynamo surface implements it to rebuild its
// registry. AddIndexer reports a block size that conflicts with an indexer
// it has (core.ErrConflict), which ends the restore.
type Indexers interface {
	AddIndexer(model, group string, blockSize int) error
}

// Stats describe one restore.
type Stats struct {
	Peer          string // the peer it came from (Recover)
	Bytes         int64
	Streams       int // sections restored
	MissingStream int // sections without a matching registration here (skipped)
	Holdings      int
	Engine        int
	Skipped       int // holdings or engine entries not applied
	Duration      time.Duration
}

// countingReader counts bytes read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Restore parses a dump in either form from r and restores it into ix, whose
// apply gate the caller holds (core.Index.HoldApplies). The indexers of a
// Dynamo-form dump are reported to idx when it is not nil. A section whose
// registration ix lacks is skipped (Stats.MissingStream). Errors wrap
// ErrFormat, or are idx's.
func Restore(ix *core.Index, r io.Reader, idx Indexers) (Stats, error) {
	return restore(ix, r, idx, false)
}

// RestorePrior is Restore for a dump that an earlier run of this process
// wrote (a state directory's snapshot): every section is restored with
// core.StreamInfo.Prior, so a publisher that restarted while the process
// was down is detected by its first live message (core.Subscription.FirstLive).
func RestorePrior(ix *core.Index, r io.Reader, idx Indexers) (Stats, error) {
	return restore(ix, r, idx, true)
}

func restore(ix *core.Index, r io.Reader, idx Indexers, prior bool) (Stats, error) {
	cr := &countingReader{r: r}
	rs := &restoreState{ix: ix, idx: idx, prior: prior, sc: scanner{r: bufio.NewReaderSize(cr, 256<<10)}}
	err := rs.run()
	rs.endCur()
	rs.st.Bytes = cr.n
	return rs.st, err
}

type restoreState struct {
	ix      *core.Index
	idx     Indexers
	prior   bool // sections get core.StreamInfo.Prior (RestorePrior)
	sc      scanner
	st      Stats
	cur     *core.StreamRestorer
	scratch []byte
	keys    []uint64
	triple  []uint64
}

// run reads the root object: the main form starts with "format", anything
// else is the Dynamo form (indexer keys).
func (rs *restoreState) run() error {
	sc := &rs.sc
	if !sc.expect('{') {
		return sc.err
	}
	main := false
	for first := true; sc.more('}', first); first = false {
		k := sc.key()
		switch {
		case sc.err != nil:
		case k == "format":
			raw := sc.value()
			if string(raw) != `"`+mainFormat+`"` {
				sc.fail("format %s", raw)
			}
			main = true
		case main && k == "streams":
			rs.mainStreams()
		case main:
			sc.value()
		default:
			rs.dynamoIndexer(k)
		}
		if sc.err != nil {
			return sc.err
		}
	}
	return sc.err
}

// mainStreams reads the main form's streams: each a stream head (begin)
// and its events.
func (rs *restoreState) mainStreams() {
	sc := &rs.sc
	if !sc.expect('[') {
		return
	}
	for first := true; sc.more(']', first); first = false {
		if !sc.expect('{') {
			return
		}
		rs.endCur()
		for f2 := true; sc.more('}', f2); f2 = false {
			switch sc.key() {
			case "stream":
				rs.streamHead(sc.value())
			case "events":
				rs.mainEvents()
			default:
				sc.value()
			}
			if sc.err != nil {
				return
			}
		}
	}
}

func (rs *restoreState) streamHead(raw []byte) {
	if rs.sc.err != nil {
		return
	}
	rs.scratch = rs.scratch[:0] // strings are copied out of each event
	r := openObject(raw, &rs.scratch)
	var info core.StreamInfo
	for {
		k, ok := r.next()
		if !ok {
			break
		}
		if string(k) == "gap_marks" {
			var bad bool
			if rs.keys, bad = r.uint64s(rs.keys[:0], maxGapMarks); bad {
				rs.sc.fail("gap_marks: want an array of at most %d deadlines", maxGapMarks)
				return
			}
			for _, at := range rs.keys {
				if at > 0 && at <= math.MaxInt64 {
					info.Marks = append(info.Marks, int64(at))
				}
			}
			continue
		}
		v := r.value()
		switch string(k) {
		case "instance_id":
			info.Reg.InstanceID = string(v.s)
		case "dp_rank":
			info.Reg.DPRank, _ = v.int32()
		case "tenant_id":
			info.Reg.TenantID = string(v.s)
		case "model_name":
			info.Reg.ModelName = string(v.s)
		case "lora_name":
			info.Reg.LoraName = string(v.s)
		case "block_size":
			bs, _ := v.int32()
			info.Reg.BlockSize = int(bs)
		case "event_id":
			info.Seq, info.HasSeq = v.u64()
		}
	}
	if r.err != nil {
		rs.sc.fail("stream: %v", r.err)
		return
	}
	rs.begin(&info)
}

// maxGapMarks bounds a stream's gap_marks (core.MaxGapMarks).
const maxGapMarks = core.MaxGapMarks

// endCur ends the section being restored (its gap marks: core.StreamRestorer.End).
func (rs *restoreState) endCur() {
	if rs.cur != nil {
		rs.cur.End()
		rs.cur = nil
	}
}

func (rs *restoreState) begin(info *core.StreamInfo) {
	rs.endCur()
	info.Prior = rs.prior
	r, err := rs.ix.RestoreStream(info)
	if err != nil {
		rs.st.MissingStream++
		rs.cur = nil
		return
	}
	rs.st.Streams++
	rs.cur = r
}

func (rs *restoreState) mainEvents() {
	sc := &rs.sc
	if !sc.expect('[') {
		return
	}
	for first := true; sc.more(']', first); first = false {
		raw := sc.value()
		if sc.err != nil {
			return
		}
		rs.mainEvent(raw)
	}
}

// mainEvent restores one event of the main form: a stored group of
// holdings or a group of engine hashes.
func (rs *restoreState) mainEvent(raw []byte) {
	rs.scratch = rs.scratch[:0] // strings are copied out of each event
	r := openObject(raw, &rs.scratch)
	var typ, medium string
	var h core.Holding
	var entries, stream []byte
	rs.keys = rs.keys[:0]
	for {
		k, ok := r.next()
		if !ok {
			break
		}
		switch string(k) {
		case "seq_hashes":
			var bad bool
			if rs.keys, bad = r.uint64s(rs.keys[:0], 1<<20); bad {
				rs.sc.fail("seq_hashes: want an array of at most %d unsigned 64-bit integers", 1<<20)
				return
			}
			continue
		case "entries":
			entries = r.value().s
			continue
		case "stream":
			if v := r.value(); v.kind == mObject {
				stream = v.s
			}
			continue
		}
		v := r.value()
		switch string(k) {
		case "event_type":
			typ = string(v.s)
		case "tenant_id":
			h.Context.TenantID = string(v.s)
		case "model_name":
			h.Context.ModelName = string(v.s)
		case "lora_name":
			h.Context.LoraName = string(v.s)
		case "block_size":
			bs, _ := v.int32()
			h.Context.BlockSize = int(bs)
		case "backend_id":
			if v.kind == mString {
				h.Shared, h.Name = true, string(v.s)
			}
		case "dp_rank":
			h.Rank, _ = v.int32()
		case "medium":
			medium = string(v.s)
		case "copies":
			c, _ := v.u64()
			h.Copies = uint32(min(c, 1<<16-1))
		case "gap_expires_ns":
			if e, ok := v.u64(); ok && e <= math.MaxInt64 {
				h.Expires = int64(e)
			}
		}
	}
	if r.err != nil {
		rs.sc.fail("event: %v", r.err)
		return
	}
	if rs.cur == nil {
		rs.st.Skipped++
		return
	}
	if len(stream) > 0 {
		if h.Stream = rs.streamDims(stream); h.Stream == nil {
			return
		}
	}
	switch typ {
	case "stored":
		t, err := core.ParseTier(medium)
		if err != nil {
			rs.st.Skipped += len(rs.keys)
			return
		}
		h.Tier = t
		rs.holdings(&h, rs.keys)
	case "engine_hashes":
		rs.engineEntries(h.Context, entries)
	default:
		rs.st.Skipped++
	}
}

func (rs *restoreState) holdings(h *core.Holding, keys []uint64) {
	n := rs.cur.Holdings(h, keys)
	rs.st.Holdings += n
	rs.st.Skipped += len(keys) - n
}

// streamDims reads a stream owner's {"salt","backend_id","medium"} (nil
// after failing the scan on a malformed one).
func (rs *restoreState) streamDims(raw []byte) *core.StreamDims {
	r := openObject(raw, &rs.scratch)
	d := &core.StreamDims{}
	for {
		k, ok := r.next()
		if !ok {
			break
		}
		v := r.value()
		switch string(k) {
		case "salt":
			d.Salt = string(v.s)
		case "backend_id":
			d.BackendID = string(v.s)
		case "medium":
			d.Medium = string(v.s)
		}
	}
	if r.err != nil {
		rs.sc.fail("stream owner: %v", r.err)
		return nil
	}
	return d
}

// engineEntries restores [[h,k,n,p],...] ([h,k,n]: p = k).
func (rs *restoreState) engineEntries(ck core.ContextKey, raw []byte) {
	if len(raw) == 0 {
		return
	}
	r := openArray(raw, &rs.scratch)
	empty, ok := r.arrayStart()
	if !ok {
		rs.sc.fail("engine entries must be an array")
		return
	}
	for !empty {
		var bad bool
		rs.triple, bad = r.uint64s(rs.triple[:0], 4)
		if bad || (len(rs.triple) != 3 && len(rs.triple) != 4) || r.err != nil {
			rs.sc.fail("engine entry: want [hash, key, count, plain]")
			return
		}
		plain := rs.triple[1]
		if len(rs.triple) == 4 {
			plain = rs.triple[3]
		}
		if rs.triple[2] > 1<<32-1 || rs.triple[2] == 0 {
			rs.st.Skipped++
		} else if rs.cur.Engine(&core.EngineEntry{Context: ck, Hash: rs.triple[0], Key: rs.triple[1], Plain: plain, Count: uint32(rs.triple[2])}) {
			rs.st.Engine++
		} else {
			rs.st.Skipped++
		}
		if !r.arrayNext() {
			break
		}
	}
	if r.err != nil {
		rs.sc.fail("engine entries: %v", r.err)
	}
}
