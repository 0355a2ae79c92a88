package httpd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// Peer recovery: a starting replica fetches GET /dump from the first
// reachable peer (either port, either form) and restores it into its index.
// The caller holds the index's apply gate (core.Index.HoldApplies) from
// before its listeners subscribe until Recover returns, so the listeners
// buffer meanwhile; each restored stream then skips its buffered batches up to
// the dumped watermark (core.RestoreStream).

// ErrDumpFormat wraps a dump that cannot be parsed.
var ErrDumpFormat = errors.New("conductor: malformed dump")

// RecoverOptions configure Recover. The zero value is valid.
type RecoverOptions struct {
	// Timeout bounds connecting to a peer and receiving its response headers
	// (the body may take longer). Default 10s (Dynamo's).
	Timeout time.Duration
	// Dynamo, when set, records the indexers (and block sizes) of a Dynamo
	// form dump.
	Dynamo *Dynamo
	// Token, when set, is sent as "Authorization: Bearer <Token>" (a peer
	// with an admin token answers /dump only to it). Default "": none.
	Token string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// RecoverStats describe one restore.
type RecoverStats struct {
	Peer          string
	Bytes         int64
	Streams       int // sections restored
	MissingStream int // sections without a matching registration here (skipped)
	Holdings      int
	Engine        int
	Skipped       int // holdings or engine entries not applied
	Duration      time.Duration
}

// Recover tries each peer in order and restores the first dump it receives.
// No reachable peer is not an error (ok=false: start empty). A dump that
// fails part-way is not retried from another peer (what was restored stays;
// live events converge the rest) and is returned as an error.
func Recover(ctx context.Context, ix *core.Index, peers []string, opts RecoverOptions) (st RecoverStats, ok bool, err error) {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		ResponseHeaderTimeout: opts.Timeout,
		DisableCompression:    true,
	}}
	defer client.CloseIdleConnections()
	for _, p := range peers {
		url := strings.TrimRight(p, "/") + "/dump"
		req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if rerr != nil {
			opts.Logger.Warn("peer recovery: bad peer URL", "peer", p, "err", rerr)
			continue
		}
		if opts.Token != "" {
			req.Header.Set("Authorization", "Bearer "+opts.Token)
		}
		resp, rerr := client.Do(req)
		if rerr != nil {
			opts.Logger.Warn("peer recovery: peer unreachable", "peer", p, "err", rerr)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			opts.Logger.Warn("peer recovery: peer refused", "peer", p, "status", resp.StatusCode)
			continue
		}
		start := time.Now()
		st, err = RestoreDump(ix, resp.Body, opts.Dynamo)
		_ = resp.Body.Close()
		st.Peer, st.Duration = p, time.Since(start)
		if err != nil {
			return st, true, fmt.Errorf("recover from %s: %w", p, err)
		}
		opts.Logger.Info("peer recovery done", "peer", p, "streams", st.Streams, "holdings", st.Holdings,
			"engine_entries", st.Engine, "missing_streams", st.MissingStream, "skipped", st.Skipped,
			"bytes", st.Bytes, "duration", st.Duration)
		return st, true, nil
	}
	opts.Logger.Info("peer recovery: no peer answered; starting empty", "peers", len(peers))
	return st, false, nil
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

// RestoreDump parses a dump in either form from r and restores it into ix.
func RestoreDump(ix *core.Index, r io.Reader, dyn *Dynamo) (RecoverStats, error) {
	cr := &countingReader{r: r}
	rs := &restoreState{ix: ix, dyn: dyn, sc: dumpScanner{r: bufio.NewReaderSize(cr, 256<<10)}}
	err := rs.run()
	rs.st.Bytes = cr.n
	return rs.st, err
}

type restoreState struct {
	ix      *core.Index
	dyn     *Dynamo
	sc      dumpScanner
	st      RecoverStats
	cur     *core.StreamRestorer
	scratch []byte
	keys    []uint64
	triple  []uint64
}

func u64Of(v *value) (uint64, bool) {
	switch {
	case v.kind == kindInt && v.i >= 0:
		return uint64(v.i), true
	case v.kind == kindUint:
		return v.u, true
	}
	return 0, false
}

func int32Of(v *value) (int32, bool) {
	if v.kind == kindInt && v.i >= 0 && v.i <= 1<<31-1 {
		return int32(v.i), true
	}
	return 0, false
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
			if string(raw) != `"conductor-dump/1"` {
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

// ---- main form --------------------------------------------------------------

func (rs *restoreState) mainStreams() {
	sc := &rs.sc
	if !sc.expect('[') {
		return
	}
	for first := true; sc.more(']', first); first = false {
		if !sc.expect('{') {
			return
		}
		rs.cur = nil
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
	r := objReader(raw, &rs.scratch)
	var info core.StreamInfo
	for {
		k, ok := r.nextKey()
		if !ok {
			break
		}
		v := r.value()
		switch string(k) {
		case "instance_id":
			info.Reg.InstanceID = string(v.s)
		case "dp_rank":
			info.Reg.DPRank, _ = int32Of(&v)
		case "tenant_id":
			info.Reg.TenantID = string(v.s)
		case "model_name":
			info.Reg.ModelName = string(v.s)
		case "lora_name":
			info.Reg.LoraName = string(v.s)
		case "block_size":
			bs, _ := int32Of(&v)
			info.Reg.BlockSize = int(bs)
		case "event_id":
			info.Seq, info.HasSeq = u64Of(&v)
		}
	}
	if err := r.err(); err != nil {
		rs.sc.fail("stream: %v", err)
		return
	}
	rs.begin(&info)
}

func (rs *restoreState) begin(info *core.StreamInfo) {
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

func (rs *restoreState) mainEvent(raw []byte) {
	rs.scratch = rs.scratch[:0] // strings are copied out of each event
	r := objReader(raw, &rs.scratch)
	var typ, medium string
	var ck core.ContextKey
	h := core.Holding{}
	var shared bool
	var entries, stream []byte
	rs.keys = rs.keys[:0]
	for {
		k, ok := r.nextKey()
		if !ok {
			break
		}
		switch string(k) {
		case "seq_hashes":
			var fe *RequestError
			rs.keys, fe = r.uint64s(&rs.keys, "seq_hashes", 1<<20)
			if fe != nil {
				rs.sc.fail("seq_hashes: %v", fe)
				return
			}
			continue
		case "entries":
			entries = r.value().s
			continue
		case "stream":
			if v := r.value(); v.kind == kindMap {
				stream = v.s
			}
			continue
		}
		v := r.value()
		switch string(k) {
		case "event_type":
			typ = string(v.s)
		case "tenant_id":
			ck.TenantID = string(v.s)
		case "model_name":
			ck.ModelName = string(v.s)
		case "lora_name":
			ck.LoraName = string(v.s)
		case "block_size":
			bs, _ := int32Of(&v)
			ck.BlockSize = int(bs)
		case "backend_id":
			if v.kind == kindStr {
				shared, h.Name = true, string(v.s)
			}
		case "dp_rank":
			h.Rank, _ = int32Of(&v)
		case "medium":
			medium = string(v.s)
		case "copies":
			c, _ := u64Of(&v)
			h.Copies = uint32(min(c, 1<<16-1))
		}
	}
	if err := r.err(); err != nil {
		rs.sc.fail("event: %v", err)
		return
	}
	if rs.cur == nil {
		rs.st.Skipped++
		return
	}
	h.Context, h.Shared = ck, shared
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
		rs.engineTriples(ck, entries)
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
	r := objReader(raw, &rs.scratch)
	d := &core.StreamDims{}
	for {
		k, ok := r.nextKey()
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
	if err := r.err(); err != nil {
		rs.sc.fail("stream owner: %v", err)
		return nil
	}
	return d
}

// engineTriples restores [[h,k,n,p],...] ([h,k,n]: p = k).
func (rs *restoreState) engineTriples(ck core.ContextKey, raw []byte) {
	if len(raw) == 0 {
		return
	}
	r := rawArray(raw, &rs.scratch)
	empty, ok := r.arrayStart()
	if !ok {
		rs.sc.fail("engine entries must be an array")
		return
	}
	for !empty {
		var fe *RequestError
		rs.triple, fe = r.uint64s(&rs.triple, "entries", 4)
		if fe != nil || (len(rs.triple) != 3 && len(rs.triple) != 4) || r.syntax != nil {
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
	if r.syntax != nil {
		rs.sc.fail("engine entries: %v", r.syntax)
	}
}

// ---- Dynamo form ------------------------------------------------------------

func (rs *restoreState) dynamoIndexer(name string) {
	sc := &rs.sc
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		sc.fail("indexer key %q is not model:group", name)
		return
	}
	k := dynKey{model: name[:i], group: name[i+1:]}
	if !sc.expect('{') {
		return
	}
	bs := 0
	rs.cur = nil
	for first := true; sc.more('}', first); first = false {
		switch sc.key() {
		case "block_size":
			raw := sc.value()
			n, err := strconv.Atoi(string(raw))
			if err != nil || n <= 0 || n > 1<<31-1 {
				sc.fail("%s: block_size %q", name, raw)
				return
			}
			bs = n
			if rs.dyn != nil {
				if err := rs.dyn.AddIndexer(k.model, k.group, bs); err != nil && sc.err == nil {
					sc.err = err
					return
				}
			}
		case "events":
			if bs <= 0 {
				sc.fail("%s: events before block_size", name)
				return
			}
			ck := dynamoContext(k, bs)
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

// routerEvent restores one RouterEvent (see WriteDynamoDump). Nested
// objects are read in place (enterObject), so each byte is scanned once.
func (rs *restoreState) routerEvent(ck core.ContextKey, raw []byte) {
	rs.scratch = rs.scratch[:0] // strings are copied out of each event
	r := objReader(raw, &rs.scratch)
	var tier string
	var streamRaw, engineRaw []byte
	var backend, owner []byte
	hasBackend := false
	copies := uint32(1)
	var eventID uint64
	var rank int32
	haveStored := false
	rs.keys = rs.keys[:0]
	for {
		k, ok := r.nextKey()
		if !ok {
			break
		}
		if string(k) == "event" {
			if ev, ok := r.enterObject(); ok {
				rs.readEventBody(&ev, &eventID, &rank, &haveStored)
				r.leave(&ev)
			}
			continue
		}
		v := r.value()
		switch string(k) {
		case "storage_tier":
			tier = string(v.s)
		case "conductor_stream":
			streamRaw = v.s
		case "conductor_engine_hashes":
			engineRaw = v.s
		case "conductor_backend":
			backend, hasBackend = v.s, v.kind == kindStr
		case "conductor_stream_owner":
			if v.kind == kindMap {
				owner = v.s
			}
		case "conductor_copies":
			c, _ := u64Of(&v)
			copies = uint32(min(c, 1<<16-1))
		}
	}
	if err := r.err(); err != nil {
		rs.sc.fail("RouterEvent: %v", err)
		return
	}
	if len(streamRaw) > 0 && streamRaw[0] == '{' {
		info := core.StreamInfo{Reg: core.Registration{TenantID: ck.TenantID, ModelName: ck.ModelName,
			LoraName: ck.LoraName, BlockSize: ck.BlockSize}, Seq: eventID}
		sr := objReader(streamRaw, &rs.scratch)
		for {
			k, ok := sr.nextKey()
			if !ok {
				break
			}
			v := sr.value()
			switch string(k) {
			case "instance_id":
				info.Reg.InstanceID = string(v.s)
			case "dp_rank":
				info.Reg.DPRank, _ = int32Of(&v)
			case "has_seq":
				info.HasSeq = v.kind == kindBool && v.b
			}
		}
		if err := sr.err(); err != nil {
			rs.sc.fail("conductor_stream: %v", err)
			return
		}
		rs.begin(&info)
		return
	}
	if rs.cur == nil {
		// A RouterEvent of a stream without a conductor_stream header (e.g.
		// from a Dynamo process: its tokens_hash is a local block hash, not
		// a conductor prefix key) cannot be attributed.
		rs.st.Skipped++
		return
	}
	if len(engineRaw) > 0 {
		rs.engineTriples(ck, engineRaw)
		return
	}
	t, ok := parseDynamoTier(tier)
	if !ok || !haveStored {
		rs.st.Skipped++
		return
	}
	h := core.Holding{Context: ck, Tier: t, Rank: rank, Copies: max(copies, 1)}
	if hasBackend {
		h.Shared, h.Name = true, string(backend)
	}
	if len(owner) > 0 {
		if h.Stream = rs.streamDims(owner); h.Stream == nil {
			return
		}
	}
	rs.holdings(&h, rs.keys)
}

// readEventBody reads RouterEvent.event: event_id, dp_rank and
// data.stored.blocks[].tokens_hash (into rs.keys).
func (rs *restoreState) readEventBody(ev *jsonReader, eventID *uint64, rank *int32, haveStored *bool) {
	for {
		k, ok := ev.nextKey()
		if !ok {
			return
		}
		switch string(k) {
		case "data":
			data, ok := ev.enterObject()
			if !ok {
				continue // "cleared"
			}
			for {
				k2, ok := data.nextKey()
				if !ok {
					break
				}
				if string(k2) != "stored" {
					data.skip()
					continue
				}
				st, ok := data.enterObject()
				if !ok {
					continue
				}
				for {
					k3, ok := st.nextKey()
					if !ok {
						break
					}
					if string(k3) != "blocks" {
						st.skip()
						continue
					}
					*haveStored = true
					rs.readBlocks(&st)
				}
				data.leave(&st)
			}
			ev.leave(&data)
		default:
			v := ev.value()
			switch string(k) {
			case "event_id":
				*eventID, _ = u64Of(&v)
			case "dp_rank":
				*rank, _ = int32Of(&v)
			}
		}
	}
}

// readBlocks reads [{"block_hash", "tokens_hash", ...}, ...] at r's position.
func (rs *restoreState) readBlocks(r *jsonReader) {
	empty, ok := r.arrayStart()
	if !ok {
		r.fail("blocks must be an array")
		return
	}
	for !empty {
		b, ok := r.enterObject()
		if !ok {
			r.fail("blocks: want objects")
			return
		}
		found := false
		for {
			k, ok := b.nextKey()
			if !ok {
				break
			}
			v := b.value()
			if string(k) == "tokens_hash" {
				var key uint64
				if key, found = u64Of(&v); found {
					rs.keys = append(rs.keys, key)
				}
			}
		}
		if !found && b.syntax == nil {
			b.fail("block without a u64 tokens_hash")
		}
		r.leave(&b)
		if r.syntax != nil || !r.arrayNext() {
			return
		}
	}
}
