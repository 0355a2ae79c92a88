package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/httpd/dynamo"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

func TestParseWorkers(t *testing.T) {
	got, err := parseWorkers("1=tcp://h:5557, 2:1=tcp://h:5558,18446744073709551615:3=ipc:///tmp/x", 16, "llama", "g")
	if err != nil {
		t.Fatal(err)
	}
	want := []dynamo.Worker{
		{InstanceID: 1, Endpoint: "tcp://h:5557", ModelName: "llama", RoutingGroup: "g", BlockSize: 16},
		{InstanceID: 2, DPRank: 1, Endpoint: "tcp://h:5558", ModelName: "llama", RoutingGroup: "g", BlockSize: 16},
		{InstanceID: 18446744073709551615, DPRank: 3, Endpoint: "ipc:///tmp/x", ModelName: "llama", RoutingGroup: "g", BlockSize: 16},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	for _, bad := range []string{"x=tcp://h:1", "1", "1=", "1:-1=tcp://h:1", "1:x=tcp://h:1", "-1=tcp://h:1", "1:2147483648=tcp://h:1"} {
		if _, err := parseWorkers(bad, 16, "m", "g"); err == nil {
			t.Errorf("--workers %q accepted", bad)
		}
	}
}

func TestDynamoFlags(t *testing.T) {
	s, err := parseFlags([]string{"--dynamo-port", "8090", "--block-size", "16", "--workers", "1=tcp://h:1",
		"--model-name", "llama", "--routing-group", "a", "--peers", "http://p:1, http://p:2", "--threads", "8",
		"--access-log", "/tmp/a.log", "--trace-id-header", "x-req", "--access-log-local-time", "--tenant-id", "t"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := s.dynamo
	if d.port != 8090 || d.blockSize != 16 || d.model != "llama" || d.group != "a" || d.threads != 8 ||
		d.accessLog != "/tmp/a.log" || d.traceHeader != "x-req" || !d.localTime || d.tenantID != "t" {
		t.Fatalf("settings %+v", d)
	}
	if p := splitPeers(d.peers); !reflect.DeepEqual(p, []string{"http://p:1", "http://p:2"}) {
		t.Fatalf("peers %q", p)
	}
	def, err := parseFlags(nil, io.Discard)
	if err != nil || def.dynamo.port != -1 || def.dynamo.model != "default" || def.dynamo.group != "default" ||
		def.dynamo.threads != 4 || def.dynamo.traceHeader != "x-trace-id" || def.dynamo.localTime {
		t.Fatalf("defaults %+v %v", def.dynamo, err)
	}
	for _, bad := range [][]string{
		{"--workers", "1=tcp://h:1"}, // no --block-size
		{"--dynamo-port", "70000"},
		{"--threads", "0"},
		{"--block-size", "4", "--workers", "one=tcp://h:1"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestDynamoPortFlag: Dynamo's own --port names the Dynamo listener and
// keeps conductor's other surfaces out of the way (ephemeral HTTP port, no
// RPC port, no state dir) unless their flags are given, so the seed's two
// command lines run side by side on one host.
func TestDynamoPortFlag(t *testing.T) {
	s, err := parseFlags([]string{"--port", "8091", "--block-size", "16", "--workers", "1=tcp://worker1:5557,2=tcp://worker2:5558",
		"--peers", "http://localhost:8090"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.dynamo.port != 8091 || s.httpPort != 0 || s.rpcPort != 0 || s.stateDir != "" {
		t.Fatalf("--port 8091: dynamo port %d, http %d, rpc %d, state %q", s.dynamo.port, s.httpPort, s.rpcPort, s.stateDir)
	}
	s, err = parseFlags([]string{"--port", "8090", "--http-port", "13333", "--rpc-port", "50052", "--state-dir", "/var/lib/c"}, io.Discard)
	if err != nil || s.dynamo.port != 8090 || s.httpPort != 13333 || s.rpcPort != 50052 || s.stateDir != "/var/lib/c" {
		t.Fatalf("explicit flags beside --port: %+v %v", s, err)
	}
	if s, err = parseFlags([]string{"--port", "8090", "--dynamo-port", "8090"}, io.Discard); err != nil || s.dynamo.port != 8090 {
		t.Fatalf("--port and --dynamo-port agreeing: %v", err)
	}
	def, err := parseFlags(nil, io.Discard)
	if err != nil || def.httpPort != -1 || def.rpcPort != -1 || def.stateDir != defaultStateDir() {
		t.Fatalf("without --port: http %d rpc %d state %q %v", def.httpPort, def.rpcPort, def.stateDir, err)
	}
	for _, bad := range [][]string{{"--port", "8090", "--dynamo-port", "8091"}, {"--port", "70000"}, {"--port", "-1"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// dynApp runs an in-process conductor with the Dynamo port on.
type dynApp struct {
	a    *app
	dyn  string
	stop func()
}

func startDynApp(t *testing.T, env map[string]string, args ...string) *dynApp {
	t.Helper()
	dir := t.TempDir()
	e := map[string]string{"CONDUCTOR_CONFIG_PATH": filepath.Join(dir, "none.json"), "HOME": dir}
	for k, v := range env {
		e[k] = v
	}
	logs := &syncbuf.Buffer{}
	all := append([]string{"--http-port", "0", "--rpc-port", "0", "--dynamo-port", "0", "--listen", "127.0.0.1", "--shutdown-timeout", "2s",
		"--state-dir", filepath.Join(dir, "state")}, args...)
	a, code := newApp(all, envOf(e), io.Discard, logs)
	if a == nil {
		t.Fatalf("newApp: exit %d\n%s", code, logs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- a.serve(ctx) }()
	d := &dynApp{a: a, dyn: a.dp.ln.Addr().String()}
	stopped := false
	d.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case c := <-done:
			if c != 0 {
				t.Errorf("exit %d\n%s", c, logs)
			}
		case <-time.After(waitBound):
			t.Fatalf("conductor did not stop\n%s", logs)
		}
	}
	t.Cleanup(d.stop)
	return d
}

// TestMinInitialWorkersGate: with DYN_ROUTER_MIN_INITIAL_WORKERS=2 the apply
// gate stays closed with one --workers entry and opens when /register adds
// the second worker.
func TestMinInitialWorkersGate(t *testing.T) {
	d := startDynApp(t, map[string]string{"DYN_ROUTER_MIN_INITIAL_WORKERS": "2"},
		"--block-size", "4", "--model-name", "m", "--workers", "1=tcp://127.0.0.1:1")
	waitFor(t, "--workers registered", func() bool {
		_, _, b := httpDo(t, "GET", "http://"+d.dyn+"/workers", "", nil)
		return strings.Contains(string(b), `"instance_id":1`)
	})
	if !d.a.ix.Gated() {
		t.Fatal("gate open with 1 of 2 workers")
	}
	code, _, body := httpDo(t, "POST", "http://"+d.dyn+"/register", "application/json",
		[]byte(`{"instance_id":2,"endpoint":"tcp://127.0.0.1:2","model_name":"m","block_size":4}`))
	if code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	waitFor(t, "gate open", func() bool { return !d.a.ix.Gated() })

	// Unset, empty or 0: no gate; garbage: refused at start.
	for _, v := range []string{"", "0"} {
		d := startDynApp(t, map[string]string{"DYN_ROUTER_MIN_INITIAL_WORKERS": v})
		if d.a.ix.Gated() {
			t.Fatalf("gate closed with %q", v)
		}
		d.stop()
	}
	if a, code := newApp([]string{"--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1", "--state-dir", ""},
		envOf(map[string]string{"DYN_ROUTER_MIN_INITIAL_WORKERS": "x", "CONDUCTOR_CONFIG_PATH": "/nonexistent"}), io.Discard, io.Discard); a != nil || code != 1 {
		t.Fatalf("garbage gate value: app %v code %d", a != nil, code)
	}
}

// TestDynamoAppAccessLogAndDump: the flags reach the Dynamo listener (access
// log with the chosen trace header) and /dump answers on both ports with
// the indexers of --workers.
func TestDynamoAppAccessLogAndDump(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "access.log")
	d := startDynApp(t, nil, "--block-size", "4", "--model-name", "llama", "--routing-group", "g1",
		"--workers", "7=tcp://127.0.0.1:1", "--access-log", logPath, "--trace-id-header", "x-req", "--threads", "2")
	waitFor(t, "--workers registered", func() bool {
		_, _, b := httpDo(t, "GET", "http://"+d.dyn+"/workers", "", nil)
		return strings.Contains(string(b), `"instance_id":7`)
	})
	req := []byte(`{"token_ids":[1,2,3,4],"model_name":"llama","routing_group":"g1"}`)
	code, _, body := httpDo(t, "POST", "http://"+d.dyn+"/query", "application/json", req)
	if code != 200 || !strings.Contains(string(body), `"scores":{"7":{"0":0}}`) {
		t.Fatalf("query: %d %s", code, body)
	}
	code, _, body = httpDo(t, "GET", "http://"+d.dyn+"/dump", "", nil)
	if code != 200 || !strings.HasPrefix(string(body), `{"llama:g1":{"block_size":4,"events":[`) {
		t.Fatalf("dynamo dump: %d %.200s", code, body)
	}
	code, _, body = httpDo(t, "GET", "http://"+d.a.Addr()+"/dump", "", nil)
	if code != 200 || !strings.Contains(string(body), `"instance_id":"7","dp_rank":0,"tenant_id":"g1","model_name":"llama"`) {
		t.Fatalf("main dump: %d %.300s", code, body)
	}
	d.stop()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"path":"/query","model":"llama","status":200`) {
		t.Fatalf("access log %s", b)
	}
}

// sglangSalted encodes SGLang's BlockStoredWithMetadata array event (position
// 7: {"cache_salt": salt}) with signed hashes, as SGLang sends it.
func sglangSalted(hash int64, tokens []int32, bs int, salt string) []byte {
	b := msgp.AppendArrayHeader(nil, 8)
	b = msgp.AppendString(b, "BlockStoredWithMetadata")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendInt64(b, hash)
	b = msgp.AppendNil(b)
	b = msgp.AppendArrayHeader(b, uint32(len(tokens)))
	for _, t := range tokens {
		b = msgp.AppendInt32(b, t)
	}
	b = msgp.AppendInt(b, bs)
	b = msgp.AppendNil(b)
	b = msgp.AppendNil(b)
	b = msgp.AppendMapHeader(b, 1)
	b = msgp.AppendString(b, "cache_salt")
	return msgp.AppendString(b, salt)
}

// sglangBatch wraps raw events in [ts, events, attn_dp_rank].
func sglangBatch(events ...[]byte) []byte {
	b := msgp.AppendArrayHeader(nil, 3)
	b = msgp.AppendFloat64(b, float64(time.Now().UnixNano())/1e9)
	b = msgp.AppendArrayHeader(b, uint32(len(events)))
	for _, e := range events {
		b = append(b, e...)
	}
	return msgp.AppendInt(b, 0)
}

func dynGPU(t *testing.T, addr, body string) string {
	t.Helper()
	code, _, b := httpDo(t, "POST", "http://"+addr+"/query", "application/json", []byte(body))
	if code != 200 {
		t.Fatalf("query %s: %d %s", body, code, b)
	}
	var v struct {
		Instances map[string]struct{ GPU int64 } `json:"instances"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(v.Instances["5"].GPU, 10)
}

// TestDynamoComplaintsOverZMQ shows two of reference §C.9's fixes through the
// Dynamo port with a real ZMQ publisher: a salted SGLang batch keeps its
// unsalted event (and files the salted one under its salt), and an engine
// restart (sequence back to 0) clears the old incarnation's blocks instead of
// discarding the new stream as stale. (Per-copy removes and reclaim:
// dynamo.TestDynamoPerCopyRemovesAndReclaim.)
func TestDynamoComplaintsOverZMQ(t *testing.T) {
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := startDynApp(t, nil)
	code, _, body := httpDo(t, "POST", "http://"+d.dyn+"/register", "application/json", []byte(fmt.Sprintf(
		`{"instance_id":5,"endpoint":%q,"replay_endpoint":%q,"model_name":"sg","block_size":4,"type":"SGLang"}`,
		pub.Endpoint(), pub.ReplayEndpoint())))
	if code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	prime := func(p *bench.Publisher) {
		metric := `conductor_ingest_batches_total{instance="5",tenant="default",dp_rank="0"}`
		before, _ := seriesValue(t, d.a.Addr(), metric)
		waitFor(t, "receiving", func() bool {
			mustPublish(t, p, sglangBatch())
			v, _ := seriesValue(t, d.a.Addr(), metric)
			return v > before
		})
	}
	prime(pub)
	unsalted := bench.AppendSGLangBatch(nil, bench.EraArray, 1, 0,
		bench.EngineStored{Hashes: []uint64{102}, Tokens: []int32{11, 12, 13, 14}, BlockSize: 4})
	// Take the unsalted event out of its batch and put it after a salted one.
	_, rest, _ := msgp.ReadArrayHeaderBytes(unsalted)
	_, rest, _ = msgp.ReadFloat64Bytes(rest)
	_, rest, _ = msgp.ReadArrayHeaderBytes(rest)
	ev := rest[:len(rest)-1] // drop the trailing dp rank (a positive fixint)
	mustPublish(t, pub, sglangBatch(sglangSalted(-101, []int32{1, 2, 3, 4}, 4, "tenant-a"), ev))

	q := func(toks, extra string) string {
		return `{"model_name":"sg","token_ids":` + toks + extra + `}`
	}
	waitFor(t, "unsalted event applied", func() bool { return dynGPU(t, d.dyn, q("[11,12,13,14]", "")) == "4" })
	if g := dynGPU(t, d.dyn, q("[1,2,3,4]", `,"cache_salt":"tenant-a"`)); g != "4" {
		t.Fatalf("salted block under its salt: gpu %s", g)
	}
	if g := dynGPU(t, d.dyn, q("[1,2,3,4]", "")); g != "0" {
		t.Fatalf("salted block visible without the salt: gpu %s", g)
	}

	// Restart the engine: a new incarnation on the same endpoints from seq 0.
	ep, rep := pub.Endpoint(), pub.ReplayEndpoint()
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	pub2, err := bench.NewPublisher(bench.PublisherOptions{Endpoint: ep, ReplayEndpoint: rep})
	if err != nil {
		t.Fatal(err)
	}
	defer pub2.Close()
	prime(pub2)
	mustPublish(t, pub2, bench.AppendSGLangBatch(nil, bench.EraArray, 2, 0,
		bench.EngineStored{Hashes: []uint64{201}, Tokens: []int32{21, 22, 23, 24}, BlockSize: 4}))
	waitFor(t, "new incarnation applied", func() bool { return dynGPU(t, d.dyn, q("[21,22,23,24]", "")) == "4" })
	if g := dynGPU(t, d.dyn, q("[11,12,13,14]", "")); g != "0" {
		t.Fatalf("old incarnation's block survived the restart: gpu %s", g)
	}
	if v, _ := seriesValue(t, d.dyn, `conductor_ingest_restarts_total{instance="5",tenant="default",dp_rank="0"}`); v < 1 {
		t.Fatalf("restart not counted: %v", v)
	}
}
