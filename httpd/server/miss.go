package server

import (
	"io"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// MissReason says why a query found no context: the first of the query's
// context fields, in the order tenant, model, block size, LoRA, for which no
// context exists that also equals the query in every field before it. A
// query whose context exists has MissNone.
type MissReason uint8

const (
	// MissNone: the query's context exists.
	MissNone MissReason = iota
	// MissUnknownTenant: no context has the query's tenant.
	MissUnknownTenant
	// MissUnknownModel: contexts of the tenant exist, none for the model.
	MissUnknownModel
	// MissUnknownBlockSize: the tenant serves the model, at other block sizes.
	MissUnknownBlockSize
	// MissUnknownLora: the tenant serves the model at the block size, not
	// with the query's LoRA name ("" being the base model).
	MissUnknownLora
	// NumMissReasons is the number of MissReason values, MissNone included.
	NumMissReasons
)

var missReasonNames = [NumMissReasons]string{"", "unknown_tenant", "unknown_model", "unknown_block_size", "unknown_lora"}

// String is the reason's wire token (the X-Conductor-Miss value and the
// reason label of conductor_query_context_misses_total); "" for MissNone.
func (r MissReason) String() string {
	if r >= NumMissReasons {
		return ""
	}
	return missReasonNames[r]
}

// MissHeader is the response header of the HTTP surfaces that names a miss's
// reason on a query answered without a context.
const MissHeader = "X-Conductor-Miss"

// missReason says why q matches none of keys, the context keys of an index.
// A key equal to q in every field (a context created after q missed) counts
// as MissUnknownLora, the last field checked.
func missReason(keys []core.ContextKey, q *core.QueryRequest) MissReason {
	tenant := q.TenantID
	if tenant == "" {
		tenant = "default" // as core.Index.Query resolves it
	}
	r := MissUnknownTenant
	for i := range keys {
		k := &keys[i]
		if k.TenantID != tenant {
			continue
		}
		next := MissUnknownModel
		if k.ModelName == q.Model {
			next = MissUnknownBlockSize
			if k.BlockSize == q.BlockSize {
				next = MissUnknownLora
			}
		}
		if next > r {
			r = next
			if r == MissUnknownLora {
				break
			}
		}
	}
	return r
}

// missKeysTTL bounds how long missKeys serves keys read before a change of
// the context set that did not go through the Gate (a restored state file,
// a replica's stream, a peer's dump); a change through the Gate is seen by
// the next miss.
const missKeysTTL = time.Second

// missKeys are the context keys missReason walks. Reading them from the
// index (core.Index.GlobalView) costs O(contexts × instances) and allocates,
// so they are read at most once per missKeysTTL and Gate change: a flood of
// misses costs a walk of a slice each (BenchmarkQueryMiss).
type missKeys struct {
	// mu is a plain mutex: a miss holds it for one slice walk, and a
	// refresh under it makes the misses meanwhile wait for its keys
	// instead of each reading the index.
	mu    sync.Mutex
	keys  []core.ContextKey
	gen   uint64           // the Gate's generation the keys were read at
	at    time.Time        // when they were read; zero: never
	clock func() time.Time // nil: time.Now (tests set it)
}

// reason is missReason over keys no older than missKeysTTL and Gate
// generation gen.
func (m *missKeys) reason(ix *core.Index, gen uint64, q *core.QueryRequest) MissReason {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.at.IsZero() || m.gen != gen || now.Sub(m.at) >= missKeysTTL {
		m.keys = m.keys[:0]
		for _, cv := range ix.GlobalView().Contexts {
			m.keys = append(m.keys, cv.ContextKey)
		}
		m.gen, m.at = gen, now
	}
	return missReason(m.keys, q)
}

func (m *missKeys) now() time.Time {
	if m.clock != nil {
		return m.clock()
	}
	return time.Now()
}

// QueryMiss is what a surface calls when its query found no context
// (core.QueryResult.ContextFound false): it works out the reason, counts it
// in conductor_query_context_misses_total{reason} and returns it. RunQuery
// calls it for the Mooncake API and the RPC; the Dynamo surface, which runs
// its own query, calls it itself. Safe for concurrent use. Call it only on a
// miss: it takes a lock, and reads every context from the index when its
// keys are older than a second or than the Gate's last change (missKeys).
func (c *Core) QueryMiss(q *core.QueryRequest) MissReason {
	r := c.missKeys.reason(c.ix, c.gate.gen.Load(), q)
	c.m.queryMisses[r].Inc()
	return r
}

// SetMissHeader names r in the response's MissHeader; MissNone sets nothing.
func SetMissHeader(ctx *fasthttp.RequestCtx, r MissReason) {
	if r != MissNone && r < NumMissReasons {
		ctx.Response.Header.Set(MissHeader, r.String())
	}
}

// missMetricName is the series of reason r.
func missMetricName(r MissReason) string {
	return `conductor_query_context_misses_total{reason="` + r.String() + `"}`
}

// WriteQueryMissMetrics writes conductor_query_context_misses_total{reason},
// one series per reason (zeros included), for a /metrics that does not
// write the Core's set (the Dynamo listener's). The Core's set holds the
// same series.
func (c *Core) WriteQueryMissMetrics(w io.Writer) {
	for r := MissNone + 1; r < NumMissReasons; r++ {
		metrics.WriteCounterUint64(w, missMetricName(r), c.m.queryMisses[r].Get())
	}
}
