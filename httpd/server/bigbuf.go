package server

import "sync"

// bigBufs keeps request-body buffers larger than retainBytes between
// requests, so that a steady stream of large queries (a million tokens is a
// 4 MiB msgpack body) reads each body into a buffer an earlier one left,
// instead of allocating it and dropping it: at a large index the
// collections those drops start (and the Limiter's scavenge, see dropped)
// would cost more than the queries. It keeps buffers no larger than one, the
// largest msgpack query body the token limit allows (newBigBufs), and four
// of those in all: the process's only request memory that outlives a
// request. A buffer that does not fit is dropped as before.
type bigBufs struct {
	one, total int // the largest buffer kept; the bound on all kept

	mu    sync.Mutex
	bufs  [][]byte
	bytes int // total capacity kept
}

// bigBufSlack is room beyond a query's token_ids bin for the rest of its
// msgpack map (model, LoRA, salt, tenant, instance).
const bigBufSlack = 64 << 10

// newBigBufs sizes the keep for queries of at most maxTokens tokens.
func newBigBufs(maxTokens int) bigBufs {
	one := 4*maxTokens + bigBufSlack
	return bigBufs{one: one, total: 4 * one}
}

// take returns a kept buffer of capacity at least n (the smallest such),
// emptied, or nil when none is.
func (p *bigBufs) take(n int64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i, b := range p.bufs {
		if int64(cap(b)) >= n && (best < 0 || cap(b) < cap(p.bufs[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	b := p.bufs[best]
	last := len(p.bufs) - 1
	p.bufs[best], p.bufs[last] = p.bufs[last], nil
	p.bufs = p.bufs[:last]
	p.bytes -= cap(b)
	return b[:0]
}

// put keeps b and reports true when it is no larger than one and fits
// under total; a buffer that does not fit replaces smaller kept ones when
// that makes room (the largest bodies are the costly ones to allocate
// again).
func (p *bigBufs) put(b []byte) bool {
	if cap(b) > p.one {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.bytes+cap(b) > p.total {
		small := -1
		for i, k := range p.bufs {
			if cap(k) < cap(b) && (small < 0 || cap(k) < cap(p.bufs[small])) {
				small = i
			}
		}
		if small < 0 {
			return false
		}
		p.bytes -= cap(p.bufs[small])
		last := len(p.bufs) - 1
		p.bufs[small], p.bufs[last] = p.bufs[last], nil
		p.bufs = p.bufs[:last]
	}
	p.bufs = append(p.bufs, b[:0])
	p.bytes += cap(b)
	return true
}
