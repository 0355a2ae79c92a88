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
// ip (none when ""), and the labels and annotations given; its spec is one
// container, as a real API server requires. uid is the fake server's (a real
// one assigns its own).
func Pod(ns, name, uid, ip string, ready bool, labels, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
		"spec": map[string]any{"containers": []any{map[string]any{"name": "engine", "image": "engine:test"}}}}}
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
		st["podIPs"] = []any{map[string]any{"ip": ip}}
	}
	u.Object["status"] = st
	return u
}

// Cluster is an API server holding pods: client-go's fake one (NewCluster)
// or a real one (a dynamic client over it); its methods fail the test on
// error.
type Cluster struct {
	t      testing.TB
	Client dynamic.Interface
}

// NewCluster returns an empty fake cluster.
func NewCluster(t testing.TB) *Cluster {
	c := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{Pods: "PodList"})
	return &Cluster{t: t, Client: c}
}

// On returns a Cluster over client.
func On(t testing.TB, client dynamic.Interface) *Cluster { return &Cluster{t: t, Client: client} }

// Create adds a pod, then sets its status through the status subresource
// (as a kubelet does; a create does not take the status).
func (c *Cluster) Create(u *unstructured.Unstructured) {
	c.t.Helper()
	ri := c.Client.Resource(Pods).Namespace(u.GetNamespace())
	made, err := ri.Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	made.Object["status"] = u.Object["status"]
	if _, err := ri.UpdateStatus(context.Background(), made, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// Update replaces a pod's labels and annotations, then its status.
func (c *Cluster) Update(u *unstructured.Unstructured) {
	c.t.Helper()
	ri := c.Client.Resource(Pods).Namespace(u.GetNamespace())
	cur, err := ri.Get(context.Background(), u.GetName(), metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	cur.SetLabels(u.GetLabels())
	cur.SetAnnotations(u.GetAnnotations())
	if cur, err = ri.Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	cur.Object["status"] = u.Object["status"]
	if _, err := ri.UpdateStatus(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// Delete removes a pod at once.
func (c *Cluster) Delete(ns, name string) {
	c.t.Helper()
	zero := int64(0)
	if err := c.Client.Resource(Pods).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		c.t.Fatal(err)
	}
}
