package ingest_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// lockedLog is a goroutine-safe log sink.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestZMQUnresolvableHost: a registration whose endpoint names a host that
// does not resolve (.invalid never does, RFC 2606) is accepted and stays
// pending, its LastError says the host does not resolve, and a WARN line
// names the host; an IP literal endpoint's pending state says nothing of
// names.
func TestZMQUnresolvableHost(t *testing.T) {
	var logs lockedLog
	opts := fastOpts(t)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := newHarness(t, opts)
	reg := func(inst, ep string) core.ServiceKey {
		return h.register(core.Registration{Endpoint: ep, Type: core.PublisherVLLM, ModelName: testModel, InstanceID: inst,
			BlockSize: testBS, Profile: hash.DefaultProfile()})
	}
	bad := reg("nowhere", "tcp://no-such-host.invalid:5557")
	lit := reg("literal", "tcp://127.0.0.1:1")
	var st ingest.ListenerStatus
	waitFor(t, "the unresolved host in LastError", func() bool {
		st = h.status(bad)
		return strings.Contains(st.LastError, "does not resolve")
	})
	if st.State != ingest.ListenerPending || !strings.Contains(st.LastError, "no-such-host.invalid") {
		t.Fatalf("status %+v", st)
	}
	waitFor(t, "the WARN line", func() bool {
		return strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "host=no-such-host.invalid")
	})
	if st := h.status(lit); st.State != ingest.ListenerPending || strings.Contains(st.LastError, "resolve") {
		t.Fatalf("IP literal: %+v", st)
	}
}
