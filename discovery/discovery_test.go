package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/discovery/kubetest"
)

// waitBound bounds a wait for a condition; it only matters when the
// condition never comes.
const waitBound = 2 * time.Minute

// recorder is a Registrar that keeps what is registered and can refuse.
type recorder struct {
	mu      sync.Mutex
	regs    map[core.ServiceKey]core.Registration
	refuse  map[string]bool // instance IDs whose Register fails
	foreign map[core.ServiceKey]bool
	unregs  int
}

func newRecorder() *recorder {
	return &recorder{regs: map[core.ServiceKey]core.Registration{}, refuse: map[string]bool{}, foreign: map[core.ServiceKey]bool{}}
}

func (r *recorder) Owns(k core.ServiceKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.regs[k]
	return ok && !r.foreign[k]
}

// operator replaces k by a registration of its own (endpoint ep), or
// removes it when ep is "", as an admin would through the API.
func (r *recorder) operator(k core.ServiceKey, ep string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ep == "" {
		delete(r.regs, k)
		delete(r.foreign, k)
		return
	}
	reg := r.regs[k]
	reg.Endpoint = ep
	r.regs[k], r.foreign[k] = reg, true
}

func (r *recorder) Register(reg core.Registration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse[reg.InstanceID] {
		return errors.New("refused by the test")
	}
	if old, ok := r.regs[reg.Key()]; ok && old.Endpoint != reg.Endpoint {
		return fmt.Errorf("%s: %w", reg.Key(), core.ErrConflict)
	}
	r.regs[reg.Key()] = reg
	return nil
}

func (r *recorder) Unregister(k core.ServiceKey) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.regs[k]; !ok || r.foreign[k] {
		return core.ErrNotFound
	}
	delete(r.regs, k)
	r.unregs++
	return nil
}

func (r *recorder) setRefuse(instance string, on bool) {
	r.mu.Lock()
	r.refuse[instance] = on
	r.mu.Unlock()
}

// state renders what is registered as sorted "instance|rank=endpoint model" lines.
func (r *recorder) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, reg := range r.regs {
		out = append(out, fmt.Sprintf("%s|%d=%s %s", k.InstanceID, k.DPRank, reg.Endpoint, reg.ModelName))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// eventually waits until the recorder's state is want.
func (r *recorder) eventually(t *testing.T, want, step string) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for r.state() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: registered %q, want %q", step, r.state(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var engineLabel = map[string]string{DefaultSelector: "vllm"}

// TestDiscoveryFollowsPods drives pods through their life against a fake API
// server and checks the registrations after every step.
func TestDiscoveryFollowsPods(t *testing.T) {
	c := kubetest.NewCluster(t)
	rec := newRecorder()
	d, err := New(rec, Options{Namespaces: []string{"llm", "batch"}, Resync: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	annA := map[string]string{AnnModel: "qwen", AnnDPSize: "2"}
	c.Create(kubetest.Pod("llm", "a", "ua1", "10.0.0.1", true, engineLabel, annA))
	c.Create(kubetest.Pod("llm", "b", "ub1", "", false, engineLabel, map[string]string{AnnModel: "qwen"}))
	c.Create(kubetest.Pod("llm", "unlabelled", "uu", "10.0.0.9", true, nil, map[string]string{AnnModel: "qwen"}))
	c.Create(kubetest.Pod("elsewhere", "c", "uc", "10.0.0.8", true, engineLabel, map[string]string{AnnModel: "qwen"}))
	if d.Ready() == nil {
		t.Fatal("ready before the first list")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.Run(ctx, c.Client); err != nil {
		t.Fatal(err)
	}
	if err := d.Ready(); err != nil {
		t.Fatal(err)
	}
	// The first list is reconciled before Run returns.
	if got, want := rec.state(), "llm/a|0=tcp://10.0.0.1:5557 qwen; llm/a|1=tcp://10.0.0.1:5558 qwen"; got != want {
		t.Fatalf("after the first list: %q, want %q", got, want)
	}

	b := kubetest.Pod("llm", "b", "ub1", "10.0.0.2", true, engineLabel, map[string]string{AnnModel: "qwen"})
	c.Update(b)
	rec.eventually(t, "llm/a|0=tcp://10.0.0.1:5557 qwen; llm/a|1=tcp://10.0.0.1:5558 qwen; llm/b|0=tcp://10.0.0.2:5557 qwen", "b becomes Ready")

	annA = map[string]string{AnnModel: "llama", AnnDPSize: "1"}
	c.Update(kubetest.Pod("llm", "a", "ua1", "10.0.0.1", true, engineLabel, annA))
	rec.eventually(t, "llm/a|0=tcp://10.0.0.1:5557 llama; llm/b|0=tcp://10.0.0.2:5557 qwen", "a's annotations change")

	// a is recreated: same name, new UID and IP.
	c.Delete("llm", "a")
	c.Create(kubetest.Pod("llm", "a", "ua2", "10.0.0.3", true, engineLabel, annA))
	rec.eventually(t, "llm/a|0=tcp://10.0.0.3:5557 llama; llm/b|0=tcp://10.0.0.2:5557 qwen", "a recreated")

	c.Update(kubetest.Pod("llm", "b", "ub1", "10.0.0.2", false, engineLabel, map[string]string{AnnModel: "qwen"}))
	rec.eventually(t, "llm/a|0=tcp://10.0.0.3:5557 llama", "b not Ready")

	c.Update(kubetest.Pod("llm", "a", "ua2", "10.0.0.3", true, map[string]string{"app": "other"}, annA))
	rec.eventually(t, "", "a relabelled out of the selector")

	// Refused annotations register nothing until they are fixed.
	c.Create(kubetest.Pod("batch", "d", "ud", "10.0.1.1", true, engineLabel, map[string]string{AnnModel: "m", AnnEventsPort: "x"}))
	c.Create(kubetest.Pod("batch", "e", "ue", "10.0.1.2", true, engineLabel, map[string]string{AnnModel: "m"}))
	rec.eventually(t, "batch/e|0=tcp://10.0.1.2:5557 m", "d's annotations refused")
	c.Update(kubetest.Pod("batch", "d", "ud", "10.0.1.1", true, engineLabel, map[string]string{AnnModel: "m", AnnEventsPort: "7000"}))
	rec.eventually(t, "batch/d|0=tcp://10.0.1.1:7000 m; batch/e|0=tcp://10.0.1.2:5557 m", "d's annotations fixed")

	// A refused registration is retried at the next resync.
	rec.setRefuse("batch/f", true)
	c.Create(kubetest.Pod("batch", "f", "uf", "10.0.1.3", true, engineLabel, map[string]string{AnnModel: "m"}))
	deadline := time.Now().Add(waitBound)
	for d.regErrs.Get() < 2 { // refused at its add and at least one resync
		if time.Now().After(deadline) {
			t.Fatal("f's registration was not attempted again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec.setRefuse("batch/f", false)
	rec.eventually(t, "batch/d|0=tcp://10.0.1.1:7000 m; batch/e|0=tcp://10.0.1.2:5557 m; batch/f|0=tcp://10.0.1.3:5557 m", "f retried")

	c.Delete("batch", "d")
	c.Delete("batch", "e")
	c.Delete("batch", "f")
	c.Delete("llm", "a")
	c.Delete("llm", "b")
	rec.eventually(t, "", "every pod deleted")
	// b held no registration: its deletion may still be on its way when the
	// recorder is already empty.
	deadline = time.Now().Add(waitBound)
	for d.podCount() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pods still tracked after every pod was deleted", d.podCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDiscoveryAllNamespaces watches every namespace and counts pods by state.
func TestDiscoveryAllNamespaces(t *testing.T) {
	c := kubetest.NewCluster(t)
	rec := newRecorder()
	d, err := New(rec, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.Create(kubetest.Pod("n1", "p", "u1", "10.0.0.1", true, engineLabel, map[string]string{AnnModel: "m"}))
	c.Create(kubetest.Pod("n2", "p", "u2", "10.0.0.2", true, engineLabel, map[string]string{AnnModel: "m", AnnDPRanks: "0-2"}))
	c.Create(kubetest.Pod("n3", "p", "u3", "10.0.0.3", false, engineLabel, map[string]string{AnnModel: "m"}))
	c.Create(kubetest.Pod("n4", "p", "u4", "10.0.0.4", true, engineLabel, map[string]string{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.Run(ctx, c.Client); err != nil {
		t.Fatal(err)
	}
	want := "n1/p|0=tcp://10.0.0.1:5557 m; n2/p|0=tcp://10.0.0.2:5557 m; n2/p|1=tcp://10.0.0.2:5558 m; n2/p|2=tcp://10.0.0.2:5559 m"
	if got := rec.state(); got != want {
		t.Fatalf("registered %q, want %q", got, want)
	}
	if r, w, i := d.nRegs.Load(), d.nWaiting.Load(), d.nInvalid.Load(); r != 4 || w != 1 || i != 1 {
		t.Errorf("registrations %d waiting %d invalid %d, want 4 1 1", r, w, i)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Selector: "a in (b"}, {Namespaces: []string{"a,b"}}, {Namespaces: []string{""}}, {Resync: -1}} {
		o.EnsureDefaults()
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
	o := Options{Namespaces: []string{"llm"}, Selector: "app=vllm,tier in (gpu)"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Errorf("%+v: %v", o, err)
	}
}

// TestDiscoveryLeavesOperatorRegistrations: discovery removes only what it
// registered. An operator's unregistration of a discovered engine is undone
// at the next resync while the pod wants it; an operator's own registration
// under the same key is not replaced (its conflict is logged) and is left in
// place when the pod goes.
func TestDiscoveryLeavesOperatorRegistrations(t *testing.T) {
	rec := newRecorder()
	d, err := New(rec, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pod := &Pod{Namespace: "llm", Name: "a", UID: "u1", IP: "10.0.0.1", Ready: true, Annotations: map[string]string{AnnModel: "qwen"}}
	k := core.ServiceKey{InstanceID: "llm/a", TenantID: "default", DPRank: 0}
	const mine = "llm/a|0=tcp://10.0.0.1:5557 qwen"
	d.Reconcile("llm/a", pod)
	if got := rec.state(); got != mine {
		t.Fatalf("registered %q, want %q", got, mine)
	}
	rec.operator(k, "") // an operator unregisters it
	d.Reconcile("llm/a", pod)
	if got := rec.state(); got != mine {
		t.Fatalf("after the operator's unregistration and a resync: %q, want %q", got, mine)
	}
	rec.operator(k, "tcp://10.0.0.9:6000") // and replaces it by one of its own
	d.Reconcile("llm/a", pod)
	d.Reconcile("llm/a", nil) // the pod is deleted
	if got, want := rec.state(), "llm/a|0=tcp://10.0.0.9:6000 qwen"; got != want {
		t.Fatalf("after the pod went: %q, want the operator's %q", got, want)
	}
}
