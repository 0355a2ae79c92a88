package dump

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"

	"github.com/seed-c7a81618/conductor/core"
)

// Indexer is one Dynamo indexer: Dynamo keeps one per (model, routing
// group), its block size fixed by the first registration.
type Indexer struct {
	Model, Group string
	BlockSize    int
}

// Context is the conductor context an indexer's workers feed and its
// queries read: tenant_id = routing group, model_name = model, no LoRA, the
// indexer's block size. A Dynamo registration of model M in group "default"
// and a Mooncake registration of model M, tenant "default", the same block
// size and no LoRA therefore share one context. The Dynamo surface maps its
// indexers with this function, and the Dynamo form restores into it.
func (in Indexer) Context() core.ContextKey {
	return core.ContextKey{TenantID: in.Group, ModelName: in.Model, LoraName: "", BlockSize: in.BlockSize}
}

// name is the indexer's member name in the Dynamo form: "model:group".
func (in Indexer) name() string { return in.Model + ":" + in.Group }

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
		b = AppendJSONString(b, r.InstanceID)
	}
	b = append(b, `,"storage_tier":"`...)
	b = append(b, tier...)
	b = append(b, `","event":{"event_id":`...)
	b = strconv.AppendUint(b, info.Seq, 10)
	return append(b, `,"data":{"stored":{"parent_hash":null,"start_position":null,`...)
}

// appendRouterStream writes a stream's header: an empty stored event
// carrying "conductor_stream" (its registration and whether event_id is a
// watermark).
func appendRouterStream(b []byte, info *core.StreamInfo) []byte {
	r := &info.Reg
	b = appendRouterHead(b, r, "device", info)
	b = append(b, `"blocks":[]}},"dp_rank":`...)
	b = strconv.AppendInt(b, int64(r.DPRank), 10)
	b = append(b, `},"conductor_stream":{"instance_id":`...)
	b = AppendJSONString(b, r.InstanceID)
	b = append(b, `,"dp_rank":`...)
	b = strconv.AppendInt(b, int64(r.DPRank), 10)
	b = append(b, `,"has_seq":`...)
	b = strconv.AppendBool(b, info.HasSeq)
	return append(b, "}}"...)
}

// appendRouterGroup writes one RouterEvent per group of holdings: each
// holding is a block whose block_hash and tokens_hash are the conductor
// prefix key; copies beyond one go in "conductor_copies" (Dynamo counts
// none).
func appendRouterGroup(b []byte, info *core.StreamInfo, h *core.Holding, keys []uint64) []byte {
	b = appendRouterHead(b, &info.Reg, dynamoTier(h.Tier), info)
	b = append(b, `"blocks":[`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"block_hash":`...)
		b = strconv.AppendUint(b, k, 10)
		b = append(b, `,"tokens_hash":`...)
		b = strconv.AppendUint(b, k, 10)
		b = append(b, `,"mm_extra_info":null}`...)
	}
	b = append(b, `]}},"dp_rank":`...)
	b = strconv.AppendInt(b, int64(h.Rank), 10)
	b = append(b, '}')
	if h.Copies > 1 {
		b = append(b, `,"conductor_copies":`...)
		b = strconv.AppendUint(b, uint64(h.Copies), 10)
	}
	if h.Shared {
		b = append(b, `,"conductor_backend":`...)
		b = AppendJSONString(b, h.Name)
	}
	if h.Stream != nil {
		b = append(b, `,"conductor_stream_owner":`...)
		b = appendStreamDims(b, h.Stream)
	}
	if h.Context.LoraName != "" {
		b = append(b, `,"conductor_lora":`...)
		b = AppendJSONString(b, h.Context.LoraName)
	}
	return append(b, '}')
}

// WriteDynamo writes the Dynamo form of the dump to w and flushes it: one
// member per indexer, "model:group": {"block_size", "events":
// [RouterEvent...]}, in (model, group) order, the RouterEvents of each
// subscription of the indexer's context in turn. A subscription's section
// starts with an empty stored event carrying "conductor_stream" (its
// registration and whether event_id is a watermark), then its holdings
// (block_hash = tokens_hash = conductor's prefix key; dp_rank the owner's
// rank; "conductor_copies" when a block is held in more than one copy;
// "conductor_backend" for shared pool holdings; "conductor_stream_owner"
// {"salt","backend_id","medium"} for holdings of an RFC #1527 stream
// owner; "conductor_lora" for holdings in an adapter's context of the
// indexer, which a Dynamo worker's events make), then events carrying
// "conductor_engine_hashes" ([h,k,n,p] as in the main form, with
// "conductor_lora" likewise). Holdings of the stream in contexts of another
// model, group or block size are left out (sink.foreign). progress (when not nil) is called after each chunk
// written; log (slog.Default() when nil) receives an indexer walk's
// failure.
//
// Indexers are walked concurrently (at most GOMAXPROCS at a time), each
// into its own bounded queue of chunks, and written in order: a walker whose
// queue is full waits (holding the lock of the stream it is in) until the
// writer reaches it, so memory stays bounded by dumpLookahead chunks per
// running walker.
func WriteDynamo(ix *core.Index, w *bufio.Writer, indexers []Indexer, progress func(), log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	keys := append([]Indexer(nil), indexers...)
	sortIndexers(keys)
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
			go func(i int, k Indexer) {
				defer func() { <-sem }()
				walkIndexer(ix, k, queues[i], free, done, log)
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
				return fmt.Errorf("dump of indexer %s failed", keys[i].name())
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

var errAbandoned = errors.New("conductor: dump abandoned by its writer")

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
		return 0, errAbandoned
	}
}

// walkIndexer writes one indexer's member ("model:group": {...}) into q and
// closes it (a nil chunk first when the walk failed).
func walkIndexer(ix *core.Index, k Indexer, q, free chan []byte, done <-chan struct{}, log *slog.Logger) {
	defer close(q)
	w := bufio.NewWriterSize(chanWriter{q: q, free: free, done: done}, flushBytes)
	s := &sink{w: w, dynamo: true, first: true}
	s.buf = AppendJSONString(s.buf, k.name())
	s.buf = append(s.buf, `:{"block_size":`...)
	s.buf = strconv.AppendInt(s.buf, int64(k.BlockSize), 10)
	s.buf = append(s.buf, `,"events":[`...)
	ck := k.Context()
	err := ix.DumpStreams(func(r *core.Registration) bool { return r.ContextKey() == ck }, s)
	s.buf = append(s.buf, "]}"...)
	s.flushBuf()
	if err == nil {
		err = s.err
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil && !errors.Is(err, errAbandoned) {
		log.Warn("dynamo dump: indexer walk failed", "indexer", k.name(), "err", err)
		select {
		case q <- nil:
		case <-done:
		}
	}
}

// sortIndexers orders indexers by (model, group).
func sortIndexers(keys []Indexer) {
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && (keys[j].Model < keys[j-1].Model ||
			(keys[j].Model == keys[j-1].Model && keys[j].Group < keys[j-1].Group)); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}
