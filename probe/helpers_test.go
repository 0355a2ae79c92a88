package probe

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// indexer is conductor's index, ZMQ ingester and Mooncake HTTP API in this
// process, wired as cmd/conductor wires them, on 127.0.0.1:0: what a
// reported registration is sent to.
type indexer struct{ addr string }

func (p *indexer) url(path string) string { return "http://" + p.addr + path }

// startIndexer starts an indexer; it stops when the test ends.
func startIndexer(t *testing.T) *indexer {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ix := core.New(core.Options{Logger: log})
	ing, err := ingest.NewIngester(ix, ingest.IngestOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	c, err := server.New(ix, ing, server.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := mooncake.New(c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		ing.Close()
	})
	return &indexer{addr: ln.Addr().String()}
}

// waitBound bounds every wait for an asynchronous effect in these tests;
// every wait polls and returns as soon as its condition holds, so the bound
// only decides when a failure is declared.
const waitBound = 2 * time.Minute

// boundedClient fails a request to a server that stops answering after
// waitBound instead of hanging the package.
var boundedClient = &http.Client{Timeout: waitBound}

func httpDo(t *testing.T, method, url, ct string, body []byte) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := boundedClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// waitFor polls cond until it holds or waitBound passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
