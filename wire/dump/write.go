package dump

import (
	"bufio"
	"strconv"

	"github.com/seed-c7a81618/conductor/core"
)

// mainFormat names the main form in its "format" member.
const mainFormat = "conductor-dump/1"

const (
	groupKeys  = 256      // keys per dump event
	flushBytes = 64 << 10 // a sink hands its buffer to the writer past this
)

// sink writes one form of the dump to w as core.Index.DumpStreams walks the
// index (it is a core.DumpVisitor).
type sink struct {
	w *bufio.Writer
	// progress is called at every flush (the HTTP handlers push the
	// connection's write deadline forward: a dump may take as long as it
	// keeps moving).
	progress func()
	dynamo   bool
	buf      []byte
	err      error
	first    bool // no event written yet in the current events array

	// the open group of holdings
	cur  core.Holding
	keys []uint64
	// the stream being written
	info *core.StreamInfo
	// engine entries of the stream, in groups per context
	eng    []uint64 // quads: hash, key, count, plain
	engCtx core.ContextKey
}

func (s *sink) flushBuf() {
	if s.err == nil && len(s.buf) > 0 {
		_, s.err = s.w.Write(s.buf)
		if s.progress != nil {
			s.progress()
		}
	}
	s.buf = s.buf[:0]
}

func (s *sink) comma() {
	if !s.first {
		s.buf = append(s.buf, ",\n"...)
	}
	s.first = false
}

func (s *sink) Stream(info *core.StreamInfo) error {
	s.info = info
	if s.dynamo {
		s.comma()
		s.buf = appendRouterStream(s.buf, info)
	} else {
		s.first = true
		s.buf = appendMainStream(s.buf, info)
	}
	s.flushBuf()
	return s.err
}

func sameGroup(a, b *core.Holding) bool {
	return a.Context == b.Context && a.Shared == b.Shared && a.Name == b.Name && a.Rank == b.Rank &&
		a.Tier == b.Tier && a.Copies == b.Copies && a.Stream.Same(b.Stream) && a.Expires == b.Expires
}

func (s *sink) Holding(h *core.Holding) error {
	if s.foreign(&h.Context) {
		return s.err
	}
	if len(s.keys) > 0 && (!sameGroup(&s.cur, h) || len(s.keys) >= groupKeys) {
		s.flushGroup()
	}
	if len(s.keys) == 0 {
		s.cur = *h
	}
	s.keys = append(s.keys, h.Key)
	return s.err
}

func (s *sink) flushGroup() {
	if len(s.keys) == 0 {
		return
	}
	s.comma()
	if s.dynamo {
		s.buf = appendRouterGroup(s.buf, s.info, &s.cur, s.keys)
	} else {
		s.buf = appendMainGroup(s.buf, s.info, &s.cur, s.keys)
	}
	s.keys = s.keys[:0]
	if len(s.buf) >= flushBytes {
		s.flushBuf()
	}
}

func (s *sink) Engine(e *core.EngineEntry) error {
	if s.foreign(&e.Context) {
		return s.err
	}
	s.flushGroup()
	if len(s.eng) > 0 && (s.engCtx != e.Context || len(s.eng) >= 4*groupKeys) {
		s.flushEngine()
	}
	s.engCtx = e.Context
	s.eng = append(s.eng, e.Hash, e.Key, uint64(e.Count), e.Plain)
	return s.err
}

func (s *sink) flushEngine() {
	if len(s.eng) == 0 {
		return
	}
	s.comma()
	if s.dynamo {
		s.buf = appendRouterHead(s.buf, &s.info.Reg, "device", s.info)
		s.buf = append(s.buf, `"blocks":[]}},"dp_rank":`...)
		s.buf = strconv.AppendInt(s.buf, int64(s.info.Reg.DPRank), 10)
		s.buf = append(s.buf, '}')
		if s.engCtx.LoraName != "" {
			s.buf = append(s.buf, `,"conductor_lora":`...)
			s.buf = AppendJSONString(s.buf, s.engCtx.LoraName)
		}
		s.buf = append(s.buf, `,"conductor_engine_hashes":[`...)
	} else {
		s.buf = append(s.buf, `{"event_type":"engine_hashes",`...)
		s.buf = appendCtxFields(s.buf, &s.engCtx)
		s.buf = append(s.buf, `,"entries":[`...)
	}
	for i := 0; i+3 < len(s.eng); i += 4 {
		if i > 0 {
			s.buf = append(s.buf, ',')
		}
		s.buf = append(s.buf, '[')
		s.buf = strconv.AppendUint(s.buf, s.eng[i], 10)
		s.buf = append(s.buf, ',')
		s.buf = strconv.AppendUint(s.buf, s.eng[i+1], 10)
		s.buf = append(s.buf, ',')
		s.buf = strconv.AppendUint(s.buf, s.eng[i+2], 10)
		s.buf = append(s.buf, ',')
		s.buf = strconv.AppendUint(s.buf, s.eng[i+3], 10)
		s.buf = append(s.buf, ']')
	}
	s.buf = append(s.buf, "]}"...)
	s.eng = s.eng[:0]
	if len(s.buf) >= flushBytes {
		s.flushBuf()
	}
}

func (s *sink) EndStream(*core.StreamInfo) error {
	s.flushGroup()
	s.flushEngine()
	if !s.dynamo {
		s.buf = append(s.buf, "]}"...)
	}
	s.flushBuf()
	return s.err
}

// foreign reports whether k is a context the Dynamo form cannot name in the
// section of the stream being written: the form is keyed by indexer
// (tenant = routing group, model, block size) and names only a LoRA beside
// it ("conductor_lora": a Dynamo worker's adapter context). The holdings of
// such a context (a standardized event naming another model) are in the
// main form only.
func (s *sink) foreign(k *core.ContextKey) bool {
	if !s.dynamo {
		return false
	}
	h := s.info.Reg.ContextKey()
	return k.TenantID != h.TenantID || k.ModelName != h.ModelName || k.BlockSize != h.BlockSize
}

// appendCtxFields writes a context's members into an open object.
func appendCtxFields(b []byte, k *core.ContextKey) []byte {
	b = append(b, `"tenant_id":`...)
	b = AppendJSONString(b, k.TenantID)
	b = append(b, `,"model_name":`...)
	b = AppendJSONString(b, k.ModelName)
	b = append(b, `,"lora_name":`...)
	b = AppendJSONString(b, k.LoraName)
	b = append(b, `,"block_size":`...)
	return strconv.AppendInt(b, int64(k.BlockSize), 10)
}

// appendMainStream opens a stream object of the main form up to its events
// array: {"stream":{...},"events":[.
func appendMainStream(b []byte, info *core.StreamInfo) []byte {
	r := &info.Reg
	b = append(b, `{"stream":{"instance_id":`...)
	b = AppendJSONString(b, r.InstanceID)
	b = append(b, `,"dp_rank":`...)
	b = strconv.AppendInt(b, int64(r.DPRank), 10)
	b = append(b, ',')
	ck := r.ContextKey()
	b = appendCtxFields(b, &ck)
	b = append(b, `,"type":`...)
	b = AppendJSONString(b, r.Type.String())
	sp := &r.Profile.Spec
	b = append(b, `,"hash_profile":{"strategy":`...)
	b = AppendJSONString(b, sp.Strategy)
	b = append(b, `,"algorithm":`...)
	b = AppendJSONString(b, sp.Algorithm)
	b = append(b, `,"python_hash_seed":`...)
	b = AppendJSONString(b, sp.PythonHashSeed)
	b = append(b, `,"index_projection":`...)
	b = AppendJSONString(b, sp.IndexProjection)
	b = append(b, '}')
	if info.HasSeq {
		b = append(b, `,"event_id":`...)
		b = strconv.AppendUint(b, info.Seq, 10)
	}
	if len(info.Marks) > 0 {
		b = append(b, `,"gap_marks":[`...)
		for i, at := range info.Marks {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, at, 10)
		}
		b = append(b, ']')
	}
	return append(b, "},\n\"events\":["...)
}

// appendMainGroup writes one stored event of the main form: keys held by
// h's owner in h's tier with h's copies.
func appendMainGroup(b []byte, info *core.StreamInfo, h *core.Holding, keys []uint64) []byte {
	b = append(b, `{"event_type":"stored",`...)
	b = appendCtxFields(b, &h.Context)
	if h.Shared {
		b = append(b, `,"backend_id":`...)
		b = AppendJSONString(b, h.Name)
	} else {
		b = append(b, `,"instance_id":`...)
		b = AppendJSONString(b, info.Reg.InstanceID)
		b = append(b, `,"dp_rank":`...)
		b = strconv.AppendInt(b, int64(h.Rank), 10)
	}
	b = append(b, `,"medium":"`...)
	b = append(b, h.Tier.String()...)
	b = append(b, `","seq_hashes":[`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, k, 10)
	}
	b = append(b, `],"copies":`...)
	b = strconv.AppendUint(b, uint64(h.Copies), 10)
	if h.Stream != nil {
		b = append(b, `,"stream":`...)
		b = appendStreamDims(b, h.Stream)
	}
	if h.Expires > 0 {
		b = append(b, `,"gap_expires_ns":`...)
		b = strconv.AppendInt(b, h.Expires, 10)
	}
	return append(b, '}')
}

// appendStreamDims writes {"salt","backend_id","medium"} of a stream owner.
func appendStreamDims(b []byte, d *core.StreamDims) []byte {
	b = append(b, `{"salt":`...)
	b = AppendJSONString(b, d.Salt)
	b = append(b, `,"backend_id":`...)
	b = AppendJSONString(b, d.BackendID)
	b = append(b, `,"medium":`...)
	b = AppendJSONString(b, d.Medium)
	return append(b, '}')
}

// Write writes the main form of the dump of every subscription of ix to w
// and flushes it. Each section is written under its subscription's lock
// (core.Index.DumpStreams), consistent with its watermark.
func Write(ix *core.Index, w *bufio.Writer) error { return WriteProgress(ix, w, nil) }

// WriteProgress is Write calling progress (when not nil) after each chunk
// it hands to w: a streamed HTTP response pushes its write deadline forward
// there, so that the deadline bounds a stall, not the whole dump.
func WriteProgress(ix *core.Index, w *bufio.Writer, progress func()) error {
	s := &sink{w: w, progress: progress}
	s.buf = append(s.buf, `{"format":"`+mainFormat+`","streams":[`...)
	n := 0
	err := ix.DumpStreams(nil, &streamSep{s: s, n: &n})
	if err != nil {
		return err
	}
	s.buf = append(s.buf, "]}\n"...)
	s.flushBuf()
	if s.err == nil {
		s.err = w.Flush()
	}
	return s.err
}

// streamSep puts commas between the main form's stream objects.
type streamSep struct {
	s *sink
	n *int
}

func (p *streamSep) Stream(i *core.StreamInfo) error {
	if *p.n > 0 {
		p.s.buf = append(p.s.buf, ",\n"...)
	}
	*p.n++
	return p.s.Stream(i)
}
func (p *streamSep) Holding(h *core.Holding) error      { return p.s.Holding(h) }
func (p *streamSep) Engine(e *core.EngineEntry) error   { return p.s.Engine(e) }
func (p *streamSep) EndStream(i *core.StreamInfo) error { return p.s.EndStream(i) }
