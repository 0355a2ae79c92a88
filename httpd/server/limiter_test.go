package server

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// newTestLimiter is NewLimiterWithOptions for tests, logging nowhere.
func newTestLimiter(t testing.TB, o LimiterOptions) *Limiter {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	lim, err := NewLimiterWithOptions(o)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestBodyBudgetRanking drives the large-body budget directly: small bodies
// keep their reserve, waiters are served within their client's share first,
// a deadlock among waiters is broken by refusing the body that started last,
// a growth that can never fit is refused at once, and a wait ends.
func TestBodyBudgetRanking(t *testing.T) {
	lim := newTestLimiter(t, LimiterOptions{MaxInflightBodyBytes: 1000, SmallBodyReserve: 200,
		SmallBodyBytes: 100, BodyWait: time.Minute})
	x, y := &client{}, &client{}
	large := func(c *client) *bodyHold { return &bodyHold{large: true, cl: c} }
	take := func(h *bodyHold, n int64) chan bodyVerdict {
		ch := make(chan bodyVerdict, 1)
		go func() { v, _ := lim.takeBody(h, n); ch <- v }()
		return ch
	}
	want := func(what string, ch chan bodyVerdict, v bodyVerdict) {
		t.Helper()
		select {
		case got := <-ch:
			if got != v {
				t.Fatalf("%s: verdict %d, want %d", what, got, v)
			}
		case <-time.After(2 * time.Minute): // a failure bound only
			t.Fatalf("%s: no verdict", what)
		}
	}
	waiting := func(n int32) func() bool { return func() bool { return lim.nWaiting.Load() == n } }

	// large bodies fill their 800; small ones still get the reserve
	x1, x2 := large(x), large(x)
	want("x1 400", take(x1, 400), bodyGranted)
	want("x2 400", take(x2, 400), bodyGranted)
	s1 := &bodyHold{}
	want("small 200", take(s1, 200), bodyGranted)
	want("small past the budget", take(&bodyHold{}, 1), bodyRefused)
	lim.releaseBody(s1)

	// x1 and x2 both wait for more: none can finish, so x2 (started last)
	// is refused and x1 gets its bytes
	c1 := take(x1, 100)
	waitFor(t, "x1 waiting", waiting(1))
	c2 := take(x2, 100)
	want("x2 cut", c2, bodyRefused)
	lim.releaseBody(x2)
	want("x1 granted", c1, bodyGranted)
	lim.releaseBody(x1)

	// y within its share ranks before x past its share, though x's fits
	x1, x2 = large(x), large(x)
	want("x1 400", take(x1, 400), bodyGranted)
	want("x2 300", take(x2, 300), bodyGranted)
	y1 := large(y)
	cy := take(y1, 200)
	waitFor(t, "y1 waiting", waiting(1))
	x3 := large(x)
	c3 := take(x3, 100)
	waitFor(t, "x3 waiting behind y1", waiting(2))
	lim.releaseBody(x1)
	want("y1 granted", cy, bodyGranted)
	want("x3 granted", c3, bodyGranted)
	if y.largeHeld != 200 || x.largeHeld != 400 {
		t.Fatalf("held: x %d y %d", x.largeHeld, y.largeHeld)
	}

	// a growth past the large class alone
	nf := large(y)
	want("never fits", take(nf, 801), bodyNeverFits)
	for _, h := range []*bodyHold{x2, x3, y1, nf} {
		lim.releaseBody(h)
	}
	if n := lim.inflight.Load(); n != 0 || lim.largeHeld != 0 || lim.bodyClients != 0 {
		t.Fatalf("after release: inflight %d large %d clients %d", n, lim.largeHeld, lim.bodyClients)
	}

	// a wait ends after BodyWait with a refusal
	short := newTestLimiter(t, LimiterOptions{MaxInflightBodyBytes: 1000, SmallBodyReserve: 200,
		SmallBodyBytes: 100, BodyWait: 20 * time.Millisecond})
	a, b := &bodyHold{large: true, cl: x}, &bodyHold{large: true, cl: y}
	if v, _ := short.takeBody(a, 800); v != bodyGranted {
		t.Fatalf("a: %d", v)
	}
	if v, waited := short.takeBody(b, 100); v != bodyRefused || waited <= 0 {
		t.Fatalf("b: %d after %v", v, waited)
	}
	short.releaseBody(a)
	short.releaseBody(b)
	if p := lim.peak.Load(); p > 1000 {
		t.Fatalf("peak %d", p)
	}
}

// TestLimiterOptionsValidate lists every bad field.
func TestLimiterOptionsValidate(t *testing.T) {
	o := LimiterOptions{MaxConns: 4, ControlConns: 4, MaxInflightBodyBytes: 100, SmallBodyReserve: 100, BodyGrace: -1}
	o.EnsureDefaults()
	err := o.Validate()
	for _, f := range []string{"ControlConns", "SmallBodyReserve", "BodyGrace"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Fatalf("Validate: %v, want %s named", err, f)
		}
	}
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatal(err)
	}
	var d LimiterOptions
	d.EnsureDefaults()
	if err := d.Validate(); err != nil || d.ControlConns != 8 || d.SmallBodyReserve != 32<<20 {
		t.Fatalf("defaults: %+v %v", d, err)
	}
}
