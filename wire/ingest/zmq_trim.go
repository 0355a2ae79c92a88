package ingest

/*
#include <stdlib.h> // defines __GLIBC__ under glibc
#ifdef __GLIBC__
#include <malloc.h>
static void cd_trim(void) { malloc_trim(0); }
#else
static void cd_trim(void) {}
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
// elsewhere). It walks every arena: call it rarely.
func trimCHeap() { C.cd_trim() }

// trimDelays are when, after a listener exit that asks for one, the trims
// run: libzmq's reaper thread destroys closed sockets after zmq_close
// returns, thousands of them over seconds, so one early trim would leave
// what is freed after it.
var trimDelays = [...]time.Duration{500 * time.Millisecond, 2 * time.Second, 8 * time.Second}

// trimScheduled coalesces trims: process-wide, like the C heap.
var trimScheduled atomic.Bool

// scheduleTrim runs trimCHeap at each of trimDelays unless a schedule is
// already running.
func scheduleTrim() {
	if trimScheduled.Swap(true) {
		return
	}
	go func() {
		start := time.Now()
		for _, d := range trimDelays {
			time.Sleep(time.Until(start.Add(d)))
			trimCHeap()
		}
		trimScheduled.Store(false)
	}()
}
