package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Placement for the harnesses that measure per server core (bench-streams,
// bench-cores): the server pinned with taskset to CPUs of its own, this
// process (flow control, the query client) and the publisher processes to
// the others, so that the server's cores serve the server alone and the
// harness's load cannot take them.

// errCores is the error of a layout this process has too few CPUs for.
var errCores = errors.New("not enough free cores")

// cpuLayout places one measurement.
type cpuLayout struct {
	server, client []int // CPU numbers
}

func (l cpuLayout) String() string {
	return fmt.Sprintf("server on %s, publishers and query client on %s", cpuNames(l.server), cpuNames(l.client))
}

// cpuNames writes "CPU 0" or "CPUs 1-3" (n of them).
func cpuNames(cpus []int) string {
	if len(cpus) == 1 {
		return "CPU " + FormatCPUList(cpus)
	}
	return fmt.Sprintf("%d CPUs (%s)", len(cpus), FormatCPUList(cpus))
}

// layoutFor gives the server the first n of allowed and the harness the
// rest, which must be at least minClient CPUs.
func layoutFor(allowed []int, n, minClient int) (cpuLayout, error) {
	if n < 1 || len(allowed) < n+minClient {
		return cpuLayout{}, fmt.Errorf("%w: %d server cores need %d free cores (%d for the server, at least %d for the publishers and the query client); this process may use %d (%s)",
			errCores, n, n+minClient, n, minClient, len(allowed), FormatCPUList(allowed))
	}
	return cpuLayout{server: slices.Clone(allowed[:n]), client: slices.Clone(allowed[n:])}, nil
}

// allowedCPUs is the CPUs this process may run on.
func allowedCPUs(tb testing.TB) []int {
	tb.Helper()
	cpus, err := AllowedCPUs(os.Getpid())
	if err != nil {
		tb.Fatal(err)
	}
	return cpus
}

// pinnedCommand is exec.Command(bin, args...) run by taskset on cpus (nil:
// not pinned). taskset execs bin, so the command's pid is bin's.
func pinnedCommand(cpus []int, bin string, args ...string) *exec.Cmd {
	if len(cpus) == 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command("taskset", append([]string{"-c", FormatCPUList(cpus), bin}, args...)...)
}

// pinSelf pins every thread of this process to cpus (taskset -a; threads
// started later inherit it from the thread that starts them) and sets
// GOMAXPROCS to their number, until cleanup puts back the CPUs and the
// GOMAXPROCS it had. No CPUs: it leaves the process as it is.
func pinSelf(tb testing.TB, cpus []int) {
	tb.Helper()
	if len(cpus) == 0 {
		return
	}
	orig := allowedCPUs(tb)
	if err := setAffinity(cpus); err != nil {
		tb.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(len(cpus))
	tb.Cleanup(func() {
		if err := setAffinity(orig); err != nil {
			tb.Error(err)
		}
		runtime.GOMAXPROCS(procs)
	})
}

// setAffinity sets every thread of this process to cpus and checks each
// one; a thread that a thread not yet moved started while taskset ran keeps
// the old set, so it tries again (three times at most).
func setAffinity(cpus []int) error {
	want := FormatCPUList(cpus)
	pid := strconv.Itoa(os.Getpid())
	for range 3 {
		if out, err := exec.Command("taskset", "-a", "-p", "-c", want, pid).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset -a -p -c %s %s: %v: %s", want, pid, err, out)
		}
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		stray := false
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			// /proc/<tid>/status reads the thread itself; a thread that
			// exited in between is gone.
			got, err := AllowedCPUs(tid)
			if err == nil && !slices.Equal(got, cpus) {
				stray = true
			}
		}
		if !stray {
			return nil
		}
	}
	return fmt.Errorf("taskset: some threads of %s stay off CPUs %s", pid, want)
}

// cpuWatch is a reading of the server's CPUs and the server's CPU time, to
// tell later how much of those CPUs other processes took: taskset keeps the
// server on its CPUs, not others off them.
type cpuWatch struct {
	cpus   []int
	stat   CPUTimes
	server time.Duration
}

// watchCPUs reads cpus (the server's) and s's CPU time now.
func watchCPUs(tb testing.TB, s *serverProc, cpus []int) cpuWatch {
	tb.Helper()
	w := cpuWatch{cpus: cpus}
	if len(cpus) == 0 {
		return w
	}
	var err error
	if w.stat, err = ProcStatCPUs(cpus); err != nil {
		tb.Fatal(err)
	}
	w.server = s.cpu(tb)
	return w
}

// others is the share of the server's CPUs' time since w that went to
// anything but s (other processes, interrupts, a hypervisor's other guests);
// NaN without CPUs to watch (the server not pinned).
func (w cpuWatch) others(tb testing.TB, s *serverProc) float64 {
	tb.Helper()
	if len(w.cpus) == 0 {
		return math.NaN()
	}
	stat, err := ProcStatCPUs(w.cpus)
	if err != nil {
		tb.Fatal(err)
	}
	other := stat.Busy - w.stat.Busy - (s.cpu(tb) - w.server)
	return max(0, other.Seconds()) / max(stat.Total-w.stat.Total, time.Millisecond).Seconds()
}

// TestLayoutFor: the server takes the first CPUs, the harness the rest, and
// a layout the CPUs cannot hold names what it needs.
func TestLayoutFor(t *testing.T) {
	l, err := layoutFor([]int{0, 1, 2, 3, 6, 7}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.server, []int{0, 1}) || !slices.Equal(l.client, []int{2, 3, 6, 7}) {
		t.Fatalf("layout %+v", l)
	}
	if s := l.String(); s != "server on 2 CPUs (0-1), publishers and query client on 4 CPUs (2-3,6-7)" {
		t.Fatalf("String() = %q", s)
	}
	_, err = layoutFor([]int{0, 1}, 2, 2)
	if !errors.Is(err, errCores) {
		t.Fatalf("2 server cores on 2 CPUs: %v", err)
	}
	want := "not enough free cores: 2 server cores need 4 free cores (2 for the server, at least 2 for the publishers and the query client); this process may use 2 (0-1)"
	if err.Error() != want {
		t.Fatalf("error %q\nwant  %q", err, want)
	}
	if _, err := layoutFor([]int{0, 1}, 0, 1); !errors.Is(err, errCores) {
		t.Fatalf("0 server cores: %v", err)
	}
}

// TestPinSelf: once pinned, every thread of this process, and a thread
// started after, runs on the one CPU given; cleanup gives back the CPUs it
// had. It needs a CPU to pin to and one to give back: the first of those it
// may use, whatever their number.
func TestPinSelf(t *testing.T) {
	orig, procs := allowedCPUs(t), runtime.GOMAXPROCS(0)
	t.Run("pinned", func(t *testing.T) {
		pinSelf(t, orig[:1])
		if got := runtime.GOMAXPROCS(0); got != 1 {
			t.Fatalf("GOMAXPROCS %d after pinning to one CPU", got)
		}
		started := make(chan []int)
		go func() {
			runtime.LockOSThread() // a thread of its own, maybe a new one
			defer runtime.UnlockOSThread()
			cpus, err := AllowedCPUs(syscall.Gettid())
			if err != nil {
				t.Error(err)
			}
			started <- cpus
		}()
		if got := <-started; !slices.Equal(got, orig[:1]) {
			t.Fatalf("a thread after pinning runs on %v, want %v", got, orig[:1])
		}
		cmd := pinnedCommand(orig[:1], "sh", "-c", "grep Cpus_allowed_list /proc/self/status")
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("Cpus_allowed_list:\t%s\n", FormatCPUList(orig[:1])); string(out) != want {
			t.Fatalf("pinned command: %q, want %q", out, want)
		}
	})
	if got := allowedCPUs(t); !slices.Equal(got, orig) {
		t.Fatalf("after cleanup on %v, want %v", got, orig)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Fatalf("GOMAXPROCS %d after cleanup, %d before", got, procs)
	}
}
