package core

// EventKind is the type of one KV-cache event after decoding.
type EventKind uint8

const (
	// EventStored: blocks were committed to a cache tier.
	EventStored EventKind = iota + 1
	// EventRemoved: blocks were evicted (vLLM sends one per physical copy).
	EventRemoved
	// EventCleared: every block of the stream (or of one backend/tenant) was purged.
	EventCleared
)

func (k EventKind) String() string {
	switch k {
	case EventStored:
		return "stored"
	case EventRemoved:
		return "removed"
	case EventCleared:
		return "cleared"
	}
	return "unknown"
}

// Event is one decoded KV-cache event, normalised across dialects (vLLM array and
// map eras, SGLang, Mooncake master, RFC #1527 standardized events).
//
// Slices and byte-slice fields alias the decoder's per-batch scratch or the input
// frame: they are valid until the decoder decodes the next payload. core copies what
// it keeps.
type Event struct {
	Kind EventKind
	// Standard marks an RFC #1527 standardized event map (recognised by its
	// event_type key) decoded from any publisher's batch: core applies it
	// with the standardized rules whatever the registration type.
	Standard bool

	// Hashes are the block hashes in chain order, folded to u64: msgpack ints kept
	// as their 64-bit pattern, bin digests as their last 8 bytes big-endian.
	// For RFC #1527 events these are the rolling seq_hashes.
	Hashes []uint64
	// Parent is the hash of the block before Hashes[0]; valid when HasParent.
	Parent    uint64
	HasParent bool

	// Tokens are the token ids of all blocks of a Stored event, concatenated.
	// For SGLang bigram (EAGLE) events, pairs are flattened: [a0,b0,a1,b1,...] and
	// Bigram is set. HasTokens distinguishes nil from empty.
	Tokens    []int32
	HasTokens bool
	Bigram    bool

	// BlockSize is the per-event block size (tokens per block); 0 if absent.
	BlockSize int
	// Partial is set by the decoder when the event carries fewer tokens per block
	// than its declared block size would need (SGLang's final partial page): core
	// ignores such blocks for the index.
	Partial bool

	// Medium is the cache medium as sent (case preserved); nil when absent.
	Medium []byte

	// LoraName (nil = base model / absent); LoraID is the deprecated numeric id.
	LoraName  []byte
	HasLoraID bool
	LoraID    int64

	// Hybrid-model group and attention-spec metadata (vLLM). Events for groups
	// other than 0, or for sliding-window specs, are not prefix-cache events for
	// full attention and are skipped by core.
	HasGroupIdx      bool
	GroupIdx         int64
	SpecKind         []byte
	HasSlidingWindow bool
	ExtraKeysPresent bool

	// CacheSalt from SGLang metadata / map-era events; nil when absent.
	CacheSalt []byte

	// RFC #1527 / Mooncake envelope. Has* flags mark presence.
	HasEventID     bool
	EventID        uint64
	Timestamp      uint64
	ModelName      []byte
	HasModelName   bool
	HasBlockSize   bool
	AdditionalSalt []byte
	TenantID       []byte
	BackendID      []byte
	HasDPRank      bool
	DPRank         uint32
	HasBaseIdx     bool
	BaseBlockIdx   uint32
	ObjectKey      []byte
}

// FullAttention reports whether e belongs to the main full-attention group: group
// 0 (or none), no sliding window, and a full-attention spec (or none). Only those
// events are prefix-cache events; the kinds are those Dynamo treats as
// prefix-cacheable. The decoders' token-count check and core's admission both
// use it.
func (e *Event) FullAttention() bool {
	if e.HasSlidingWindow || (e.HasGroupIdx && e.GroupIdx != 0) {
		return false
	}
	switch string(e.SpecKind) {
	case "", "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// Reset clears e for reuse, keeping slice capacity.
func (e *Event) Reset() {
	*e = Event{
		Hashes: e.Hashes[:0],
		Tokens: e.Tokens[:0],
	}
}

// Batch is one decoded publisher payload: `[ts, events, dp_rank]` for engine
// dialects. Events is reused across decodes (truncate-and-re-extend).
type Batch struct {
	// Timestamp in seconds (engine batches) or milliseconds (Mooncake), as sent.
	TimestampF float64
	TimestampU uint64
	// DPRank is the batch-level data-parallel rank; HasDPRank is false when nil/absent.
	DPRank    uint32
	HasDPRank bool

	Events []Event
	// Seq is the publisher's sequence number of the message that carried the
	// batch (set by the transport after decoding; HasSeq false when unknown).
	// A subscription restored from a peer's dump skips batches at or below the
	// dumped watermark (RestoreStream).
	Seq    uint64
	HasSeq bool
	// Skipped counts events with unknown tags or event-local errors that were
	// dropped without failing the batch; Errors keeps their first few errors.
	Skipped int
	Errors  []error
}

// Reset clears b for reuse, keeping the capacity of Events and of each event's slices.
func (b *Batch) Reset() {
	for i := range b.Events {
		b.Events[i].Reset()
	}
	b.Events = b.Events[:0]
	b.TimestampF, b.TimestampU = 0, 0
	b.DPRank, b.HasDPRank = 0, false
	b.Seq, b.HasSeq = 0, false
	b.Skipped = 0
	b.Errors = b.Errors[:0]
}

// NextEvent extends b.Events by one and returns the new (reset) slot, reusing
// the slot's previous slice capacity.
func (b *Batch) NextEvent() *Event {
	if len(b.Events) < cap(b.Events) {
		b.Events = b.Events[:len(b.Events)+1]
	} else {
		b.Events = append(b.Events, Event{})
	}
	e := &b.Events[len(b.Events)-1]
	e.Reset()
	return e
}
