package ingest

import "syscall"

// setThreadNice sets the calling OS thread's nice value and returns its
// thread id. On Linux, setpriority(PRIO_PROCESS, tid) changes that one thread
// (a thread is a task with its own priority); raising the value needs no
// privilege. The caller must hold the thread (runtime.LockOSThread) for as
// long as the priority should apply, and not let it run other goroutines
// afterwards (a locked goroutine that exits takes its thread with it).
func setThreadNice(nice int) (tid int, err error) {
	tid = syscall.Gettid()
	return tid, syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice)
}
