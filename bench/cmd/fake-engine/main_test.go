package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"
)

// TestPayloads: one BlockStored event per run of blocks on one medium (the
// last medium repeats), parents chained across events, complete blocks only.
func TestPayloads(t *testing.T) {
	o, err := parse([]string{"-tokens", "70", "-block-size", "16", "-media", "GPU,GPU,CPU"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	batches, blocks, err := payloads(o)
	if err != nil || blocks != 4 || len(batches) != 2 {
		t.Fatalf("blocks %d batches %d err %v", blocks, len(batches), err)
	}
	var prevLast any
	for i, b := range batches {
		v, rest, err := msgp.ReadIntfBytes(b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("batch %d: %v", i, err)
		}
		batch := v.([]any) // [ts, events, dp]
		ev := batch[1].([]any)[0].([]any)
		hashes, parent, tokens, medium := ev[1].([]any), ev[2], ev[3].([]any), ev[6]
		if ev[0] != "BlockStored" || len(hashes) != 2 || len(tokens) != 32 || ev[4] != int64(16) {
			t.Fatalf("event %d: %v", i, ev)
		}
		if want := []string{"GPU", "CPU"}[i]; medium != want {
			t.Fatalf("event %d medium %v, want %s", i, medium, want)
		}
		if tokens[0] != int64(32*i) {
			t.Fatalf("event %d first token %v", i, tokens[0])
		}
		if parent != prevLast {
			t.Fatalf("event %d parent %v, want %v", i, parent, prevLast)
		}
		prevLast = hashes[1]
	}
}

// TestRunPrintsEndpointsAndStops: the first stdout line names the bound
// endpoints; a signal stops the command with status 0; bad flags are 2.
func TestRunPrintsEndpointsAndStops(t *testing.T) {
	out := &firstLine{seen: make(chan struct{})}
	var errb bytes.Buffer
	stop := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() { done <- run([]string{"-repeat", "1", "-interval", "10ms"}, out, &errb, stop) }()
	select {
	case <-out.seen:
	case code := <-done:
		t.Fatalf("exit %d before printing its endpoints: %s", code, errb.String())
	case <-time.After(time.Minute):
		t.Fatal("no endpoint line")
	}
	stop <- syscall.SIGTERM
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not stop")
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &line); err != nil {
		t.Fatalf("stdout %q: %v", out.String(), err)
	}
	if ep, _ := line["endpoint"].(string); !strings.HasPrefix(ep, "tcp://127.0.0.1:") || line["blocks"] != float64(4) {
		t.Fatalf("line %v", line)
	}
	if code := run([]string{"-block-size", "0"}, io.Discard, &errb, stop); code != 2 {
		t.Fatalf("bad flags: exit %d", code)
	}
}

// firstLine is an io.Writer safe to read while run writes to it; seen closes
// once a complete line has been written.
type firstLine struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
	once sync.Once
}

func (w *firstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if bytes.IndexByte(w.buf.Bytes(), '\n') >= 0 {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *firstLine) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
