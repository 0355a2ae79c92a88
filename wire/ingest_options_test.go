package wire

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
		o.RestartThreshold != DefaultRestartThreshold || o.Logger == nil || o.Metrics == nil {
		t.Fatalf("defaults not applied: %+v", o)
	}
	bad := IngestOptions{PollInterval: -1, ReconnectMin: 10, ReconnectMax: 5, ReplayTimeout: -1,
		ReplayTotalTimeout: -1, ReplayMaxBuffered: -1, RcvHWM: -1, MaxSockets: 3}
	bad.EnsureDefaults()
	err := bad.Validate()
	if !errors.Is(err, ErrInvalidIngestOptions) {
		t.Fatalf("got %v, want ErrInvalidIngestOptions", err)
	}
	// Every bad field is listed.
	for _, field := range []string{"PollInterval", "ReconnectMin", "ReconnectMax", "ReplayTimeout",
		"ReplayTotalTimeout", "ReplayMaxBuffered", "RcvHWM", "MaxSockets"} {
		if !strings.Contains("\n"+err.Error(), "\n"+field+"=") {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}
