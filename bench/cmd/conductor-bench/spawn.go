package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// server is a spawned conductor (or nats-server).
type server struct {
	bin       string
	args      []string
	stdout    io.Writer // its stdout (nil: out)
	out       io.Writer // its stderr
	cmd       *exec.Cmd
	addr      string // where /health answers ("" for a process without one)
	queryAddr string // the RPC or Dynamo surface, when spawned with one
	done      chan struct{}
	dir       string // removed when the server stops ("" for none)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// spawn starts bin on a free loopback port with an empty configuration file
// and durable state in a directory of its own (extra comes last, so it can
// override any of these), and waits until /health answers.
func spawn(ctx context.Context, bin string, extra []string, surface string, stderr io.Writer) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	rpcPort, dynPort := 0, 0
	switch surface {
	case "rpc":
		if rpcPort, err = freePort(); err != nil {
			return nil, err
		}
	case "dynamo":
		if dynPort, err = freePort(); err != nil {
			return nil, err
		}
		extra = append([]string{"--dynamo-port", strconv.Itoa(dynPort)}, extra...)
	}
	dir, err := os.MkdirTemp("", "conductor-bench")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "conductor.json")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// RPC (or Dynamo) on a free port of its own when that surface is queried,
	// RPC off otherwise.
	args := append([]string{"--config", cfg, "--listen", "127.0.0.1", "--http-port", strconv.Itoa(port), "--log-level", "WARN",
		"--rpc-port", strconv.Itoa(rpcPort), "--state-dir", filepath.Join(dir, "state")}, extra...)
	s := &server{bin: bin, args: args, out: stderr, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	if p := max(rpcPort, dynPort); p != 0 {
		s.queryAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// start runs s.bin with s.args, its output to s.out, and waits until s.addr
// answers /health (or, without an address, until s.ready says so). The
// process has a process group of its own, so a terminal's Ctrl-C reaches only
// this harness, which then stops it in order.
func (s *server) start(ctx context.Context) error {
	return s.startUntil(ctx, func() bool {
		resp, err := http.Get("http://" + s.addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func (s *server) startUntil(ctx context.Context, ready func() bool) error {
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = s.stdout, s.out
	if s.stdout == nil {
		cmd.Stdout = s.out
	}
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		s.removeDir()
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for !ready() {
		select {
		case <-s.done:
			s.removeDir()
			return fmt.Errorf("%s exited before serving (%v)", s.bin, cmd.ProcessState)
		case <-ctx.Done():
			s.stop()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("%s did not get ready on %s within 15s", s.bin, s.addr)
		}
	}
	return nil
}

// stop sends SIGTERM (conductor drains and exits) and kills after 10s; it
// returns the process's exit code.
func (s *server) stop() int {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.removeDir()
	return s.cmd.ProcessState.ExitCode()
}

// crash kills the server with SIGKILL (nothing flushed, no snapshot written)
// and starts it again with the same arguments: the same ports and state
// directory, so it restores its registrations and last snapshot. It returns
// once /health answers.
func (s *server) crash(ctx context.Context) error {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	dir := s.dir
	s.dir = "" // a failed start must not remove the state it is to restore
	err := s.start(ctx)
	s.dir = dir
	return err
}

// restart stops the server with SIGTERM (conductor drains and writes its
// snapshot at shutdown) and starts it again with the same arguments, its
// state directory kept; it returns once /health answers.
func (s *server) restart(ctx context.Context) error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("%s did not stop within 30s of SIGTERM", s.bin)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("%s exited %d on SIGTERM", s.bin, code)
	}
	dir := s.dir
	s.dir = ""
	err := s.start(ctx)
	s.dir = dir
	return err
}

func (s *server) removeDir() {
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// spawnNATS starts a nats-server with JetStream on a free loopback port, its
// store in a directory of its own, and waits until it accepts connections;
// it returns the server and its URL.
func spawnNATS(ctx context.Context, bin string, stderr io.Writer) (*server, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "conductor-bench-nats")
	if err != nil {
		return nil, "", err
	}
	// Its log goes to a file in its store directory (removed with it).
	s := &server{bin: bin, args: []string{"-js", "-sd", dir, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-l", filepath.Join(dir, "nats.log")}, out: stderr,
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	err = s.startUntil(ctx, func() bool {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	if err != nil {
		return nil, "", err
	}
	return s, "nats://" + s.addr, nil
}

// hasFlag reports whether bin's --help lists --name.
func hasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return bytes.Contains(out, []byte("--"+name+" ")) || bytes.Contains(out, []byte("--"+name+"\n"))
}
