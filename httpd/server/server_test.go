package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

func TestOptionsValidate(t *testing.T) {
	o := Options{MaxBodyBytes: -1, MaxQueryTokens: -2, ReadTimeout: -1, ExtraMetrics: []*metrics.Set{nil}}
	err := o.Validate()
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatal(err)
	}
	for _, f := range []string{"MaxBodyBytes", "MaxQueryTokens", "ReadTimeout", "ExtraMetrics[0]"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error lacks %s: %v", f, err)
		}
	}
	var d Options
	d.EnsureDefaults()
	if d.MaxBodyBytes != 16<<20 || d.MaxQueryTokens != 1<<20 || d.Version != "dev" || d.Logger == nil || d.Validate() != nil {
		t.Fatalf("%+v", d)
	}
	if _, err := New(nil, nil, Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatal(err)
	}
}

func TestRequestErrorText(t *testing.T) {
	e := elemErr(ErrOutOfRange, "token_ids", 3, "token_ids element must be a 32-bit signed integer")
	if got := e.Error(); got != `field="token_ids" index=3: token_ids element must be a 32-bit signed integer: conductor: out of range` {
		t.Fatal(got)
	}
	if !errors.Is(e, ErrOutOfRange) || ReasonOf(e) != "out_of_range" || ReasonOf(errors.New("x")) != "" {
		t.Fatal("sentinel")
	}
	for _, r := range reasons {
		if ReasonOf(&RequestError{Err: r.err}) != r.reason {
			t.Fatal(r.reason)
		}
	}
}
