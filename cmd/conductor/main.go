// Command conductor is the KV-cache indexer process: it serves the Mooncake
// indexer HTTP API (JSON and msgpack, package httpd), the Python client's RPC
// surface on its own port (httpd.RPCServer) and consumes KV events from
// the registered ZMQ publishers (package wire/ingest, decoding with package
// wire) into the prefix index (package core).
//
// Configuration, lowest precedence first:
//
//  1. the configuration file: --config, else $CONDUCTOR_CONFIG_PATH (an empty
//     value counts as unset, with a warning), else
//     $HOME/.mooncake/conductor_config.json. A missing or unreadable file starts
//     an empty conductor with a warning; a malformed one exits 1 with the reason.
//     Keys: http_server_port (default 13333; 0 = ephemeral), rpc_server_port
//     (the Python client's RPC port, default 50052; 0 = off),
//     kvevent_instance (map name → /register entry; instance_id defaults to the
//     name) and services (list of /register entries). Invalid entries are logged
//     and skipped; unknown entry keys are ignored.
//  2. the environment: CONDUCTOR_LOG_LEVEL (DEBUG | INFO | WARN | ERROR, any case;
//     invalid → warning and INFO).
//  3. flags: --http-port, --rpc-port, --listen (bind address of every listener,
//     default 127.0.0.1), --log-level,
//     --log-format (text | json), the limits (--max-body-bytes,
//     --max-inflight-body-bytes, --max-connections, --max-query-tokens,
//     --max-registrations; fitted into the file descriptor budget at start),
//     --context-size-hint, --shutdown-timeout, --state-dir (durable
//     registrations), the access flags (--admin-token[-file],
//     --query-token[-file], --client-tokens-file, --protect-metrics,
//     --allow-endpoints; tokens also from CONDUCTOR_ADMIN_TOKEN and
//     CONDUCTOR_QUERY_TOKEN), --version, and --demo (the embedded engine
//     simulator of package bench/sim publishing to this server, with a live
//     summary on stdout; what `make run` starts; no durable state).
//
// Static registrations start in the background after the HTTP server listens;
// failures are logged and never block or abort startup. Logs are log/slog on
// stderr; "HTTP server listening" carries the bound address (useful with port 0).
// SIGINT or SIGTERM stops accepting connections, drains in-flight requests (up to
// --shutdown-timeout) and stops the subscribers; a second signal kills at once.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal terminates immediately
	}()
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
