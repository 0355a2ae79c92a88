package main

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/discovery"
	"github.com/seed-c7a81618/conductor/discovery/kubetest"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/statedir"
)

// kubeEngine is a vLLM engine on loopback standing in for an engine pod: a
// real ZMQ publisher, its pod annotations, and the prompt it holds.
type kubeEngine struct {
	pub    *bench.Publisher
	ann    map[string]string
	tokens []int32
	hashes []uint64
	seq    float64
}

func newKubeEngine(t *testing.T, model string, base int32) *kubeEngine {
	t.Helper()
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	port := func(ep string) string {
		u, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		return u.Port()
	}
	// The annotations' defaults: vLLM, block size 16, vllm_v1 sha256 with
	// PYTHONHASHSEED=0 (discovery/pod.go).
	prof, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	e := &kubeEngine{pub: pub, ann: map[string]string{discovery.AnnModel: model,
		discovery.AnnEventsPort: port(pub.Endpoint()), discovery.AnnReplayPort: port(pub.ReplayEndpoint())}, seq: 1}
	for i := range 48 {
		e.tokens = append(e.tokens, base+int32(i))
	}
	if e.hashes, err = hash.AppendChain(nil, &prof, e.tokens, 16, nil, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// publish sends the engine's blocks once more.
func (e *kubeEngine) publish(t *testing.T) {
	mustPublish(t, e.pub, bench.AppendVLLMBatch(nil, bench.EraMap, e.seq, 0,
		bench.EngineStored{Hashes: e.hashes, Tokens: e.tokens, BlockSize: 16, Medium: "GPU"}))
	e.seq++
}

// matched is what /query answers for the engine's prompt: instance →
// longest_matched.
func matched(t *testing.T, p *proc, model string, tokens []int32) map[string]int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "block_size": 16, "token_ids": tokens})
	code, _, b := httpDo(t, "POST", p.url("/query"), "application/json", body)
	var res map[string]map[string]map[string]any
	if code != 200 || json.Unmarshal(b, &res) != nil {
		t.Fatalf("query: %d %s", code, b)
	}
	out := map[string]int{}
	for inst, m := range res["default"] {
		n, _ := m["longest_matched"].(float64)
		out[inst] = int(n)
	}
	return out
}

// TestKubernetesDiscovery runs conductor with --discover-kubernetes against
// client-go's fake API server: engine pods that become Ready are registered
// and answer queries with hits from their real ZMQ publishers; a pod that is
// no longer Ready, or deleted, stops answering; /services names the source;
// the state file holds only the API's registration.
func TestKubernetesDiscovery(t *testing.T) {
	c := kubetest.NewCluster(t)
	orig := kubeClient
	kubeClient = func(mode string) (dynamic.Interface, string, error) {
		if mode != "test-kubeconfig" {
			t.Errorf("client for %q", mode)
		}
		return c.Client, "llm", nil
	}
	t.Cleanup(func() { kubeClient = orig })

	e1, e2 := newKubeEngine(t, "qwen", 1000), newKubeEngine(t, "qwen", 5000)
	label := map[string]string{discovery.DefaultSelector: "vllm"}
	c.Create(kubetest.Pod("llm", "e1", "u1", "127.0.0.1", true, label, e1.ann))
	c.Create(kubetest.Pod("llm", "e2", "u2", "", false, label, e2.ann))
	c.Create(kubetest.Pod("other", "e3", "u3", "127.0.0.1", true, label, e2.ann)) // not a watched namespace
	p := startConductor(t, "", "--discover-kubernetes", "test-kubeconfig")
	// Ready once the first list is reconciled (discovery.Discovery.Ready).
	waitFor(t, "/health ready", func() bool { code, _, _ := httpDo(t, "GET", p.url("/health"), "", nil); return code == 200 })

	// One API registration besides: its own publisher.
	api := newKubeEngine(t, "qwen", 9000)
	body := `{"endpoint":"` + api.pub.Endpoint() + `","type":"vLLM","modelname":"qwen","instance_id":"api-engine","block_size":16,"dp_rank":0,` +
		`"hash_profile":{"strategy":"vllm_v1","algorithm":"sha256","python_hash_seed":"0","index_projection":"low64_be"}}`
	if code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", []byte(body)); code != 200 {
		t.Fatalf("register: %d %s", code, b)
	}

	hit := func(e *kubeEngine, instance string) {
		t.Helper()
		waitFor(t, instance+" answering", func() bool {
			e.publish(t)
			return matched(t, p, "qwen", e.tokens)[instance] == 48
		})
	}
	hit(e1, "llm/e1")
	hit(api, "api-engine")
	c.Update(kubetest.Pod("llm", "e2", "u2", "127.0.0.1", true, label, e2.ann))
	hit(e2, "llm/e2")

	sources := map[string]string{}
	for _, s := range getJSON(t, p.url("/services"))["services"].([]any) {
		m := s.(map[string]any)
		sources[m["InstanceID"].(string)] = m["Source"].(string)
	}
	if len(sources) != 3 || sources["llm/e1"] != "kubernetes" || sources["llm/e2"] != "kubernetes" || sources["api-engine"] != "api" {
		t.Fatalf("sources %v", sources)
	}
	state, err := os.ReadFile(filepath.Join(p.stateDir, statedir.RegistrationsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(state), "api-engine") || strings.Contains(string(state), "llm/e") {
		t.Fatalf("state file holds the discovered registrations or lacks the API's: %s", state)
	}

	c.Update(kubetest.Pod("llm", "e1", "u1", "127.0.0.1", false, label, e1.ann))
	waitFor(t, "e1 gone once not Ready", func() bool { _, ok := matched(t, p, "qwen", e1.tokens)["llm/e1"]; return !ok })
	c.Delete("llm", "e2")
	waitFor(t, "e2 gone once deleted", func() bool { _, ok := matched(t, p, "qwen", e2.tokens)["llm/e2"]; return !ok })
	if got := matched(t, p, "qwen", api.tokens); got["api-engine"] != 48 || len(got) != 1 {
		t.Fatalf("after the pods left: %v", got)
	}
	_, _, mb := httpDo(t, "GET", p.url("/metrics"), "", nil)
	metrics := string(mb)
	for _, want := range []string{"conductor_discovery_synced 1", "conductor_discovery_registrations 0", `conductor_discovery_pods{state="waiting"} 1`} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestKubernetesDiscoveryFlags: the discovery flags need each other, and a
// replica takes its registrations from the stream.
func TestKubernetesDiscoveryFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--discover-namespaces", "a"},
		{"--discover-selector", "app=vllm"},
		{"--discover-kubernetes", "in-cluster", "--nats-consume", "--nats-url", "nats://127.0.0.1:4222"},
	} {
		if _, err := parseFlags(args, nil); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	s, err := parseFlags([]string{"--discover-kubernetes", "/k/config", "--discover-namespaces", ""}, nil)
	if err != nil || s.kube.mode != "/k/config" || !s.kube.nsSet || s.kube.namespaces != "" {
		t.Fatalf("%+v %v", s.kube, err)
	}
}
