package mooncake

import (
	"encoding/json"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// queryRow posts a /query as token and returns the row of instance inst
// (nil when absent).
func queryRow(t *testing.T, env *testEnv, token string, tokens []int32, inst string) map[string]any {
	t.Helper()
	r := env.doAuth(t, "POST", "/query", token, jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", tokens}))
	if r.status != 200 {
		t.Fatalf("query: %d %s", r.status, r.body)
	}
	var m map[string]map[string]map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("query: %v: %s", err, r.body)
	}
	return m["default"][inst]
}

// TestProfileSquatting: identity team-a registers model m first with a
// wrong hash profile; team-b's registration with the right profile still
// succeeds (a partition of its own) and the blocks of team-b's engine are
// found by /query, while team-a's rows stay. team-a contradicting its own
// profile is still a conflict, and so is a contradiction on an open surface
// (no tokens).
func TestProfileSquatting(t *testing.T) {
	env := accessEnv(t, false, nil)
	reg := func(inst, ep string, prof any) string {
		o := with(baseReg(), "instance_id", inst, "endpoint", ep, "hash_profile", prof)
		if prof == nil {
			o = with(o, "hash_profile", drop)
		}
		return jsonEnc(o)
	}
	pickle := with(cborSpec(), "algorithm", "sha256")
	if r := env.doAuth(t, "POST", "/register", teamATok, reg("a1", "tcp://10.0.0.1:1", pickle)); r.status != 200 {
		t.Fatalf("team-a squats: %d %s", r.status, r.body)
	}
	if r := env.doAuth(t, "POST", "/register", teamBTok, reg("b1", "tcp://10.0.0.2:1", cborSpec())); r.status != 200 {
		t.Fatalf("team-b with the right profile after team-a's squat: %d %s", r.status, r.body)
	}

	tokens := seqTokens(64, 7)
	cbor := cborProfile(t)
	apply(t, env.reg.sub(t, "b1", "default", 0), storeBatch("GPU", 16, chain(t, cbor, tokens, 16, "", ""), nil))
	p := mustResolve(t, hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "0", IndexProjection: "low64_be"})
	apply(t, env.reg.sub(t, "a1", "default", 0), storeBatch("GPU", 16, chain(t, p, tokens[:32], 16, "", ""), nil))
	for _, tok := range []string{teamBTok, queryTok} {
		b := queryRow(t, env, tok, tokens, "b1")
		if b == nil || b["GPU"] != float64(64) || b["longest_matched"] != float64(64) {
			t.Fatalf("team-b's engine under the right profile: %v", b)
		}
		if a := queryRow(t, env, tok, tokens, "a1"); a == nil || a["GPU"] != float64(32) {
			t.Fatalf("team-a's engine under its own profile: %v", a)
		}
	}

	// team-a contradicting itself (the default profile matches no partition).
	r := env.doAuth(t, "POST", "/register", teamATok, reg("a2", "tcp://10.0.0.1:2", nil))
	checkError(t, r, 400, "invalid_registration", "", -1)
	// Joining team-b's partition by its profile is allowed, and so is the
	// admin's own partition.
	if r := env.doAuth(t, "POST", "/register", teamATok, reg("a3", "tcp://10.0.0.1:3", cborSpec())); r.status != 200 {
		t.Fatalf("team-a joins the cbor partition: %d %s", r.status, r.body)
	}
	if r := env.doAuth(t, "POST", "/register", adminTok, reg("x1", "tcp://10.0.0.3:1", nil)); r.status != 200 {
		t.Fatalf("admin's own profile: %d %s", r.status, r.body)
	}
	if r := env.doAuth(t, "POST", "/register", adminTok, reg("x2", "tcp://10.0.0.3:2", with(cborSpec(), "python_hash_seed", "9"))); r.status != 400 {
		t.Fatalf("admin contradicting itself: %d %s", r.status, r.body)
	}
	if n := len(env.ix.GlobalView().Contexts); n != 3 {
		t.Fatalf("%d partitions, want 3: %+v", n, env.ix.GlobalView())
	}

	// An open surface: one identity, a contradicting profile is a conflict,
	// also against a configuration-file registration (the operator's too).
	open := startEnv(t, Options{}, core.Options{})
	if r := open.postJSON(t, "/register", reg("a1", "tcp://10.0.0.1:1", pickle)); r.status != 200 {
		t.Fatalf("open: %d %s", r.status, r.body)
	}
	checkError(t, open.postJSON(t, "/register", reg("b1", "tcp://10.0.0.2:1", cborSpec())), 400, "invalid_registration", "", -1)
	cfg := core.Registration{Endpoint: "tcp://10.0.0.4:1", Type: core.PublisherVLLM, ModelName: "m2", InstanceID: "c1",
		BlockSize: 16, Profile: p, ProfileExplicit: true}
	if _, err := open.c.Gate().Register(server.Principal{Name: "config", Admin: true}, cfg); err != nil {
		t.Fatal(err)
	}
	checkError(t, open.postJSON(t, "/register", jsonEnc(with(baseReg(), "modelname", "m2", "instance_id", "b2", "endpoint", "tcp://10.0.0.2:2"))),
		400, "invalid_registration", "", -1)
}
