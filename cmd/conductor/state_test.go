package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
	"github.com/seed-c7a81618/conductor/statedir"
)

// TestStateWriteFailuresKeepServing: disk full (the temporary file is
// /dev/full) and a directory that is gone fail register and unregister with
// 500 state_not_saved, change nothing, and queries keep working.
func TestStateWriteFailuresKeepServing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	p := startConductor(t, "", "--state-dir", dir)
	reg := func(inst, ep string) (int, string) {
		code, _, body := httpDo(t, "POST", p.url("/register"), "application/json", []byte(fmt.Sprintf(
			`{"endpoint":%q,"type":"vLLM","modelname":"m","instance_id":%q,"block_size":16,"dp_rank":0}`, ep, inst)))
		return code, string(body)
	}
	if code, body := reg("a", "tcp://127.0.0.1:1"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	tmp := filepath.Join(dir, statedir.RegistrationsFile+".tmp")
	if err := os.Symlink("/dev/full", tmp); err != nil {
		t.Fatal(err)
	}
	code, body := reg("b", "tcp://127.0.0.1:2")
	if code != 500 || !strings.Contains(body, "state_not_saved") || !strings.Contains(body, "no space left") {
		t.Fatalf("register on a full disk: %d %s", code, body)
	}
	if err := os.Symlink("/dev/full", tmp); err != nil { // the failed write removed its temporary file
		t.Fatal(err)
	}
	code, _, b := httpDo(t, "POST", p.url("/unregister"), "application/json", []byte(`{"instance_id":"a","dp_rank":0}`))
	if code != 500 || !strings.Contains(string(b), "state_not_saved") {
		t.Fatalf("unregister on a full disk: %d %s", code, b)
	}
	if n := getJSON(t, p.url("/services"))["count"]; n != json.Number("1") {
		t.Fatalf("services after failed writes: %v", n)
	}
	if code, _, _ := httpDo(t, "POST", p.url("/query"), "application/json", []byte(`{"model":"m","block_size":16,"token_ids":[1]}`)); code != 200 {
		t.Fatalf("query: %d", code)
	}
	// the directory disappears and a file takes its place: still a clean 500
	os.Remove(tmp)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := reg("c", "tcp://127.0.0.1:3"); code != 500 || !strings.Contains(body, "state_not_saved") {
		t.Fatalf("register without a directory: %d %s", code, body)
	}
	os.Remove(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if code, body := reg("c", "tcp://127.0.0.1:3"); code != 200 {
		t.Fatalf("register once the disk is back: %d %s", code, body)
	}
}

// TestStateSurvivesSIGKILL: registrations made over HTTP come back after
// SIGKILL and restart, and the index refills from the engine's replay ring.
func TestStateSurvivesSIGKILL(t *testing.T) {
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	dir := filepath.Join(t.TempDir(), "state")
	c := startChild(t, 0, "--state-dir", dir)
	url := func(c *child, path string) string { return "http://" + c.addr + path }
	code, _, body := httpDo(t, "POST", url(c, "/register"), "application/json", []byte(fmt.Sprintf(
		`{"endpoint":%q,"replay_endpoint":%q,"type":"vLLM","modelname":"m","instance_id":"engine-a","block_size":16,"dp_rank":0}`,
		pub.Endpoint(), pub.ReplayEndpoint())))
	if code != 200 {
		t.Fatalf("register: %d %s", code, body)
	}
	tokens := make([]int32, 64)
	for i := range tokens {
		tokens[i] = int32(7 * i)
	}
	mustPublish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1, 0,
		bench.EngineStored{Hashes: []uint64{1, 2, 3, 4}, Tokens: tokens, BlockSize: 16, Medium: "GPU"}))
	query := []byte(`{"model":"m","block_size":16,"token_ids":` + jsonList(tokens) + `}`)
	hit := func(c *child) bool {
		code, _, b := httpDo(t, "POST", url(c, "/query"), "application/json", query)
		return code == 200 && strings.Contains(string(b), `"longest_matched":64`)
	}
	// the first batch may fall in ZMQ's slow-joiner window: proactive replay
	// on connect brings it either way
	waitFor(t, "hit before the kill", func() bool { return hit(c) })

	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	c.done <- nil
	c2 := startChild(t, 0, "--state-dir", dir)
	if !strings.Contains(c2.logs.String(), "registrations restored") {
		t.Fatalf("no restore logged:\n%s", c2.logs)
	}
	svcs := getJSON(t, url(c2, "/services"))
	if svcs["count"] != json.Number("1") {
		t.Fatalf("services after restart: %v", svcs)
	}
	waitFor(t, "hit after restart (replayed)", func() bool { return hit(c2) })
}

// TestStateDynamoWorkersComeBack: a worker registered on the Dynamo port is
// durable too, and after a restart it is back in the Dynamo registry (its
// indexer answers /query, /workers lists it), not only in the index.
func TestStateDynamoWorkersComeBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	dynAddr := func(c *child) string {
		re := regexp.MustCompile(`Dynamo HTTP server listening.*addr=(\S+)`)
		var m []string
		waitFor(t, "the Dynamo listener", func() bool { m = re.FindStringSubmatch(c.logs.String()); return m != nil })
		return "http://" + m[1]
	}
	c := startChild(t, 0, "--state-dir", dir, "--dynamo-port", "0")
	code, _, body := httpDo(t, "POST", dynAddr(c)+"/register", "application/json",
		[]byte(`{"instance_id":7,"endpoint":"tcp://127.0.0.1:1","model_name":"llama","block_size":16,"dp_rank":0}`))
	if code != 201 {
		t.Fatalf("dynamo register: %d %s", code, body)
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	c.done <- nil
	c2 := startChild(t, 0, "--state-dir", dir, "--dynamo-port", "0")
	d := dynAddr(c2)
	code, _, body = httpDo(t, "POST", d+"/query", "application/json", []byte(`{"token_ids":[1,2,3],"model_name":"llama"}`))
	if code != 200 {
		t.Fatalf("dynamo query after restart: %d %s\n%s", code, body, tail(c2.logs.String()))
	}
	code, _, body = httpDo(t, "GET", d+"/workers", "", nil)
	if code != 200 || !strings.Contains(string(body), `"instance_id":7`) {
		t.Fatalf("workers after restart: %d %s", code, body)
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// TestStateDirOneConductor: a second conductor started on a state directory
// in use exits 1 before it binds a port, with one line naming the directory
// and the first's pid; the first's registrations are intact after both have
// stopped and come back when it restarts.
func TestStateDirOneConductor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	c1 := startChild(t, 0, "--state-dir", dir)
	pid := strconv.Itoa(c1.cmd.Process.Pid)

	c2 := exec.Command(os.Args[0], "--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1",
		"--shutdown-timeout", "5s", "--state-dir", dir)
	c2.Env = append(os.Environ(), "CONDUCTOR_TEST_CHILD=1", "CONDUCTOR_CONFIG_PATH=/nonexistent/conductor.json")
	out := &syncbuf.Buffer{}
	c2.Stdout, c2.Stderr = out, out
	if err := c2.Start(); err != nil {
		t.Fatal(err)
	}
	c2done := make(chan error, 1)
	go func() { c2done <- c2.Wait() }()
	t.Cleanup(func() {
		_ = c2.Process.Kill()
		if c2done != nil {
			<-c2done
		}
	})
	var c2addr string
	deadline := time.After(waitBound)
	for c2addr == "" && c2done != nil {
		select {
		case err := <-c2done:
			c2done = nil
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("second conductor: %v, want exit status 1\n%s", err, out)
			}
		case <-deadline:
			t.Fatalf("second conductor neither refused nor listening\n%s", out)
		case <-time.After(10 * time.Millisecond):
			if m := listeningRE.FindStringSubmatch(out.String()); m != nil {
				c2addr = m[1]
			}
		}
	}
	if c2addr != "" {
		t.Errorf("second conductor started on %s, which pid %s holds", dir, pid)
	} else {
		var line string // the refusal, one line
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "state directory in use") {
				line = l
			}
		}
		for _, want := range []string{"level=ERROR", dir, "pid " + pid, "--state-dir DIR", "--state-dir ''"} {
			if !strings.Contains(line, want) {
				t.Errorf("refusal line lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out.String(), "listening") {
			t.Errorf("the refused conductor bound a port:\n%s", out)
		}
	}

	register := func(addr, inst string) {
		t.Helper()
		code, _, body := httpDo(t, "POST", "http://"+addr+"/register", "application/json", []byte(fmt.Sprintf(
			`{"endpoint":"tcp://127.0.0.1:%d","type":"vLLM","modelname":"m","instance_id":%q,"block_size":16,"dp_rank":0}`,
			closedPort(t), inst)))
		if code != 200 {
			t.Fatalf("register %s: %d %s", inst, code, body)
		}
	}
	register(c1.addr, "first-a")
	register(c1.addr, "first-b")
	if c2addr != "" { // the other's churn rewrites the file with its own set
		register(c2addr, "second-a")
		stopChild(t, &child{cmd: c2, addr: c2addr, logs: out, done: c2done})
	}
	stopChild(t, c1)

	c3 := startChild(t, 0, "--state-dir", dir)
	if !strings.Contains(c3.logs.String(), "restored=2") {
		t.Errorf("restart did not log restored=2:\n%s", tail(c3.logs.String()))
	}
	svcs := getJSON(t, "http://"+c3.addr+"/services")
	b, _ := json.Marshal(svcs)
	if svcs["count"] != json.Number("2") || !strings.Contains(string(b), `"first-a"`) || !strings.Contains(string(b), `"first-b"`) {
		t.Fatalf("the first conductor's registrations after the restart: %s", b)
	}
}

// TestStateRestoredHolderNamed: a registration that conflicts with one the
// state directory restored at startup (its endpoint or its service key, over
// HTTP or the RPC port) is refused with a sentence saying that the holder
// was restored from the state file and the command that removes it; that
// command, run as printed, removes it, and the registration then succeeds.
// A conflict with a registration made in this run names no state file.
func TestStateRestoredHolderNamed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	const old = `{"endpoint":"tcp://127.0.0.1:5557","type":"vLLM","modelname":"demo","instance_id":"vllm-node1","block_size":16,"dp_rank":0}`
	p := startConductor(t, "", "--state-dir", dir)
	if code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", []byte(old)); code != 200 {
		t.Fatalf("register: %d %s", code, b)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}

	rpcPort := freePort(t)
	p = startConductor(t, "", "--state-dir", dir, "--rpc-port", strconv.Itoa(rpcPort))
	waitFor(t, "the RPC listener", func() bool { return strings.Contains(p.logs.String(), "RPC server listening") })
	file := filepath.Join(dir, statedir.RegistrationsFile)
	remove := fmt.Sprintf(`remove it with curl -s %s/unregister -d '{"dp_rank":0,"instance_id":"vllm-node1","tenant_id":"default"}'`, p.addr)
	for _, c := range []struct {
		name, url, body string
		status          int
		want            []string
	}{
		{"endpoint", p.url("/register"),
			`{"endpoint":"tcp://127.0.0.1:5557","type":"vLLM","modelname":"demo","instance_id":"engine-0","block_size":16,"dp_rank":0}`,
			400, []string{"endpoint tcp://127.0.0.1:5557 is used by vllm-node1|default|0"}},
		{"service key", p.url("/register"),
			`{"endpoint":"tcp://127.0.0.1:5600","type":"vLLM","modelname":"other","instance_id":"vllm-node1","block_size":16,"dp_rank":0}`,
			400, []string{"conflicting registration for service key"}},
		{"service key over RPC", "http://127.0.0.1:" + strconv.Itoa(rpcPort) + "/rpc/Register",
			`{"endpoint":"tcp://127.0.0.1:5600","publisher_type":"vLLM","model_name":"other","instance_id":"vllm-node1","block_size":16,"dp_rank":0,` +
				`"hash_profile":{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be"}}`,
			200, []string{"conflicting registration for service key"}},
	} {
		code, _, b := httpDo(t, "POST", c.url, "application/json", []byte(c.body))
		var env struct {
			Error, Reason string
		}
		if err := json.Unmarshal(b, &env); err != nil || code != c.status || env.Reason != "invalid_registration" {
			t.Errorf("%s: %d %s", c.name, code, b)
			continue
		}
		for _, w := range append(c.want, "vllm-node1|default|0 was restored at startup from "+file, remove, "--state-dir ''") {
			if !strings.Contains(env.Error, w) {
				t.Errorf("%s: %q\nlacks %q", c.name, env.Error, w)
			}
		}
	}
	// the printed command, as printed
	_, cmdline, _ := strings.Cut(remove, "remove it with ")
	out, err := exec.Command("bash", "-c", cmdline).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "unregistered successfully") {
		t.Fatalf("%s: %v %s", cmdline, err, out)
	}
	mine := `{"endpoint":"tcp://127.0.0.1:5557","type":"vLLM","modelname":"demo","instance_id":"engine-0","block_size":16,"dp_rank":0}`
	if code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", []byte(mine)); code != 200 {
		t.Fatalf("register after removing the restored holder: %d %s", code, b)
	}
	code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", []byte(
		`{"endpoint":"tcp://127.0.0.1:5557","type":"vLLM","modelname":"demo","instance_id":"engine-1","block_size":16,"dp_rank":0}`))
	if code != 400 || !strings.Contains(string(b), "is used by engine-0|default|0") || strings.Contains(string(b), "restored") {
		t.Fatalf("a conflict with this run's registration: %d %s", code, b)
	}
}
