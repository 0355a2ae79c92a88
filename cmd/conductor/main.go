// Command conductor is the KV-cache indexer process. It subscribes to the
// KV-cache events of the registered inference engines (vLLM, SGLang, RFC #1527
// standard publishers, Mooncake) over ZMQ (package wire/ingest, decoded by
// package wire), keeps the prefix index they describe (package core), and
// answers which engine holds how much of a prompt's prefix on which tier:
// over the Mooncake indexer HTTP API (JSON and msgpack, package mooncake), the
// Python client's RPC port, and optionally the Dynamo standalone-indexer
// surface on a listener of its own (dynamo.go).
//
// Around that core the process keeps registrations durable and the index
// warm across restarts in its state directory (package statedir; one
// process per directory), plans its file descriptors between
// connections and registrations (fdbudget.go), and can scale out over NATS
// JetStream as a relay or a query replica (nats.go, package replica).
//
// Configuration comes, lowest precedence first, from a JSON configuration
// file, a few environment variables and flags; with none of them it serves on
// loopback with the default ports. `conductor --help` lists every flag by
// group, and docs/configuration.md is the reference for the file, the
// environment and the flags.
//
// `conductor probe ENDPOINT` (probecmd.go, the command line of package
// probe) subscribes to a publisher without registering it, for a few
// seconds, and prints its dialect, what its events carry, how its replay
// answers, the hash profile that reproduces its hashes and the registration
// that fits it; it needs no running conductor. `conductor healthcheck`
// (healthcheck.go) is the container's readiness check.
//
// Static registrations from the configuration file start in the background
// after the HTTP server listens; failures are logged and never block or
// abort startup. Logs are log/slog lines on stderr; "HTTP server listening"
// carries the bound address (useful with port 0). SIGINT or SIGTERM stops
// accepting connections, drains in-flight requests (up to --shutdown-timeout),
// writes the index snapshot and stops the subscribers; a second signal ends
// the process at once.
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
