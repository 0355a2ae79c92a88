package ingest_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// TestZMQRegisterCanonicalEndpoint: a registration is connected to, and kept
// in the index, in its canonical form, a host name resolved once to the
// address it names; another spelling of a registered publisher is refused
// for another instance (and is the same registration for the same one); a
// name that does not resolve is refused before the index is touched.
func TestZMQRegisterCanonicalEndpoint(t *testing.T) {
	opts := fastOpts(t)
	lookups := 0
	opts.Lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		lookups++
		if host == "engine.test" {
			return []netip.Addr{netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, errors.New("no such host")
	}
	h := newHarness(t, opts)
	pub := newPublisher(t, bench.PublisherOptions{})
	_, port, _ := strings.Cut(strings.TrimPrefix(pub.Endpoint(), "tcp://127.0.0.1"), ":")
	r := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))
	r.Endpoint = "tcp://engine.test:0" + port
	k := h.register(r)
	if lookups != 1 {
		t.Fatalf("%d lookups", lookups)
	}
	if got := h.ix.Services()[0].Endpoint; got != pub.Endpoint() {
		t.Fatalf("registered endpoint %s, want %s", got, pub.Endpoint())
	}
	publish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0,
		bench.EngineStored{Hashes: []uint64{5}, BlockSize: testBS, Medium: "GPU"}))
	waitFor(t, "block 5", func() bool { return h.holds("vllm-a", 5) })

	same := r
	same.Endpoint = "tcp://[::ffff:127.0.0.1]:" + port
	if created, err := h.g.Register(same); err != nil || created {
		t.Fatalf("the same registration in another spelling: created=%v %v", created, err)
	}
	for _, ep := range []string{"tcp://[::ffff:127.0.0.1]:" + port, "tcp://127.0.0.2:" + port, "tcp://[::1]:" + port,
		"tcp://engine.test:" + port, "tcp://127.0.0.1:0;127.0.0.1:" + port} {
		alias := r
		alias.InstanceID, alias.Endpoint, alias.ReplayEndpoint = "vllm-b", ep, ""
		var fe *core.FieldError
		_, err := h.g.Register(alias)
		if !errors.Is(err, core.ErrConflict) || !errors.As(err, &fe) || fe.Field != "endpoint" ||
			!strings.Contains(err.Error(), k.String()) {
			t.Errorf("alias %s: %v, want a conflict on endpoint naming %s", ep, err, k)
		}
	}
	bad := r
	bad.InstanceID, bad.Endpoint = "vllm-c", "tcp://nowhere.test:"+port
	var fe *core.FieldError
	if _, err := h.g.Register(bad); !errors.Is(err, ingest.ErrBadEndpoint) || !errors.Is(err, core.ErrInvalid) ||
		!errors.As(err, &fe) || fe.Field != "endpoint" || !strings.Contains(err.Error(), "nowhere.test") {
		t.Fatalf("unresolvable host: %v", err)
	}
	if n := len(h.ix.Services()); n != 1 || len(h.g.Listeners()) != 1 {
		t.Fatalf("%d registrations, %d listeners after the refusals", n, len(h.g.Listeners()))
	}
}
