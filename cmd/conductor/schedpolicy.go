package main

import (
	"flag"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// Scheduling policy for ingest against queries (docs/performance.md, "Query
// latency under ingest, memory and GC"). Each registration's listener receives,
// decodes and applies its stream on one goroutine; flat out, it keeps a CPU
// busy. The Go scheduler preempts a running goroutine only every ~10 ms, so on
// a small machine a query handler that becomes ready waits for the kernel to
// give its thread a CPU. --ingest-nice runs every listener on a thread of its
// own, that many nice levels below the process's priority, so the kernel
// prefers the query threads, and doubles GOMAXPROCS (unless $GOMAXPROCS is set): a listener thread the
// kernel has descheduled still holds its P, and with one spare P per CPU the
// query handlers that become ready find an idle P and a thread of their own
// at once, so the kernel, which knows the priorities, arbitrates between them
// and ingest instead of the Go run queue (one spare P in all leaves queries
// queued behind each other).

const defaultIngestNice = 0

func addSchedFlags(fs *flag.FlagSet, nice *int) {
	fs.IntVar(nice, "ingest-nice", defaultIngestNice, fmt.Sprintf(
		"nice levels the ingest threads run below the rest of the process (1..%d, capped at nice 19, Linux; 0 = same priority as queries); >0 also doubles GOMAXPROCS unless $GOMAXPROCS is set",
		ingest.MaxListenerNice))
}

func validateIngestNice(n int) error {
	if n < 0 || n > ingest.MaxListenerNice {
		return fmt.Errorf("--ingest-nice=%d: want 0..%d", n, ingest.MaxListenerNice)
	}
	return nil
}

// startProcs is the runtime's own GOMAXPROCS (from the CPUs or cgroup quota
// this process may use, or $GOMAXPROCS), read before any change so that
// applying the policy twice in one process (tests) does not compound.
var startProcs = runtime.GOMAXPROCS(0)

// applySchedPolicy sets GOMAXPROCS for --ingest-nice and logs the result.
// Setting it stops the runtime from following later changes of the CPU quota.
func applySchedPolicy(nice int, env func(string) (string, bool), log *slog.Logger) {
	procs := startProcs
	if _, set := env("GOMAXPROCS"); nice > 0 && !set {
		procs *= 2
	}
	if procs != runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(procs)
	}
	log.Info("scheduling policy", "ingest_nice", nice, "gomaxprocs", procs, "cpus", runtime.NumCPU())
}
