package main

import (
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const testChart = "../../deploy/helm/conductor"

// renderObjects renders the chart with the value set in ci/file and decodes it.
func renderObjects(t *testing.T, file string) []object {
	t.Helper()
	r, err := newRenderer(testChart)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := newDecoder()
	if err != nil {
		t.Fatal(err)
	}
	vals, err := readValues(testChart + "/ci/" + file)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.render(vals)
	if err != nil {
		t.Fatal(err)
	}
	objs := make([]object, 0, len(out.Docs))
	for _, d := range out.Docs {
		o, err := dec.decode(d)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	if errs := checkPolicy(objs); len(errs) > 0 {
		t.Fatalf("%s fails before any change: %v", file, errs)
	}
	return objs
}

func find[T any](t *testing.T, objs []object) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.Obj.(T); ok {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T rendered", zero)
	return zero
}

func container(t *testing.T, objs []object) *corev1.Container {
	return &find[*appsv1.StatefulSet](t, objs).Spec.Template.Spec.Containers[0]
}

// TestPolicyCatches breaks one thing at a time in the rendered objects of a
// value set and expects checkPolicy to name it.
func TestPolicyCatches(t *testing.T) {
	f := func(file, want string, breakIt func(t *testing.T, objs []object)) {
		t.Helper()
		objs := renderObjects(t, file)
		breakIt(t, objs)
		errs := checkPolicy(objs)
		for _, e := range errs {
			if strings.Contains(e.Error(), want) {
				return
			}
		}
		t.Errorf("%s: want an error containing %q, got %v", file, want, errs)
	}
	const def = "default-values.yaml"
	f(def, "no resources.requests.cpu", func(t *testing.T, objs []object) {
		delete(container(t, objs).Resources.Requests, corev1.ResourceCPU)
	})
	f(def, "no resources.limits.memory", func(t *testing.T, objs []object) {
		container(t, objs).Resources.Limits = nil
	})
	f(def, "below the request", func(t *testing.T, objs []object) {
		container(t, objs).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
	})
	f(def, "readOnlyRootFilesystem is not true", func(t *testing.T, objs []object) {
		no := false
		container(t, objs).SecurityContext.ReadOnlyRootFilesystem = &no
	})
	f(def, "capabilities.drop lacks ALL", func(t *testing.T, objs []object) {
		container(t, objs).SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"}
	})
	f(def, "pod securityContext.fsGroup is not 65532", func(t *testing.T, objs []object) {
		find[*appsv1.StatefulSet](t, objs).Spec.Template.Spec.SecurityContext.FSGroup = nil
	})
	f(def, "seccompProfile is not RuntimeDefault", func(t *testing.T, objs []object) {
		container(t, objs).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	})
	f(def, "no startupProbe", func(t *testing.T, objs []object) {
		container(t, objs).StartupProbe = nil
	})
	f(def, "livenessProbe port metrics is not a port of the container", func(t *testing.T, objs []object) {
		container(t, objs).LivenessProbe.HTTPGet.Port = intstr.FromString("metrics")
	})
	f(def, `readinessProbe path "/livez", want "/health"`, func(t *testing.T, objs []object) {
		container(t, objs).ReadinessProbe.HTTPGet.Path = "/livez"
	})
	f(def, "matches no workload's pods", func(t *testing.T, objs []object) {
		find[*corev1.Service](t, objs).Spec.Selector["app.kubernetes.io/component"] = "replica"
	})
	f(def, `port "rpc" targets grpc`, func(t *testing.T, objs []object) {
		find[*corev1.Service](t, objs).Spec.Ports[1].TargetPort = intstr.FromString("grpc")
	})
	f(def, "is not a headless Service of this render", func(t *testing.T, objs []object) {
		find[*appsv1.StatefulSet](t, objs).Spec.ServiceName = "conductor"
	})
	f(def, "without --admin-token-file or --insecure", func(t *testing.T, objs []object) {
		ct := container(t, objs)
		ct.Args = removeArg(ct.Args, "--admin-token-file")
	})
	f(def, "is on no mounted volume", func(t *testing.T, objs []object) {
		ct := container(t, objs)
		ct.VolumeMounts = ct.VolumeMounts[1:] // the configuration's mount
	})
	f(def, "/tmp is not an emptyDir", func(t *testing.T, objs []object) {
		ct := container(t, objs)
		for i := range ct.VolumeMounts {
			if ct.VolumeMounts[i].MountPath == "/tmp" {
				ct.VolumeMounts[i].MountPath = "/scratch"
			}
		}
	})
	f(def, "exponent form", func(t *testing.T, objs []object) {
		ct := container(t, objs)
		ct.Args = append(ct.Args, "--nats-max-bytes=1.073741824e+10")
	})
	f(def, "label app.kubernetes.io/version missing", func(t *testing.T, objs []object) {
		delete(find[*corev1.ConfigMap](t, objs).Labels, "app.kubernetes.io/version")
	})
	f(def, "no metadata.namespace", func(t *testing.T, objs []object) {
		find[*corev1.ServiceAccount](t, objs).Namespace = ""
	})
	f("nats-values.yaml", "sets spec.replicas", func(t *testing.T, objs []object) {
		for _, o := range objs {
			if d, ok := o.Obj.(*appsv1.Deployment); ok {
				n := int32(2)
				d.Spec.Replicas = &n
			}
		}
	})
	f("nats-values.yaml", "is not a workload of this render", func(t *testing.T, objs []object) {
		find[*autoscalingv2.HorizontalPodAutoscaler](t, objs).Spec.ScaleTargetRef.Kind = "StatefulSet"
	})
	f("nats-values.yaml", "selects headless Service", func(t *testing.T, objs []object) {
		find[*monitoringv1.ServiceMonitor](t, objs).Spec.Selector.MatchExpressions = nil
	})
	f("servicemonitor-values.yaml", `endpoint port "metrics" is not a port`, func(t *testing.T, objs []object) {
		find[*monitoringv1.ServiceMonitor](t, objs).Spec.Endpoints[0].Port = "metrics"
	})
	f("discovery-values.yaml", "is not a role of this render", func(t *testing.T, objs []object) {
		find[*rbacv1.RoleBinding](t, objs).RoleRef.Name = "pod-reader"
	})
	f("discovery-clusterwide-values.yaml", "is not a ServiceAccount of this render", func(t *testing.T, objs []object) {
		find[*rbacv1.ClusterRoleBinding](t, objs).Subjects[0].Namespace = "default"
	})
}

func removeArg(args []string, flag string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, flag+"=") {
			out = append(out, a)
		}
	}
	return out
}

// TestStrictDecode feeds the decoder objects a lenient decoder would accept.
func TestStrictDecode(t *testing.T) {
	dec, err := newDecoder()
	if err != nil {
		t.Fatal(err)
	}
	f := func(name, content, want string) {
		t.Helper()
		_, err := dec.decode(doc{Source: name, Kind: "Service", Name: "s", Content: content})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want an error containing %q, got %v", name, want, err)
		}
	}
	const head = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n"
	f("unknown field", head+"spec:\n  selectr:\n    a: b\n", `unknown field "spec.selectr"`)
	f("duplicate field", head+"spec:\n  type: ClusterIP\n  type: NodePort\n", `"type" already set`)
	f("wrong type", head+"spec:\n  ports:\n    - port: http\n", "cannot unmarshal")
	f("unknown kind", "apiVersion: v1\nkind: Sevrice\nmetadata:\n  name: s\n", "no kind")
	if _, err := dec.decode(doc{Source: "good", Kind: "Service", Content: head + "spec:\n  ports:\n    - port: 80\n"}); err != nil {
		t.Errorf("a valid Service: %v", err)
	}
}

// TestChart is `make chart-check` as a test: the chart passes every check
// and deploy/k8s/conductor.yaml is current.
func TestChart(t *testing.T) {
	var out strings.Builder
	if err := run(&out, testChart, "../../deploy/k8s/conductor.yaml", false); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}

// TestKubeVersionMatchesAPITypes keeps kubeVersion at the Kubernetes minor
// version of the k8s.io/api module the objects are decoded with (v0.N.x
// serves Kubernetes 1.N).
func TestKubeVersionMatchesAPITypes(t *testing.T) {
	api := moduleVersion("k8s.io/api")
	minor, _, ok := strings.Cut(strings.TrimPrefix(api, "v0."), ".")
	if !ok {
		t.Fatalf("k8s.io/api version %q", api)
	}
	if want := "v1." + minor + ".0"; kubeVersion != want {
		t.Errorf("kubeVersion = %s, but k8s.io/api is %s: want %s", kubeVersion, api, want)
	}
}
