package ingest

import "syscall"

// setThreadNice lowers the calling OS thread's priority by delta nice levels
// (capped at 19) and returns its thread id and the nice value it now has. On
// Linux, setpriority(PRIO_PROCESS, tid) changes that one thread (a thread is a
// task with its own priority); raising the value needs no privilege. The
// starting point is the thread's own nice value, which it inherited from the
// process, so a conductor started under `nice -n 10` runs its listeners delta
// levels below its query threads, not at an absolute value that might be no
// lower at all. The caller must hold the thread (runtime.LockOSThread) for as
// long as the priority should apply, and not let it run other goroutines
// afterwards (a locked goroutine that exits takes its thread with it).
func setThreadNice(delta int) (tid, nice int, err error) {
	tid = syscall.Gettid()
	// The raw getpriority system call returns 20 - nice (1..40), which is
	// what syscall.Getpriority passes through.
	raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil {
		return tid, 0, err
	}
	nice = min(20-raw+delta, MaxListenerNice)
	return tid, nice, syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice)
}
