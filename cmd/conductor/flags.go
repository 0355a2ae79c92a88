package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/seed-c7a81618/conductor/internal/suggest"
)

// helpIntro opens `conductor --help`.
const helpIntro = `conductor is a KV-cache indexer: it subscribes to the KV events of LLM engines
(vLLM, SGLang, Mooncake store, RFC #1527 publishers) and tells a gateway, per
prompt, which instance holds how much of it on which tier.

Usage: conductor [flags]

  conductor                                      serve on 127.0.0.1:13333 (HTTP) and :50052 (RPC)
  conductor --config /etc/conductor/conductor.json --listen 0.0.0.0 --admin-token-file /run/secrets/admin
  conductor --port 8090 --block-size 16 --workers "1=tcp://worker1:5557"   Dynamo's command line
  conductor probe tcp://10.0.0.5:5557            watch an engine without registering it: dialect, hash profile, registration (probe --help)

Flags override the configuration file; docs/configuration.md has the file and
the environment variables.
`

// flagGroups orders `--help`: every flag is in exactly one group
// (TestFlagGroupsCoverEveryFlag).
var flagGroups = []struct {
	title string
	names []string
}{
	{"Server", []string{"config", "http-port", "rpc-port", "listen", "log-level", "log-format", "shutdown-timeout", "pprof-addr", "version"}},
	{"Access", []string{"admin-token-file", "admin-token", "query-token-file", "query-token", "client-tokens-file", "protect-metrics",
		"allow-endpoints", "allow-source-endpoints", "insecure"}},
	{"Limits", []string{"max-body-bytes", "max-inflight-body-bytes", "max-connections", "max-query-tokens", "max-registrations", "max-registrations-per-client",
		"receive-queue-bytes", "max-queued-bytes", "max-message-bytes", "max-blocks-per-registration"}},
	{"Ingest", []string{"gap-policy", "gap-expire-after"}},
	{"State", []string{"state-dir", "snapshot-interval"}},
	{"Dynamo standalone-indexer API", []string{"port", "dynamo-port", "block-size", "workers", "model-name", "routing-group", "peers",
		"peer-join-delay", "threads", "access-log", "trace-id-header", "access-log-local-time", "tenant-id"}},
	{"NATS scale-out (relay or replica)", []string{"nats-url", "nats-publish", "nats-consume", "nats-stream", "nats-subject-prefix",
		"nats-replicas", "nats-max-age", "nats-max-bytes", "nats-dedup-window", "nats-buffer-bytes", "nats-filter-tenant",
		"nats-filter-model", "nats-max-lag", "nats-max-stale", "nats-snapshot-interval", "nats-snapshot-keep", "nats-snapshot-bucket",
		"nats-no-snapshot-load"}},
	{"Kubernetes engine discovery", []string{"discover-kubernetes", "discover-namespaces", "discover-selector"}},
	{"Tuning", []string{"hash-memo-bytes", "hash-memo-prompt-bytes", "sha256-backend", "context-size-hint", "memory-limit", "gogc", "gc-heap-floor",
		"query-priority", "ingest-nice"}},
}

// writeHelp prints the intro and every flag under its group.
func writeHelp(w io.Writer, fs *flag.FlagSet) {
	io.WriteString(w, helpIntro)
	for _, g := range flagGroups {
		writeFlags(w, fs, g.title, g.names)
	}
}

// writeFlags prints one group of flags under its title: name, value
// placeholder, usage, and the default unless the usage already states it or
// it is a zero value (whose meaning the usage gives).
func writeFlags(w io.Writer, fs *flag.FlagSet, title string, names []string) {
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		placeholder, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if placeholder != "" {
			line += " " + placeholder
		}
		fmt.Fprintf(w, "%-36s %s", line, usage)
		switch f.DefValue {
		case "", "false", "0", "-1", "0s":
		default:
			if strings.Contains(usage, "default") {
				break
			}
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		io.WriteString(w, "\n")
	}
}

// flagError turns a flag package parse error into one line, naming the
// nearest defined flag for a mistyped one and the command's --help.
func flagError(err error, fs *flag.FlagSet) error {
	const undefined = "flag provided but not defined: -"
	hint := " (" + fs.Name() + " --help lists every flag)"
	msg := err.Error()
	if !strings.HasPrefix(msg, undefined) {
		msg = strings.Replace(strings.Replace(msg, "flag -", "flag --", 1), "for -", "for --", 1)
		return errors.New(msg + hint)
	}
	name := strings.TrimPrefix(msg, undefined)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if best := suggest.Nearest(name, names); best != "" {
		return fmt.Errorf("unknown flag --%s; did you mean --%s?%s", name, best, hint)
	}
	return fmt.Errorf("unknown flag --%s%s", name, hint)
}
