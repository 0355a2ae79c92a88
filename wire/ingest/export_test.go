package ingest

import (
	"sync"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// Test-only access to the listener's yield hook (Ingester.testCmdHook).

// HoldPauseUntilNextCommand makes every listener of g, after handling and
// acknowledging a Pause, wait (up to a second) until the controller has queued its
// next command, so that the listener picks that command up in the same pass as the
// Pause. With a Resume next, this is the interleaving in which a replay must not
// go on over reopened sockets without a DEALER. Call before Register.
func HoldPauseUntilNextCommand(g *Ingester) {
	g.testCmdHook = func(l *listener, op cmdOp) {
		if op != cmdPause {
			return
		}
		deadline := time.Now().Add(time.Second)
		for len(l.cmds) == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// StallAfterFirstBigLive makes the listener that handles g's first live message
// of at least 64 KiB pause for d after it, as if applying it were slow, so that
// the messages published meanwhile wait in libzmq. Call before Register.
func StallAfterFirstBigLive(g *Ingester, d time.Duration) {
	var once sync.Once
	g.testLiveHook = func(_ *listener, big bool) {
		if big {
			once.Do(func() { time.Sleep(d) })
		}
	}
}

// ListenerThread is the OS thread id the listener of k is locked to with
// IngestOptions.ListenerNice (0: not locked, or no such listener).
func ListenerThread(g *Ingester, k core.ServiceKey) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.listeners[normKey(k)]; l != nil {
		return int(l.tid.Load())
	}
	return 0
}

// TrimCHeap returns the C heap's free memory to the OS (malloc_trim).
func TrimCHeap() { trimCHeap() }
