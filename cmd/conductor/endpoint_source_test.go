package main

import (
	"errors"
	"strings"
	"testing"
)

// TestAllowSourceEndpoints: the source-address form is refused unless the
// configuration file's allow_source_endpoints or --allow-source-endpoints
// allows it; the flag wins over the file.
func TestAllowSourceEndpoints(t *testing.T) {
	const body = `{"endpoint": "tcp://127.0.0.1:0;127.0.0.1:5997", "type": "vLLM", "modelname": "m", "instance_id": "s", "block_size": 16, "dp_rank": 0}`
	for _, c := range []struct {
		config string
		args   []string
		want   int
	}{
		{"", nil, 403},
		{"", []string{"--allow-source-endpoints"}, 200},
		{`{"allow_source_endpoints": true}`, nil, 200},
		{`{"allow_source_endpoints": false}`, []string{"--allow-source-endpoints"}, 200},
		{`{"allow_source_endpoints": true}`, []string{"--allow-source-endpoints=false"}, 403},
	} {
		p := startConductor(t, c.config, c.args...)
		code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", []byte(body))
		if code != c.want || (code == 403 && !strings.Contains(string(b), "--allow-source-endpoints")) {
			t.Errorf("config %s, flags %v: %d %s, want %d", c.config, c.args, code, b, c.want)
		}
		p.stop(t)
	}
	if _, err := parseConfig([]byte(`{"allow_source_endpoints": "yes"}`)); !errors.Is(err, ErrConfig) ||
		!strings.Contains(err.Error(), "allow_source_endpoints") {
		t.Fatalf("a string for allow_source_endpoints: %v", err)
	}
}
