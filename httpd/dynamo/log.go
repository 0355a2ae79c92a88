package dynamo

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// accessLog writes one JSON line per request of the Dynamo listener:
//
//	{"ts":"2026-11-30T19:00:00.123Z","method":"POST","path":"/query","model":"m",
//	 "status":200,"duration_ms":0.042,"trace_id":"abc"}
//
// ts is RFC 3339 with milliseconds, UTC unless local time was asked for;
// model and trace_id are null when the request named none. reopen closes and
// reopens the path (after an external rotation renamed the file), so later
// lines go to a new file at the configured path.
type accessLog struct {
	path string
	loc  *time.Location // time.UTC, or time.Local with --access-log-local-time

	// mu serialises writes and reopen: each line is one write(2).
	mu  sync.Mutex
	f   *os.File
	buf []byte
}

func openAccessLog(path string, loc *time.Location) (*accessLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("access log: %w: %w", err, server.ErrInvalidOptions)
	}
	return &accessLog{path: path, loc: loc, f: f}, nil
}

func (a *accessLog) reopen() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	a.mu.Lock()
	old := a.f
	a.f = f
	a.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

func (a *accessLog) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		_ = a.f.Close()
		a.f = nil
	}
}

func appendNullableString(dst []byte, s []byte) []byte {
	if len(s) == 0 {
		return append(dst, "null"...)
	}
	return dump.AppendJSONString(dst, server.B2S(s))
}

func (a *accessLog) write(start time.Time, method, path, model []byte, status int, d time.Duration, trace []byte) {
	ts := start.In(a.loc)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return
	}
	b := a.buf[:0]
	b = append(b, `{"ts":"`...)
	b = ts.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","method":`...)
	b = dump.AppendJSONString(b, server.B2S(method))
	b = append(b, `,"path":`...)
	b = dump.AppendJSONString(b, server.B2S(path))
	b = append(b, `,"model":`...)
	b = appendNullableString(b, model)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(d.Nanoseconds())/1e6, 'f', 3, 64)
	b = append(b, `,"trace_id":`...)
	b = appendNullableString(b, trace)
	b = append(b, "}\n"...)
	_, _ = a.f.Write(b)
	if cap(b) <= 1<<16 {
		a.buf = b
	}
}
