package httpd

import (
	"bufio"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// GET /dump, in two forms over the same per-subscription sections
// (core.DumpStreams): each section is written under its subscription's lock,
// consistent with the stream's watermark (the sequence of its last applied
// batch), so a replica that restores it and then skips its own buffered
// batches up to that watermark reproduces the stream exactly. The response is
// streamed (bufio over the connection; no whole-index buffer) and every u64
// is written as an exact decimal integer.
//
// Main API form ("standardized events", RFC #1527 field names):
//
//	{"format":"conductor-dump/1","streams":[
//	 {"stream":{"instance_id","tenant_id","dp_rank","model_name","lora_name",
//	            "block_size","type","hash_profile":{...},"event_id"?},
//	  "events":[
//	   {"event_type":"stored","tenant_id","model_name","lora_name","block_size",
//	    "instance_id","dp_rank","medium","seq_hashes":[k...],"copies":c,
//	    "stream"?:{"salt","backend_id","medium"}}
//	     (shared pool holdings: "backend_id" instead of instance_id/dp_rank)
//	   {"event_type":"engine_hashes","tenant_id",...,"entries":[[h,k,n,p]...]}
//	  ]}, ...]}
//
// A stored dump event lists holdings, not a chain: seq_hashes are independent
// prefix keys held by that owner in that tier with that many copies (no
// parent_hash / base_block_idx); "medium" is the tier. "stream" is present
// for holdings of an RFC #1527 stream owner: the salt, backend_id and medium
// the publisher's stream named (core.StreamDims), so the replica re-creates
// the same owner and a later `cleared` of that stream purges exactly these
// holdings. engine_hashes map an engine's own block hash h to the prefix key
// k it was filed under and the plain standard hash p behind k (the parent of
// the engine's next block), with n stores not yet removed, so the replica
// resolves the engine's later removes and parents ([h,k,n] is read as p = k).
//
// Dynamo form: see appendRouterEvent.

const dumpGroup = 256 // keys per dump event

// dumpSink writes one form of the dump to w.
type dumpSink struct {
	w *bufio.Writer
	// progress is called at every flush (the handlers push the connection's
	// write deadline forward: a dump may take as long as it keeps moving).
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

func (s *dumpSink) flushBuf() {
	if s.err == nil && len(s.buf) > 0 {
		_, s.err = s.w.Write(s.buf)
		if s.progress != nil {
			s.progress()
		}
	}
	s.buf = s.buf[:0]
}

func (s *dumpSink) comma() {
	if !s.first {
		s.buf = append(s.buf, ",\n"...)
	}
	s.first = false
}

func appendCtxFields(b []byte, k *core.ContextKey) []byte {
	b = append(b, `"tenant_id":`...)
	b = appendJSONString(b, k.TenantID)
	b = append(b, `,"model_name":`...)
	b = appendJSONString(b, k.ModelName)
	b = append(b, `,"lora_name":`...)
	b = appendJSONString(b, k.LoraName)
	b = append(b, `,"block_size":`...)
	return strconv.AppendInt(b, int64(k.BlockSize), 10)
}

func (s *dumpSink) Stream(info *core.StreamInfo) error {
	s.info = info
	if !s.dynamo {
		s.first = true
	}
	r := &info.Reg
	if s.dynamo {
		s.comma()
		s.buf = appendRouterHead(s.buf, r, "device", info)
		s.buf = append(s.buf, `"blocks":[]}},"dp_rank":`...)
		s.buf = strconv.AppendInt(s.buf, int64(r.DPRank), 10)
		s.buf = append(s.buf, `},"conductor_stream":{"instance_id":`...)
		s.buf = appendJSONString(s.buf, r.InstanceID)
		s.buf = append(s.buf, `,"dp_rank":`...)
		s.buf = strconv.AppendInt(s.buf, int64(r.DPRank), 10)
		s.buf = append(s.buf, `,"has_seq":`...)
		s.buf = strconv.AppendBool(s.buf, info.HasSeq)
		s.buf = append(s.buf, "}}"...)
	} else {
		s.buf = append(s.buf, `{"stream":{"instance_id":`...)
		s.buf = appendJSONString(s.buf, r.InstanceID)
		s.buf = append(s.buf, `,"dp_rank":`...)
		s.buf = strconv.AppendInt(s.buf, int64(r.DPRank), 10)
		s.buf = append(s.buf, ',')
		ck := r.ContextKey()
		s.buf = appendCtxFields(s.buf, &ck)
		s.buf = append(s.buf, `,"type":`...)
		s.buf = appendJSONString(s.buf, r.Type.String())
		sp := &r.Profile.Spec
		s.buf = append(s.buf, `,"hash_profile":{"strategy":`...)
		s.buf = appendJSONString(s.buf, sp.Strategy)
		s.buf = append(s.buf, `,"algorithm":`...)
		s.buf = appendJSONString(s.buf, sp.Algorithm)
		s.buf = append(s.buf, `,"python_hash_seed":`...)
		s.buf = appendJSONString(s.buf, sp.PythonHashSeed)
		s.buf = append(s.buf, `,"index_projection":`...)
		s.buf = appendJSONString(s.buf, sp.IndexProjection)
		s.buf = append(s.buf, '}')
		if info.HasSeq {
			s.buf = append(s.buf, `,"event_id":`...)
			s.buf = strconv.AppendUint(s.buf, info.Seq, 10)
		}
		s.buf = append(s.buf, "},\n\"events\":["...)
	}
	s.flushBuf()
	return s.err
}

func sameGroup(a, b *core.Holding) bool {
	return a.Context == b.Context && a.Shared == b.Shared && a.Name == b.Name && a.Rank == b.Rank &&
		a.Tier == b.Tier && a.Copies == b.Copies && a.Stream.Same(b.Stream)
}

func (s *dumpSink) Holding(h *core.Holding) error {
	if len(s.keys) > 0 && (!sameGroup(&s.cur, h) || len(s.keys) >= dumpGroup) {
		s.flushGroup()
	}
	if len(s.keys) == 0 {
		s.cur = *h
	}
	s.keys = append(s.keys, h.Key)
	return s.err
}

// dynamoTier names conductor's tiers as Dynamo's storage_tier.
func dynamoTier(t core.Tier) string {
	switch t {
	case core.TierDevice:
		return "device"
	case core.TierCPULocal:
		return "host_pinned"
	case core.TierCPUShare:
		return "external"
	}
	return "disk"
}

func parseDynamoTier(s string) (core.Tier, bool) {
	switch s {
	case "device":
		return core.TierDevice, true
	case "host_pinned":
		return core.TierCPULocal, true
	case "external":
		return core.TierCPUShare, true
	case "disk":
		return core.TierDisk, true
	}
	return 0, false
}

// appendRouterHead opens one Dynamo RouterEvent of a stored event up to its
// blocks key:
//
//	{"worker_id":W,"storage_tier":T,"event":{"event_id":S,"data":{"stored":
//	 {"parent_hash":null,"start_position":null,"blocks":[...]}},"dp_rank":R}}
//
// worker_id is the instance id as a number (a string when it is not a u64),
// event_id the stream's watermark.
func appendRouterHead(b []byte, r *core.Registration, tier string, info *core.StreamInfo) []byte {
	b = append(b, `{"worker_id":`...)
	if _, err := strconv.ParseUint(r.InstanceID, 10, 64); err == nil {
		b = append(b, r.InstanceID...)
	} else {
		b = appendJSONString(b, r.InstanceID)
	}
	b = append(b, `,"storage_tier":"`...)
	b = append(b, tier...)
	b = append(b, `","event":{"event_id":`...)
	b = strconv.AppendUint(b, info.Seq, 10)
	return append(b, `,"data":{"stored":{"parent_hash":null,"start_position":null,`...)
}

func (s *dumpSink) flushGroup() {
	if len(s.keys) == 0 {
		return
	}
	h := &s.cur
	s.comma()
	if s.dynamo {
		// One RouterEvent per group: each holding is a block whose
		// block_hash and tokens_hash are the conductor prefix key; copies
		// beyond one go in "conductor_copies" (Dynamo counts none).
		s.buf = appendRouterHead(s.buf, &s.info.Reg, dynamoTier(h.Tier), s.info)
		s.buf = append(s.buf, `"blocks":[`...)
		for i, k := range s.keys {
			if i > 0 {
				s.buf = append(s.buf, ',')
			}
			s.buf = append(s.buf, `{"block_hash":`...)
			s.buf = strconv.AppendUint(s.buf, k, 10)
			s.buf = append(s.buf, `,"tokens_hash":`...)
			s.buf = strconv.AppendUint(s.buf, k, 10)
			s.buf = append(s.buf, `,"mm_extra_info":null}`...)
		}
		s.buf = append(s.buf, `]}},"dp_rank":`...)
		s.buf = strconv.AppendInt(s.buf, int64(h.Rank), 10)
		s.buf = append(s.buf, '}')
		if h.Copies > 1 {
			s.buf = append(s.buf, `,"conductor_copies":`...)
			s.buf = strconv.AppendUint(s.buf, uint64(h.Copies), 10)
		}
		if h.Shared {
			s.buf = append(s.buf, `,"conductor_backend":`...)
			s.buf = appendJSONString(s.buf, h.Name)
		}
		if h.Stream != nil {
			s.buf = append(s.buf, `,"conductor_stream_owner":`...)
			s.buf = appendStreamDims(s.buf, h.Stream)
		}
		s.buf = append(s.buf, '}')
	} else {
		s.buf = append(s.buf, `{"event_type":"stored",`...)
		s.buf = appendCtxFields(s.buf, &h.Context)
		if h.Shared {
			s.buf = append(s.buf, `,"backend_id":`...)
			s.buf = appendJSONString(s.buf, h.Name)
		} else {
			s.buf = append(s.buf, `,"instance_id":`...)
			s.buf = appendJSONString(s.buf, s.info.Reg.InstanceID)
			s.buf = append(s.buf, `,"dp_rank":`...)
			s.buf = strconv.AppendInt(s.buf, int64(h.Rank), 10)
		}
		s.buf = append(s.buf, `,"medium":"`...)
		s.buf = append(s.buf, h.Tier.String()...)
		s.buf = append(s.buf, `","seq_hashes":[`...)
		for i, k := range s.keys {
			if i > 0 {
				s.buf = append(s.buf, ',')
			}
			s.buf = strconv.AppendUint(s.buf, k, 10)
		}
		s.buf = append(s.buf, `],"copies":`...)
		s.buf = strconv.AppendUint(s.buf, uint64(h.Copies), 10)
		if h.Stream != nil {
			s.buf = append(s.buf, `,"stream":`...)
			s.buf = appendStreamDims(s.buf, h.Stream)
		}
		s.buf = append(s.buf, '}')
	}
	s.keys = s.keys[:0]
	if len(s.buf) >= 64<<10 {
		s.flushBuf()
	}
}

// appendStreamDims writes {"salt","backend_id","medium"} of a stream owner.
func appendStreamDims(b []byte, d *core.StreamDims) []byte {
	b = append(b, `{"salt":`...)
	b = appendJSONString(b, d.Salt)
	b = append(b, `,"backend_id":`...)
	b = appendJSONString(b, d.BackendID)
	b = append(b, `,"medium":`...)
	b = appendJSONString(b, d.Medium)
	return append(b, '}')
}

func (s *dumpSink) Engine(e *core.EngineEntry) error {
	s.flushGroup()
	if len(s.eng) > 0 && (s.engCtx != e.Context || len(s.eng) >= 4*dumpGroup) {
		s.flushEngine()
	}
	s.engCtx = e.Context
	s.eng = append(s.eng, e.Hash, e.Key, uint64(e.Count), e.Plain)
	return s.err
}

func (s *dumpSink) flushEngine() {
	if len(s.eng) == 0 {
		return
	}
	s.comma()
	if s.dynamo {
		s.buf = appendRouterHead(s.buf, &s.info.Reg, "device", s.info)
		s.buf = append(s.buf, `"blocks":[]}},"dp_rank":`...)
		s.buf = strconv.AppendInt(s.buf, int64(s.info.Reg.DPRank), 10)
		s.buf = append(s.buf, `},"conductor_engine_hashes":[`...)
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
	if len(s.buf) >= 64<<10 {
		s.flushBuf()
	}
}

func (s *dumpSink) EndStream(*core.StreamInfo) error {
	s.flushGroup()
	s.flushEngine()
	if !s.dynamo {
		s.buf = append(s.buf, "]}"...)
	}
	s.flushBuf()
	return s.err
}

// WriteDump writes the main API's dump of every subscription to w.
func WriteDump(ix *core.Index, w *bufio.Writer) error { return writeDump(ix, w, nil) }

func writeDump(ix *core.Index, w *bufio.Writer, progress func()) error {
	s := &dumpSink{w: w, progress: progress}
	s.buf = append(s.buf, `{"format":"conductor-dump/1","streams":[`...)
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
	s *dumpSink
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

// handleDump serves the main API's GET /dump.
func (s *Server) handleDump(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(200)
	ctx.SetContentType(contentTypeJSON)
	ix, log := s.ix, s.opts.Logger
	progress := deadlinePusher(ctx, s.opts.WriteTimeout)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		if err := writeDump(ix, w, progress); err != nil {
			log.Warn("dump aborted", "err", err)
		}
	})
}

// deadlinePusher sets the connection's write deadline now and returns a
// function that moves it timeout into the future again (fasthttp's
// RequestCtx.SetWriteDeadline, safe from the stream goroutine and refused
// once the response is done): the WriteTimeout then bounds a stall of a
// streamed dump, not its length (TestDumpOutlivesWriteTimeout).
func deadlinePusher(ctx *fasthttp.RequestCtx, timeout time.Duration) func() {
	if timeout <= 0 || ctx.SetWriteDeadline(time.Now().Add(timeout)) != nil {
		return nil
	}
	return func() { _ = ctx.SetWriteDeadline(time.Now().Add(timeout)) }
}

// WriteDynamoDump writes the Dynamo form of the dump: one member per
// indexer, "model:group": {"block_size", "events": [RouterEvent...]}, the
// RouterEvents of each subscription of the indexer's context in turn. A
// subscription's section starts with an empty stored event carrying
// "conductor_stream" (its registration and whether event_id is a watermark),
// then its holdings (block_hash = tokens_hash = conductor's prefix key;
// dp_rank the owner's rank; "conductor_copies" when a block is held in more
// than one copy; "conductor_backend" for shared pool holdings;
// "conductor_stream_owner" {"salt","backend_id","medium"} for holdings of an
// RFC #1527 stream owner), then events carrying "conductor_engine_hashes"
// ([h,k,n,p] as in the main form).
// Indexers are walked concurrently into bounded queues and written in key
// order (writeDynamoDump).
func (d *Dynamo) WriteDynamoDump(w *bufio.Writer) error { return d.writeDynamoDump(w, nil) }

func (d *Dynamo) writeDynamoDump(w *bufio.Writer, progress func()) error {
	d.mu.Lock()
	keys := make([]dynKey, 0, len(d.indexers))
	bss := make(map[dynKey]int, len(d.indexers))
	for k, bs := range d.indexers {
		keys = append(keys, k)
		bss[k] = bs
	}
	d.mu.Unlock()
	sortDynKeys(keys)

	// Indexers are walked concurrently (at most GOMAXPROCS at a time), each
	// into its own bounded queue of chunks; this goroutine writes the queues
	// in key order. A walker whose queue is full waits (holding the lock of
	// the stream it is in) until the writer reaches it: memory stays bounded
	// by dumpLookahead chunks per running walker.
	done := make(chan struct{})
	defer close(done)
	queues := make([]chan []byte, len(keys))
	for i := range queues {
		queues[i] = make(chan []byte, dumpLookahead)
	}
	// Chunk buffers circulate between the walkers and this writer (no
	// garbage per chunk): enough for every running walker's queue.
	free := make(chan []byte, (dumpLookahead+2)*max(runtime.GOMAXPROCS(0), 1))
	go func() {
		sem := make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))
		for i, k := range keys {
			select {
			case sem <- struct{}{}:
			case <-done:
				return
			}
			go func(i int, k dynKey) {
				defer func() { <-sem }()
				d.walkIndexer(k, bss[k], queues[i], free, done)
			}(i, k)
		}
	}()
	if _, err := w.WriteString("{"); err != nil {
		return err
	}
	for i, q := range queues {
		if i > 0 {
			if _, err := w.WriteString(",\n"); err != nil {
				return err
			}
		}
		for chunk := range q {
			if chunk == nil {
				return fmt.Errorf("dump of indexer %s failed", keys[i])
			}
			if _, err := w.Write(chunk); err != nil {
				return err
			}
			select {
			case free <- chunk[:0]:
			default:
			}
			if progress != nil {
				progress()
			}
		}
	}
	if _, err := w.WriteString("}\n"); err != nil {
		return err
	}
	return w.Flush()
}

// dumpLookahead is how many 64 KiB chunks a concurrent indexer walker may
// queue ahead of the writer.
const dumpLookahead = 16

// chanWriter sends copies of what is written to a queue, in buffers taken
// from free when there are any; it fails once done is closed (the writer
// gave up).
type chanWriter struct {
	q    chan<- []byte
	free chan []byte
	done <-chan struct{}
}

var errDumpAbandoned = errors.New("conductor: dump abandoned by its writer")

func (c chanWriter) Write(p []byte) (int, error) {
	var b []byte
	select {
	case b = <-c.free:
	default:
	}
	select {
	case c.q <- append(b, p...):
		return len(p), nil
	case <-c.done:
		return 0, errDumpAbandoned
	}
}

// walkIndexer writes one indexer's member ("model:group": {...}) into q and
// closes it (a nil chunk first when the walk failed).
func (d *Dynamo) walkIndexer(k dynKey, bs int, q, free chan []byte, done <-chan struct{}) {
	defer close(q)
	w := bufio.NewWriterSize(chanWriter{q: q, free: free, done: done}, 64<<10)
	s := &dumpSink{w: w, dynamo: true, first: true}
	s.buf = appendJSONString(s.buf, k.String())
	s.buf = append(s.buf, `:{"block_size":`...)
	s.buf = strconv.AppendInt(s.buf, int64(bs), 10)
	s.buf = append(s.buf, `,"events":[`...)
	ck := dynamoContext(k, bs)
	err := d.ix.DumpStreams(func(r *core.Registration) bool { return r.ContextKey() == ck }, s)
	s.buf = append(s.buf, "]}"...)
	s.flushBuf()
	if err == nil {
		err = s.err
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil && !errors.Is(err, errDumpAbandoned) {
		d.opts.Logger.Warn("dynamo dump: indexer walk failed", "indexer", k.String(), "err", err)
		select {
		case q <- nil:
		case <-done:
		}
	}
}

func sortDynKeys(keys []dynKey) {
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && (keys[j].model < keys[j-1].model ||
			(keys[j].model == keys[j-1].model && keys[j].group < keys[j-1].group)); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

func (d *Dynamo) handleDump(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(200)
	ctx.SetContentType(contentTypeJSON)
	log := d.opts.Logger
	progress := deadlinePusher(ctx, d.opts.WriteTimeout)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		if err := d.writeDynamoDump(w, progress); err != nil {
			log.Warn("dynamo dump aborted", "err", err)
		}
	})
}
