package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the separate-process harnesses read about a process from /proc
// (Linux): its CPU time, resident set and thread count, and the CPUs a
// process may run on. Every server figure of BENCHMARKS.md's separate-process
// tables comes through these.

// ErrProc is returned when a /proc file does not hold what Linux writes there.
var ErrProc = errors.New("bench: malformed /proc file")

// userHZ is USER_HZ, the unit of /proc/<pid>/stat times. Linux fixes it at
// 100 on every architecture Go supports (sysconf(_SC_CLK_TCK)).
const userHZ = 100

// ProcCPU returns the CPU time (user + system, every thread) process pid has
// used, from /proc/<pid>/stat (clock ticks of 10 ms: compare phases of
// seconds, not single requests).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is parenthesised and may hold spaces: split
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, ErrProc)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, ErrProc)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, ErrProc)
	}
	return time.Duration(u+s) * time.Second / userHZ, nil
}

// ProcRSS returns process pid's resident set in bytes (/proc/<pid>/statm).
func ProcRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/statm: %w", pid, ErrProc)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/statm: %w", pid, ErrProc)
	}
	return pages * int64(os.Getpagesize()), nil
}

// ProcThreads returns the number of threads of process pid (the Threads
// line of /proc/<pid>/status).
func ProcThreads(pid int) (int, error) {
	v, err := procStatus(pid, "Threads")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/status Threads %q: %w", pid, v, ErrProc)
	}
	return n, nil
}

// CPUTimes is what some CPUs did, summed, from /proc/stat: Busy is user,
// nice, system, irq, softirq and steal time (steal: the hypervisor ran
// another guest), Total that and idle and iowait.
type CPUTimes struct {
	Busy, Total time.Duration
}

// ProcStatCPUs reads what cpus have done since boot (/proc/stat).
func ProcStatCPUs(cpus []int) (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	return parseProcStat(b, cpus)
}

// parseProcStat sums the "cpuN" lines of a /proc/stat page for cpus; each
// must be there.
func parseProcStat(page []byte, cpus []int) (CPUTimes, error) {
	var t CPUTimes
	found := 0
	for line := range strings.Lines(string(page)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || !slices.Contains(cpus, n) {
			continue
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]:
		// guest time is counted in user already.
		if len(f) < 9 {
			return CPUTimes{}, fmt.Errorf("/proc/stat %s: %w", f[0], ErrProc)
		}
		var v [8]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[1+i], 10, 64); err != nil {
				return CPUTimes{}, fmt.Errorf("/proc/stat %s: %w", f[0], ErrProc)
			}
		}
		busy := v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		t.Busy += time.Duration(busy) * time.Second / userHZ
		t.Total += time.Duration(busy+v[3]+v[4]) * time.Second / userHZ
		found++
	}
	if found != len(slices.Compact(slices.Sorted(slices.Values(cpus)))) {
		return CPUTimes{}, fmt.Errorf("/proc/stat lacks some of CPUs %s: %w", FormatCPUList(cpus), ErrProc)
	}
	return t, nil
}

// AllowedCPUs returns the CPUs process pid may run on, ascending (the
// Cpus_allowed_list line of /proc/<pid>/status: its affinity mask, which
// taskset sets and a container's cpuset bounds).
func AllowedCPUs(pid int) ([]int, error) {
	v, err := procStatus(pid, "Cpus_allowed_list")
	if err != nil {
		return nil, err
	}
	cpus, err := ParseCPUList(v)
	if err != nil {
		return nil, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return cpus, nil
}

// procStatus returns the value of the line "key:" of /proc/<pid>/status.
func procStatus(pid int, key string) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("/proc/%d/status has no %s: %w", pid, key, ErrProc)
}

// ParseCPUList reads a CPU list as Linux and taskset write it ("0-3,8,10-11")
// into ascending, distinct CPU numbers.
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("CPU list %q: bad item %q: %w", s, part, ErrProc)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// FormatCPUList writes CPU numbers as a CPU list, runs of consecutive
// numbers as ranges ("0-3,8"); it sorts a copy first.
func FormatCPUList(cpus []int) string {
	cpus = slices.Compact(slices.Sorted(slices.Values(cpus)))
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}
