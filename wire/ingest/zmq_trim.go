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
// also does). libzmq
// allocates a socket's state in the thread that creates it, so a thousand
// listeners leave freed memory spread over glibc's per-thread arenas, which
// glibc does not return by itself (TestZMQUnregisterReleasesThreads).
const trimEvery = 256

// trimCHeap returns free C heap memory to the OS (glibc only; a no-op
// elsewhere). It walks every arena: call it rarely.
func trimCHeap() { C.cd_trim() }

// trimDelay lets the exiting listeners' threads end (they free their
// thread-local caches on exit, after Unregister returned) before the trim.
const trimDelay = 500 * time.Millisecond

// trimScheduled coalesces trims: process-wide, like the C heap.
var trimScheduled atomic.Bool

// scheduleTrim runs trimCHeap after trimDelay unless one is already scheduled.
func scheduleTrim() {
	if trimScheduled.Swap(true) {
		return
	}
	time.AfterFunc(trimDelay, func() {
		trimScheduled.Store(false)
		trimCHeap()
	})
}
