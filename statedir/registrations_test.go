package statedir

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

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
			CacheGroup: &zero, Profile: prof, ProfileExplicit: true, Owner: "team-a", GapPolicy: core.GapExpire, MaxBlocks: -1},
		{Endpoint: "tcp://10.0.0.2:5557", Type: core.PublisherSGLang, ModelName: "q", TenantID: "default", InstanceID: "b",
			BlockSize: 64, Profile: hash.DefaultProfile(), Owner: "admin", GapPolicy: core.GapClear, MaxBlocks: 1000},
		{Endpoint: "tcp://10.0.0.3:5557", Type: core.PublisherVLLM, ModelName: "c", TenantID: "default", InstanceID: "c",
			BlockSize: 16, Profile: hash.DefaultProfile(), Owner: configOwner},
	}
}

// decodeAll reads entries back with the API's own decoder.
func decodeAll(t *testing.T, entries []Entry) []core.Registration {
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
func storeAt(dir string) *Store { return openUnlocked(dir) }

// TestStoreRoundTrip: what save writes, load and the /register decoder give
// back exactly (configuration-file registrations are not written).
func TestStoreRoundTrip(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	regs := sampleRegs(t)
	if err := st.Save(regs); err != nil {
		t.Fatal(err)
	}
	ld := st.Load()
	if len(ld.Bad) != 0 || ld.Generation != 1 {
		t.Fatalf("%+v", ld)
	}
	got := decodeAll(t, ld.Entries)
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

// TestStoreSavesOnlyChanges: a save whose written registrations did not
// change (a configuration-file or discovered registration came or went)
// writes no new generation; a change to the API's writes one.
func TestStoreSavesOnlyChanges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	regs := sampleRegs(t) // two API registrations, one from the configuration file
	discovered := regs[1]
	discovered.InstanceID, discovered.Endpoint, discovered.Owner = "ns/pod", "tcp://10.0.0.9:5557", server.DiscoveryPrincipal.Name
	gen := func() uint64 {
		t.Helper()
		ld := storeAt(dir).Load()
		if len(ld.Bad) != 0 {
			t.Fatalf("%+v", ld)
		}
		return ld.Generation
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
		if err := st.Save(s.regs); err != nil {
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

// TestStoreTornFile: a torn current file falls back to the previous
// generation; both bad means no restored registrations, reported, and the
// bad files kept aside.
func TestStoreTornFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	regs := sampleRegs(t)
	if err := st.Save(regs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(regs[:2]); err != nil {
		t.Fatal(err)
	}
	cur := filepath.Join(dir, RegistrationsFile)
	data, _ := os.ReadFile(cur)
	if err := os.WriteFile(cur, data[:len(data)/2], 0o600); err != nil { // torn mid-write
		t.Fatal(err)
	}
	ld := storeAt(dir).Load()
	if len(ld.Bad) != 1 || ld.Generation != 1 || len(ld.Entries) != 1 || !strings.HasSuffix(ld.From, ".prev") {
		t.Fatalf("%+v", ld)
	}
	// an edited (checksum-breaking) previous file too: nothing left
	prev := filepath.Join(dir, RegistrationsFile+".prev")
	data, _ = os.ReadFile(prev)
	if err := os.WriteFile(prev, []byte(strings.Replace(string(data), "10.0.0.1", "10.6.6.6", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	ld = storeAt(dir).Load()
	if len(ld.Bad) != 1 || ld.From != "" || len(ld.Entries) != 0 || !strings.Contains(ld.Bad[0], "checksum") {
		t.Fatalf("%+v", ld)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "*.corrupt-*"))
	if len(aside) != 2 {
		t.Fatalf("corrupt files kept aside: %v", aside)
	}
}

// TestStoreKeepsRefused: an entry Restore could not register (here: over a
// lowered registration limit) stays in every generation this run writes, so
// the next start tries it again; a registration of its service key
// supersedes it, and after that key's unregistration it is gone.
func TestStoreKeepsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	regs := sampleRegs(t)[:2]
	if err := st.Save(regs); err != nil {
		t.Fatal(err)
	}
	st.Close()

	st, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var got []core.Registration
	st.Restore(slog.New(slog.DiscardHandler), func(p server.Principal, origin string, r core.Registration) error {
		if r.InstanceID == "a" {
			return fmt.Errorf("register: 1 registrations: %w", core.ErrLimit)
		}
		r.Owner = p.Name
		got = append(got, r)
		return nil
	})
	if len(got) != 1 || got[0].InstanceID != "b" {
		t.Fatalf("restored %+v, want b only", got)
	}
	ids := func() string {
		var out []string
		for _, r := range decodeAll(t, st.Load().Entries) {
			out = append(out, r.InstanceID)
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	if err := st.Save(got); err != nil { // the start's first save: b registered, a refused
		t.Fatal(err)
	}
	if s := ids(); s != "a,b" {
		t.Fatalf("after the first save: %s, want a kept beside b", s)
	}
	a := regs[0]
	a.Endpoint = "tcp://10.0.0.9:5557" // registered anew through the API
	if err := st.Save(append(got, a)); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(got); err != nil { // and unregistered
		t.Fatal(err)
	}
	if s := ids(); s != "b" {
		t.Fatalf("after a was registered anew and unregistered: %s, want b", s)
	}
}
