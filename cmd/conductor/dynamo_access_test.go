package main

import (
	"fmt"
	"net"
	"testing"
)

// TestDynamoPortDeniedAsEndpoint: the Dynamo listener's port is one of
// conductor's own, so a registration naming it is refused by the endpoint
// policy (as for the HTTP and RPC ports).
func TestDynamoPortDeniedAsEndpoint(t *testing.T) {
	d := startDynApp(t, nil)
	port := d.a.dp.ln.Addr().(*net.TCPAddr).Port
	body := fmt.Sprintf(`{"endpoint":"tcp://127.0.0.1:%d","type":"vLLM","modelname":"m","instance_id":"i1","block_size":16,"dp_rank":0}`, port)
	if code, _, resp := httpDo(t, "POST", "http://"+d.a.Addr()+"/register", "application/json", []byte(body)); code != 403 {
		t.Fatalf("register naming the Dynamo port: %d %s", code, resp)
	}
	body = fmt.Sprintf(`{"instance_id":1,"endpoint":"tcp://127.0.0.1:%d","model_name":"m","block_size":16}`, port)
	if code, _, resp := httpDo(t, "POST", "http://"+d.dyn+"/register", "application/json", []byte(body)); code != 403 {
		t.Fatalf("Dynamo register naming the Dynamo port: %d %s", code, resp)
	}
}

// TestPeerRecoveryWithAdminToken: replicas sharing an admin token recover
// from each other (the replica presents the token to the peer's /dump); a
// replica with another token cannot, and starts empty.
func TestPeerRecoveryWithAdminToken(t *testing.T) {
	const tok = "replica-admin-token-0123456789"
	workers := []string{"--block-size", "4", "--workers", "1=tcp://127.0.0.1:1", "--peer-join-delay", "10ms"}
	a := startDynApp(t, map[string]string{"CONDUCTOR_ADMIN_TOKEN": tok}, workers...)
	recovery := func(d *dynApp) (int, bool) {
		d.a.dp.mu.Lock()
		defer d.a.dp.mu.Unlock()
		return d.a.dp.recovery.Streams, d.a.dp.recovery.Peer != ""
	}
	for _, c := range []struct {
		token   string
		streams int
	}{{tok, 1}, {"another-admin-token-0123456789", 0}} {
		b := startDynApp(t, map[string]string{"CONDUCTOR_ADMIN_TOKEN": c.token},
			append(workers, "--peers", "http://"+a.dyn)...)
		waitFor(t, "recovery", func() bool { return !b.a.ix.Gated() })
		if n, _ := recovery(b); n != c.streams {
			t.Fatalf("token %q: recovered %d streams, want %d", c.token, n, c.streams)
		}
		b.stop()
	}
}
