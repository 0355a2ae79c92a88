package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// DropReason names a class of dropped or refused events. Every class is
// counted (Counters.DroppedBy) and logged at WARN, rate-limited per class.
type DropReason uint8

const (
	DropUnknownMedium    DropReason = iota // medium not in the media map
	DropUnknownContext                     // event names a (tenant, model, lora, block_size) nobody registered
	DropWrongLora                          // engine event for another LoRA (vLLM base model on an adapter's registration too), or a bare lora_id on the base's
	DropNotFullAttention                   // hybrid-model group != 0, sliding window, non-full-attention spec
	DropBlockSize                          // stored event with a finer block size than the context's
	DropUnknownParent                      // parent hash never seen from this publisher (chain not locatable)
	DropRank                               // publisher-named dp rank out of range or over the cap
	DropDuplicateID                        // event_id already applied or held
	DropStreamLimit                        // new RFC stream beyond MaxStreamsPerSubscription, none evictable
	DropNoBlocks                           // stored event with nothing to index (no hashes, no locatable tokens)
	DropUnknownKind                        // event kind not stored/removed/cleared
	DropDecode                             // the decoder skipped a malformed event (see the error)
	DropAdapterLimit                       // stored event for a new LoRA adapter beyond Options.MaxAdaptersPerRegistration
	NumDropReasons
)

var dropReasonNames = [NumDropReasons]string{
	"unknown_medium", "unknown_context", "wrong_lora", "not_full_attention", "block_size",
	"unknown_parent", "dp_rank", "duplicate_event_id", "stream_limit", "no_blocks", "unknown_kind", "decode",
	"adapter_limit",
}

func (r DropReason) String() string {
	if r < NumDropReasons {
		return dropReasonNames[r]
	}
	return "unknown"
}

// dropLog rate-limits drop warnings: at most one line per reason per
// interval, carrying how many drops of that reason were not logged. Its
// memory is fixed (one slot per reason), whatever publishers send.
type dropLog struct {
	mu         sync.Mutex
	last       [NumDropReasons]time.Time
	suppressed [NumDropReasons]uint64
}

// DropLogInterval is the minimum time between two WARN lines of one drop
// reason (Options.DropLogInterval default).
const DropLogInterval = 10 * time.Second

// drop counts one dropped event of reason r and logs it unless a line for r
// was logged within the interval. attrs are extra slog key/value pairs.
func (s *Subscription) drop(st *ApplyStats, r DropReason, attrs ...any) {
	st.Dropped++
	s.ix.noteDrop(s, r, 1, attrs...)
}

func (ix *Index) noteDrop(s *Subscription, r DropReason, n uint64, attrs ...any) {
	ix.counters.DroppedBy[r].Add(n)
	l := &ix.drops
	now := time.Now()
	l.mu.Lock()
	if !l.last[r].IsZero() && now.Sub(l.last[r]) < ix.opts.DropLogInterval {
		l.suppressed[r] += n
		l.mu.Unlock()
		return
	}
	sup := l.suppressed[r]
	l.last[r], l.suppressed[r] = now, 0
	l.mu.Unlock()
	args := make([]any, 0, 8+len(attrs))
	args = append(args, "reason", r.String(), "events", n, "suppressed_since_last_log", sup)
	if s != nil {
		args = append(args, "service", s.reg.Key().String())
	}
	args = append(args, attrs...)
	ix.opts.Logger.Warn("KV events dropped", args...)
}

// clip bounds a publisher-supplied string logged as an attribute.
func clip(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// dropCounts is the per-reason drop counters' type (Counters.DroppedBy).
type dropCounts = [NumDropReasons]atomic.Uint64
