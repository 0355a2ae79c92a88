// Package natstest starts an embedded NATS server with JetStream for tests
// (package replica's and cmd/conductor's): no external server, a temp store.
package natstest

import (
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Start runs an embedded NATS server with JetStream on a loopback port (port
// -1: a random one), storing in dir, and shuts it down at the test's cleanup.
// Starting it again on the same port and dir restarts it with its streams.
func Start(t testing.TB, dir string, port int) *natsserver.Server {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true,
		StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}
