package main

import (
	"io"
	"strings"
	"testing"
)

// TestNATSFlags: --nats-* flags are refused in bad combinations with the
// field named; without --nats-publish/--nats-consume nothing is required.
func TestNATSFlags(t *testing.T) {
	f := func(wantErr string, args ...string) {
		t.Helper()
		s, err := parseFlags(args, io.Discard)
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("%v: %v", args, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("%v: err %v, want %q", args, err, wantErr)
		case wantErr == "" && (s.nats.publish || s.nats.consume) && s.nats.opts.URL != s.nats.url:
			t.Fatalf("%v: URL not carried into the options", args)
		}
	}
	f("")                                // the default: no NATS
	f("", "--nats-url", "nats://h:4222") // a URL alone does nothing
	f("", "--nats-url", "nats://h:4222", "--nats-publish")
	f("", "--nats-url", "nats://h:4222", "--nats-consume", "--nats-filter-tenant", "acme", "--nats-filter-model", "m/1")
	f("URL is required", "--nats-publish")
	f("URL is required", "--nats-consume")
	f("choose one", "--nats-url", "nats://h:4222", "--nats-publish", "--nats-consume")
	f("FilterModel needs FilterTenant", "--nats-url", "nats://h:4222", "--nats-consume", "--nats-filter-model", "m")
	f("Stream=", "--nats-url", "nats://h:4222", "--nats-publish", "--nats-stream", "a.b")
	f("SubjectPrefix=", "--nats-url", "nats://h:4222", "--nats-publish", "--nats-subject-prefix", "x.>")
	f("Replicas=", "--nats-url", "nats://h:4222", "--nats-publish", "--nats-replicas", "9")
	f("Bucket=", "--nats-url", "nats://h:4222", "--nats-consume", "--nats-snapshot-bucket", "a.b")
}

// TestReplicaRefusesRegistration: a query replica's registrations come from
// the stream, so /register and /unregister answer 403 forbidden saying where
// to register instead (NATS need not be up: the replica starts without it).
func TestReplicaRefusesRegistration(t *testing.T) {
	p := startConductor(t, "", "--nats-url", "nats://127.0.0.1:1", "--nats-consume")
	for _, c := range []struct{ path, body string }{
		{"/register", `{"type":"vLLM","modelname":"m","tenant_id":"default","instance_id":"e1","block_size":16,` +
			`"dp_rank":0,"endpoint":"tcp://127.0.0.1:5557"}`},
		{"/unregister", `{"instance_id":"e1","tenant_id":"default","dp_rank":0}`},
	} {
		resp, err := boundedClient.Post(p.url(c.path), "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), "forbidden") ||
			!strings.Contains(string(body), "query replica") || !strings.Contains(string(body), "on the relay") {
			t.Errorf("%s: %d %s, want 403 forbidden naming the relay", c.path, resp.StatusCode, body)
		}
	}
}
