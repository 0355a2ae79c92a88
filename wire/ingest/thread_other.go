//go:build !linux

package ingest

import "errors"

// setThreadNice is Linux-only (thread_linux.go): elsewhere setpriority applies
// to the whole process, so the listener keeps the process's priority.
func setThreadNice(int) (tid, nice int, err error) {
	return 0, 0, errors.New("per-thread priority is only supported on Linux")
}
