package ingest

import (
	"errors"
	"testing"
)

func TestCheckConnectEndpoint(t *testing.T) {
	f := func(ep string, ok bool) {
		t.Helper()
		err := checkConnectEndpoint("endpoint", ep)
		if ok && err != nil {
			t.Errorf("%q: unexpected error %v", ep, err)
		}
		if !ok && !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("%q: got %v, want ErrBadEndpoint", ep, err)
		}
	}
	f("tcp://127.0.0.1:5557", true)
	f("tcp://localhost:1", true)
	f("tcp://[::1]:65535", true)
	f("tcp://eth0;10.0.0.1:5557", true)
	f("ipc:///tmp/kv.sock", true)
	f("inproc://kv", true)

	f("", false)
	f("127.0.0.1:5557", false)
	f("tcp://127.0.0.1", false)
	f("tcp://*:5557", false)
	f("tcp://0.0.0.0:5557", false)
	f("tcp://[::]:5557", false)
	f("tcp://127.1:5557", false)
	f("tcp://:5557", false)
	f("tcp://127.0.0.1:0", false)
	f("tcp://127.0.0.1:65536", false)
	f("tcp://127.0.0.1:port", false)
	f("tcp://::1:5557", false)
	f("tcp://[::1:5557", false)
	f("tcp://host name:5557", false)
	f("ipc://", false)
	f("ipc://*", false)
	f("udp://127.0.0.1:5557", false)
	f("pgm://eth0;239.192.1.1:5555", false)
}
