package ingest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestIngestOptions(t *testing.T) {
	var o IngestOptions
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if o.PollInterval != DefaultPollInterval || o.RcvHWM != DefaultRcvHWM ||
		o.RestartThreshold != DefaultRestartThreshold || o.Logger == nil || o.Metrics == nil ||
		o.MaxListeners != 4096 || o.MaxSockets != 4096*4+64 || o.ReceiveQueueBytes != 64<<20 ||
		o.MaxQueuedBytes != 1<<30 || o.MaxMessageBytes != 1<<20 || o.queueHWM() != 64 {
		t.Fatalf("defaults not applied: %+v", o)
	}
	// The socket cap follows MaxListeners unless set.
	o = IngestOptions{MaxListeners: 10}
	o.EnsureDefaults()
	if o.MaxSockets != 10*4+64 || o.Validate() != nil {
		t.Fatalf("MaxSockets for 10 listeners: %d (%v)", o.MaxSockets, o.Validate())
	}
	bad := IngestOptions{PollInterval: -1, ReconnectMin: 10, ReconnectMax: 5, ReplayTimeout: -1,
		ReplayTotalTimeout: -1, ReplayMaxBuffered: -1, RcvHWM: -1, MaxSockets: 3,
		MaxListeners: MaxListenersLimit + 1, ReceiveQueueBytes: -1, MaxQueuedBytes: -1, MaxMessageBytes: -2}
	bad.EnsureDefaults()
	err := bad.Validate()
	if !errors.Is(err, ErrInvalidIngestOptions) {
		t.Fatalf("got %v, want ErrInvalidIngestOptions", err)
	}
	// Every bad field is listed.
	for _, field := range []string{"PollInterval", "ReconnectMin", "ReconnectMax", "ReplayTimeout",
		"ReplayTotalTimeout", "ReplayMaxBuffered", "RcvHWM", "MaxSockets", "MaxListeners",
		"ReceiveQueueBytes", "MaxQueuedBytes", "MaxMessageBytes"} {
		if !strings.Contains("\n"+err.Error(), "\n"+field+"=") {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}

// TestQueueLimits: the SUB and replay sockets' options bound what libzmq can
// hold in bytes. ZMQ_RCVHWM is ReceiveQueueBytes/MaxMessageBytes messages
// (at least 1, at most RcvHWM) and ZMQ_MAXMSGSIZE is MaxMessageBytes, so the
// complete messages libzmq queues take at most max(ReceiveQueueBytes,
// MaxMessageBytes) per frame; both are read back from a socket.
func TestQueueLimits(t *testing.T) {
	ctx, err := newZContext()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctx.term() }()
	f := func(queue int, maxMsg int64, rcvHWM, wantHWM int) {
		t.Helper()
		o := IngestOptions{ReceiveQueueBytes: queue, MaxMessageBytes: maxMsg, RcvHWM: rcvHWM}
		o.EnsureDefaults()
		s, err := ctx.socket(zSUB)
		if err != nil {
			t.Fatal(err)
		}
		defer closeSocket(s)
		if err := setQueueLimits(s, &o); err != nil {
			t.Fatal(err)
		}
		hwm, msg := s.getInt(optRcvHWM), s.getInt64(optMaxMsgSize)
		name := fmt.Sprintf("queue=%d max=%d rcvhwm=%d", queue, maxMsg, rcvHWM)
		if hwm != wantHWM {
			t.Errorf("%s: ZMQ_RCVHWM %d, want %d", name, hwm, wantHWM)
		}
		if maxMsg < 0 {
			if msg != -1 {
				t.Errorf("%s: ZMQ_MAXMSGSIZE %d, want -1", name, msg)
			}
			return
		}
		if msg != o.MaxMessageBytes {
			t.Errorf("%s: ZMQ_MAXMSGSIZE %d, want %d", name, msg, o.MaxMessageBytes)
		}
		if bound := max(int64(o.ReceiveQueueBytes), o.MaxMessageBytes); int64(hwm)*msg > bound {
			t.Errorf("%s: libzmq may queue %d × %d bytes, above %d", name, hwm, msg, bound)
		}
	}
	f(0, 0, 0, 64)                  // defaults: 64 MiB / 1 MiB
	f(8<<20, 4<<20, 0, 2)           // TestZMQBurstMemory's
	f(64<<20, 64<<20, 0, 1)         // one message of the largest size
	f(1<<20, 64<<20, 0, 1)          // larger than the queue: still one
	f(64<<20, 1<<10, 0, 65536)      // small messages: many
	f(64<<20, 1<<10, 1000, 1000)    // capped by RcvHWM
	f(64<<20, -1, 0, DefaultRcvHWM) // no size limit: bounded in messages only
}
