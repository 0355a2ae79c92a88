package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/discovery"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Engine discovery on Kubernetes (package discovery): with
// --discover-kubernetes, Ready pods matching --discover-selector in
// --discover-namespaces are registered from their annotations, owned by
// server.DiscoveryPrincipal; they are not written to the state directory
// (the API server is their record) and coexist with configuration-file and
// API registrations. Without the flag nothing here runs.

type kubeSettings struct {
	mode       string // "" off, "in-cluster", or a kubeconfig path
	namespaces string
	nsSet      bool // --discover-namespaces was given ("" then means every namespace)
	selector   string
}

func addKubeFlags(fs *flag.FlagSet, s *kubeSettings) {
	fs.StringVar(&s.mode, "discover-kubernetes", "", `register engine pods found through the Kubernetes API: "in-cluster" (the pod's service account) or a kubeconfig path (default off)`)
	fs.StringVar(&s.namespaces, "discover-namespaces", "", `comma-separated namespaces to watch ("" = every namespace; default: the service account's, else the kubeconfig context's)`)
	fs.StringVar(&s.selector, "discover-selector", discovery.DefaultSelector, "label selector of the engine pods")
}

// validate runs after parsing; set names the flags given.
func (s *kubeSettings) validate(set map[string]bool) error {
	s.nsSet = set["discover-namespaces"]
	if s.mode == "" && (s.nsSet || set["discover-selector"]) {
		return errors.New("--discover-namespaces and --discover-selector need --discover-kubernetes")
	}
	return nil
}

// kubeClient makes the client of --discover-kubernetes and names the
// namespace its configuration implies; tests replace it with a fake.
var kubeClient = func(mode string) (dynamic.Interface, string, error) {
	cfg, ns, err := discovery.Config(mode)
	if err != nil {
		return nil, "", err
	}
	cfg.UserAgent = "conductor/" + buildVersion()
	c, err := dynamic.NewForConfig(cfg)
	return c, ns, err
}

// kubePart is the app's discovery; a nil *kubePart is off.
type kubePart struct {
	d      *discovery.Discovery
	client dynamic.Interface
	log    *slog.Logger
}

// newKubePart builds the discovery of s over gate, or nil when off.
func newKubePart(s *kubeSettings, gate *server.Gate, log *slog.Logger) (*kubePart, error) {
	if s.mode == "" {
		return nil, nil
	}
	klog.SetSlogLogger(log.With("component", "client-go"))
	client, implied, err := kubeClient(s.mode)
	if err != nil {
		return nil, fmt.Errorf("--discover-kubernetes %s: %w", s.mode, err)
	}
	var nss []string
	switch {
	case !s.nsSet:
		nss = []string{implied}
	case s.namespaces != "" && s.namespaces != "*":
		for _, ns := range strings.Split(s.namespaces, ",") {
			nss = append(nss, strings.TrimSpace(ns))
		}
	}
	d, err := discovery.New(gateRegistrar{gate}, discovery.Options{Namespaces: nss, Selector: s.selector, Logger: log})
	if err != nil {
		return nil, err
	}
	return &kubePart{d: d, client: client, log: log}, nil
}

// start watches until ctx ends; the first list is reconciled before /health
// is ready.
func (k *kubePart) start(ctx context.Context) {
	if k == nil {
		return
	}
	go func() {
		if err := k.d.Run(ctx, k.client); err != nil && ctx.Err() == nil {
			k.log.Error("kubernetes discovery stopped", "err", err)
		}
	}()
}

// ready is part of server.Options.Ready.
func (k *kubePart) ready() error {
	if k == nil {
		return nil
	}
	return k.d.Ready()
}

// metrics are conductor_discovery_* (none when off).
func (k *kubePart) metrics() []*metrics.Set {
	if k == nil {
		return nil
	}
	return []*metrics.Set{k.d.Metrics()}
}

// gateRegistrar registers through the Gate as DiscoveryPrincipal.
type gateRegistrar struct{ g *server.Gate }

func (r gateRegistrar) Register(reg core.Registration) error {
	_, err := r.g.Register(server.DiscoveryPrincipal, reg)
	return err
}

func (r gateRegistrar) Unregister(k core.ServiceKey) error {
	_, err := r.g.UnregisterOwn(server.DiscoveryPrincipal, k)
	return err
}

func (r gateRegistrar) Owns(k core.ServiceKey) bool { return r.g.Owns(server.DiscoveryPrincipal, k) }
