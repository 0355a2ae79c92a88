package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/seed-c7a81618/conductor/core"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Registrar is where discovery's registrations go. Register of a
// registration that already exists unchanged succeeds.
type Registrar interface {
	Register(r core.Registration) error
	// Unregister removes k if this Registrar registered it; k held by
	// another owner (an operator who replaced it) is left alone and
	// answered with an error wrapping core.ErrNotFound.
	Unregister(k core.ServiceKey) error
	// Owns reports whether k is registered, by this Registrar.
	Owns(k core.ServiceKey) bool
}

// Options configure a Discovery.
type Options struct {
	// Namespaces are watched; empty watches every namespace.
	Namespaces []string
	// Selector is the pods' label selector. Default DefaultSelector.
	Selector string
	// Resync is how often every pod is reconciled again, so that a
	// registration that failed (a conflict, the registration limit) is
	// retried. Default 30s; client-go raises anything under 1s to 1s.
	Resync time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills the zero fields.
func (o *Options) EnsureDefaults() {
	if o.Selector == "" {
		o.Selector = DefaultSelector
	}
	if o.Resync == 0 {
		o.Resync = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if _, err := labels.Parse(o.Selector); err != nil {
		return fmt.Errorf("discovery selector %q: %w", o.Selector, err)
	}
	if o.Resync < 0 {
		return errors.New("discovery resync must not be negative")
	}
	for _, ns := range o.Namespaces {
		if ns == "" || strings.ContainsAny(ns, " ,/") {
			return fmt.Errorf("discovery namespace %q is not a namespace name", ns)
		}
	}
	return nil
}

// Discovery keeps registrations in step with the Ready pods its informers
// see: a Ready pod with an IP is registered from its annotations
// (Registrations); a pod deleted, no longer Ready, or whose annotations,
// IP or UID changed is unregistered (and registered again as it now is). A
// new UID is a new engine with an empty cache: its blocks are dropped with
// the old registration. One goroutine at a time reconciles (mu).
type Discovery struct {
	opts Options
	sel  labels.Selector
	reg  Registrar
	log  *slog.Logger

	mu   sync.Mutex
	pods map[string]*podState // by namespace/name

	synced    atomic.Bool
	nInvalid  atomic.Int64 // pods whose annotations are refused
	nWaiting  atomic.Int64 // pods not Ready or without an IP
	nRegs     atomic.Int64 // registrations made and held
	regErrs   *metrics.Counter
	unregErrs *metrics.Counter
	annErrs   *metrics.Counter
	set       *metrics.Set
}

// podState is what discovery made of one pod.
type podState struct {
	uid     string
	counted bool                        // its share is in the gauges
	invalid string                      // the annotations' error, "" when none
	want    map[core.ServiceKey]Desired // what the pod asks for now
	have    map[core.ServiceKey]Desired // what is registered
}

// New returns a Discovery that registers into reg.
func New(reg Registrar, opts Options) (*Discovery, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	sel, _ := labels.Parse(opts.Selector) // Validate parsed it
	d := &Discovery{opts: opts, sel: sel, reg: reg, log: opts.Logger, pods: map[string]*podState{}, set: metrics.NewSet()}
	d.regErrs = d.set.NewCounter(`conductor_discovery_errors_total{op="register"}`)
	d.unregErrs = d.set.NewCounter(`conductor_discovery_errors_total{op="unregister"}`)
	d.annErrs = d.set.NewCounter(`conductor_discovery_errors_total{op="annotations"}`)
	d.set.RegisterMetricsWriter(func(w io.Writer) {
		metrics.WriteGaugeUint64(w, `conductor_discovery_pods{state="invalid"}`, uint64(d.nInvalid.Load()))
		metrics.WriteGaugeUint64(w, `conductor_discovery_pods{state="waiting"}`, uint64(d.nWaiting.Load()))
		metrics.WriteGaugeUint64(w, `conductor_discovery_registrations`, uint64(d.nRegs.Load()))
		synced := uint64(0)
		if d.synced.Load() {
			synced = 1
		}
		metrics.WriteGaugeUint64(w, `conductor_discovery_synced`, synced)
	})
	return d, nil
}

// Metrics are conductor_discovery_*: pods by state, registrations held,
// errors by operation, and whether the first list is in.
func (d *Discovery) Metrics() *metrics.Set { return d.set }

// Ready is nil once every watched namespace's first list has been
// reconciled.
func (d *Discovery) Ready() error {
	if !d.synced.Load() {
		return errors.New("kubernetes discovery has not listed the pods yet")
	}
	return nil
}

// podsResource is the core API's pods.
var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Run watches the pods through client until ctx is done. It returns once
// the informers are started and have listed (or ctx ended first); the
// informers stop with ctx.
func (d *Discovery) Run(ctx context.Context, client dynamic.Interface) error {
	nss := d.opts.Namespaces
	if len(nss) == 0 {
		nss = []string{metav1.NamespaceAll}
	}
	synced := make([]cache.InformerSynced, 0, len(nss))
	for _, ns := range nss {
		ri := client.Resource(podsResource).Namespace(ns)
		sel := d.opts.Selector
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return ri.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				return ri.Watch(ctx, o)
			},
		}
		// The wrapper tells the reflector whether client can stream the
		// first list as watch events (a fake client cannot).
		inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client),
			&unstructured.Unstructured{}, d.opts.Resync, cache.Indexers{})
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { d.observe(obj, false) },
			UpdateFunc: func(_, obj any) { d.observe(obj, false) },
			DeleteFunc: func(obj any) { d.observe(obj, true) },
		}); err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return context.Cause(ctx)
	}
	d.synced.Store(true)
	d.log.Info("kubernetes discovery watching", "namespaces", strings.Join(d.opts.Namespaces, ","), "selector", d.opts.Selector,
		"pods", d.podCount())
	return nil
}

func (d *Discovery) podCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pods)
}

// observe is an informer's event: the pod as it now is, or gone. A pod
// whose labels no longer match the selector is gone too (the API server
// filters watches by the selector; this does not rely on it).
func (d *Discovery) observe(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = t.Obj, true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	if !d.sel.Matches(labels.Set(u.GetLabels())) {
		deleted = true
	}
	p := PodOf(u)
	if deleted {
		d.Reconcile(p.Key(), nil)
		return
	}
	d.Reconcile(p.Key(), &p)
}

// PodOf reads the fields discovery uses from a pod object.
func PodOf(u *unstructured.Unstructured) Pod {
	p := Pod{Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), Annotations: u.GetAnnotations()}
	p.IP, _, _ = unstructured.NestedString(u.Object, "status", "podIP")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	ready := false
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			ready = true
		}
	}
	p.Ready = ready && phase == "Running" && u.GetDeletionTimestamp() == nil
	return p
}

// Reconcile brings the registrations of the pod key to what p asks for (nil:
// the pod is gone). Failed registrations are retried at the next event or
// resync of the pod.
func (d *Discovery) Reconcile(key string, p *Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.pods[key]
	if st == nil {
		st = &podState{have: map[core.ServiceKey]Desired{}}
		d.pods[key] = st
	}
	d.count(st, -1)
	want := map[core.ServiceKey]Desired{}
	invalid := ""
	if p != nil && p.Ready {
		regs, err := Registrations(p)
		if err != nil {
			invalid = err.Error()
		}
		for _, r := range regs {
			want[r.Reg.Key()] = r
		}
	}
	if invalid != "" && invalid != st.invalid {
		d.annErrs.Inc()
		d.log.Warn("kubernetes discovery: pod not registered", "pod", key, "err", invalid)
	}
	newUID := p != nil && st.uid != "" && p.UID != st.uid
	if p != nil {
		st.uid = p.UID
	}
	st.invalid, st.want = invalid, want
	for k, h := range st.have {
		// Unregistered, or replaced, by someone else since: forgotten, and
		// registered again below while the pod wants it (a replacement's
		// conflict is then logged at every resync).
		if !d.reg.Owns(k) {
			delete(st.have, k)
			d.log.Info("kubernetes discovery: a registration it made is no longer its own", "pod", key, "service", k.String(), "endpoint", h.Reg.Endpoint)
		}
	}
	for k, h := range st.have {
		if w, ok := want[k]; ok && w.Body == h.Body && !newUID {
			continue
		}
		if err := d.reg.Unregister(k); err != nil && !errors.Is(err, core.ErrNotFound) {
			d.unregErrs.Inc()
			d.log.Error("kubernetes discovery: unregister failed", "pod", key, "service", k.String(), "err", err)
			continue
		}
		delete(st.have, k)
		d.log.Info("kubernetes discovery: unregistered", "pod", key, "service", k.String(), "endpoint", h.Reg.Endpoint)
	}
	keys := make([]core.ServiceKey, 0, len(want))
	for k := range want {
		if _, ok := st.have[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].DPRank < keys[j].DPRank })
	for _, k := range keys {
		w := want[k]
		if err := d.reg.Register(w.Reg); err != nil {
			d.regErrs.Inc()
			d.log.Error("kubernetes discovery: register failed; retried at the next resync", "pod", key, "service", k.String(), "err", err)
			continue
		}
		st.have[k] = w
		d.log.Info("kubernetes discovery: registered", "pod", key, "service", k.String(), "endpoint", w.Reg.Endpoint)
	}
	if p == nil && len(st.have) == 0 {
		delete(d.pods, key)
		return
	}
	d.count(st, +1)
}

// count adds sign × the pod's share to the gauges: +1 after a reconcile,
// -1 before the next (once counted).
func (d *Discovery) count(st *podState, sign int64) {
	if st.counted == (sign > 0) {
		return
	}
	st.counted = sign > 0
	switch {
	case st.invalid != "":
		d.nInvalid.Add(sign)
	case len(st.want) == 0:
		d.nWaiting.Add(sign)
	}
	d.nRegs.Add(sign * int64(len(st.have)))
}

// Config is the client configuration of --discover-kubernetes: "in-cluster"
// (the pod's service account) or a kubeconfig path. ns is the namespace the
// configuration implies: the service account's, or the kubeconfig context's
// ("default" when it names none).
func Config(mode string) (cfg *rest.Config, ns string, err error) {
	if mode == "in-cluster" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, "", err
		}
		b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, "", fmt.Errorf("in-cluster namespace: %w", err)
		}
		return cfg, strings.TrimSpace(string(b)), nil
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: mode}, &clientcmd.ConfigOverrides{})
	if cfg, err = cc.ClientConfig(); err != nil {
		return nil, "", err
	}
	if ns, _, err = cc.Namespace(); err != nil {
		return nil, "", err
	}
	return cfg, ns, nil
}
