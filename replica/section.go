package replica

import (
	"encoding/binary"
	"math"

	"github.com/seed-c7a81618/conductor/core"
)

// State transfer. When a relay had to drop messages of a subscription (its
// buffer full while NATS was down or slow), the stream no longer describes
// that subscription; the relay stops publishing it ("dirty") and, once the
// buffer has room again, publishes the subscription's current state instead:
// a run of section messages taken under the subscription's lock (so exactly
// between two of its batches), the first of which tells replicas to clear it
// and the last of which carries its ZMQ sequence. Replicas restore the
// sections with core's dump restorer and continue with the batches after.
//
//	'S' section: key, flags (1 begin, 2 end, 4 has_seq), seq, records
//	record 'H': context, flags (1 shared, 2 stream dims, 4 expires), name,
//	            rank, stream dims?, tier, copies, expires?, keys
//	record 'E': context, count, [hash, key, plain, count]...
//	record 'M': count, [deadline (Unix ns)]...: the pending gap marks, oldest
//	            first (first section only; core.StreamInfo.Marks)
//
// (The same per-subscription state as /dump's sections, in the binary
// codec; RFC streams' pending event ids are not part of it.)

// KindSection is a state-transfer section.
const KindSection Kind = 'S'

const (
	secBegin  = 1
	secEnd    = 2
	secHasSeq = 4
)

// sectionChunkBytes is the size at which a section message is cut (NATS's
// default max_payload is 1 MiB).
const sectionChunkBytes = 256 << 10

// Section is a decoded section message: slices alias the decoder.
type Section struct {
	Begin, End, HasSeq bool
	Seq                uint64
	Holdings           []SectionHoldings
	Engine             []core.EngineEntry
	// Marks: the subscription's pending gap marks (core.StreamInfo.Marks).
	Marks []int64
}

// SectionHoldings is one group of holdings that share everything but the key.
type SectionHoldings struct {
	H    core.Holding
	Keys []uint64
}

func appendCtx(b []byte, k *core.ContextKey) []byte {
	b = appendStr(b, []byte(k.TenantID))
	b = appendStr(b, []byte(k.ModelName))
	b = appendStr(b, []byte(k.LoraName))
	return binary.AppendVarint(b, int64(k.BlockSize))
}

func (r *reader) ctx() core.ContextKey {
	var k core.ContextKey
	k.TenantID = string(r.bytes("tenant"))
	k.ModelName = string(r.bytes("model"))
	k.LoraName = string(r.bytes("lora"))
	bs := r.varint("block_size")
	if bs < 0 || bs > math.MaxInt32 {
		r.fail("block_size")
	}
	k.BlockSize = int(bs)
	return k
}

// sectionWriter builds a subscription's section messages (a core.StreamVisitor).
type sectionWriter struct {
	key  core.ServiceKey
	msgs [][]byte
	cur  []byte
	n    int // records in cur
	info core.StreamInfo

	grp  core.Holding
	keys []uint64
	eng  []core.EngineEntry
}

func (w *sectionWriter) open() { w.cur, w.n = w.cur[:0], 0 }

// cut closes the current message: header, then the records gathered.
func (w *sectionWriter) cut(end bool) {
	w.msgs = append(w.msgs, appendSectionHead(make([]byte, 0, len(w.cur)+64), w.key,
		len(w.msgs) == 0, end, w.info.HasSeq, w.info.Seq, w.n, w.cur))
	w.open()
}

func appendSectionHead(b []byte, k core.ServiceKey, begin, end, hasSeq bool, seq uint64, n int, recs []byte) []byte {
	flags := uint64(0)
	if begin {
		flags |= secBegin
	}
	if end {
		flags |= secEnd
	}
	if hasSeq {
		flags |= secHasSeq
	}
	b = append(b, codecVersion, byte(KindSection))
	b = appendKey(b, k)
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(n))
	return append(b, recs...)
}

// AppendSection encodes a decoded section again (one record per holdings
// group, one per run of engine entries of one context).
func AppendSection(b []byte, k core.ServiceKey, s *Section) []byte {
	w := &sectionWriter{key: k}
	w.appendMarks(s.Marks)
	for i := range s.Holdings {
		w.grp, w.keys = s.Holdings[i].H, append(w.keys[:0], s.Holdings[i].Keys...)
		w.appendGroup()
	}
	for i := range s.Engine {
		if len(w.eng) > 0 && w.eng[0].Context != s.Engine[i].Context {
			w.appendEngine()
		}
		w.eng = append(w.eng, s.Engine[i])
	}
	w.appendEngine()
	return appendSectionHead(b, k, s.Begin, s.End, s.HasSeq, s.Seq, w.n, w.cur)
}

func (w *sectionWriter) Stream(info *core.StreamInfo) error {
	w.info = *info
	w.open()
	w.appendMarks(info.Marks)
	return nil
}

// appendMarks writes the 'M' record of marks (none when there are none).
func (w *sectionWriter) appendMarks(marks []int64) {
	if len(marks) == 0 {
		return
	}
	w.cur = append(w.cur, 'M')
	w.cur = binary.AppendUvarint(w.cur, uint64(len(marks)))
	for _, at := range marks {
		w.cur = binary.AppendUvarint(w.cur, uint64(at))
	}
	w.n++
}

func (w *sectionWriter) flushGroup() {
	if len(w.keys) == 0 {
		return
	}
	w.appendGroup()
	if len(w.cur) >= sectionChunkBytes {
		w.cut(false)
	}
}

func (w *sectionWriter) appendGroup() {
	h := &w.grp
	w.cur = append(w.cur, 'H')
	w.cur = appendCtx(w.cur, &h.Context)
	var f byte
	if h.Shared {
		f |= 1
	}
	if h.Stream != nil {
		f |= 2
	}
	if h.Expires > 0 {
		f |= 4
	}
	w.cur = append(w.cur, f)
	w.cur = appendStr(w.cur, []byte(h.Name))
	w.cur = binary.AppendVarint(w.cur, int64(h.Rank))
	if h.Stream != nil {
		w.cur = appendStr(w.cur, []byte(h.Stream.Salt))
		w.cur = appendStr(w.cur, []byte(h.Stream.BackendID))
		w.cur = appendStr(w.cur, []byte(h.Stream.Medium))
	}
	w.cur = append(w.cur, byte(h.Tier))
	w.cur = binary.AppendUvarint(w.cur, uint64(h.Copies))
	if h.Expires > 0 {
		w.cur = binary.AppendUvarint(w.cur, uint64(h.Expires))
	}
	w.cur = binary.AppendUvarint(w.cur, uint64(len(w.keys)))
	for _, k := range w.keys {
		w.cur = binary.LittleEndian.AppendUint64(w.cur, k)
	}
	w.n++
	w.keys = w.keys[:0]
}

func (w *sectionWriter) Holding(h *core.Holding) error {
	if len(w.keys) > 0 && (!sameHolding(&w.grp, h) || len(w.keys) >= 4096) {
		w.flushGroup()
	}
	if len(w.keys) == 0 {
		w.grp = *h
	}
	w.keys = append(w.keys, h.Key)
	return nil
}

func sameHolding(a, b *core.Holding) bool {
	return a.Context == b.Context && a.Shared == b.Shared && a.Name == b.Name && a.Rank == b.Rank &&
		a.Tier == b.Tier && a.Copies == b.Copies && a.Stream.Same(b.Stream) && a.Expires == b.Expires
}

func (w *sectionWriter) flushEngine() {
	w.appendEngine()
	if len(w.cur) >= sectionChunkBytes {
		w.cut(false)
	}
}

func (w *sectionWriter) appendEngine() {
	if len(w.eng) == 0 {
		return
	}
	w.cur = append(w.cur, 'E')
	w.cur = appendCtx(w.cur, &w.eng[0].Context)
	w.cur = binary.AppendUvarint(w.cur, uint64(len(w.eng)))
	for _, e := range w.eng {
		w.cur = binary.LittleEndian.AppendUint64(w.cur, e.Hash)
		w.cur = binary.LittleEndian.AppendUint64(w.cur, e.Key)
		w.cur = binary.LittleEndian.AppendUint64(w.cur, e.Plain)
		w.cur = binary.AppendUvarint(w.cur, uint64(e.Count))
	}
	w.n++
	w.eng = w.eng[:0]
}

func (w *sectionWriter) Engine(e *core.EngineEntry) error {
	w.flushGroup()
	if len(w.eng) > 0 && (w.eng[0].Context != e.Context || len(w.eng) >= 4096) {
		w.flushEngine()
	}
	w.eng = append(w.eng, *e)
	return nil
}

func (w *sectionWriter) EndStream(*core.StreamInfo) error {
	w.flushGroup()
	w.flushEngine()
	w.cut(true)
	return nil
}

// section decodes a section message's body after the key.
func (d *Decoder) section(r *reader) {
	s := &d.sec
	s.Holdings, s.Engine, s.Marks = s.Holdings[:0], s.Engine[:0], s.Marks[:0]
	f := r.uvarint("section flags")
	if f&^7 != 0 {
		r.fail("section flags")
	}
	s.Begin, s.End, s.HasSeq = f&secBegin != 0, f&secEnd != 0, f&secHasSeq != 0
	s.Seq = r.uvarint("seq")
	n := r.uvarint("records")
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail("records")
		return
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		if len(r.b) == 0 {
			r.fail("record")
			return
		}
		typ := r.b[0]
		r.b = r.b[1:]
		switch typ {
		case 'H':
			var g SectionHoldings
			g.H.Context = r.ctx()
			if len(r.b) == 0 {
				r.fail("holding flags")
				return
			}
			hf := r.b[0]
			r.b = r.b[1:]
			if hf&^7 != 0 {
				r.fail("holding flags")
				return
			}
			g.H.Shared = hf&1 != 0
			g.H.Name = string(r.bytes("name"))
			rank := r.varint("rank")
			if rank < math.MinInt32 || rank > math.MaxInt32 {
				r.fail("rank")
			}
			g.H.Rank = int32(rank)
			if hf&2 != 0 {
				g.H.Stream = &core.StreamDims{Salt: string(r.bytes("salt")), BackendID: string(r.bytes("backend")),
					Medium: string(r.bytes("medium"))}
			}
			if len(r.b) == 0 {
				r.fail("tier")
				return
			}
			g.H.Tier = core.Tier(r.b[0])
			r.b = r.b[1:]
			c := r.uvarint("copies")
			if c > math.MaxUint32 {
				r.fail("copies")
			}
			g.H.Copies = uint32(c)
			if hf&4 != 0 {
				e := r.uvarint("expires")
				if e == 0 || e > math.MaxInt64 {
					r.fail("expires")
				}
				g.H.Expires = int64(e)
			}
			nk := r.uvarint("keys")
			if r.err != nil || nk > uint64(len(r.b))/8 {
				r.fail("keys")
				return
			}
			g.Keys = make([]uint64, nk)
			for j := range g.Keys {
				g.Keys[j] = r.u64("key")
			}
			s.Holdings = append(s.Holdings, g)
		case 'M':
			nm := r.uvarint("marks")
			if r.err != nil || nm > uint64(len(r.b)) || nm > core.MaxGapMarks {
				r.fail("marks")
				return
			}
			for j := uint64(0); j < nm && r.err == nil; j++ {
				at := r.uvarint("deadline")
				if at == 0 || at > math.MaxInt64 {
					r.fail("deadline")
				}
				s.Marks = append(s.Marks, int64(at))
			}
		case 'E':
			ck := r.ctx()
			ne := r.uvarint("entries")
			if r.err != nil || ne > uint64(len(r.b))/25 {
				r.fail("entries")
				return
			}
			for j := uint64(0); j < ne && r.err == nil; j++ {
				e := core.EngineEntry{Context: ck, Hash: r.u64("hash"), Key: r.u64("key"), Plain: r.u64("plain")}
				c := r.uvarint("count")
				if c > math.MaxUint32 {
					r.fail("count")
				}
				e.Count = uint32(c)
				s.Engine = append(s.Engine, e)
			}
		default:
			r.fail("record type")
			return
		}
	}
}
