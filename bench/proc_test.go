package bench

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestProcCPU cross-checks /proc/self/stat parsing with getrusage(2).
func TestProcCPU(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	got, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	want := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	// /proc counts in 10 ms ticks and the two reads are not simultaneous.
	if d := want - got; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("ProcCPU = %v, getrusage = %v", got, want)
	}
	if _, err := ProcCPU(-1); err == nil {
		t.Fatal("ProcCPU(-1) succeeded")
	}
}

// TestProcRSS: touching 64 MiB of freshly mapped memory (outside the Go
// heap, which may hold resident pages from earlier runs) raises the resident
// set by about that much.
func TestProcRSS(t *testing.T) {
	before, err := ProcRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	buf, err := syscall.Mmap(-1, 0, 64<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	after, err := ProcRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if grew := after - before; grew < 60<<20 || grew > 80<<20 {
		t.Fatalf("RSS grew by %d bytes after touching 64 MiB (%d → %d)", grew, before, after)
	}
	if _, err := ProcRSS(-1); err == nil {
		t.Fatal("ProcRSS(-1) succeeded")
	}
}

// TestProcThreads: the Threads line agrees with the entries of
// /proc/self/task, and counts at least the 8 threads that 8 goroutines
// locked to their threads and blocked hold, beside the test's own.
func TestProcThreads(t *testing.T) {
	tasks := func() int {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	release := make(chan struct{})
	var locked, done sync.WaitGroup
	for range 8 {
		locked.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked.Done()
			<-release
		}()
	}
	locked.Wait()
	// The eight threads cannot exit before release: both reads see them.
	got, err := ProcThreads(os.Getpid())
	n := tasks()
	close(release)
	done.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got < 9 {
		t.Fatalf("threads %d with 8 locked goroutines and the test's", got)
	}
	if d := got - n; d < -2 || d > 2 {
		t.Fatalf("Threads line %d, /proc/self/task %d entries", got, n)
	}
}

// TestCPUList: CPU lists as Linux writes them, against hand-expanded sets,
// and back.
func TestCPUList(t *testing.T) {
	f := func(in string, want []int, canon string) {
		t.Helper()
		got, err := ParseCPUList(in)
		if err != nil {
			t.Fatalf("ParseCPUList(%q): %v", in, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ParseCPUList(%q) = %v, want %v", in, got, want)
		}
		if s := FormatCPUList(got); s != canon {
			t.Fatalf("FormatCPUList(%v) = %q, want %q", got, s, canon)
		}
	}
	f("0", []int{0}, "0")
	f("0-3", []int{0, 1, 2, 3}, "0-3")
	f("0-1,4,6-7\n", []int{0, 1, 4, 6, 7}, "0-1,4,6-7")
	f("8,2,3", []int{2, 3, 8}, "2-3,8")
	f("1,1-2", []int{1, 2}, "1-2")
	for _, bad := range []string{"", "a", "3-1", "1,,2", "-1", "1-", "0-x"} {
		if got, err := ParseCPUList(bad); !errors.Is(err, ErrProc) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want ErrProc", bad, got, err)
		}
	}
	if s := FormatCPUList([]int{5, 3, 4, 3}); s != "3-5" {
		t.Fatalf("FormatCPUList unsorted = %q", s)
	}
	own, err := AllowedCPUs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The runtime counts the same affinity mask at start-up.
	if len(own) != runtime.NumCPU() {
		t.Fatalf("AllowedCPUs = %v, runtime.NumCPU = %d", own, runtime.NumCPU())
	}
}

// TestProcStat: the CPU lines of a /proc/stat page, summed by hand: busy is
// user + nice + system + irq + softirq + steal, in 10 ms ticks.
func TestProcStat(t *testing.T) {
	page := []byte("cpu  300 0 60 900 10 0 6 3 0 0\n" +
		"cpu0 100 5 20 300 4 1 2 3 0 0\n" +
		"cpu1 200 0 40 600 6 0 4 0 7 0\n" +
		"cpu12 1 1 1 1 1 1 1 1 0 0\n" +
		"intr 12345 0 0\nctxt 999\n")
	f := func(cpus []int, busy, total int) {
		t.Helper()
		got, err := parseProcStat(page, cpus)
		if err != nil {
			t.Fatalf("%v: %v", cpus, err)
		}
		want := CPUTimes{Busy: time.Duration(busy) * 10 * time.Millisecond, Total: time.Duration(total) * 10 * time.Millisecond}
		if got != want {
			t.Fatalf("%v: %+v, want %+v", cpus, got, want)
		}
	}
	f([]int{0}, 100+5+20+1+2+3, 100+5+20+1+2+3+300+4)
	f([]int{1}, 200+40+4, 200+40+4+600+6) // guest time (7) is in user already
	f([]int{0, 1}, 131+244, 435+850)
	f([]int{12}, 6, 8) // cpu12, not cpu1 twice
	for _, bad := range [][]int{{2}, {0, 3}} {
		if _, err := parseProcStat(page, bad); !errors.Is(err, ErrProc) {
			t.Errorf("CPUs %v: %v, want ErrProc", bad, err)
		}
	}
	if _, err := parseProcStat([]byte("cpu0 1 2 3\n"), []int{0}); !errors.Is(err, ErrProc) {
		t.Errorf("a short line: %v", err)
	}
	live, err := ProcStatCPUs(allowedCPUs(t))
	if err != nil {
		t.Fatal(err)
	}
	if live.Busy <= 0 || live.Total < live.Busy {
		t.Fatalf("this machine's CPUs: %+v", live)
	}
}
