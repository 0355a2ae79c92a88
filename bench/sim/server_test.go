package sim

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd"
	"github.com/seed-c7a81618/conductor/wire"
)

// startConductor runs conductor's index, ZMQ ingester and HTTP server in this
// process (wired as cmd/conductor wires them) on 127.0.0.1:0.
func startConductor(tb testing.TB) string {
	addr, _ := startConductorRPC(tb)
	return addr
}

// startConductorRPC is startConductor with the Python client's RPC surface
// on a second listener; it returns both addresses.
func startConductorRPC(tb testing.TB) (httpAddr, rpcAddr string) {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ix := core.New(core.Options{Logger: log})
	ing, err := wire.NewIngester(ix, wire.IngestOptions{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := httpd.New(ix, ing, httpd.Options{Logger: log, ExtraMetrics: []*metrics.Set{ing.Metrics()}})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	rln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	rpc := httpd.NewRPC(srv)
	go func() { _ = srv.Serve(ln) }()
	go func() { _ = rpc.Serve(rln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = rpc.Shutdown(ctx)
		ing.Close()
	})
	return ln.Addr().String(), rln.Addr().String()
}

// startConductorDynamo is startConductor with the Dynamo dialect on a second
// listener; it returns both addresses.
func startConductorDynamo(tb testing.TB) (httpAddr, dynAddr string) {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ix := core.New(core.Options{Logger: log})
	ing, err := wire.NewIngester(ix, wire.IngestOptions{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := httpd.New(ix, ing, httpd.Options{Logger: log, ExtraMetrics: []*metrics.Set{ing.Metrics()}})
	if err != nil {
		tb.Fatal(err)
	}
	dyn, err := httpd.NewDynamo(srv, httpd.DynamoOptions{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	dln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	go func() { _ = dyn.Serve(dln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = dyn.Shutdown(ctx)
		ing.Close()
	})
	return ln.Addr().String(), dln.Addr().String()
}
