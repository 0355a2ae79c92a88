package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/seed-c7a81618/conductor/discovery"
	"github.com/seed-c7a81618/conductor/discovery/kubetest"
)

// TestKubernetesDiscoveryAPIServer runs discovery against a real API server:
// etcd and kube-apiserver from $CONDUCTOR_K8S_BIN (`make test-k8s` builds
// them: tools/kube/build.sh). conductor watches with an identity of its own
// that RBAC allows only to get, list and watch pods in its namespace (the
// chart's Role). Pods are created, made Ready with an IP through the status
// subresource, relabelled, annotated and deleted through the API while real
// ZMQ publishers stand in for the engines; after every step the query
// answers must equal the ground truth: exactly the Ready, labelled pods hit.
func TestKubernetesDiscoveryAPIServer(t *testing.T) {
	bin := os.Getenv("CONDUCTOR_K8S_BIN")
	if bin == "" {
		t.Skip("make test-k8s runs this test (it needs kube-apiserver and etcd in $CONDUCTOR_K8S_BIN)")
	}
	api := startAPIServer(t, bin)
	admin := kubetest.On(t, api.client(t, "admin"))
	ctx := context.Background()
	ns := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	roles := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	bindings := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		ns  string
		obj map[string]any
	}{
		{ns, "", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "llm"}}},
		{ns, "", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "other"}}},
		{roles, "llm", map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": map[string]any{"name": "conductor-discovery"},
			"rules": []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"get", "list", "watch"}}}}},
		{bindings, "llm", map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": map[string]any{"name": "conductor-discovery"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "conductor-discovery"},
			"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "conductor"}}}},
	} {
		if _, err := admin.Client.Resource(o.gvr).Namespace(o.ns).Create(ctx, &unstructured.Unstructured{Object: o.obj}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The identity may not read pods elsewhere.
	if _, err := api.client(t, "conductor").Resource(kubetest.Pods).Namespace("other").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("RBAC let conductor list pods outside its namespace")
	}

	engines := map[string]*kubeEngine{}
	for i, name := range []string{"e1", "e2", "e3"} {
		engines[name] = newKubeEngine(t, "qwen", int32(1000*(i+1)))
	}
	label := map[string]string{discovery.DefaultSelector: "vllm"}
	type podState struct {
		ready, labelled bool
		model           string
	}
	pods := map[string]*podState{}
	put := func(name string, st podState, create bool) {
		t.Helper()
		pods[name] = &st
		ann := map[string]string{}
		for k, v := range engines[name].ann {
			ann[k] = v
		}
		ann[discovery.AnnModel] = st.model
		var lbl map[string]string
		if st.labelled {
			lbl = label
		}
		p := kubetest.Pod("llm", name, "", "127.0.0.1", st.ready, lbl, ann)
		if create {
			admin.Create(p)
		} else {
			admin.Update(p)
		}
	}
	var p *proc // the conductor, started once the first pods exist
	// check waits until the answers equal the ground truth: an engine hits
	// under its pod's model exactly when its pod is Ready and labelled.
	check := func(step string) {
		t.Helper()
		var got, want string
		waitFor(t, step+": answers equal the ground truth", func() bool {
			var g, w []string
			for _, name := range []string{"e1", "e2", "e3"} {
				e := engines[name]
				e.publish(t)
				st := pods[name]
				for _, model := range []string{"qwen", "llama"} {
					if st != nil && st.ready && st.labelled && st.model == model {
						w = append(w, name+"@"+model)
					}
					if matched(t, p, model, e.tokens)["llm/"+name] == len(e.tokens) {
						g = append(g, name+"@"+model)
					}
				}
			}
			sort.Strings(g)
			got, want = strings.Join(g, " "), strings.Join(w, " ")
			return got == want
		})
		t.Logf("%s: %q", step, got)
	}

	put("e1", podState{ready: true, labelled: true, model: "qwen"}, true)
	put("e2", podState{ready: false, labelled: true, model: "qwen"}, true)
	put("e3", podState{ready: true, labelled: false, model: "qwen"}, true)
	kubeconfig := api.kubeconfig(t, "conductor", "llm")
	p = startConductor(t, "", "--discover-kubernetes", kubeconfig)
	check("start: e1 Ready, e2 not Ready, e3 unlabelled")
	put("e2", podState{ready: true, labelled: true, model: "qwen"}, false)
	check("e2 Ready")
	put("e3", podState{ready: true, labelled: true, model: "qwen"}, false)
	check("e3 labelled")
	put("e2", podState{ready: true, labelled: false, model: "qwen"}, false)
	check("e2 unlabelled")
	put("e1", podState{ready: false, labelled: true, model: "qwen"}, false)
	check("e1 not Ready")
	put("e3", podState{ready: true, labelled: true, model: "llama"}, false)
	check("e3 serves another model")
	admin.Delete("llm", "e3")
	delete(pods, "e3")
	check("e3 deleted")
	put("e3", podState{ready: true, labelled: true, model: "qwen"}, true)
	check("e3 recreated")
	put("e1", podState{ready: true, labelled: true, model: "qwen"}, false)
	check("e1 Ready again")
	for _, name := range []string{"e1", "e2", "e3"} {
		admin.Delete("llm", name)
		delete(pods, name)
	}
	check("every pod deleted")
}

// apiServer is a running etcd and kube-apiserver on loopback.
type apiServer struct {
	url    string
	tokens map[string]string // user → bearer token
	dir    string
}

func startAPIServer(t *testing.T, bin string) *apiServer {
	t.Helper()
	dir := t.TempDir()
	free := func() int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	etcdPort, peerPort, apiPort := free(), free(), free()
	start := func(name string, args ...string) {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			log.Close()
			if t.Failed() {
				b, _ := os.ReadFile(log.Name())
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("%s log (end):\n%s", name, b)
			}
		})
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	start("etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort))

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	writeFile(t, filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	a := &apiServer{url: fmt.Sprintf("https://127.0.0.1:%d", apiPort), dir: dir,
		tokens: map[string]string{"admin": "admin-token-0123456789abcdef", "conductor": "conductor-token-0123456789abcdef"}}
	writeFile(t, filepath.Join(dir, "tokens.csv"), []byte(a.tokens["admin"]+",admin,1,system:masters\n"+a.tokens["conductor"]+",conductor,2\n"))
	start("kube-apiserver", "--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(apiPort),
		"--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.96.0.0/16",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		// No controller manager runs: nothing would create the namespaces'
		// default service accounts the ServiceAccount admission plugin wants.
		"--disable-admission-plugins", "ServiceAccount", "--enable-priority-and-fairness=false")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(3 * waitBound)
	for {
		req, _ := http.NewRequest("GET", a.url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+a.tokens["admin"])
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return a
}

// client is a dynamic client for user.
func (a *apiServer) client(t *testing.T, user string) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(&rest.Config{Host: a.url, BearerToken: a.tokens[user], TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubeconfig writes a kubeconfig for user, namespace ns, and returns its path.
func (a *apiServer) kubeconfig(t *testing.T, user, ns string) string {
	t.Helper()
	path := filepath.Join(a.dir, user+".kubeconfig")
	writeFile(t, path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: %s
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: %s, namespace: %s}
current-context: test
`, a.url, user, a.tokens[user], user, ns)))
	return path
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
