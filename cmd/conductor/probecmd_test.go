package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
	"github.com/seed-c7a81618/conductor/probe"
)

// `conductor probe`'s command line: package probe's tests prove what it
// finds; these run it as a user does (run, text and --json) and send the
// registration it prints to a conductor in each of its three forms.

// probeOut runs `conductor probe args...` and returns its exit status and
// output.
func probeOut(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncbuf.Buffer
	code = run(context.Background(), append([]string{"probe"}, args...), envOf(nil), &out, &errb)
	return code, out.String(), errb.String()
}

// probePublisher publishes, every 20 ms until the test ends, a vLLM
// map-era engine's prompt of 64 tokens (4 blocks of 16, hashed with
// vllm_v1 sha256_cbor and PYTHONHASHSEED=0): the root event of blocks 0-1
// and its continuation.
func probePublisher(t *testing.T) (pub *bench.Publisher, tokens []int32) {
	t.Helper()
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens = make([]int32, 64)
	for i := range tokens {
		tokens[i] = int32(5000 + 7*i)
	}
	prof, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := hash.AppendChain(nil, &prof, tokens, 16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var ts atomic.Int64
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			p := bench.AppendVLLMBatch(nil, bench.EraMap, float64(1.7e9+ts.Add(1)), 0,
				bench.EngineStored{Hashes: keys[:2], Tokens: tokens[:32], BlockSize: 16, Medium: "GPU"},
				bench.EngineStored{Hashes: keys[2:4], Parent: keys[1], HasParent: true, Tokens: tokens[32:], BlockSize: 16, Medium: "GPU"})
			if _, err := pub.Publish(p); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done; _ = pub.Close() })
	return pub, tokens
}

// compactJSON is v as one line of JSON with <, > and & as themselves, as
// the probe prints its forms.
func compactJSON(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// waitForHit queries the prompt until instance holds want of its tokens.
func waitForHit(t *testing.T, p *proc, model, instance string, tokens []int32, want int) {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"model":%q,"block_size":16,"token_ids":%s}`, model, jsonList(tokens)))
	var last string
	waitFor(t, "a hit for "+instance, func() bool {
		code, _, b := httpDo(t, "POST", p.url("/query"), "application/json", body)
		last = string(b)
		var res map[string]map[string]map[string]any
		if code != 200 || json.Unmarshal(b, &res) != nil {
			return false
		}
		n, _ := res["default"][instance]["longest_matched"].(float64)
		return int(n) == want
	})
	if t.Failed() {
		t.Log(last)
	}
}

// TestProbeRegistrationForms: `conductor probe` prints the report as text
// (with all three forms) and as JSON; the Python form registers over the
// RPC port and the configuration form from a configuration file, each
// finding the prompt (package probe's tests send the curl form's body).
func TestProbeRegistrationForms(t *testing.T) {
	pub, tokens := probePublisher(t)
	args := []string{pub.Endpoint(), "--replay", pub.ReplayEndpoint(), "--model", "m-forms", "--instance-id", "forms-0"}
	code, text, errs := probeOut(t, args...)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, out, errs := probeOut(t, append(args, "--json")...)
	var r probe.Report
	if code != 0 || errs != "" || json.Unmarshal([]byte(out), &r) != nil || r.Registration == nil {
		t.Fatalf("--json: exit %d: %s\n%s", code, errs, out)
	}
	for _, want := range []string{"dialect        vLLM: a form only vLLM sends", `map era: events as maps with a "type" key`,
		"4-frame form", "vllm_v1 sha256_cbor with PYTHONHASHSEED=0 reproduces 1 of 1 distinct root event", r.Curl, r.Python,
		compactJSON(r.Config)} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	port := freePort(t)
	p := startConductor(t, "", "--rpc-port", strconv.Itoa(port))
	waitFor(t, "the RPC listening line", func() bool { return strings.Contains(p.logs.String(), "RPC server listening") })
	py := strings.TrimSuffix(strings.TrimPrefix(r.Python, "client.register("), ")")
	if code, _, b := httpDo(t, "POST", "http://127.0.0.1:"+strconv.Itoa(port)+"/rpc/Register", "application/json", []byte(py)); code != 200 || string(b) != `{"ret":0}` {
		t.Fatalf("RPC Register: %d %s", code, b)
	}
	waitForHit(t, p, "m-forms", "forms-0", tokens, 64)

	cfg := startConductor(t, compactJSON(r.Config))
	waitForHit(t, cfg, "m-forms", "forms-0", tokens, 64)
}

// TestProbeNothingUsable: `conductor probe` exits 1 with one line saying
// why when it saw nothing usable or could not start, 2 for bad arguments
// (a mistyped flag names the nearest one), and 0 for --help, which
// `conductor --help` mentions once.
func TestProbeNothingUsable(t *testing.T) {
	quiet, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tcp://127.0.0.1:1", "--seconds", "1"}, 1, "not connected"},
		{[]string{quiet.Endpoint(), "--seconds", "1"}, 1, "connected, but nothing was published"},
		{[]string{"tcp://*:5557"}, 1, "tcp address needs a host to connect to"},
		{nil, 2, "want one endpoint"},
		{[]string{"tcp://127.0.0.1:1", "tcp://127.0.0.1:2"}, 2, "want one endpoint"},
		{[]string{"tcp://127.0.0.1:1", "--seconds", "0"}, 2, "--seconds=0: want >= 1"},
		{[]string{"tcp://127.0.0.1:1", "--block-size", "-1"}, 2, "--block-size=-1: want >= 0"},
		{[]string{"tcp://127.0.0.1:1", "--replai", "x"}, 2, "unknown flag --replai; did you mean --replay? (conductor probe --help lists every flag)"},
	} {
		code, out, errs := probeOut(t, c.args...)
		if code != c.code || out != "" || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "conductor probe: ") || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.args, code, out, errs, c.code, c.want)
		}
	}
	code, out, _ := probeOut(t, "--help")
	if code != 0 || !strings.HasPrefix(out, "conductor probe subscribes") || !strings.Contains(out, "  --replay ENDPOINT") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); err == nil || strings.Count(help.String(), "conductor probe") != 1 {
		t.Errorf("conductor --help mentions the probe %d times, want 1:\n%s", strings.Count(help.String(), "conductor probe"), help.String())
	}
}

// TestServerBinaryDeps: the server binary, probe included, links none of
// the harness (bench, bench/sim) nor pebbe/zmq4: its ZMQ is wire/ingest's.
func TestServerBinaryDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasSuffix(dep, "/conductor/bench") || strings.Contains(dep, "/conductor/bench/") || strings.Contains(dep, "pebbe/zmq4") {
			t.Errorf("cmd/conductor depends on %s", dep)
		}
	}
	if !strings.Contains(string(out), "github.com/seed-c7a81618/conductor/wire/ingest\n") {
		t.Fatalf("go list -deps lacks wire/ingest:\n%s", out)
	}
}
