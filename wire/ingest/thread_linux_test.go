package ingest_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// threadNice reads a thread's nice value from /proc/self/task/TID/stat (field
// 19, counted after the parenthesised command name as the kernel's
// proc_pid_stat prints it); ok is false once the thread is gone.
func threadNice(t *testing.T, tid int) (nice int, ok bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if os.IsNotExist(err) || errors.Is(err, syscall.ESRCH) {
		// Gone, or exiting while we read it.
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	// f[0] is field 3 (state); nice is field 19.
	n, err := strconv.Atoi(string(f[19-3]))
	if err != nil {
		t.Fatalf("stat %q: %v", b, err)
	}
	return n, true
}

// threadNices maps every thread of the process to its nice value.
func threadNices(t *testing.T) map[int]int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int]int, len(tasks))
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		if n, ok := threadNice(t, tid); ok {
			out[tid] = n
		}
	}
	return out
}

// TestListenerNice: with ListenerNice the listener runs on a thread of its
// own ListenerNice levels above the process's nice value (capped at 19) while
// it ingests (the events still arrive), every other thread keeps its priority
// (libzmq's I/O threads included, which inherit their creator's; new threads
// start at the process's value), and the thread stops running Go code with
// the listener instead of going back to the runtime's pool at the lowered
// priority. The process's own nice value is whatever the test runs under
// (`nice -n 10 make test` included).
func TestListenerNice(t *testing.T) {
	before := threadNices(t)
	// The process's nice value, read on this goroutine's own thread: the
	// main thread is no witness, since a listener of an earlier run may have
	// ended on it and left it parked at its lowered priority.
	runtime.LockOSThread()
	base, ok := threadNice(t, syscall.Gettid())
	runtime.UnlockOSThread()
	if !ok {
		t.Fatal("this thread's nice value unreadable")
	}
	want := min(base+7, ingest.MaxListenerNice)
	opts := fastOpts(t)
	opts.ListenerNice = 7
	h := newHarness(t, opts)
	pub := newPublisher(t, bench.PublisherOptions{})
	prof := vllmProfile(t)
	k := h.register(registration("nice", core.PublisherVLLM, pub, prof))
	toks := tokens(100, 4*testBS)
	h.prime(k, pub, emptyVLLM())
	hs := chain(t, prof, toks)
	publish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1, 0,
		bench.EngineStored{Hashes: hs, Tokens: toks, BlockSize: testBS, Medium: "GPU"}))
	h.waitRow("nice", toks, full(4))

	tid := ingest.ListenerThread(h.g, k)
	if tid == 0 {
		t.Fatal("listener not locked to a thread")
	}
	if n, ok := threadNice(t, tid); !ok || n != want {
		t.Fatalf("listener thread %d: nice %d (exists %v), want %d (process at %d, +7)", tid, n, ok, want, base)
	}
	for other, n := range threadNices(t) {
		keep, seen := before[other]
		if !seen {
			keep = base
		}
		if other != tid && n != keep {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/comm", other))
			t.Errorf("thread %d (%s): nice %d, want %d (only the listener's thread changes)", other, bytes.TrimSpace(comm), n, keep)
		}
	}
	if _, err := h.g.Unregister(k); err != nil {
		t.Fatal(err)
	}
	if tid == os.Getpid() {
		// The listener ran on the main thread, which the runtime parks for
		// good instead of terminating (runtime.mexit): it runs no more Go code.
		return
	}
	waitFor(t, "the listener's thread to exit", func() bool {
		_, ok := threadNice(t, tid)
		return !ok
	})
}

// TestListenerNiceOff: by default the listener is not locked to a thread.
func TestListenerNiceOff(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	k := h.register(registration("plain", core.PublisherVLLM, pub, vllmProfile(t)))
	h.prime(k, pub, emptyVLLM())
	if tid := ingest.ListenerThread(h.g, k); tid != 0 {
		t.Fatalf("listener locked to thread %d without ListenerNice", tid)
	}
}
