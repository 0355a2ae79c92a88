package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

func TestParseConfigRejects(t *testing.T) {
	for _, body := range []string{
		``, `{`, `[]`, `null`, `"x"`, `{"http_server_port": "13333"}`, `{"http_server_port": 1.5}`,
		`{"http_server_port": -1}`, `{"http_server_port": 70000}`, `{"rpc_server_port": true}`,
		`{"kvevent_instance": []}`, `{"services": {}}`,
	} {
		if _, err := parseConfig([]byte(body)); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", body, err)
		}
	}
}

func TestParseConfig(t *testing.T) {
	const profile = `{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be"}`
	body := `{
  "http_server_port": 14444,
  "rpc_server_port": 50052,
  "kvevent_instance": {
    "engine-a": {"endpoint": "tcp://a:1", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0,
                 "hash_profile": ` + profile + `, "additionalsalt": "legacy-ok"},
    "rank1": {"endpoint": "tcp://a:2", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 1,
              "instance_id": "engine-a", "tenant_id": "", "cache_group": 0},
    "group1": {"endpoint": "tcp://g:1", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0, "cache_group": 1},
    "tenant7": {"endpoint": "tcp://t:1", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0, "tenant_id": 7},
    "typeX": {"endpoint": "tcp://x:1", "type": "TRT", "modelname": "m", "block_size": 16, "dp_rank": 0},
    "emptyid": {"endpoint": "tcp://e:1", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0, "instance_id": ""},
    "spaceseed": {"endpoint": "tcp://s:1", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0,
                  "hash_profile": {"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":" 0","index_projection":"low64_be"}},
    "floatbs": {"endpoint": "tcp://f:1", "type": "vLLM", "modelname": "m", "block_size": 16.0, "dp_rank": 0},
    "notobj": 5
  },
  "services": [
    {"endpoint": "tcp://s:9", "type": "SGLang", "modelname": "sg", "instance_id": "sg-0", "block_size": 64, "dp_rank": 2,
     "hash_profile": {"strategy": "sglang", "algorithm": "sha256_raw", "index_projection": "first64_be"}},
    {"endpoint": "tcp://s:10", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0}
  ]
}`
	cfg, err := parseConfig([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPPort != 14444 || !cfg.HasRPC || cfg.RPCPort != 50052 {
		t.Fatalf("%+v", cfg)
	}
	var sources []string
	for _, e := range cfg.Static {
		sources = append(sources, e.Source)
	}
	if got := strings.Join(sources, " "); got != `kvevent_instance["engine-a"] kvevent_instance["rank1"] services[0]` {
		t.Fatalf("static %s", got)
	}
	a, r1, sg := cfg.Static[0].Reg, cfg.Static[1].Reg, cfg.Static[2].Reg
	if a.InstanceID != "engine-a" || a.AdditionalSalt != "legacy-ok" || !a.ProfileExplicit || a.Profile.Spec.Algorithm != "sha256_cbor" {
		t.Fatalf("engine-a %+v", a)
	}
	if r1.InstanceID != "engine-a" || r1.DPRank != 1 || r1.TenantID != "default" || r1.CacheGroup == nil || r1.ProfileExplicit ||
		r1.Profile != hash.DefaultProfile() {
		t.Fatalf("rank1 %+v", r1)
	}
	if sg.InstanceID != "sg-0" || sg.BlockSize != 64 || sg.DPRank != 2 || sg.Profile.Spec.Strategy != "sglang" {
		t.Fatalf("sglang %+v", sg)
	}
	reasons := map[string]string{}
	for _, s := range cfg.Skipped {
		reasons[s.Source] = server.ReasonOf(s.Err)
	}
	want := map[string]string{
		`kvevent_instance["group1"]`:    "unsupported",
		`kvevent_instance["tenant7"]`:   "invalid_type",
		`kvevent_instance["typeX"]`:     "invalid_value",
		`kvevent_instance["emptyid"]`:   "invalid_value",
		`kvevent_instance["spaceseed"]`: "invalid_value",
		`kvevent_instance["floatbs"]`:   "invalid_type",
		`kvevent_instance["notobj"]`:    "invalid_json",
		`services[1]`:                   "missing",
	}
	if len(reasons) != len(want) {
		t.Fatalf("skipped %v", reasons)
	}
	for k, v := range want {
		if reasons[k] != v {
			t.Errorf("%s: reason %q, want %q", k, reasons[k], v)
		}
	}
}

// TestParseConfigTypos: an unknown key anywhere in the file (the top level,
// media, a kvevent_instance or services entry, its hash_profile, a Go-era
// root_digest copied from /services) makes the file unusable, and the error
// names the key, where it is, and the nearest known key when one is near.
func TestParseConfigTypos(t *testing.T) {
	const entry = `"endpoint": "tcp://a:1", "type": "vLLM", "modelname": "m", "block_size": 16, "dp_rank": 0`
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"http_srver_port": 8080}`, []string{`unknown key "http_srver_port"; did you mean "http_server_port"?`}},
		{`{"service": []}`, []string{`unknown key "service"; did you mean "services"?`}},
		{`{"zzz": 1}`, []string{`unknown key "zzz" (known: http_server_port, rpc_server_port, kvevent_instance, services, media, allow_source_endpoints)`}},
		{`{"media": {"engin": {}}}`, []string{`media: unknown key "engin"; did you mean "engine"?`}},
		{`{"services": [{` + entry + `, "instance_id": "i", "replay_endpont": "tcp://a:2"}]}`,
			[]string{"services[0]: unknown field replay_endpont; did you mean replay_endpoint?"}},
		{`{"kvevent_instance": {"e": {` + entry + `, "blocksize": 16}}}`,
			[]string{`kvevent_instance["e"]: unknown field blocksize; did you mean block_size?`}},
		{`{"kvevent_instance": {"e": {` + entry + `, "hash_profile": {"strategy": "vllm_v1", "algoritm": "sha256"}}}}`,
			[]string{`kvevent_instance["e"]: unknown hash_profile field algoritm; did you mean algorithm?`}},
		{`{"kvevent_instance": {"e": {` + entry + `, "hash_profile": {"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be","root_digest":"00"}}}}`,
			[]string{`kvevent_instance["e"]: unknown hash_profile field root_digest`}},
	} {
		_, err := parseConfig([]byte(c.body))
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", c.body, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nlacks %q", c.body, err, w)
			}
		}
	}
}

// TestMissingConfigFlag: a configuration file --config names that does not
// exist stops the start (exit 1, the path in the error); without --config a
// missing default file is no error.
func TestMissingConfigFlag(t *testing.T) {
	dir := t.TempDir()
	var out syncbuf.Buffer
	missing := filepath.Join(dir, "conductr.json")
	if a, code := newApp([]string{"--config", missing, "--http-port", "0", "--rpc-port", "0", "--state-dir", ""},
		envOf(map[string]string{"HOME": dir}), io.Discard, &out); a != nil || code != 1 ||
		!strings.Contains(out.String(), "--config names a file that cannot be read") || !strings.Contains(out.String(), missing) {
		t.Fatalf("exit %d, logs:\n%s", code, out.String())
	}
	out = syncbuf.Buffer{}
	a, code := newApp([]string{"--http-port", "0", "--rpc-port", "0", "--state-dir", ""}, envOf(map[string]string{"HOME": dir}), io.Discard, &out)
	if a == nil || code != 0 || !strings.Contains(out.String(), "no configuration file") || strings.Contains(out.String(), "not readable") {
		t.Fatalf("default path: exit %d, logs:\n%s", code, out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // serve starts and stops at once
	if code := a.serve(ctx); code != 0 {
		t.Fatalf("serve: exit %d", code)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, readErr, err := loadConfig(filepath.Join(dir, "missing.json"))
	if err != nil || readErr == nil || cfg.HTTPPort != DefaultHTTPPort {
		t.Fatalf("%+v %v %v", cfg, readErr, err)
	}
	p := filepath.Join(dir, "c.json")
	if err := os.WriteFile(p, []byte(`{"kvevent_instance": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, readErr, err = loadConfig(p); err != nil || readErr != nil || cfg.HTTPPort != DefaultHTTPPort {
		t.Fatalf("%+v %v %v", cfg, readErr, err)
	}
	// a directory is unreadable, not malformed
	if _, readErr, err = loadConfig(dir); err != nil || readErr == nil {
		t.Fatalf("%v %v", readErr, err)
	}
}

func TestConfigPath(t *testing.T) {
	for _, c := range []struct {
		flag     string
		env      map[string]string
		want     string
		emptyEnv bool
	}{
		{"/f.json", map[string]string{"CONDUCTOR_CONFIG_PATH": "/e.json", "HOME": "/h"}, "/f.json", false},
		{"", map[string]string{"CONDUCTOR_CONFIG_PATH": "/e.json", "HOME": "/h"}, "/e.json", false},
		{"", map[string]string{"CONDUCTOR_CONFIG_PATH": "", "HOME": "/h"}, "/h/.mooncake/conductor_config.json", true},
		{"", map[string]string{"HOME": "/h"}, "/h/.mooncake/conductor_config.json", false},
		{"", map[string]string{}, "~/.mooncake/conductor_config.json", false},
	} {
		got, empty := configPath(c.flag, envOf(c.env))
		if got != c.want || empty != c.emptyEnv {
			t.Errorf("%v: %s %v, want %s %v", c, got, empty, c.want, c.emptyEnv)
		}
	}
}

func TestParseLevel(t *testing.T) {
	for in, ok := range map[string]bool{"debug": true, "INFO": true, "Warn": true, "warning": true, "ERROR": true, "": true, "verbose": false, "5": false} {
		if _, got := parseLevel(in); got != ok {
			t.Errorf("%q: %v", in, got)
		}
	}
}

// TestConfigMedia: the media mapping is configurable in the file; a bad tier
// is a configuration error.
func TestConfigMedia(t *testing.T) {
	cfg, err := parseConfig([]byte(`{"media": {"engine": {"TAPE": "disk"}, "pool": {"cxl": "cpu_share"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := cfg.EngineMedia["tape"]; !ok || p.Tier != core.TierDisk {
		t.Fatalf("engine tape: %+v %v", p, ok)
	}
	if p, ok := cfg.PoolMedia["cxl"]; !ok || p.Tier != core.TierCPUShare || !p.Shared {
		t.Fatalf("pool cxl: %+v %v", p, ok)
	}
	if p, ok := cfg.EngineMedia["dfs"]; !ok || p.Tier != core.TierDisk {
		t.Fatalf("defaults kept: %+v %v", p, ok)
	}
	if _, err := parseConfig([]byte(`{"media": {"engine": {"x": "warp"}}}`)); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad tier: %v", err)
	}
}

// TestRPCPortDefault: without rpc_server_port the RPC port is the seed's
// 50052; 0 turns it off; a missing file keeps the default.
func TestRPCPortDefault(t *testing.T) {
	for _, c := range []struct {
		text string
		want int
	}{{`{}`, 50052}, {`{"rpc_server_port": 0}`, 0}, {`{"rpc_server_port": 6000}`, 6000}} {
		cfg, err := parseConfig([]byte(c.text))
		if err != nil || cfg.RPCPort != c.want {
			t.Fatalf("%s: port %d err %v, want %d", c.text, cfg.RPCPort, err, c.want)
		}
	}
	cfg, readErr, err := loadConfig(t.TempDir() + "/missing.json")
	if readErr == nil || err != nil || cfg.RPCPort != DefaultRPCPort {
		t.Fatalf("missing file: %+v %v %v", cfg, readErr, err)
	}
}
