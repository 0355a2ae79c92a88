package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/seed-c7a81618/conductor/bench/sim"
)

// fleet is what -spawn starts: one conductor, or with -replica a
// nats-server, a relay conductor and a query replica.
type fleet struct {
	main    *server // the conductor engines register with (the relay with -replica)
	replica *server // nil without -replica
	nats    *server // nil without -replica
}

// conductorArgs are the flags every spawned conductor gets from f.
func conductorArgs(f *flags, stderr io.Writer) ([]string, error) {
	extra := strings.Fields(f.spawnArgs)
	switch {
	case f.snapshotAt > 0:
		extra = append(extra, "--snapshot-interval", "0") // only at shutdown: -snapshot-at's
	case f.snapshotInterval != 0:
		extra = append(extra, "--snapshot-interval", f.snapshotInterval.String())
	}
	if f.gapPolicy != "" {
		switch {
		case hasFlag(f.spawn, "gap-policy"):
			extra = append(extra, "--gap-policy", f.gapPolicy)
			if f.gapExpireAfter != 0 {
				extra = append(extra, "--gap-expire-after", f.gapExpireAfter.String())
			}
		case f.gapPolicy == "clear":
			fmt.Fprintf(stderr, "conductor-bench: %s has no --gap-policy; clear is its behaviour\n", f.spawn)
		default:
			return nil, fmt.Errorf("-gap-policy %s: %s has no --gap-policy flag", f.gapPolicy, f.spawn)
		}
	}
	return extra, nil
}

// startFleet starts the processes -spawn and -replica ask for.
func startFleet(ctx context.Context, f *flags, stderr io.Writer) (*fleet, error) {
	extra, err := conductorArgs(f, stderr)
	if err != nil {
		return nil, err
	}
	fl := &fleet{}
	if !f.replica {
		if fl.main, err = spawn(ctx, f.spawn, extra, f.surface, stderr); err != nil {
			return nil, err
		}
		return fl, nil
	}
	if f.surface != "msgpack" && f.surface != "json" {
		return nil, fmt.Errorf("-replica: query the replica with -surface msgpack or json, not %s", f.surface)
	}
	bin := f.natsServer
	if bin == "" {
		if bin = filepath.Join(filepath.Dir(f.spawn), "nats-server"); !executable(bin) {
			if bin, err = exec.LookPath("nats-server"); err != nil {
				return nil, errors.New("-replica: no nats-server beside the -spawn binary or on PATH (make docs-test builds bin/nats-server; or -nats-server)")
			}
		}
	}
	var url string
	if fl.nats, url, err = spawnNATS(ctx, bin, stderr); err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	if fl.main, err = spawn(ctx, f.spawn, append(extra, "--nats-url", url, "--nats-publish"), f.surface, stderr); err != nil {
		fl.stop()
		return nil, fmt.Errorf("relay: %w", err)
	}
	// A replica keeps no state directory (its state is the stream).
	if fl.replica, err = spawn(ctx, f.spawn, append(extra, "--nats-url", url, "--nats-consume", "--state-dir", ""), f.surface, stderr); err != nil {
		fl.stop()
		return nil, fmt.Errorf("replica: %w", err)
	}
	fmt.Fprintf(stderr, "conductor-bench: relay %s, replica %s, nats %s\n", fl.main.addr, fl.replica.addr, url)
	return fl, nil
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// wire points o at the fleet: registrations to the main conductor, queries,
// quiescing, verification and metrics to the replica when there is one, the
// main conductor's CPU time, and the snapshot and crash faults on the main
// conductor.
func (fl *fleet) wire(o *sim.RunOptions) {
	o.Addr, o.ServerPID = fl.main.addr, fl.main.cmd.Process.Pid
	if fl.main.queryAddr != "" {
		o.QueryAddr = fl.main.queryAddr
	}
	if fl.replica != nil {
		o.QueryAddr, o.MetricsAddr = fl.replica.addr, fl.replica.addr
	}
	o.Crash, o.Snapshot = fl.main.crash, fl.main.restart
}

// stop stops the processes in order: the replica, the relay, nats-server.
func (fl *fleet) stop() {
	for _, s := range []*server{fl.replica, fl.main, fl.nats} {
		if s != nil && s.cmd != nil {
			s.stop()
		}
	}
}
