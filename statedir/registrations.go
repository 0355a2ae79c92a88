// Package statedir keeps a conductor's state directory: the durable
// registrations (registrations.go), the index snapshot for warm restarts
// (snapshot.go), both written as whole generations of their files
// (generations.go), and the lock that gives the directory to one process at
// a time (lock.go). docs/operations.md, "Durable registrations" and "Warm
// restarts", is the operator's view.
package statedir

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Durable registrations. Every successful /register and /unregister (of any
// surface) that changes the registrations the file holds rewrites
// DIR/registrations.json before it is answered, as the next generation of a
// file kept in generations (generations.go): written to a temporary file and
// fsynced, the current file kept as registrations.json.prev (a hard link),
// the temporary one renamed over it, DIR fsynced. The file carries a SHA-256
// of its registrations; at start the current file is tried, then the
// previous one, and a torn or corrupt file is reported at ERROR and moved
// aside (never overwritten, never a crash). When a write fails (disk full,
// read-only directory) the change is undone and the request answered 500
// state_not_saved (server.Gate.OnChange); queries keep working.
// Configuration-file registrations come from the file at every start and are
// not written. DIR belongs to one process (lock.go). Proved by the
// TestStore* tests here and cmd/conductor's TestState* tests.
const (
	// RegistrationsFile is the registrations' file in the directory.
	RegistrationsFile = "registrations.json"
	stateVersion      = 1
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
	decoded       []Entry
}

// Entry is one registration: its owner and its /register JSON body.
type Entry struct {
	Owner    string          `json:"owner"`
	Origin   string          `json:"origin,omitempty"` // core.Registration.Origin
	Register json.RawMessage `json:"register"`
}

// Store reads and writes the state directory's registrations, and holds
// the directory's lock. Its methods are safe for concurrent use.
type Store struct {
	dir  string
	file generations
	lock *os.File // nil: not locked (read-only directory, or a test's store)

	// mu guards what follows. A mutex: every use is short, and Save is
	// already serialized by the Gate that calls it.
	mu  sync.Mutex
	gen uint64
	// last is the checksum of the registrations this store last wrote
	// (saved: it wrote some): Save writes only when they change.
	last  [sha256.Size]byte
	saved bool
	// restored holds the service keys Restore registered, until a Save
	// shows them gone (unregistered, perhaps registered anew since).
	restored map[core.ServiceKey]bool
	// kept are the entries Restore could not register (a lowered
	// --max-registrations, a narrower endpoint policy, a rule of this
	// version): every Save writes them again, so that the next start tries
	// them again instead of the file forgetting them, until a registration
	// of the same service key supersedes one (TestStoreKeepsRefused).
	kept []keptEntry
}

// keptEntry is an entry Restore refused and its service key (ok false when
// the entry does not decode: it is kept as it is).
type keptEntry struct {
	e   Entry
	key core.ServiceKey
	ok  bool
}

// Open creates dir if needed and locks it (ErrInUse when another process
// holds it). Close releases the lock.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s := openUnlocked(dir)
	s.lock = lock
	return s, nil
}

// openUnlocked is a store of dir without its lock.
func openUnlocked(dir string) *Store {
	return &Store{dir: dir, file: generations{path: filepath.Join(dir, RegistrationsFile)}}
}

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// Path is the registrations' file.
func (s *Store) Path() string { return s.file.path }

// Close releases the directory's lock (the process's exit does too). Safe
// on a nil store.
func (s *Store) Close() {
	if s != nil && s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// RegisterJSON renders r as a /register JSON body (the JSON dialect's
// keys), which server.DecodeRegistration reads back with the API's own
// rules.
func RegisterJSON(r *core.Registration) ([]byte, error) {
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
	if r.GapPolicy != core.GapDefault {
		m["gap_policy"] = r.GapPolicy.String()
	}
	if r.MaxBlocks != 0 {
		m["max_blocks"] = r.MaxBlocks
	}
	if r.ProfileExplicit {
		sp := r.Profile.Spec
		m["hash_profile"] = map[string]string{"strategy": sp.Strategy, "algorithm": sp.Algorithm,
			"python_hash_seed": sp.PythonHashSeed, "index_projection": sp.IndexProjection}
	}
	return json.Marshal(m)
}

// Save writes regs as the next generation, leaving out the configuration
// file's and Kubernetes discovery's (their sources hold them). It is the
// Gate's OnChange: regs is every registration after a change.
func (s *Store) Save(regs []core.Registration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneRestored(regs)
	entries := make([]Entry, 0, len(regs)+len(s.kept))
	if len(s.kept) > 0 {
		held := make(map[core.ServiceKey]bool, len(regs))
		for i := range regs {
			held[regs[i].Key()] = true
		}
		kept := s.kept[:0]
		for _, k := range s.kept {
			if k.ok && held[k.key] {
				continue // superseded by a registration of its key
			}
			kept = append(kept, k)
			entries = append(entries, k.e)
		}
		s.kept = kept
	}
	for i := range regs {
		if regs[i].Owner == configOwner || regs[i].Owner == server.DiscoveryPrincipal.Name {
			continue
		}
		b, err := RegisterJSON(&regs[i])
		if err != nil {
			return err
		}
		entries = append(entries, Entry{Owner: regs[i].Owner, Origin: regs[i].Origin, Register: b})
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

// Loaded is what Load found.
type Loaded struct {
	Entries    []Entry
	From       string   // the file the entries came from ("" when none)
	Generation uint64   // its generation
	Bad        []string // files found torn or corrupt (moved aside), with why
}

// Load reads the newest good generation. Torn or corrupt files are moved
// aside to FILE.corrupt-<unix time> and reported in Bad.
func (s *Store) Load() Loaded {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out Loaded
	var doc stateDoc
	out.From, out.Bad = s.file.load(func(p string) (err error) {
		doc, err = parseState(os.ReadFile(p))
		return err
	})
	if out.From != "" {
		out.Entries, out.Generation = doc.decoded, doc.Generation
	}
	s.gen = out.Generation
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

// RegisterFunc registers one restored registration on behalf of who;
// origin is core.Registration.Origin as recorded (the surface whose own
// registry holds it besides the index).
type RegisterFunc func(who server.Principal, origin string, reg core.Registration) error

// Restore registers what the directory holds through register, each under
// its recorded owner, and logs what it found. Entries that no longer decode
// or register are logged and dropped from the next generation.
func (s *Store) Restore(log *slog.Logger, register RegisterFunc) {
	ld := s.Load()
	for _, b := range ld.Bad {
		log.Error("registration state file is torn or corrupt; using the previous good generation", "problem", b)
	}
	if ld.From == "" {
		if len(ld.Bad) > 0 {
			log.Error("no good registration state left: starting without restored registrations", "path", s.file.path)
		} else {
			log.Info("no registration state yet", "path", s.file.path)
		}
		return
	}
	ok, failed := 0, 0
	for _, e := range ld.Entries {
		reg, err := server.DecodeRegistration(e.Register, true, server.DecodeOptions{})
		decoded := err == nil
		if err == nil {
			err = register(server.Principal{Name: e.Owner, Admin: true}, e.Origin, reg)
		}
		if err != nil {
			failed++
			log.Error("restored registration refused; kept in the state file and tried again at the next start (register its service key anew, then unregister it, to drop it)",
				"entry", string(e.Register), "err", err)
			s.mu.Lock()
			s.kept = append(s.kept, keptEntry{e: e, key: reg.Key(), ok: decoded})
			s.mu.Unlock()
			continue
		}
		ok++
		s.mu.Lock()
		if s.restored == nil {
			s.restored = map[core.ServiceKey]bool{}
		}
		s.restored[reg.Key()] = true
		s.mu.Unlock()
	}
	log.Info("registrations restored", "path", ld.From, "restored", ok, "failed", failed, "generation", ld.Generation)
}

// pruneRestored forgets the restored keys regs no longer holds. s.mu held.
func (s *Store) pruneRestored(regs []core.Registration) {
	if len(s.restored) == 0 {
		return
	}
	held := make(map[core.ServiceKey]bool, len(regs))
	for i := range regs {
		held[regs[i].Key()] = true
	}
	for k := range s.restored {
		if !held[k] {
			delete(s.restored, k)
		}
	}
}

// Explain says, of the registration holding service key k, that it was
// restored at startup from this directory and how to remove it (through
// the API at addr, host:port); "" when k was not restored (or was
// unregistered since). It is the Gate's Explain: a conflict with a
// registration an earlier run made names it.
func (s *Store) Explain(k core.ServiceKey, addr string) string {
	s.mu.Lock()
	restored := s.restored[k]
	s.mu.Unlock()
	if !restored {
		return ""
	}
	body, _ := json.Marshal(map[string]any{"instance_id": k.InstanceID, "tenant_id": k.TenantID, "dp_rank": k.DPRank})
	return fmt.Sprintf("%s|%s|%d was restored at startup from %s (an earlier run registered it; registrations persist in the state directory): "+
		"remove it with curl -s %s/unregister -d '%s', or start conductor with --state-dir '' to keep no registrations",
		k.InstanceID, k.TenantID, k.DPRank, s.file.path, addr, body)
}
