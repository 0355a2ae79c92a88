package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

func sampleRegs(t *testing.T) []core.Registration {
	t.Helper()
	prof, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "42", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	return []core.Registration{
		{Endpoint: "tcp://10.0.0.1:5557", ReplayEndpoint: "tcp://10.0.0.1:5558", Type: core.PublisherVLLM, ModelName: "m",
			LoraName: "sql", TenantID: "t1", InstanceID: "a", BlockSize: 16, DPRank: 2, AdditionalSalt: "w8a8",
			CacheGroup: &zero, Profile: prof, ProfileExplicit: true, Owner: "team-a"},
		{Endpoint: "tcp://10.0.0.2:5557", Type: core.PublisherSGLang, ModelName: "q", TenantID: "default", InstanceID: "b",
			BlockSize: 64, Profile: hash.DefaultProfile(), Owner: "admin"},
		{Endpoint: "tcp://10.0.0.3:5557", Type: core.PublisherVLLM, ModelName: "c", TenantID: "default", InstanceID: "c",
			BlockSize: 16, Profile: hash.DefaultProfile(), Owner: configOwner},
	}
}

// decodeAll reads entries back with the API's own decoder.
func decodeAll(t *testing.T, entries []stateEntry) []core.Registration {
	t.Helper()
	var out []core.Registration
	for _, e := range entries {
		r, err := server.DecodeRegistration(e.Register, true, server.DecodeOptions{})
		if err != nil {
			t.Fatalf("%s: %v", e.Register, err)
		}
		r.Owner = e.Owner
		out = append(out, r)
	}
	return out
}

// storeAt is a store of dir as a fresh start would open it, without the lock.
func storeAt(dir string) *stateStore {
	return &stateStore{dir: dir, file: generations{path: filepath.Join(dir, stateFile)}}
}

// TestStateRoundTrip: what save writes, load and the /register decoder give
// back exactly (configuration-file registrations are not written).
func TestStateRoundTrip(t *testing.T) {
	st, err := newStateStore(filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	regs := sampleRegs(t)
	if err := st.save(regs); err != nil {
		t.Fatal(err)
	}
	ld := st.load()
	if len(ld.bad) != 0 || ld.gen != 1 {
		t.Fatalf("%+v", ld)
	}
	got := decodeAll(t, ld.entries)
	if len(got) != 2 {
		t.Fatalf("%d entries", len(got))
	}
	byID := map[string]core.Registration{}
	for _, r := range got {
		byID[r.InstanceID] = r
	}
	for _, want := range regs[:2] {
		g := byID[want.InstanceID]
		if !sameReg(&g, &want) {
			t.Fatalf("round trip\n got %+v\nwant %+v", g, want)
		}
	}
}

// TestStateSavesOnlyChanges: a save whose written registrations did not
// change (a configuration-file or discovered registration came or went)
// writes no new generation; a change to the API's writes one.
func TestStateSavesOnlyChanges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	st, err := newStateStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	regs := sampleRegs(t) // two API registrations, one from the configuration file
	discovered := regs[1]
	discovered.InstanceID, discovered.Endpoint, discovered.Owner = "ns/pod", "tcp://10.0.0.9:5557", server.DiscoveryPrincipal.Name
	gen := func() uint64 {
		t.Helper()
		ld := storeAt(dir).load()
		if len(ld.bad) != 0 {
			t.Fatalf("%+v", ld)
		}
		return ld.gen
	}
	steps := []struct {
		name string
		regs []core.Registration
		gen  uint64
	}{
		{"first save", regs[:2], 1},
		{"the same again", regs[:2], 1},
		{"a configuration-file registration more", regs, 1},
		{"a discovered registration more", append(append([]core.Registration(nil), regs...), discovered), 1},
		{"an API registration fewer", regs[1:], 2},
		{"it back", regs, 3},
	}
	for _, s := range steps {
		if err := st.save(s.regs); err != nil {
			t.Fatal(err)
		}
		if g := gen(); g != s.gen {
			t.Fatalf("%s: generation %d, want %d", s.name, g, s.gen)
		}
	}
}

func sameReg(a, b *core.Registration) bool {
	if (a.CacheGroup == nil) != (b.CacheGroup == nil) {
		return false
	}
	x, y := *a, *b
	x.CacheGroup, y.CacheGroup = nil, nil
	return x == y
}

// TestStateTornFile: a torn current file falls back to the previous
// generation; both bad means no restored registrations, reported, and the
// bad files kept aside.
func TestStateTornFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	st, err := newStateStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	regs := sampleRegs(t)
	if err := st.save(regs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := st.save(regs[:2]); err != nil {
		t.Fatal(err)
	}
	cur := filepath.Join(dir, stateFile)
	data, _ := os.ReadFile(cur)
	if err := os.WriteFile(cur, data[:len(data)/2], 0o600); err != nil { // torn mid-write
		t.Fatal(err)
	}
	ld := storeAt(dir).load()
	if len(ld.bad) != 1 || ld.gen != 1 || len(ld.entries) != 1 || !strings.HasSuffix(ld.from, ".prev") {
		t.Fatalf("%+v", ld)
	}
	// an edited (checksum-breaking) previous file too: nothing left
	prev := filepath.Join(dir, stateFile+".prev")
	data, _ = os.ReadFile(prev)
	if err := os.WriteFile(prev, []byte(strings.Replace(string(data), "10.0.0.1", "10.6.6.6", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	ld = storeAt(dir).load()
	if len(ld.bad) != 1 || ld.from != "" || len(ld.entries) != 0 || !strings.Contains(ld.bad[0], "checksum") {
		t.Fatalf("%+v", ld)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "*.corrupt-*"))
	if len(aside) != 2 {
		t.Fatalf("corrupt files kept aside: %v", aside)
	}
}

// TestGenerationsCrash: a crash after any step of replace (or a write that
// fails part-way) leaves a complete generation that load finds: the new one
// once it is renamed into place, else the previous one; never none.
func TestGenerationsCrash(t *testing.T) {
	check := func(p string) error { // a generation is "gen N\n", whole
		b, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(b), "gen ") || !strings.HasSuffix(string(b), "\n") {
			return fmt.Errorf("torn: %q %v", b, err)
		}
		return nil
	}
	write := func(g *generations, s string) error {
		return g.replace(func(f *os.File) error { _, err := f.WriteString(s); return err })
	}
	f := func(crashAfter int, want string) {
		t.Helper()
		dir := t.TempDir()
		g := &generations{path: filepath.Join(dir, "file")}
		for _, s := range []string{"gen 1\n", "gen 2\n"} {
			if err := write(g, s); err != nil {
				t.Fatal(err)
			}
		}
		g.crashAfter = func(step int) bool { return step == crashAfter }
		var err error
		if crashAfter == 0 {
			err = g.replace(func(f *os.File) error { // fails part-way
				f.WriteString("gen 3 (torn")
				return errors.New("disk full")
			})
		} else {
			err = write(g, "gen 3\n")
		}
		if err == nil {
			t.Fatalf("crash after step %d: replace returned nil", crashAfter)
		}
		from, bad := (&generations{path: g.path}).load(check)
		if len(bad) != 0 || from == "" {
			t.Fatalf("crash after step %d: from %q, bad %v", crashAfter, from, bad)
		}
		if got, _ := os.ReadFile(from); string(got) != want {
			t.Fatalf("crash after step %d: loaded %q from %s, want %q", crashAfter, got, from, want)
		}
	}
	f(0, "gen 2\n") // the write failed: the current file is untouched
	f(1, "gen 2\n") // written, not rotated
	f(2, "gen 2\n") // PATH.prev linked to PATH
	f(3, "gen 3\n") // renamed into place
	f(4, "gen 3\n") // and the directory synced
}

// TestGenerationsAlwaysPresent: while one goroutine replaces the file over
// and over, another never finds PATH missing, and every read of it is a
// whole generation; PATH.prev holds the generation before PATH's.
func TestGenerationsAlwaysPresent(t *testing.T) {
	g := &generations{path: filepath.Join(t.TempDir(), "file")}
	write := func(n int) error {
		return g.replace(func(f *os.File) error { _, err := fmt.Fprintf(f, "gen %d\n", n); return err })
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	const n = 300
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= n; i++ {
			if err := write(i); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	reads, last := 0, -1
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			cur, _ := os.ReadFile(g.path)
			prev, _ := os.ReadFile(g.path + ".prev")
			if string(cur) != fmt.Sprintf("gen %d\n", n) || string(prev) != fmt.Sprintf("gen %d\n", n-1) {
				t.Fatalf("after %d generations: PATH %q, PATH.prev %q", n, cur, prev)
			}
			t.Logf("%d reads while replacing", reads)
			return
		default:
		}
		b, err := os.ReadFile(g.path)
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		var gen int
		if _, err := fmt.Sscanf(string(b), "gen %d\n", &gen); err != nil || gen < last {
			t.Fatalf("read %d: %q after generation %d", reads, b, last)
		}
		last = gen
		reads++
	}
}

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
	tmp := filepath.Join(dir, stateFile+".tmp")
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
