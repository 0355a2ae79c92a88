package main

import (
	"fmt"
	"syscall"

	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// File descriptor budget. conductor's descriptors go to HTTP connections (one
// each, over every surface) and to ZMQ registrations (their sockets' mailboxes
// and TCP connections, fdsPerRegistration = ingest.ListenerFDs each), plus a fixed reserve for
// everything else (listeners, logs, the state directory, libzmq's own
// threads). The budget is planned once at start so that neither side can
// starve the other: past its share, HTTP refuses connections (503) and
// /register answers limit_exceeded, instead of accept or socket creation
// failing with EMFILE, which would stop the HTTP server
// (TestFDExhaustionIsNotFatal).
const (
	fdReserve          = 64
	fdsPerRegistration = ingest.ListenerFDs
)

// fdPlan is the budget the process runs with.
type fdPlan struct {
	limit         uint64 // RLIMIT_NOFILE soft limit after raising
	hard          uint64
	conns         int      // HTTP connection cap
	registrations int      // registration cap
	notes         []string // requests the budget lowered
}

// raiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit (Go does this at
// start since 1.19; doing it here makes the budget explicit and logged) and
// returns both.
func raiseNoFile() (soft, hard uint64, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, err
	}
	if rl.Cur < rl.Max {
		want := rl
		want.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			rl = want
		}
	}
	return rl.Cur, rl.Max, nil
}

// planFDs fits the requested caps into limit descriptors. When both fit they
// stand; otherwise HTTP gets at most half of what is left after the reserve
// and registrations the rest, and each lowered cap is noted.
func planFDs(limit, hard uint64, wantConns, wantRegs int) fdPlan {
	p := fdPlan{limit: limit, hard: hard, conns: wantConns, registrations: wantRegs}
	avail := int64(limit) - fdReserve
	if avail < 2*(1+fdsPerRegistration) {
		avail = 2 * (1 + fdsPerRegistration)
	}
	if int64(wantConns)+int64(wantRegs)*fdsPerRegistration <= avail {
		return p
	}
	p.conns = int(min(int64(wantConns), avail/2))
	p.registrations = int(min(int64(wantRegs), (avail-int64(p.conns))/fdsPerRegistration))
	if p.conns < wantConns {
		p.notes = append(p.notes, fmt.Sprintf("--max-connections lowered from %d to %d", wantConns, p.conns))
	}
	if p.registrations < wantRegs {
		p.notes = append(p.notes, fmt.Sprintf("--max-registrations lowered from %d to %d", wantRegs, p.registrations))
	}
	return p
}
