package server

import (
	"strconv"
	"strings"
)

// Internals the external tests (package server_test: the limits through
// a surface) look at.

// BodyChunk is a body buffer's first size.
const BodyChunk = bodyChunk

// RetryableAccept is retryableAccept.
var RetryableAccept = retryableAccept

// NewTestLimiter is NewLimiterWithOptions for tests, logging nowhere.
var NewTestLimiter = newTestLimiter

// Peak is the most body bytes held in flight at once.
func (g *Limiter) Peak() int64 { return g.peak.Load() }

// Counter is the value of one of the Limiter's counters.
func (g *Limiter) Counter(name string) int {
	for _, l := range strings.Split(string(g.MetricsText()), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// MetricsText is the Limiter's metrics in Prometheus text.
func (g *Limiter) MetricsText() []byte {
	var b strings.Builder
	g.set.WritePrometheus(&b)
	return []byte(b.String())
}

// TestPolicy is testPolicy: spec parsed, DNS answered from dns only, the
// ports 13333 and 50052 denied as conductor's own.
var TestPolicy = testPolicy

// DroppedBytes is what the Limiter counted of dropped request buffers since
// its last release nudge.
func (g *Limiter) DroppedBytes() int64 { return g.droppedBytes.Load() }

// BigKept is how many large body buffers the Core keeps, and their bytes.
func (c *Core) BigKept() (n, bytes int) {
	c.big.mu.Lock()
	defer c.big.mu.Unlock()
	return len(c.big.bufs), c.big.bytes
}

// ReadingConns is how many of g's connections have a request in progress
// whose handler has not run yet (connReading).
func (g *Limiter) ReadingConns() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, cl := range g.clients {
		for c := cl.head; c != nil; c = c.next {
			if c.state.Load() == connReading {
				n++
			}
		}
	}
	return n
}
