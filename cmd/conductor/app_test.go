package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// proc is a conductor started in-process with run's building blocks.
type proc struct {
	addr     string
	stateDir string
	logs     *syncbuf.Buffer
	cancel   context.CancelFunc
	done     chan int
}

// startConductor starts a conductor on 127.0.0.1:0 with config (JSON text; ""
// means no file) and extra args; it is stopped at cleanup, which asserts exit 0.
func startConductor(t *testing.T, config string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "conductor_config.json")
	if config != "" {
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncbuf.Buffer{}
	all := append([]string{"--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1", "--log-level", "debug", "--shutdown-timeout", "5s",
		"--state-dir", filepath.Join(dir, "state")}, args...)
	a, code := newApp(all, envOf(map[string]string{"CONDUCTOR_CONFIG_PATH": path, "HOME": dir}), io.Discard, logs)
	if a == nil {
		t.Fatalf("newApp: exit %d\n%s", code, logs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{addr: a.Addr(), stateDir: filepath.Join(dir, "state"), logs: logs, cancel: cancel, done: make(chan int, 1)}
	go func() { p.done <- a.serve(ctx) }()
	t.Cleanup(func() {
		if code := p.stop(t); code != 0 {
			t.Errorf("exit %d\n%s", code, logs)
		}
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return p
}

func (p *proc) stop(t *testing.T) int {
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code
		return code
	case <-time.After(waitBound):
		t.Fatal("conductor did not stop")
		return -1
	}
}

func (p *proc) url(path string) string { return "http://" + p.addr + path }

func httpDo(t *testing.T, method, url, ct string, body []byte) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := boundedClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	code, _, b := httpDo(t, "GET", url, "", nil)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, b)
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// waitBound bounds every wait for an asynchronous effect in this package's
// tests. Every wait polls and returns as soon as its condition holds, so the
// bound only decides when a failure is declared: generous, for a loaded
// machine running the race detector.
const waitBound = 2 * time.Minute

// boundedClient is the tests' HTTP client: a server that stops answering
// fails the request after waitBound instead of hanging the package.
var boundedClient = &http.Client{Timeout: waitBound}

// waitFor polls cond until it holds or waitBound passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunLifecycle drives run itself: the listening line carries the bound
// address, /health answers, cancelling the context exits 0 after a clean stop.
func TestRunLifecycle(t *testing.T) {
	dir := t.TempDir()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1", "--log-format", "json"},
			envOf(map[string]string{"CONDUCTOR_CONFIG_PATH": filepath.Join(dir, "none.json"), "CONDUCTOR_LOG_LEVEL": "loud"}), io.Discard, pw)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var addr string
	var lines []string
	for addr == "" && sc.Scan() {
		lines = append(lines, sc.Text())
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %s", sc.Text())
		}
		if rec["msg"] == "HTTP server listening" {
			addr, _ = rec["addr"].(string)
		}
	}
	go io.Copy(io.Discard, pr)
	if addr == "" {
		t.Fatalf("no listening line: %v", lines)
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{`"invalid log level, using INFO"`, `"configuration file not readable, starting with no static services"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("logs lack %s:\n%s", want, joined)
		}
	}
	m := getJSON(t, "http://"+addr+"/health")
	if m["status"] != "ok" {
		t.Fatalf("%v", m)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(waitBound):
		t.Fatal("run did not return")
	}
	if _, err := boundedClient.Get("http://" + addr + "/health"); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"http_server_port": `), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"malformed config", []string{"--config", bad}, 1, "cannot use configuration file"},
		{"unknown flag", []string{"--nope"}, 2, "unknown flag --nope (conductor --help lists every flag)"},
		{"bad port", []string{"--http-port", "70000"}, 2, "want 0..65535"},
		{"bad rpc port", []string{"--rpc-port", "-2"}, 2, "--rpc-port=-2: want 0..65535"},
		{"bad log format", []string{"--log-format", "xml"}, 2, "want text or json"},
		{"extra args", []string{"serve"}, 2, "unexpected arguments"},
		{"negative memo", []string{"--hash-memo-bytes", "-1"}, 2, "want >= 0"},
		{"negative prompt memo", []string{"--hash-memo-prompt-bytes", "-1"}, 2, "--hash-memo-prompt-bytes=-1: want >= 0"},
		{"prompt memo without the memo", []string{"--hash-memo-prompt-bytes", "1048576"}, 2, "--hash-memo-prompt-bytes=1048576 needs the memo: --hash-memo-bytes > 0"},
		{"pprof beyond loopback", []string{"--pprof-addr", "0.0.0.0:0"}, 2, "must be a loopback host:port"},
		{"pprof without port", []string{"--pprof-addr", "127.0.0.1"}, 2, "must be a loopback host:port"},
		{"version", []string{"--version"}, 0, "conductor "},
		{"help", []string{"-h"}, 0, "--http-port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out syncbuf.Buffer
			code := run(context.Background(), c.args, envOf(map[string]string{"HOME": dir}), &out, &out)
			if code != c.code || !strings.Contains(out.String(), c.out) {
				t.Fatalf("exit %d, want %d; output:\n%s", code, c.code, out.String())
			}
		})
	}
}

// TestStaticServicesDoNotBlockStartup: static entries (valid, invalid, and one
// whose endpoint libzmq refuses) never block or abort startup.
func TestStaticServicesDoNotBlockStartup(t *testing.T) {
	p := startConductor(t, `{
  "http_server_port": 1,
  "rpc_server_port": 50052,
  "kvevent_instance": {
    "engine-a": {"endpoint": "tcp://127.0.0.1:1", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0},
    "broken": {"endpoint": "not-an-endpoint", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 1, "instance_id": "engine-a"},
    "skipped": {"endpoint": "tcp://127.0.0.1:2", "type": "vLLM", "modelname": "m", "block_size": 0, "dp_rank": 0}
  },
  "services": [
    {"endpoint": "tcp://127.0.0.1:3", "type": "Mooncake", "modelname": "m", "instance_id": "pool", "block_size": 16, "dp_rank": 0}
  ]
}`)
	waitFor(t, "static registrations", func() bool { return strings.Contains(p.logs.String(), "Static KV Event Manager started") })
	logs := p.logs.String()
	for _, want := range []string{"success=2 failed=1", "RPC server disabled", `invalid static service skipped" entry="kvevent_instance[\"skipped\"]"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q", want)
		}
	}
	m := getJSON(t, p.url("/services"))
	if m["count"] != json.Number("2") {
		t.Fatalf("services %v", m)
	}
	code, _, body := httpDo(t, "GET", p.url("/metrics"), "", nil)
	if code != 200 || !strings.Contains(string(body), `conductor_listeners{state="pending"}`) ||
		!strings.Contains(string(body), `conductor_registrations{type="Mooncake"} 1`) {
		t.Fatalf("metrics:\n%s", body)
	}
}

// freePort returns a loopback port that was free a moment ago (the RPC port
// has no ephemeral form: 0 turns it off).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRPCPortServed: --rpc-port serves the Python client's surface over the
// same index and registrar as the HTTP API; the HTTP port does not serve it.
func TestRPCPortServed(t *testing.T) {
	port := freePort(t)
	p := startConductor(t, `{"rpc_server_port": 0}`, "--rpc-port", strconv.Itoa(port))
	waitFor(t, "the RPC listening line", func() bool { return strings.Contains(p.logs.String(), "RPC server listening") })
	rpc := "http://127.0.0.1:" + strconv.Itoa(port) + "/rpc/"
	code, _, body := httpDo(t, "POST", rpc+"ListServices", "application/json", nil)
	if code != 200 || string(body) != `{"ret":0,"count":0,"services":[]}` {
		t.Fatalf("ListServices: %d %s", code, body)
	}
	reg := `{"instance_id":"vllm-0","endpoint":"tcp://127.0.0.1:1","model_name":"m","block_size":16,` +
		`"hash_profile":{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be"}}`
	code, _, body = httpDo(t, "POST", rpc+"Register", "application/json", []byte(reg))
	if code != 200 || string(body) != `{"ret":0}` {
		t.Fatalf("Register: %d %s", code, body)
	}
	m := getJSON(t, p.url("/services"))
	svcs, _ := m["services"].([]any)
	if len(svcs) != 1 || svcs[0].(map[string]any)["Type"] != "vLLM" || svcs[0].(map[string]any)["DPRank"] != json.Number("0") {
		t.Fatalf("HTTP /services after RPC Register: %v", m)
	}
	if code, _, _ := httpDo(t, "POST", p.url("/rpc/ListServices"), "application/json", nil); code != 404 {
		t.Fatalf("HTTP port serves /rpc/: %d", code)
	}
}
