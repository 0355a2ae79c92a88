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
	"github.com/seed-c7a81618/conductor/httpd/dynamo"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/rpc"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// startConductor runs conductor's index, ZMQ ingester and HTTP server in this
// process (wired as cmd/conductor wires them) on 127.0.0.1:0.
func startConductor(tb testing.TB) string {
	addr, _ := startSurfaces(tb, "")
	return addr
}

// startConductorRPC is startConductor with the Python client's RPC surface
// on a second listener; it returns both addresses.
func startConductorRPC(tb testing.TB) (httpAddr, rpcAddr string) { return startSurfaces(tb, "rpc") }

// startConductorDynamo is startConductor with the Dynamo dialect on a second
// listener; it returns both addresses.
func startConductorDynamo(tb testing.TB) (httpAddr, dynAddr string) {
	return startSurfaces(tb, "dynamo")
}

// startSurfaces starts the Mooncake API and, when second is "rpc" or
// "dynamo", that surface on a listener of its own ("" for its address
// otherwise).
func startSurfaces(tb testing.TB, second string) (httpAddr, secondAddr string) {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ix := core.New(core.Options{Logger: log})
	ing, err := ingest.NewIngester(ix, ingest.IngestOptions{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := server.New(ix, ing, server.Options{Logger: log, ExtraMetrics: []*metrics.Set{ing.Metrics()}})
	if err != nil {
		tb.Fatal(err)
	}
	srv := mooncake.New(c)
	type surface interface {
		Serve(net.Listener) error
		Shutdown(context.Context) error
	}
	surfaces := []surface{srv}
	switch second {
	case "rpc":
		surfaces = append(surfaces, rpc.New(c))
	case "dynamo":
		dyn, err := dynamo.New(c, dynamo.Options{Logger: log})
		if err != nil {
			tb.Fatal(err)
		}
		surfaces = append(surfaces, dyn)
	}
	addrs := make([]string, 2)
	for i, s := range surfaces {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		addrs[i] = ln.Addr().String()
		go func() { _ = s.Serve(ln) }()
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range surfaces {
			_ = s.Shutdown(ctx)
		}
		ing.Close()
	})
	return addrs[0], addrs[1]
}
