package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seed-c7a81618/conductor/bench/sim"
)

const demoUsage = `Usage: conductor-bench demo [flags] [-- conductor flags]

Starts a conductor on loopback with no durable state and a small fleet of
simulated engines (package bench/sim) publishing to it over ZMQ, registered
through its HTTP API, and prints a summary every second on stdout: events/s,
the blocks conductor indexes per tier, queries/s, the hit ratio of
cache-aware against random routing, an example answer, and how many answers
matched the simulator's ground truth. Ctrl-C stops both.

Flags after -- go to conductor (e.g. -- --rpc-port 0 --log-level WARN).

`

// runDemo is `conductor-bench demo`.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conductor-bench demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, demoUsage)
		fs.PrintDefaults()
	}
	bin := fs.String("conductor", conductorBesideMe(), "conductor binary to start")
	port := fs.Int("http-port", 13333, "conductor's HTTP port on 127.0.0.1 (0 = a free one)")
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "conductor-bench demo: "+format+"\n", a...)
		return code
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return fail(2, "%v", err)
	}
	for _, a := range fs.Args() {
		switch name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); {
		case !strings.HasPrefix(a, "-"):
		case name == "http-port":
			return fail(2, "the demo sets conductor's --http-port: use -http-port before --")
		case name == "state-dir":
			return fail(2, "the demo runs conductor without durable state: no --state-dir")
		}
	}
	if *port == 0 {
		p, err := freePort()
		if err != nil {
			return fail(1, "%v", err)
		}
		*port = p
	}
	// No durable state: the simulated engines live at fresh ports each run,
	// so restoring their registrations would only conflict with the next
	// run's.
	cargs := append([]string{"--listen", "127.0.0.1", "--http-port", strconv.Itoa(*port), "--state-dir", ""}, fs.Args()...)
	srv := &server{bin: *bin, args: cargs, stdout: stdout, out: stderr, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(*port))}
	if err := srv.start(ctx); err != nil {
		return fail(1, "cannot start conductor: %v", err)
	}
	d, err := sim.StartDemo(sim.DemoOptions{Addr: srv.addr, Out: stdout})
	if err != nil {
		srv.stop()
		return fail(1, "cannot start the simulated engines: %v", err)
	}
	fmt.Fprintf(stderr, "conductor-bench demo: simulated engines registered with conductor on %s; summary every second on stdout (Ctrl-C stops)\n", srv.addr)
	// The demo also stops when conductor exits by itself.
	dctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-srv.done:
			cancel()
		case <-dctx.Done():
		}
	}()
	runErr := d.Run(dctx)
	cancel()
	exited := false // by itself, before the harness stopped it
	select {
	case <-srv.done:
		exited = true
	default:
	}
	code := srv.stop()
	d.Close() // after conductor stopped, to keep its logs quiet
	switch {
	case exited && ctx.Err() == nil:
		return fail(1, "conductor exited with status %d", code)
	case runErr != nil && ctx.Err() == nil:
		return fail(1, "demo stopped: %v", runErr)
	case code != 0:
		return fail(1, "conductor stopped with status %d", code)
	}
	return 0
}

// conductorBesideMe is the conductor binary in this executable's directory
// (bin/conductor beside bin/conductor-bench).
func conductorBesideMe() string {
	exe, err := os.Executable()
	if err != nil {
		return "conductor"
	}
	return filepath.Join(filepath.Dir(exe), "conductor")
}
