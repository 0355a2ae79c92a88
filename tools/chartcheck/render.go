package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
)

// Release name and namespace of every render, and of deploy/k8s/conductor.yaml.
const (
	releaseName      = "conductor"
	releaseNamespace = "conductor"
)

// kubeVersion is the Kubernetes version renders and lint run against: the
// minor version of the k8s.io/api types in go.mod that the rendered objects
// are decoded into.
const kubeVersion = "v1.37.0"

// errHooks is returned for a chart that renders Helm hooks: conductor's
// chart has none, and the plain manifests could not express them.
var errHooks = errors.New("the chart renders hooks")

// renderer renders one loaded chart the way `helm template` does, offline:
// release options and capabilities are fixed, no cluster is consulted.
type renderer struct {
	chart *chart.Chart
	caps  *chartutil.Capabilities
}

// doc is one rendered Kubernetes object.
type doc struct {
	Source  string // template path, e.g. conductor/templates/service.yaml
	Kind    string
	Name    string
	Content string // the object's YAML
}

// rendering is the result of one successful render.
type rendering struct {
	Manifest string // the stream `helm template` prints
	Docs     []doc  // the objects in install order
	Notes    string // the rendered NOTES.txt
}

func newRenderer(chartDir string) (*renderer, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, kv.String()) {
		return nil, fmt.Errorf("chart kubeVersion %q excludes Kubernetes %s", ch.Metadata.KubeVersion, kv)
	}
	return &renderer{chart: ch, caps: caps}, nil
}

// readValues reads a values file; an empty path gives no overrides.
func readValues(file string) (map[string]any, error) {
	if file == "" {
		return map[string]any{}, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValues(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return vals.AsMap(), nil
}

// render renders the chart with vals over its defaults, validating them
// against values.schema.json first, as `helm template` does. Templates run in
// strict mode: a reference to a value that does not exist is an error rather
// than an empty string.
func (r *renderer) render(vals map[string]any) (rendering, error) {
	var out rendering
	if err := chartutil.ProcessDependenciesWithMerge(r.chart, vals); err != nil {
		return out, err
	}
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValues(r.chart, vals, opts, r.caps)
	if err != nil {
		return out, err
	}
	files, err := engine.Engine{Strict: true}.Render(r.chart, top)
	if err != nil {
		return out, err
	}
	notes := path.Join(r.chart.Name(), "templates", "NOTES.txt")
	out.Notes = files[notes]
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, r.caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return out, err
	}
	if len(hooks) > 0 {
		return out, fmt.Errorf("%w: %s", errHooks, hooks[0].Path)
	}
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
		d := doc{Source: m.Name, Kind: m.Head.Kind, Content: m.Content}
		if m.Head.Metadata != nil {
			d.Name = m.Head.Metadata.Name
		}
		out.Docs = append(out.Docs, d)
	}
	out.Manifest = strings.TrimSpace(b.String()) + "\n"
	return out, nil
}
