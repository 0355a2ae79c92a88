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
		o.MaxQueuedBytes != 1<<30 || o.MaxMessageBytes != 64<<20 || o.queueHWM(0) != 64 {
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
// hold in bytes. ZMQ_RCVHWM is ReceiveQueueBytes/max(largest, 1 MiB)
// messages, largest being the stream's largest message so far (at least 1, at
// most RcvHWM), so the complete messages libzmq queues take at most
// max(ReceiveQueueBytes, largest) while no larger one arrives; ZMQ_MAXMSGSIZE
// is four times MaxMessageBytes (the frame guard). Both are read back from a
// socket.
func TestQueueLimits(t *testing.T) {
	ctx, err := newZContext()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctx.term() }()
	f := func(queue int, maxMsg, largest int64, rcvHWM, wantHWM int, wantGuard int64) {
		t.Helper()
		o := IngestOptions{ReceiveQueueBytes: queue, MaxMessageBytes: maxMsg, RcvHWM: rcvHWM}
		o.EnsureDefaults()
		s, err := ctx.socket(zSUB)
		if err != nil {
			t.Fatal(err)
		}
		defer closeSocket(s)
		if err := setQueueLimits(s, &o, o.queueHWM(largest)); err != nil {
			t.Fatal(err)
		}
		hwm, guard := s.getInt(optRcvHWM), s.getInt64(optMaxMsgSize)
		name := fmt.Sprintf("queue=%d max=%d largest=%d rcvhwm=%d", queue, maxMsg, largest, rcvHWM)
		if hwm != wantHWM {
			t.Errorf("%s: ZMQ_RCVHWM %d, want %d", name, hwm, wantHWM)
		}
		if guard != wantGuard {
			t.Errorf("%s: ZMQ_MAXMSGSIZE %d, want %d", name, guard, wantGuard)
		}
		if maxMsg < 0 {
			return
		}
		m := max(largest, 1<<20)
		if bound := max(int64(o.ReceiveQueueBytes), m); int64(hwm)*m > bound {
			t.Errorf("%s: libzmq may queue %d × %d bytes, above %d", name, hwm, m, bound)
		}
	}
	f(0, 0, 0, 0, 64, 256<<20)                  // defaults: 64 MiB / 1 MiB; guard 4 × 64 MiB
	f(0, 0, 100<<10, 0, 64, 256<<20)            // small messages keep the 1 MiB floor
	f(0, 0, 4025189, 0, 16, 256<<20)            // the trace's largest store flush: 64 MiB / 3.8 MiB
	f(0, 0, 16<<20, 0, 4, 256<<20)              // a 16 MiB flush
	f(0, 0, 64<<20, 0, 1, 256<<20)              // one message of the largest size
	f(8<<20, 4<<20, 0, 0, 8, 16<<20)            // TestZMQBurstMemory's, before its first message
	f(8<<20, 4<<20, 2<<20, 0, 4, 16<<20)        // … after a 2 MiB one
	f(1<<20, 64<<20, 64<<20, 0, 1, 256<<20)     // larger than the queue: still one
	f(64<<20, 1<<10, 0, 1000, 64, 4<<10)        // under RcvHWM: the floor decides
	f(64<<20, 1<<10, 0, 16, 16, 4<<10)          // capped by RcvHWM
	f(64<<20, -1, 64<<20, 0, DefaultRcvHWM, -1) // no size limit: bounded in messages only
}
