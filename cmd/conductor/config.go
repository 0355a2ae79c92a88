package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
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
// E is a /register JSON body (same keys and rules, hash_profile optional), except
// that unknown keys are ignored. Invalid entries are skipped with a warning.
type fileConfig struct {
	HTTPPort int
	RPCPort  int
	HasRPC   bool
	Static   []staticEntry
	Skipped  []skippedEntry
	Unknown  []string // unknown top-level keys (warned about)
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
// says why and the defaults apply (the caller warns). A file that is not a JSON
// object, or whose ports are not integers in 0..65535, is an ErrConfig.
func loadConfig(path string) (cfg fileConfig, readErr, err error) {
	data, readErr := os.ReadFile(path)
	if readErr != nil {
		return fileConfig{HTTPPort: DefaultHTTPPort, RPCPort: DefaultRPCPort}, readErr, nil
	}
	cfg, err = parseConfig(data)
	return cfg, nil, err
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
		raw := root[k]
		switch k {
		case "http_server_port":
			p, err := parsePort(raw)
			if err != nil {
				return cfg, fmt.Errorf("%w: http_server_port: %v", ErrConfig, err)
			}
			cfg.HTTPPort = p
		case "rpc_server_port":
			p, err := parsePort(raw)
			if err != nil {
				return cfg, fmt.Errorf("%w: rpc_server_port: %v", ErrConfig, err)
			}
			cfg.RPCPort, cfg.HasRPC = p, true
		case "kvevent_instance":
			if isNull(raw) {
				continue
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				return cfg, fmt.Errorf("%w: kvevent_instance must be an object: %v", ErrConfig, err)
			}
			keys := make([]string, 0, len(m))
			for name := range m {
				keys = append(keys, name)
			}
			sort.Strings(keys)
			for _, name := range keys {
				cfg.addEntry("kvevent_instance["+strconv.Quote(name)+"]", m[name], name)
			}
		case "services":
			if isNull(raw) {
				continue
			}
			var list []json.RawMessage
			if err := json.Unmarshal(raw, &list); err != nil {
				return cfg, fmt.Errorf("%w: services must be an array: %v", ErrConfig, err)
			}
			for i, e := range list {
				cfg.addEntry("services["+strconv.Itoa(i)+"]", e, "")
			}
		case "media":
			if isNull(raw) {
				continue
			}
			var m struct {
				Engine map[string]string `json:"engine"`
				Pool   map[string]string `json:"pool"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				return cfg, fmt.Errorf("%w: media must be {\"engine\": {name: tier}, \"pool\": {name: tier}}: %v", ErrConfig, err)
			}
			var err error
			if cfg.EngineMedia, err = core.DefaultEngineMedia().WithOverrides(m.Engine, false); err != nil {
				return cfg, fmt.Errorf("%w: media.engine: %v", ErrConfig, err)
			}
			if cfg.PoolMedia, err = core.DefaultPoolMedia().WithOverrides(m.Pool, true); err != nil {
				return cfg, fmt.Errorf("%w: media.pool: %v", ErrConfig, err)
			}
		case "allow_source_endpoints":
			if err := json.Unmarshal(raw, &cfg.AllowSourceEndpoints); err != nil {
				return cfg, fmt.Errorf("%w: allow_source_endpoints: want true or false, got %s", ErrConfig, bytes.TrimSpace(raw))
			}
		default:
			cfg.Unknown = append(cfg.Unknown, k)
		}
	}
	return cfg, nil
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

func (c *fileConfig) addEntry(source string, raw json.RawMessage, defaultInstance string) {
	reg, err := server.DecodeRegistration(raw, true, server.DecodeOptions{IgnoreUnknown: true, DefaultInstanceID: defaultInstance})
	if err != nil {
		c.Skipped = append(c.Skipped, skippedEntry{Source: source, Err: err})
		return
	}
	c.Static = append(c.Static, staticEntry{Source: source, Reg: reg})
}
