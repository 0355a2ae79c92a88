package ingest

/*
#include <stdlib.h> // defines __GLIBC__ under glibc
#ifdef __GLIBC__
#include <malloc.h>
static int cd_trim(void) { return malloc_trim(0); }
#else
static int cd_trim(void) { return 0; }
#endif
*/
import "C"

import (
	"sync/atomic"
	"time"
)

// trimEvery is how many listener exits make Unregister schedule the return of
// the C heap's free memory to the OS (malloc_trim; the last listener's exit
// also does). libzmq allocates a socket's state in the thread that creates
// it, so thousands of listeners leave freed memory spread over glibc's
// per-thread arenas, which glibc does not return by itself
// (TestZMQThreadsBounded).
const trimEvery = 256

// trimCHeap returns free C heap memory to the OS (glibc only; a no-op
// elsewhere) and reports whether it released any. It walks every arena: call
// it rarely.
func trimCHeap() bool { return C.cd_trim() != 0 }

// trimDelays are when, after the latest listener exit that asks for one,
// the trims run: libzmq's reaper thread destroys closed sockets after
// zmq_close returns, thousands of them over seconds, so one early trim would
// leave what is freed after it. On a busy machine the reaper takes longer:
// after the last delay a trim runs every trimRepeat for as long as the one
// before released memory, until trimFor after the request.
var trimDelays = [...]time.Duration{500 * time.Millisecond, 2 * time.Second, 8 * time.Second}

const (
	trimRepeat = 8 * time.Second
	trimFor    = 2 * time.Minute
)

// trimAsked counts the requests; trimRunning is whether a goroutine runs
// trims. Both are process-wide, like the C heap.
var (
	trimAsked   atomic.Uint64
	trimRunning atomic.Bool
)

// scheduleTrim runs trimCHeap at each of trimDelays after now, and on while
// it releases memory (see trimDelays). A request while trims run restarts
// their schedule from it, once the current round ends.
func scheduleTrim() {
	trimAsked.Add(1)
	if trimRunning.Swap(true) {
		return
	}
	go func() {
		for {
			seen := trimAsked.Load()
			trimRound()
			if trimAsked.Load() != seen {
				continue // asked again meanwhile
			}
			trimRunning.Store(false)
			// A request between the check and the Store found trims
			// running and left: take it unless another goroutine did.
			if trimAsked.Load() == seen || trimRunning.Swap(true) {
				return
			}
		}
	}()
}

// trimRound is one schedule of trims (trimDelays), from now.
func trimRound() {
	start := time.Now()
	released := false
	for _, d := range trimDelays {
		time.Sleep(time.Until(start.Add(d)))
		released = trimCHeap()
	}
	for released && time.Since(start)+trimRepeat <= trimFor {
		time.Sleep(trimRepeat)
		released = trimCHeap()
	}
}
