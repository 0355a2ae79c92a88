package wire_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// threadNice reads a thread's nice value from /proc/self/task/TID/stat (field
// 19, counted after the parenthesised command name as the kernel's
// proc_pid_stat prints it); ok is false once the thread is gone.
func threadNice(t *testing.T, tid int) (nice int, ok bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if os.IsNotExist(err) {
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

// TestListenerNice: with ListenerNice the listener runs on a thread of its
// own at that nice value while it ingests (the events still arrive), the
// rest of the process keeps its priority, and the thread ends with the
// listener instead of going back to the runtime's pool at the lowered
// priority.
func TestListenerNice(t *testing.T) {
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

	tid := wire.ListenerThread(h.g, k)
	if tid == 0 {
		t.Fatal("listener not locked to a thread")
	}
	if n, ok := threadNice(t, tid); !ok || n != 7 {
		t.Fatalf("listener thread %d: nice %d (exists %v), want 7", tid, n, ok)
	}
	if n, ok := threadNice(t, os.Getpid()); !ok || n != 0 {
		t.Fatalf("main thread: nice %d, want 0 (only the listener's thread changes)", n)
	}
	if _, err := h.g.Unregister(k); err != nil {
		t.Fatal(err)
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
	if tid := wire.ListenerThread(h.g, k); tid != 0 {
		t.Fatalf("listener locked to thread %d without ListenerNice", tid)
	}
}
