package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/internal/suggest"
)

// DefaultHTTPPort is the Mooncake conductor's port when no configuration names one.
const DefaultHTTPPort = 13333

// DefaultRPCPort is the Python client's RPC port when no configuration names
// one (the seed's rpc_server_port).
const DefaultRPCPort = 50052

// ErrConfig is wrapped by every error that makes a configuration file unusable
// (the process then exits 1 with the reason).
var ErrConfig = errors.New("conductor: bad configuration file")

// fileConfig is a parsed configuration file (reference §7):
//
//	{
//	  "http_server_port": 13333,          // optional, 0..65535; 0 = an ephemeral port
//	  "rpc_server_port": 50052,           // optional, 0..65535; the Python client's RPC surface; 0 = off
//	  "kvevent_instance": {"name": E...}, // static registrations; instance_id defaults to the name
//	  "services": [E...],                 // the same entries as a list (instance_id required)
//	  "media": {"engine": {"tape": "disk"}, "pool": {"cxl": "cpu_share"}}, // medium → tier overrides
//	  "allow_source_endpoints": false     // optional; --allow-source-endpoints wins
//	}
//
// E is a /register JSON body (same keys and rules, hash_profile optional).
// An unknown key anywhere (the top level, media, an entry, its
// hash_profile) makes the file unusable, with the nearest known key in the
// error (configKeys, TestParseConfigTypos); an entry that is invalid
// otherwise is skipped with a warning.
type fileConfig struct {
	HTTPPort int
	RPCPort  int
	HasRPC   bool
	Static   []staticEntry
	Skipped  []skippedEntry
	// EngineMedia / PoolMedia are the media maps with the file's overrides
	// (nil: the defaults).
	EngineMedia, PoolMedia core.MediumMap
	// AllowSourceEndpoints is allow_source_endpoints: registrations may use
	// the tcp source-address form (server.EndpointPolicy.AllowSourceAddresses).
	AllowSourceEndpoints bool
}

// configOwner owns the configuration file's registrations.
var configOwner = server.ConfigPrincipal.Name

// staticEntry is one valid static registration and where it came from.
type staticEntry struct {
	Source string // `kvevent_instance["name"]` or `services[3]`
	Reg    core.Registration
}

// skippedEntry is an invalid static registration.
type skippedEntry struct {
	Source string
	Err    error
}

// loadConfig reads path. A missing or unreadable file is not fatal: readErr
// says why and the defaults apply (the caller decides how loudly to say
// so). A file that is not a JSON object, has an unknown key, or whose ports
// are not integers in 0..65535, is an ErrConfig.
func loadConfig(path string) (cfg fileConfig, readErr, err error) {
	data, readErr := os.ReadFile(path)
	if readErr != nil {
		return fileConfig{HTTPPort: DefaultHTTPPort, RPCPort: DefaultRPCPort}, readErr, nil
	}
	cfg, err = parseConfig(data)
	return cfg, nil, err
}

// configKey is one top-level key of the configuration file and its reader.
type configKey struct {
	name  string
	parse func(c *fileConfig, raw json.RawMessage) error
}

// configKeys are the configuration file's top-level keys and how each is
// read (a JSON null is as if the key were absent, except for the ports). A
// new key is one line here.
var configKeys = []configKey{
	{"http_server_port", func(c *fileConfig, raw json.RawMessage) (err error) { c.HTTPPort, err = parsePort(raw); return err }},
	{"rpc_server_port", func(c *fileConfig, raw json.RawMessage) (err error) {
		c.RPCPort, err = parsePort(raw)
		c.HasRPC = true
		return err
	}},
	{"kvevent_instance", (*fileConfig).parseInstances},
	{"services", (*fileConfig).parseServices},
	{"media", (*fileConfig).parseMedia},
	{"allow_source_endpoints", func(c *fileConfig, raw json.RawMessage) error {
		if err := json.Unmarshal(raw, &c.AllowSourceEndpoints); err != nil {
			return fmt.Errorf("want true or false, got %s", bytes.TrimSpace(raw))
		}
		return nil
	}},
}

// configKeyNames lists configKeys' names.
func configKeyNames() []string {
	names := make([]string, len(configKeys))
	for i, k := range configKeys {
		names[i] = k.name
	}
	return names
}

// unknownKey is the error for a key of where that is not in known: it names
// the nearest known one when one is near.
func unknownKey(where, key string, known []string) error {
	msg := fmt.Sprintf("%sunknown key %q", where, key)
	if n := suggest.Nearest(key, known); n != "" {
		msg += fmt.Sprintf("; did you mean %q?", n)
	}
	return fmt.Errorf("%w: %s (known: %s)", ErrConfig, msg, strings.Join(known, ", "))
}

// parseConfig parses the bytes of a configuration file.
func parseConfig(data []byte) (fileConfig, error) {
	cfg := fileConfig{HTTPPort: DefaultHTTPPort, RPCPort: DefaultRPCPort}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(data, &root); err != nil || root == nil {
		if err == nil {
			err = errors.New("root is null")
		}
		return cfg, fmt.Errorf("%w: not a JSON object: %v", ErrConfig, err)
	}
	names := make([]string, 0, len(root))
	for k := range root {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		i := slices.IndexFunc(configKeys, func(c configKey) bool { return c.name == k })
		if i < 0 {
			return cfg, unknownKey("", k, configKeyNames())
		}
		if err := configKeys[i].parse(&cfg, root[k]); err != nil {
			if errors.Is(err, ErrConfig) {
				return cfg, err
			}
			return cfg, fmt.Errorf("%w: %s: %v", ErrConfig, k, err)
		}
	}
	return cfg, nil
}

// parseInstances reads kvevent_instance: {name: entry}.
func (c *fileConfig) parseInstances(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("must be an object: %v", err)
	}
	keys := make([]string, 0, len(m))
	for name := range m {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	for _, name := range keys {
		if err := c.addEntry("kvevent_instance["+strconv.Quote(name)+"]", m[name], name); err != nil {
			return err
		}
	}
	return nil
}

// parseServices reads services: [entry...].
func (c *fileConfig) parseServices(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("must be an array: %v", err)
	}
	for i, e := range list {
		if err := c.addEntry("services["+strconv.Itoa(i)+"]", e, ""); err != nil {
			return err
		}
	}
	return nil
}

// mediaKeys are media's keys.
var mediaKeys = []string{"engine", "pool"}

// parseMedia reads media: {"engine": {name: tier}, "pool": {name: tier}}.
func (c *fileConfig) parseMedia(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("must be {\"engine\": {name: tier}, \"pool\": {name: tier}}: %v", err)
	}
	maps := map[string]map[string]string{}
	for k, v := range m {
		if !slices.Contains(mediaKeys, k) {
			return unknownKey("media: ", k, mediaKeys)
		}
		var names map[string]string
		if err := json.Unmarshal(v, &names); err != nil {
			return fmt.Errorf("media.%s must be {name: tier}: %v", k, err)
		}
		maps[k] = names
	}
	var err error
	if c.EngineMedia, err = core.DefaultEngineMedia().WithOverrides(maps["engine"], false); err != nil {
		return fmt.Errorf("media.engine: %v", err)
	}
	if c.PoolMedia, err = core.DefaultPoolMedia().WithOverrides(maps["pool"], true); err != nil {
		return fmt.Errorf("media.pool: %v", err)
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// parsePort accepts a JSON integer in 0..65535.
func parsePort(raw json.RawMessage) (int, error) {
	s := string(bytes.TrimSpace(raw))
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("want an integer in 0..65535, got %s", s)
	}
	return p, nil
}

// addEntry decodes one static registration: an unknown key is an ErrConfig
// naming it (and the nearest known key); any other refusal skips the entry.
func (c *fileConfig) addEntry(source string, raw json.RawMessage, defaultInstance string) error {
	reg, err := server.DecodeRegistration(raw, true, server.DecodeOptions{DefaultInstanceID: defaultInstance})
	var re *server.RequestError
	switch {
	case errors.As(err, &re) && errors.Is(re.Err, server.ErrUnknownField):
		return fmt.Errorf("%w: %s: %s", ErrConfig, source, re.Msg)
	case err != nil:
		c.Skipped = append(c.Skipped, skippedEntry{Source: source, Err: err})
		return nil
	}
	c.Static = append(c.Static, staticEntry{Source: source, Reg: reg})
	return nil
}
