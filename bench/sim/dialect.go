package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
)

// Dialect is the event wire format an Engine publishes.
type Dialect uint8

const (
	VLLMArray   Dialect = iota + 1 // vLLM ≤ v0.23: array_like events, tag first
	VLLMMap                        // vLLM v0.24+ (PR #42892): tagged maps
	SGLangArray                    // SGLang before PR #37482
	SGLangMap                      // SGLang after PR #37482
	Standard                       // RFC #1527 standardized events (seq_hashes)
)

var dialectNames = [...]string{"", "vllm-array", "vllm-map", "sglang-array", "sglang-map", "standard"}

func (d Dialect) String() string {
	if int(d) < len(dialectNames) && d != 0 {
		return dialectNames[d]
	}
	return fmt.Sprintf("dialect(%d)", uint8(d))
}

// ParseDialect accepts the String forms (case-insensitive); "sglang" means
// sglang-map and "vllm" vllm-map.
func ParseDialect(s string) (Dialect, error) {
	switch strings.ToLower(s) {
	case "vllm":
		return VLLMMap, nil
	case "sglang":
		return SGLangMap, nil
	}
	for i, n := range dialectNames {
		if i > 0 && strings.EqualFold(s, n) {
			return Dialect(i), nil
		}
	}
	return 0, fmt.Errorf("sim: unknown dialect %q (want vllm-array, vllm-map, sglang-array, sglang-map or standard)", s)
}

// PublisherType is the /register "type" of the dialect.
func (d Dialect) PublisherType() string {
	switch d {
	case VLLMArray, VLLMMap:
		return "vLLM"
	case SGLangArray, SGLangMap:
		return "SGLang"
	}
	return "standard"
}

// media names the dialect's medium strings for device, host and disk, as
// that engine family sends them (SGLang HiCache host memory is CPU_PINNED).
func (d Dialect) media() [numTiers]string {
	if d == SGLangArray || d == SGLangMap {
		return [numTiers]string{"GPU", "CPU_PINNED", "", "DISK"}
	}
	return [numTiers]string{"GPU", "CPU", "", "DISK"}
}

// Tier indexes, in query order (core.Tier's order).
const (
	tierDevice = iota
	tierHost   // cpu_local
	tierShare  // cpu_share (the Store)
	tierDisk
	numTiers
)

// TierNames are the tier names as the msgpack dialect reports them.
var TierNames = [numTiers]string{"device", "cpu_local", "cpu_share", "disk"}

// event is one stored / removed / cleared event before encoding.
type event struct {
	kind   uint8 // evStored, evRemoved, evCleared
	tier   int
	hashes []uint64
	parent uint64
	hasPar bool
	tokens []int32
}

const (
	evStored = iota + 1
	evRemoved
	evCleared
)

// encoder turns a step's events into one payload of a dialect.
type encoder struct {
	d         Dialect
	model     string
	blockSize int
	rank      int
	eventIDs  [numTiers]uint64 // Standard: RFC event ids, one stream per medium
	any       []any
	std       []bench.StandardEvent
}

func (e *encoder) append(dst []byte, evs []event) []byte {
	media := e.d.media()
	now := time.Now()
	if e.d == Standard {
		return e.appendRFC(dst, now, evs)
	}
	e.any = e.any[:0]
	for i := range evs {
		ev := &evs[i]
		switch ev.kind {
		case evStored:
			e.any = append(e.any, bench.EngineStored{Hashes: ev.hashes, Parent: ev.parent, HasParent: ev.hasPar,
				Tokens: ev.tokens, BlockSize: e.blockSize, Medium: media[ev.tier]})
		case evRemoved:
			e.any = append(e.any, bench.EngineRemoved{Hashes: ev.hashes, Medium: media[ev.tier]})
		default:
			e.any = append(e.any, bench.EngineCleared{})
		}
	}
	ts := float64(now.UnixNano()) / 1e9
	switch e.d {
	case VLLMArray:
		return bench.AppendVLLMBatch(dst, bench.EraArray, ts, e.rank, e.any...)
	case VLLMMap:
		return bench.AppendVLLMBatch(dst, bench.EraMap, ts, e.rank, e.any...)
	case SGLangArray:
		return bench.AppendSGLangBatch(dst, bench.EraArray, ts, e.rank, e.any...)
	}
	return bench.AppendSGLangBatch(dst, bench.EraMap, ts, e.rank, e.any...)
}

// appendRFC writes an RFC #1527 batch [ts_ms, events, dp_rank]. event_id is
// consecutive per stream; conductor keys an RFC stream by (model, block size,
// salt, LoRA, tenant, backend, medium, rank), so each medium has its own ids.
func (e *encoder) appendRFC(dst []byte, now time.Time, evs []event) []byte {
	media := e.d.media()
	e.std = e.std[:0]
	for i := range evs {
		ev := &evs[i]
		e.eventIDs[ev.tier]++
		se := bench.StandardEvent{EventID: e.eventIDs[ev.tier], Type: [...]string{"", "stored", "removed", "cleared"}[ev.kind],
			ModelName: e.model, BlockSize: e.blockSize, Medium: media[ev.tier], DPRank: e.rank}
		if ev.kind != evCleared {
			se.SeqHashes = ev.hashes
		}
		if ev.kind == evStored {
			se.Parent, se.HasParent, se.Tokens = ev.parent, ev.hasPar, ev.tokens
		}
		e.std = append(e.std, se)
	}
	return bench.AppendStandardBatch(dst, uint64(now.UnixMilli()), e.rank, e.std...)
}
