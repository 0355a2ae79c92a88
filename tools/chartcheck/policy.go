package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The identity every conductor pod runs as (the image's non-root user).
const podUserID = 65532

// requiredLabels are the labels every rendered object carries.
var requiredLabels = []string{
	"app.kubernetes.io/name",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
	"app.kubernetes.io/component",
	"app.kubernetes.io/managed-by",
	"helm.sh/chart",
}

// floatForm matches a number printed in exponent form, e.g. 1.073741824e+10.
var floatForm = regexp.MustCompile(`^-?[0-9.]+e[-+]?[0-9]+$`)

// fileFlags are conductor's flags that name a file it reads at start.
var fileFlags = []string{"--config", "--admin-token-file", "--query-token-file", "--client-tokens-file"}

// workload is the part of a Deployment or StatefulSet the checks read.
type workload struct {
	Source, Kind, Name, Namespace string
	Replicas                      *int32
	Selector                      *metav1.LabelSelector
	Template                      corev1.PodTemplateSpec
	ServiceName                   string // StatefulSet only
	Claims                        []corev1.PersistentVolumeClaim
}

// inventory indexes one render's objects for the cross-object checks.
type inventory struct {
	workloads []workload
	services  []*corev1.Service
	byKey     map[string]object // "Kind/namespace/name"
}

func key(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

func newInventory(objs []object) (*inventory, []error) {
	inv := &inventory{byKey: map[string]object{}}
	var errs []error
	for _, o := range objs {
		m, err := metaOf(o.Obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.Source, err))
			continue
		}
		kind := o.Obj.GetObjectKind().GroupVersionKind().Kind
		k := key(kind, m.GetNamespace(), m.GetName())
		if _, dup := inv.byKey[k]; dup {
			errs = append(errs, fmt.Errorf("%s: %s %q in namespace %q is rendered twice", o.Source, kind, m.GetName(), m.GetNamespace()))
		}
		inv.byKey[k] = o
		switch t := o.Obj.(type) {
		case *appsv1.Deployment:
			inv.workloads = append(inv.workloads, workload{Source: o.Source, Kind: kind, Name: t.Name, Namespace: t.Namespace,
				Replicas: t.Spec.Replicas, Selector: t.Spec.Selector, Template: t.Spec.Template})
		case *appsv1.StatefulSet:
			inv.workloads = append(inv.workloads, workload{Source: o.Source, Kind: kind, Name: t.Name, Namespace: t.Namespace,
				Replicas: t.Spec.Replicas, Selector: t.Spec.Selector, Template: t.Spec.Template,
				ServiceName: t.Spec.ServiceName, Claims: t.Spec.VolumeClaimTemplates})
		case *corev1.Service:
			inv.services = append(inv.services, t)
		}
	}
	return inv, errs
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

func (inv *inventory) has(kind, ns, name string) bool {
	_, ok := inv.byKey[key(kind, ns, name)]
	return ok
}

// checkPolicy runs every check the values schema cannot express over one
// render's objects and returns every failure.
func checkPolicy(objs []object) []error {
	inv, errs := newInventory(objs)
	c := &checker{inv: inv, errs: errs}
	for _, o := range objs {
		c.metadata(o)
		switch t := o.Obj.(type) {
		case *corev1.Service:
			c.service(o.Source, t)
		case *monitoringv1.ServiceMonitor:
			c.serviceMonitor(o.Source, t)
		case *autoscalingv2.HorizontalPodAutoscaler:
			c.hpa(o.Source, t)
		case *rbacv1.RoleBinding:
			c.binding(o.Source, "RoleBinding", t.Namespace, t.Name, t.RoleRef, t.Subjects)
		case *rbacv1.ClusterRoleBinding:
			c.binding(o.Source, "ClusterRoleBinding", "", t.Name, t.RoleRef, t.Subjects)
		}
	}
	for i := range inv.workloads {
		c.workload(&inv.workloads[i])
	}
	return c.errs
}

type checker struct {
	inv  *inventory
	errs []error
}

func (c *checker) fail(source, what, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s: %s", source, what, fmt.Sprintf(format, args...)))
}

// clusterScoped kinds carry no namespace.
var clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true}

func (c *checker) metadata(o object) {
	m, err := metaOf(o.Obj)
	if err != nil {
		return
	}
	kind := o.Obj.GetObjectKind().GroupVersionKind().Kind
	what := kind + "/" + m.GetName()
	nameErrs := validation.IsDNS1123Subdomain(m.GetName())
	if kind == "Service" {
		nameErrs = validation.IsDNS1035Label(m.GetName())
	}
	for _, e := range nameErrs {
		c.fail(o.Source, what, "name: %s", e)
	}
	switch ns := m.GetNamespace(); {
	case clusterScoped[kind] && ns != "":
		c.fail(o.Source, what, "a cluster-scoped object names namespace %q", ns)
	case !clusterScoped[kind] && ns == "":
		c.fail(o.Source, what, "no metadata.namespace (plain manifests would land in the caller's namespace)")
	}
	c.labels(o.Source, what, m.GetLabels(), true)
}

func (c *checker) labels(source, what string, l map[string]string, required bool) {
	if required {
		for _, k := range requiredLabels {
			if l[k] == "" {
				c.fail(source, what, "label %s missing", k)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(l)) {
		v := l[k]
		for _, e := range validation.IsQualifiedName(k) {
			c.fail(source, what, "label key %q: %s", k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			c.fail(source, what, "label %s=%q: %s", k, v, e)
		}
	}
}

func (c *checker) workload(w *workload) {
	what := w.Kind + "/" + w.Name
	sel, err := metav1.LabelSelectorAsSelector(w.Selector)
	switch {
	case err != nil:
		c.fail(w.Source, what, "selector: %v", err)
	case sel.Empty():
		c.fail(w.Source, what, "empty selector")
	case !sel.Matches(labels.Set(w.Template.Labels)):
		c.fail(w.Source, what, "selector %s does not match the pod template's labels", sel)
	}
	c.labels(w.Source, what+" pod template", w.Template.Labels, true)
	if w.Kind == "StatefulSet" {
		o, ok := c.inv.byKey[key("Service", w.Namespace, w.ServiceName)]
		if svc, _ := o.Obj.(*corev1.Service); !ok || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			c.fail(w.Source, what, "serviceName %q is not a headless Service of this render", w.ServiceName)
		}
	}
	spec := &w.Template.Spec
	if sa := spec.ServiceAccountName; sa == "" || !c.inv.has("ServiceAccount", w.Namespace, sa) {
		c.fail(w.Source, what, "serviceAccountName %q is not a ServiceAccount of this render", sa)
	}
	c.podSecurity(w.Source, what, spec.SecurityContext)
	volumes := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if volumes[v.Name] != nil {
			c.fail(w.Source, what, "volume %q defined twice", v.Name)
		}
		volumes[v.Name] = v
		if cm := v.ConfigMap; cm != nil && !c.inv.has("ConfigMap", w.Namespace, cm.Name) {
			c.fail(w.Source, what, "volume %q names ConfigMap %q, which this render lacks", v.Name, cm.Name)
		}
	}
	claims := map[string]bool{}
	for _, pvc := range w.Claims {
		claims[pvc.Name] = true
		if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			c.fail(w.Source, what, "volumeClaimTemplate %q requests no storage", pvc.Name)
		}
	}
	if len(spec.Containers) == 0 {
		c.fail(w.Source, what, "no containers")
	}
	for i := range spec.InitContainers {
		c.container(w, &spec.InitContainers[i], volumes, claims, false)
	}
	for i := range spec.Containers {
		c.container(w, &spec.Containers[i], volumes, claims, true)
	}
}

func (c *checker) podSecurity(source, what string, sc *corev1.PodSecurityContext) {
	if sc == nil {
		c.fail(source, what, "no pod securityContext")
		return
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		c.fail(source, what, "pod securityContext.runAsNonRoot is not true")
	}
	for _, f := range []struct {
		name string
		id   *int64
	}{{"runAsUser", sc.RunAsUser}, {"runAsGroup", sc.RunAsGroup}, {"fsGroup", sc.FSGroup}} {
		if f.id == nil || *f.id != podUserID {
			c.fail(source, what, "pod securityContext.%s is not %d", f.name, podUserID)
		}
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		c.fail(source, what, "pod securityContext.seccompProfile is not RuntimeDefault")
	}
}

func (c *checker) container(w *workload, ct *corev1.Container, volumes map[string]*corev1.Volume, claims map[string]bool, probed bool) {
	what := fmt.Sprintf("%s/%s container %q", w.Kind, w.Name, ct.Name)
	if ct.Name == "" || ct.Image == "" {
		c.fail(w.Source, what, "container without a name or an image")
	}
	req, lim := ct.Resources.Requests, ct.Resources.Limits
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := req[r]; !ok || q.IsZero() {
			c.fail(w.Source, what, "no resources.requests.%s", r)
		}
	}
	if q, ok := lim[corev1.ResourceMemory]; !ok || q.IsZero() {
		c.fail(w.Source, what, "no resources.limits.memory")
	} else if r, ok := req[corev1.ResourceMemory]; ok && q.Cmp(r) < 0 {
		c.fail(w.Source, what, "resources.limits.memory %s is below the request %s", q.String(), r.String())
	}
	c.containerSecurity(w.Source, what, ct.SecurityContext, w.Template.Spec.SecurityContext)

	mounts := map[string]string{} // mount path → volume name
	for _, m := range ct.VolumeMounts {
		if volumes[m.Name] == nil && !claims[m.Name] {
			c.fail(w.Source, what, "volumeMount %q names no volume or claim template", m.Name)
		}
		mounts[m.MountPath] = m.Name
	}
	if v := volumes[mounts["/tmp"]]; v == nil || v.EmptyDir == nil {
		c.fail(w.Source, what, "/tmp is not an emptyDir (the root filesystem is read-only)")
	}
	c.args(w.Source, what, ct.Args, mounts)
	if !probed {
		return
	}
	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
	}{
		{"readinessProbe", "/health", ct.ReadinessProbe},
		{"livenessProbe", "/livez", ct.LivenessProbe},
		{"startupProbe", "/livez", ct.StartupProbe},
	} {
		switch {
		case p.probe == nil:
			c.fail(w.Source, what, "no %s", p.name)
		case p.probe.HTTPGet == nil:
			c.fail(w.Source, what, "%s is not an httpGet", p.name)
		default:
			if p.probe.HTTPGet.Path != p.path {
				c.fail(w.Source, what, "%s path %q, want %q", p.name, p.probe.HTTPGet.Path, p.path)
			}
			if !hasPort(ct, p.probe.HTTPGet.Port) {
				c.fail(w.Source, what, "%s port %s is not a port of the container", p.name, p.probe.HTTPGet.Port.String())
			}
		}
	}
}

func (c *checker) containerSecurity(source, what string, sc *corev1.SecurityContext, pod *corev1.PodSecurityContext) {
	if sc == nil {
		c.fail(source, what, "no securityContext")
		return
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		c.fail(source, what, "securityContext.allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		c.fail(source, what, "securityContext.readOnlyRootFilesystem is not true")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		c.fail(source, what, "securityContext.capabilities.drop lacks ALL")
	} else if len(sc.Capabilities.Add) > 0 {
		c.fail(source, what, "securityContext.capabilities.add is %v", sc.Capabilities.Add)
	}
	if sc.Privileged != nil && *sc.Privileged {
		c.fail(source, what, "privileged")
	}
	// The container's own settings override the pod's.
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil && pod != nil {
		nonRoot = pod.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		c.fail(source, what, "runAsNonRoot is not true")
	}
	if sc.RunAsUser != nil && *sc.RunAsUser != podUserID {
		c.fail(source, what, "securityContext.runAsUser is %d, not %d", *sc.RunAsUser, podUserID)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil && pod != nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		c.fail(source, what, "seccompProfile is not RuntimeDefault")
	}
}

// args checks conductor's arguments: a listener beyond loopback has an admin
// token or says --insecure (conductor refuses to start otherwise), and every
// file it is told to read lies on a mounted volume.
func (c *checker) args(source, what string, args []string, mounts map[string]string) {
	flags := map[string]string{}
	for _, a := range args {
		name, val, _ := strings.Cut(a, "=")
		flags[name] = val
		// A YAML number reaches a template as a float64, which prints
		// large values in exponent form; conductor's integer flags refuse it.
		if floatForm.MatchString(val) {
			c.fail(source, what, "%s: a number in exponent form (render it through int64)", a)
		}
	}
	if listen, ok := flags["--listen"]; ok && listen != "127.0.0.1" && listen != "::1" && listen != "localhost" {
		_, token := flags["--admin-token-file"]
		_, insecure := flags["--insecure"]
		if !token && !insecure {
			c.fail(source, what, "--listen=%s without --admin-token-file or --insecure: conductor refuses to start", listen)
		}
	}
	for _, f := range fileFlags {
		file, ok := flags[f]
		if !ok {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(mounts)), func(dir string) bool {
			return strings.HasPrefix(file, strings.TrimSuffix(dir, "/")+"/")
		}) {
			c.fail(source, what, "%s=%s is on no mounted volume", f, file)
		}
	}
}

func hasPort(ct *corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range ct.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return true
		}
	}
	return false
}

// matchingWorkloads returns the workloads in ns whose pods sel selects.
func (c *checker) matchingWorkloads(ns string, sel labels.Selector) []*workload {
	var out []*workload
	for i := range c.inv.workloads {
		w := &c.inv.workloads[i]
		if w.Namespace == ns && sel.Matches(labels.Set(w.Template.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

func (c *checker) service(source string, s *corev1.Service) {
	what := "Service/" + s.Name
	if len(s.Spec.Selector) == 0 {
		c.fail(source, what, "no selector")
		return
	}
	ws := c.matchingWorkloads(s.Namespace, labels.SelectorFromSet(s.Spec.Selector))
	if len(ws) == 0 {
		c.fail(source, what, "selector %v matches no workload's pods", s.Spec.Selector)
	}
	names := map[string]bool{}
	for _, p := range s.Spec.Ports {
		if names[p.Name] {
			c.fail(source, what, "port name %q used twice", p.Name)
		}
		names[p.Name] = true
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		for _, w := range ws {
			found := false
			for i := range w.Template.Spec.Containers {
				found = found || hasPort(&w.Template.Spec.Containers[i], target)
			}
			if !found {
				c.fail(source, what, "port %q targets %s, which %s/%s does not expose", p.Name, target.String(), w.Kind, w.Name)
			}
		}
	}
}

func (c *checker) serviceMonitor(source string, sm *monitoringv1.ServiceMonitor) {
	what := "ServiceMonitor/" + sm.Name
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		c.fail(source, what, "selector: %v", err)
		return
	}
	namespaces := sm.Spec.NamespaceSelector.MatchNames
	if len(namespaces) == 0 {
		namespaces = []string{sm.Namespace}
	}
	var matched []*corev1.Service
	for _, s := range c.inv.services {
		if slices.Contains(namespaces, s.Namespace) && sel.Matches(labels.Set(s.Labels)) {
			matched = append(matched, s)
		}
	}
	if len(matched) == 0 {
		c.fail(source, what, "selector %s matches no Service", sel)
	}
	for _, s := range matched {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			c.fail(source, what, "selects headless Service %s, so its pods are scraped twice", s.Name)
		}
	}
	if len(sm.Spec.Endpoints) == 0 {
		c.fail(source, what, "no endpoints")
	}
	for _, ep := range sm.Spec.Endpoints {
		if ep.Port == "" {
			c.fail(source, what, "an endpoint names no port")
			continue
		}
		for _, s := range matched {
			if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				c.fail(source, what, "endpoint port %q is not a port of Service %s", ep.Port, s.Name)
			}
		}
		if a := ep.Authorization; a != nil && a.Credentials != nil && (a.Credentials.Name == "" || a.Credentials.Key == "") {
			c.fail(source, what, "authorization credentials name no Secret key")
		}
	}
}

func (c *checker) hpa(source string, h *autoscalingv2.HorizontalPodAutoscaler) {
	what := "HorizontalPodAutoscaler/" + h.Name
	ref := h.Spec.ScaleTargetRef
	var target *workload
	for i := range c.inv.workloads {
		w := &c.inv.workloads[i]
		if w.Namespace == h.Namespace && w.Kind == ref.Kind && w.Name == ref.Name {
			target = w
		}
	}
	if target == nil || ref.APIVersion != "apps/v1" {
		c.fail(source, what, "scaleTargetRef %s %s/%s is not a workload of this render", ref.APIVersion, ref.Kind, ref.Name)
		return
	}
	if target.Replicas != nil {
		c.fail(source, what, "%s/%s sets spec.replicas, which every upgrade would reset under the autoscaler", target.Kind, target.Name)
	}
	if lo := h.Spec.MinReplicas; lo != nil && *lo > h.Spec.MaxReplicas {
		c.fail(source, what, "minReplicas %d exceeds maxReplicas %d", *lo, h.Spec.MaxReplicas)
	}
	for _, m := range h.Spec.Metrics {
		if m.Type != autoscalingv2.ResourceMetricSourceType || m.Resource == nil || m.Resource.Target.Type != autoscalingv2.UtilizationMetricType {
			continue
		}
		for _, ct := range target.Template.Spec.Containers {
			if _, ok := ct.Resources.Requests[m.Resource.Name]; !ok {
				c.fail(source, what, "utilization of %s needs a %s request on container %q", m.Resource.Name, m.Resource.Name, ct.Name)
			}
		}
	}
}

func (c *checker) binding(source, kind, ns, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
	what := kind + "/" + name
	roleNS := ns
	if ref.Kind == "ClusterRole" {
		roleNS = ""
	}
	if ref.APIGroup != rbacv1.GroupName || !c.inv.has(ref.Kind, roleNS, ref.Name) {
		c.fail(source, what, "roleRef %s %q is not a role of this render", ref.Kind, ref.Name)
	}
	if len(subjects) == 0 {
		c.fail(source, what, "no subjects")
	}
	for _, s := range subjects {
		if s.Kind != rbacv1.ServiceAccountKind || !c.inv.has("ServiceAccount", s.Namespace, s.Name) {
			c.fail(source, what, "subject %s %s/%s is not a ServiceAccount of this render", s.Kind, s.Namespace, s.Name)
		}
	}
}
