package server

import (
	"sync"
	"sync/atomic"
	"time"
)

// bodyBudget is the Limiter's request-body budget; the rules are the
// Limiter's ("Request bodies"). Small bodies are charged with one CAS on
// inflight; the large class, whose bodies may wait and are ranked, is
// accounted under bodyMu.
type bodyBudget struct {
	bodyMax  int64 // MaxInflightBodyBytes
	largeMax int64 // MaxInflightBodyBytes - SmallBodyReserve

	// inflight is every body's reservation; never above bodyMax (it only
	// grows by CAS). It sits on a cache line of its own: every request with
	// a body writes it. peak is the highest it has been.
	_        [64]byte
	inflight atomic.Int64
	_        [56]byte
	peak     atomic.Int64
	// nWaiting counts large bodies waiting, so that a small body's release
	// looks for them only when there are some.
	nWaiting atomic.Int32

	// bodyMu guards the large class: largeHeld, waitHeld, waiters, bodySeq,
	// bodyClients, every client's largeHeld and largeRefs, and the wait
	// fields of every bodyHold. A mutex: ranking reads all waiters and their
	// clients' holdings together. Small bodies take it only to hand budget
	// back while large bodies wait.
	bodyMu      sync.Mutex
	largeHeld   int64       // large-class reservations
	waitHeld    int64       // the part of largeHeld held by waiting bodies
	waiters     []*bodyHold // unordered; ranked by scanning
	bodySeq     uint64      // start order of large bodies
	bodyClients int         // clients with largeRefs > 0
	anon        client      // the client of a request without a tracked connection
}

func (b *bodyBudget) setup(o *LimiterOptions) {
	b.bodyMax = o.MaxInflightBodyBytes
	b.largeMax = o.MaxInflightBodyBytes - max(o.SmallBodyReserve, 0)
}

// bodyVerdict is the answer to a request for body budget.
type bodyVerdict uint8

const (
	bodyGranted   bodyVerdict = iota
	bodyRefused               // spent, or waited out, or cut to let older bodies finish: 503
	bodyNeverFits             // the growth cannot fit in the large class even alone: 413
)

// bodyHold is what one request holds of the body budget (State.reserved),
// given back whole by releaseBody when the request ends.
type bodyHold struct {
	n     int64 // bytes reserved
	large bool  // charged to the large class
	cl    *client

	// Large class; guarded by Limiter.bodyMu.
	joined  bool   // counted in its client's largeRefs
	seq     uint64 // start order; lower started first
	want    int64  // bytes asked for while waiting
	waiting bool
	verdict bodyVerdict   // set when a wait is resolved
	wake    chan struct{} // signalled when dispatch resolves a wait; made once, kept across requests
}

// beginBody classifies the body of a request on tc (nil: not a tracked
// connection) with Content-Length declared (-1: chunked).
func (g *Limiter) beginBody(h *bodyHold, tc *trackedConn, declared int64) {
	h.large = declared < 0 || declared > g.o.SmallBodyBytes
	h.cl = &g.anon
	if tc != nil {
		h.cl = tc.cl
	}
}

// addInflight adds n to inflight unless that would pass the budget.
func (g *Limiter) addInflight(n int64) bool {
	for {
		cur := g.inflight.Load()
		if cur+n > g.bodyMax {
			return false
		}
		if g.inflight.CompareAndSwap(cur, cur+n) {
			for p := g.peak.Load(); cur+n > p; p = g.peak.Load() {
				if g.peak.CompareAndSwap(p, cur+n) {
					break
				}
			}
			return true
		}
	}
}

// takeBody reserves n more bytes for h before its buffer grows. A small body
// is granted or refused at once; a large one may wait (see Limiter), and
// waited is how long it did.
func (g *Limiter) takeBody(h *bodyHold, n int64) (v bodyVerdict, waited time.Duration) {
	if !h.large {
		if !g.addInflight(n) {
			g.bodyRefused.Inc()
			return bodyRefused, 0
		}
		h.n += n
		return bodyGranted, 0
	}
	g.bodyMu.Lock()
	if !h.joined {
		h.joined = true
		g.bodySeq++
		h.seq = g.bodySeq
		if h.cl.largeRefs == 0 {
			g.bodyClients++
		}
		h.cl.largeRefs++
	}
	if h.n+n > g.largeMax {
		g.bodyMu.Unlock()
		g.bodyRefused.Inc()
		return bodyNeverFits, 0
	}
	if !g.outrankedLocked(h) && g.tryLargeLocked(h, n) {
		g.bodyMu.Unlock()
		return bodyGranted, 0
	}
	if g.o.BodyWait < 0 {
		g.bodyMu.Unlock()
		g.bodyRefused.Inc()
		return bodyRefused, 0
	}
	if h.wake == nil {
		h.wake = make(chan struct{}, 1)
	}
	h.want, h.waiting = n, true
	g.waitHeld += h.n
	g.waiters = append(g.waiters, h)
	g.nWaiting.Add(1)
	g.dispatchLocked()
	g.bodyMu.Unlock()

	start := time.Now()
	t := time.NewTimer(g.o.BodyWait)
	select {
	case <-h.wake:
	case <-t.C:
	}
	t.Stop()
	g.bodyMu.Lock()
	if h.waiting { // waited out
		g.unwaitLocked(h)
		h.verdict = bodyRefused
		g.dispatchLocked()
	}
	select { // a resolution racing the timer
	case <-h.wake:
	default:
	}
	v = h.verdict
	g.bodyMu.Unlock()
	if v != bodyGranted {
		g.bodyRefused.Inc()
	}
	return v, time.Since(start)
}

// giveBody hands back n bytes of h (an old buffer, once copied).
func (g *Limiter) giveBody(h *bodyHold, n int64) {
	if !h.large {
		h.n -= n
		g.inflight.Add(-n)
		g.wakeWaiters()
		return
	}
	g.bodyMu.Lock()
	h.n -= n
	g.largeHeld -= n
	h.cl.largeHeld -= n
	g.inflight.Add(-n)
	g.dispatchLocked()
	g.bodyMu.Unlock()
}

// releaseBody hands back everything h holds; h is then ready for the next
// request. Safe on a hold that holds nothing.
func (g *Limiter) releaseBody(h *bodyHold) {
	switch {
	case h.joined:
		g.bodyMu.Lock()
		g.largeHeld -= h.n
		h.cl.largeHeld -= h.n
		g.inflight.Add(-h.n)
		if h.cl.largeRefs--; h.cl.largeRefs == 0 {
			g.bodyClients--
		}
		g.dispatchLocked()
		g.bodyMu.Unlock()
	case h.n != 0:
		g.inflight.Add(-h.n)
		g.wakeWaiters()
	}
	*h = bodyHold{wake: h.wake}
}

// wakeWaiters lets waiting large bodies use what a small body handed back
// (they may have been short of the total, not of the large class).
func (g *Limiter) wakeWaiters() {
	if g.nWaiting.Load() > 0 {
		g.bodyMu.Lock()
		g.dispatchLocked()
		g.bodyMu.Unlock()
	}
}

// tryLargeLocked reserves n more large-class bytes for h if they fit.
func (g *Limiter) tryLargeLocked(h *bodyHold, n int64) bool {
	if g.largeHeld+n > g.largeMax || !g.addInflight(n) {
		return false
	}
	g.largeHeld += n
	h.n += n
	h.cl.largeHeld += n
	return true
}

// underShareLocked reports whether c holds less than its share of the large
// class. It does not depend on what a body asks for, so that a client's own
// bodies keep their start order among themselves.
func (g *Limiter) underShareLocked(c *client) bool {
	return c.largeHeld < g.largeMax/int64(max(g.bodyClients, 1))
}

// ranksBefore is the waiters' order: within their client's share first,
// then the body that started first.
func ranksBefore(aUnder bool, aSeq uint64, bUnder bool, bSeq uint64) bool {
	if aUnder != bUnder {
		return aUnder
	}
	return aSeq < bSeq
}

// outrankedLocked reports whether a waiter ranks before h.
func (g *Limiter) outrankedLocked(h *bodyHold) bool {
	hu := g.underShareLocked(h.cl)
	for _, w := range g.waiters {
		if ranksBefore(g.underShareLocked(w.cl), w.seq, hu, h.seq) {
			return true
		}
	}
	return false
}

// dispatchLocked grants waiters in rank order while the first fits. When it
// does not, and every large-class byte is held by waiting bodies (none can
// finish and hand budget back), it refuses the last-ranked waiter that holds
// any; that one hands its bytes back as it returns, and dispatch runs again.
func (g *Limiter) dispatchLocked() {
	for len(g.waiters) > 0 {
		first := 0
		fu := g.underShareLocked(g.waiters[0].cl)
		for i, w := range g.waiters[1:] {
			if u := g.underShareLocked(w.cl); ranksBefore(u, w.seq, fu, g.waiters[first].seq) {
				first, fu = i+1, u
			}
		}
		w := g.waiters[first]
		held := w.n
		if g.tryLargeLocked(w, w.want) {
			g.resolveLocked(first, held, bodyGranted)
			continue
		}
		if g.largeHeld+w.want <= g.largeMax || g.waitHeld != g.largeHeld {
			return // budget comes back as bodies finish
		}
		last, lu := -1, false
		for i, v := range g.waiters {
			if i == first || v.n == 0 {
				continue
			}
			if u := g.underShareLocked(v.cl); last < 0 || ranksBefore(lu, g.waiters[last].seq, u, v.seq) {
				last, lu = i, u
			}
		}
		if last >= 0 {
			g.resolveLocked(last, g.waiters[last].n, bodyRefused)
		}
		return
	}
}

// resolveLocked ends the wait of waiters[i], which held held bytes while it
// waited, with verdict v.
func (g *Limiter) resolveLocked(i int, held int64, v bodyVerdict) {
	w := g.waiters[i]
	g.removeWaiterLocked(i, held)
	w.verdict = v
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// unwaitLocked removes h from the waiters.
func (g *Limiter) unwaitLocked(h *bodyHold) {
	for i, w := range g.waiters {
		if w == h {
			g.removeWaiterLocked(i, h.n)
			return
		}
	}
}

func (g *Limiter) removeWaiterLocked(i int, held int64) {
	w := g.waiters[i]
	last := len(g.waiters) - 1
	g.waiters[i] = g.waiters[last]
	g.waiters[last] = nil
	g.waiters = g.waiters[:last]
	g.waitHeld -= held
	w.waiting = false
	g.nWaiting.Add(-1)
}
