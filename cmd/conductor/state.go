package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/dynamo"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Durable registrations. Every successful /register and /unregister (of any
// surface) that changes the registrations the file holds rewrites
// DIR/registrations.json before it is answered, as the next generation of a
// file kept in generations (below): written to a temporary file and fsynced,
// the current file kept as registrations.json.prev (a hard link), the
// temporary one renamed over it, DIR fsynced. The file carries a SHA-256
// of its registrations; at start the current file is tried, then the
// previous one, and a torn or corrupt file is reported at ERROR and moved
// aside (never overwritten, never a crash). When a write fails (disk full,
// read-only directory) the change is undone and the request answered 500
// state_not_saved (server.Gate.OnChange); queries keep working.
// Configuration-file registrations come from the file at every start and are
// not written. DIR belongs to one process (statelock.go). Proved by the
// TestState* tests.
const (
	stateFile    = "registrations.json"
	stateVersion = 1
)

// configOwner owns the configuration file's registrations.
var configOwner = server.ConfigPrincipal.Name

// stateDoc is the file's JSON.
type stateDoc struct {
	Version       int             `json:"version"`
	Generation    uint64          `json:"generation"`
	Written       string          `json:"written"`
	Checksum      string          `json:"checksum"` // hex SHA-256 of Registrations as written
	Registrations json.RawMessage `json:"registrations"`
	decoded       []stateEntry
}

// stateEntry is one registration: its owner and its /register JSON body.
type stateEntry struct {
	Owner    string          `json:"owner"`
	Origin   string          `json:"origin,omitempty"` // core.Registration.Origin
	Register json.RawMessage `json:"register"`
}

// generations is a file replaced only as a whole: PATH is the current
// generation, PATH.prev the one before it, PATH.tmp the next one while it is
// written. replace writes the next generation in four steps:
//
//  1. PATH.tmp is written and fsynced;
//  2. PATH.prev becomes a hard link to PATH, if any (the old PATH.prev
//     removed first);
//  3. PATH.tmp is renamed over PATH, which the kernel does atomically;
//  4. the directory is fsynced.
//
// Once written, PATH never goes missing, so a reader of the directory (an
// operator, a backup, a test) always finds a complete generation there. On
// a filesystem without hard links step 2 renames PATH to PATH.prev instead,
// and PATH is absent until step 3. A crash after any step leaves a complete,
// fsynced generation at PATH or, in that fallback between steps 2 and 3
// only, at PATH.prev; PATH.tmp is never read. load
// tries PATH then PATH.prev with the caller's check (which must detect a torn
// or corrupt file: a checksum inside the file), moves each file that fails it
// aside to FILE.corrupt-<unix time> and stops at the first that passes. The
// registration state and the index snapshot both use it (TestGenerationsCrash
// kills replace after every step).
type generations struct {
	path string
	// crashAfter, when set, is called after each step of replace (1..4);
	// true ends replace there as a SIGKILL would (tests only).
	crashAfter func(step int) bool
}

// errCrashed is what replace returns where crashAfter stopped it.
var errCrashed = errors.New("conductor: simulated crash")

// replace writes the next generation with write, which gets PATH.tmp open
// for writing; the file is fsynced and closed by replace.
func (g *generations) replace(write func(f *os.File) error) error {
	tmp := g.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if g.crashed(1) {
		return errCrashed
	}
	if err := g.keepPrevious(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("keep previous generation: %w", err)
	}
	if g.crashed(2) {
		return errCrashed
	}
	if err := os.Rename(tmp, g.path); err != nil {
		return err
	}
	if g.crashed(3) {
		return errCrashed
	}
	if err := syncDir(filepath.Dir(g.path)); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	if g.crashed(4) {
		return errCrashed
	}
	return nil
}

// keepPrevious makes PATH.prev the current generation (step 2 of replace):
// a hard link where the filesystem has them, else a rename.
func (g *generations) keepPrevious() error {
	prev := g.path + ".prev"
	if err := os.Remove(prev); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	err := os.Link(g.path, prev)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.Rename(g.path, prev); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (g *generations) crashed(step int) bool { return g.crashAfter != nil && g.crashAfter(step) }

// load returns the newest generation that passes check ("" when none does)
// and a line for each file that failed it (moved aside).
func (g *generations) load(check func(path string) error) (from string, bad []string) {
	for _, p := range []string{g.path, g.path + ".prev"} {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := check(p); err != nil {
			aside := fmt.Sprintf("%s.corrupt-%d", p, time.Now().Unix())
			_ = os.Rename(p, aside)
			bad = append(bad, fmt.Sprintf("%s: %v (moved to %s)", p, err, aside))
			continue
		}
		return p, bad
	}
	return "", bad
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// stateStore reads and writes the state directory's registrations, and
// holds the directory's lock.
type stateStore struct {
	dir string
	gen uint64
	// last is the checksum of the registrations this store last wrote
	// (saved: it wrote some): save writes only when they change.
	last  [sha256.Size]byte
	saved bool
	file  generations
	lock  *os.File // nil: not locked (read-only directory, or a test's store)
}

// newStateStore creates dir if needed and locks it (errStateDirInUse when
// another process holds it). close releases the lock.
func newStateStore(dir string) (*stateStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	lock, err := lockStateDir(dir)
	if err != nil {
		return nil, err
	}
	return &stateStore{dir: dir, file: generations{path: filepath.Join(dir, stateFile)}, lock: lock}, nil
}

// close releases the directory's lock (the process's exit does too). Safe on
// a nil store.
func (s *stateStore) close() {
	if s != nil && s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// registerJSON renders r as a /register JSON body (the JSON dialect's keys),
// which server.DecodeRegistration reads back with the API's own rules.
func registerJSON(r *core.Registration) ([]byte, error) {
	m := map[string]any{
		"endpoint": r.Endpoint, "type": r.Type.String(), "modelname": r.ModelName,
		"instance_id": r.InstanceID, "block_size": r.BlockSize, "dp_rank": r.DPRank,
		"tenant_id": r.TenantID,
	}
	for k, v := range map[string]string{"replay_endpoint": r.ReplayEndpoint, "lora_name": r.LoraName,
		"additionalsalt": r.AdditionalSalt} {
		if v != "" {
			m[k] = v
		}
	}
	if r.CacheGroup != nil {
		m["cache_group"] = *r.CacheGroup
	}
	if r.ProfileExplicit {
		sp := r.Profile.Spec
		m["hash_profile"] = map[string]string{"strategy": sp.Strategy, "algorithm": sp.Algorithm,
			"python_hash_seed": sp.PythonHashSeed, "index_projection": sp.IndexProjection}
	}
	return json.Marshal(m)
}

// save writes regs as the next generation, leaving out the configuration
// file's and Kubernetes discovery's (their sources hold them).
func (s *stateStore) save(regs []core.Registration) error {
	entries := make([]stateEntry, 0, len(regs))
	for i := range regs {
		if regs[i].Owner == configOwner || regs[i].Owner == server.DiscoveryPrincipal.Name {
			continue
		}
		b, err := registerJSON(&regs[i])
		if err != nil {
			return err
		}
		entries = append(entries, stateEntry{Owner: regs[i].Owner, Origin: regs[i].Origin, Register: b})
	}
	sort.Slice(entries, func(i, j int) bool { return bytes.Compare(entries[i].Register, entries[j].Register) < 0 })
	body, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if s.saved && sum == s.last {
		// Nothing it holds changed (a discovered or configuration-file
		// registration): no new generation, no fsync.
		return nil
	}
	doc := stateDoc{Version: stateVersion, Generation: s.gen + 1, Written: time.Now().UTC().Format(time.RFC3339Nano),
		Checksum: hex.EncodeToString(sum[:]), Registrations: body}
	data, err := json.Marshal(doc) // compact: the checksum covers the registrations' bytes as written
	if err != nil {
		return err
	}
	err = s.file.replace(func(f *os.File) error {
		_, err := f.Write(append(data, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	s.gen, s.last, s.saved = doc.Generation, sum, true
	return nil
}

// stateLoad is what load found.
type stateLoad struct {
	entries []stateEntry
	from    string   // the file the entries came from ("" when none)
	gen     uint64   // its generation
	bad     []string // files found torn or corrupt (moved aside), with why
}

// load reads the newest good generation. Torn or corrupt files are moved
// aside to FILE.corrupt-<unix time> and reported in bad.
func (s *stateStore) load() stateLoad {
	var out stateLoad
	var doc stateDoc
	out.from, out.bad = s.file.load(func(p string) (err error) {
		doc, err = parseState(os.ReadFile(p))
		return err
	})
	if out.from != "" {
		out.entries, out.gen = doc.decoded, doc.Generation
	}
	s.gen = out.gen
	return out
}

func parseState(data []byte, readErr error) (stateDoc, error) {
	var doc stateDoc
	if readErr != nil {
		return doc, readErr
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return doc, fmt.Errorf("not a state document: %w", err)
	}
	if doc.Version != stateVersion {
		return doc, fmt.Errorf("version %d, want %d", doc.Version, stateVersion)
	}
	sum := sha256.Sum256(doc.Registrations)
	if hex.EncodeToString(sum[:]) != doc.Checksum {
		return doc, errors.New("checksum mismatch (torn or edited)")
	}
	if err := json.Unmarshal(doc.Registrations, &doc.decoded); err != nil {
		return doc, fmt.Errorf("registrations: %w", err)
	}
	return doc, nil
}

// restoreState registers what the state directory holds, through the gate
// (so the endpoint policy applies), each under its recorded owner. Entries
// that no longer decode or register are logged and dropped from the next
// generation.
func (a *app) restoreState() {
	if a.state == nil {
		return
	}
	ld := a.state.load()
	for _, b := range ld.bad {
		a.log.Error("registration state file is torn or corrupt; using the previous good generation", "problem", b)
	}
	if ld.from == "" {
		if len(ld.bad) > 0 {
			a.log.Error("no good registration state left: starting without restored registrations", "path", a.state.file.path)
		} else {
			a.log.Info("no registration state yet", "path", a.state.file.path)
		}
		return
	}
	ok, failed := 0, 0
	for _, e := range ld.entries {
		reg, err := server.DecodeRegistration(e.Register, true, server.DecodeOptions{})
		who := server.Principal{Name: e.Owner, Admin: true}
		switch {
		case err != nil:
		case e.Origin == dynamo.Origin && a.dp != nil && a.dp.dyn != nil:
			// back into the Dynamo registry too (its indexer and worker)
			err = a.dp.dyn.Restore(who, reg)
		default:
			_, err = a.gate.Register(who, reg)
		}
		if err != nil {
			failed++
			a.log.Error("restored registration refused", "entry", string(e.Register), "err", err)
			continue
		}
		ok++
	}
	a.log.Info("registrations restored", "path", ld.from, "restored", ok, "failed", failed, "generation", ld.gen)
}

// persist turns on durable registrations: from now on every change is
// written before it is answered; the current set is written once now.
func (a *app) persist() {
	if a.state == nil {
		return
	}
	if err := a.state.save(a.ix.Services()); err != nil {
		a.log.Error("cannot write the registration state; registrations will fail until it can be written",
			"dir", a.state.dir, "err", err)
	}
	a.gate.OnChange = a.state.save
}
