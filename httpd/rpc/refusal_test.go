package rpc

import (
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestRPCRegisterRefusalReason: over a loopback RPC port, a refused Register
// answers the Python API's INVALID_PARAMS (-600) and, beside it, why: the
// error envelope's "reason", "field" when the refusal names one, and the
// cause in "error" (what the Python client's last_error carries). Nothing
// else is in the answer, so clients that read only ret are unaffected.
func TestRPCRegisterRefusalReason(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	addr, client := apitest.Serve(t, New(env.c))
	call := func(cfg obj) response {
		t.Helper()
		return responseOf(apitest.Do(t, client, addr, "POST", "/rpc/Register", "application/json", []byte(jsonEnc(cfg))))
	}
	checkRet(t, call(pyReg()), RetOK, "", "")
	cases := []struct {
		name          string
		cfg           obj
		reason, field string
		errorHas      []string // substrings of "error"
	}{
		{"hash profile algorithm", with(pyReg(), "instance_id", "vllm-1", "endpoint", "tcp://127.0.0.1:6001",
			"hash_profile", with(cborSpec(), "algorithm", "md5")),
			"invalid_value", "algorithm", []string{`hash_profile.algorithm="md5"`, `strategy "vllm_v1" wants`}},
		{"hash profile strategy", with(pyReg(), "instance_id", "vllm-1", "endpoint", "tcp://127.0.0.1:6001",
			"hash_profile", with(cborSpec(), "strategy", "vllm_v2")),
			"invalid_value", "strategy", []string{`hash_profile.strategy="vllm_v2"`}},
		{"endpoint of another registration", with(pyReg(), "instance_id", "vllm-1"),
			"invalid_registration", "endpoint", []string{"endpoint tcp://127.0.0.1:5557 is used by vllm-0|default|0"}},
		{"hash profile conflicting with the context's", with(pyReg(), "instance_id", "vllm-1", "endpoint", "tcp://127.0.0.1:6001",
			"hash_profile", with(cborSpec(), "python_hash_seed", "7")),
			"invalid_registration", "", []string{`context default/my-model/""/16 is bound to hash profile vllm_v1/sha256_cbor/0/low64_be`}},
		{"block size", with(pyReg(), "instance_id", "vllm-1", "endpoint", "tcp://127.0.0.1:6001", "block_size", 0),
			"out_of_range", "block_size", []string{"block_size must be greater than zero"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := call(c.cfg)
			checkRet(t, r, RetInvalidParams, c.reason, c.field)
			m := decodeMap(t, r)
			want := []string{"error", "reason", "ret"}
			if c.field != "" {
				want = []string{"error", "field", "reason", "ret"}
			}
			if got := keys(m); !deepEqual(got, want) {
				t.Fatalf("keys %v, want %v: %s", got, want, r.body)
			}
			for _, s := range c.errorHas {
				if !strings.Contains(m["error"].(string), s) {
					t.Errorf("error %q lacks %q", m["error"], s)
				}
			}
		})
	}
	if n := len(env.ix.Services()); n != 1 {
		t.Fatalf("%d services after refusals, want 1", n)
	}
}
