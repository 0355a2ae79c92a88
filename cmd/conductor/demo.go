package main

import (
	"context"
	"net"
	"strconv"
	"sync"

	"github.com/seed-c7a81618/conductor/bench/sim"
)

// demoRun is the embedded simulator of --demo (bench/sim.Demo): a few engines
// of mixed dialects publishing to this process over loopback ZMQ, registered
// through its own HTTP API. A nil *demoRun (no --demo) does nothing.
type demoRun struct {
	d    *sim.Demo
	done sync.WaitGroup
}

// startDemo starts the simulator once the HTTP server is serving; it stops
// replaying when ctx ends. A failure is logged and leaves the server running.
func (a *app) startDemo(ctx context.Context) *demoRun {
	if a.demo == nil {
		return nil
	}
	addr := a.ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	r := &demoRun{}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		d, err := sim.StartDemo(sim.DemoOptions{Addr: net.JoinHostPort(host, strconv.Itoa(addr.Port)), Out: a.demo})
		if err != nil {
			a.log.Error("demo: cannot start the simulated engines", "err", err)
			return
		}
		r.d = d
		a.log.Info("demo: simulated engines registered; summary every second on stdout (Ctrl-C stops)")
		if err := d.Run(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("demo stopped", "err", err)
		}
	}()
	return r
}

func (r *demoRun) wait() {
	if r != nil {
		r.done.Wait()
	}
}

func (r *demoRun) close() {
	if r != nil && r.d != nil {
		r.d.Close()
	}
}
