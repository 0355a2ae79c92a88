package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
)

// TestServicesConnection: /services shows each registration's connection:
// an engine that publishes is active with its events counted; one nothing
// listens for is pending, not yet connected. An endpoint whose host does not
// resolve is refused at registration, naming the host and the field (the
// name is resolved once, and the registration connects to the address).
func TestServicesConnection(t *testing.T) {
	p := startConductor(t, "")
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	body := func(inst, ep string) []byte {
		return []byte(fmt.Sprintf(`{"endpoint":%q,"type":"vLLM","modelname":"m","instance_id":%q,"block_size":16,"dp_rank":0}`, ep, inst))
	}
	for inst, ep := range map[string]string{"live": pub.Endpoint(), "closed": fmt.Sprintf("tcp://127.0.0.1:%d", closedPort(t))} {
		if code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", body(inst, ep)); code != 200 {
			t.Fatalf("register %s: %d %s", inst, code, b)
		}
	}
	code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", body("nowhere", "tcp://no-such-host.invalid:5557"))
	var refusal struct{ Error, Reason, Field string }
	if err := json.Unmarshal(b, &refusal); err != nil || code != 400 || refusal.Field != "endpoint" ||
		!strings.Contains(refusal.Error, "no-such-host.invalid") || !strings.Contains(refusal.Error, "does not resolve") {
		t.Fatalf("unresolvable host: %d %s", code, b)
	}
	type conn struct {
		State     string `json:"state"`
		LastError string `json:"last_error"`
		Events    uint64 `json:"events"`
		LastSeq   uint64 `json:"last_seq"`
	}
	conns := func() map[string]conn {
		_, _, b := httpDo(t, "GET", p.url("/services"), "", nil)
		var v struct {
			Services []struct {
				InstanceID string
				Connection *conn
			}
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		out := map[string]conn{}
		for _, s := range v.Services {
			if s.Connection == nil {
				t.Fatalf("%s: no Connection: %s", s.InstanceID, b)
			}
			out[s.InstanceID] = *s.Connection
		}
		return out
	}
	waitFor(t, "the live engine's batch", func() bool {
		mustPublish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1, 0,
			bench.EngineStored{Hashes: []uint64{1}, Tokens: make([]int32, 16), BlockSize: 16, Medium: "GPU"}))
		c := conns()["live"]
		return c.State == "active" && c.Events > 0 && c.LastSeq > 0
	})
	c := conns()
	if _, ok := c["nowhere"]; ok || len(c) != 2 {
		t.Errorf("registrations: %+v", c)
	}
	if c["closed"].State != "pending" || !strings.Contains(c["closed"].LastError, "not connected") {
		t.Errorf("closed: %+v", c["closed"])
	}
}

// TestPortInUse: a port another process holds stops the start with one
// line naming the flag and the configuration key that choose another, for
// the HTTP port and the RPC port.
func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--http-port", busy, "--rpc-port", "0"}, []string{"the port of the Mooncake API is in use", "--http-port", "http_server_port"}},
		{[]string{"--http-port", "0", "--rpc-port", busy}, []string{"the port of the Python client's RPC port is in use", "--rpc-port", "rpc_server_port"}},
	} {
		var logs bytes.Buffer
		a, code := newApp(append(c.args, "--listen", "127.0.0.1", "--state-dir", ""), envOf(map[string]string{"HOME": t.TempDir()}), io.Discard, &logs)
		if a != nil || code != 1 {
			t.Fatalf("%v: exit %d", c.args, code)
		}
		for _, w := range c.want {
			if !strings.Contains(logs.String(), w) {
				t.Errorf("%v: logs lack %q:\n%s", c.args, w, logs.String())
			}
		}
	}
}
