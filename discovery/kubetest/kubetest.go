// Package kubetest builds pods and a fake API server for the tests of
// Kubernetes discovery (package discovery and cmd/conductor).
package kubetest

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/fake"
)

// Pods is the core API's pods resource.
var Pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Pod is a pod object in phase Running with a Ready condition of ready, IP
// ip (none when ""), and the labels and annotations given.
func Pod(ns, name, uid, ip string, ready bool, labels, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetUID(types.UID(uid))
	u.SetLabels(labels)
	u.SetAnnotations(annotations)
	status := "False"
	if ready {
		status = "True"
	}
	st := map[string]any{"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": status}}}
	if ip != "" {
		st["podIP"] = ip
	}
	u.Object["status"] = st
	return u
}

// Cluster is client-go's fake dynamic client holding pods; its methods fail
// the test on error.
type Cluster struct {
	t      testing.TB
	Client dynamic.Interface
}

// NewCluster returns an empty fake cluster.
func NewCluster(t testing.TB) *Cluster {
	c := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{Pods: "PodList"})
	return &Cluster{t: t, Client: c}
}

// Create adds a pod.
func (c *Cluster) Create(u *unstructured.Unstructured) {
	c.t.Helper()
	if _, err := c.Client.Resource(Pods).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// Update replaces a pod, status included.
func (c *Cluster) Update(u *unstructured.Unstructured) {
	c.t.Helper()
	if _, err := c.Client.Resource(Pods).Namespace(u.GetNamespace()).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// Delete removes a pod.
func (c *Cluster) Delete(ns, name string) {
	c.t.Helper()
	if err := c.Client.Resource(Pods).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
}
