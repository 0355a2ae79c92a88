package ingest

import (
	"errors"
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
		o.MaxQueuedBytes != 1<<30 || o.MaxMessageBytes != 64<<20 {
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
