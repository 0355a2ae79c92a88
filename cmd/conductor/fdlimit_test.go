package main

import (
	"bufio"
	"context"
	"fmt"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the conductor process for tests that need one of its
// own (a lower fd limit, a signal): with CONDUCTOR_TEST_CHILD=1 the test
// binary runs conductor with its arguments instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("CONDUCTOR_TEST_CHILD") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	// Durable state defaults to the user's state directory: keep every
	// conductor these tests start (in-process or child) out of it.
	dir, err := os.MkdirTemp("", "conductor-test-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// child is a conductor process started from the test binary.
type child struct {
	cmd  *exec.Cmd
	addr string
	logs *syncbuf.Buffer
	done chan error
}

var listeningRE = regexp.MustCompile(`HTTP server listening.*addr=(\S+)`)

// startChild runs conductor under `ulimit -n nofile` (0: unchanged) with args
// and waits for its HTTP address. It is killed at cleanup.
func startChild(t *testing.T, nofile int, args ...string) *child {
	t.Helper()
	script := `exec "$0" "$@"`
	if nofile > 0 {
		script = fmt.Sprintf("ulimit -S -n %d && ulimit -H -n %d && %s", nofile, nofile, script)
	}
	all := append([]string{"-c", script, os.Args[0], "--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1",
		"--shutdown-timeout", "5s", "--state-dir", ""}, args...)
	cmd := exec.Command("bash", all...)
	// no configuration file (a missing one named by the environment is a warning)
	cmd.Env = append(os.Environ(), "CONDUCTOR_TEST_CHILD=1", "CONDUCTOR_CONFIG_PATH=/nonexistent/conductor.json")
	return runChild(t, cmd)
}

// runChild starts cmd, a conductor logging text lines to stderr, and waits
// for its HTTP address. It is killed at cleanup.
func runChild(t *testing.T, cmd *exec.Cmd) *child {
	t.Helper()
	logs := &syncbuf.Buffer{}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(logs, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, logs: logs, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case c.addr = <-found:
	case err := <-c.done:
		t.Fatalf("conductor exited before listening: %v\n%s", err, logs)
	case <-time.After(waitBound):
		t.Fatalf("conductor did not start:\n%s", logs)
	}
	return c
}

func (c *child) alive() bool {
	select {
	case err := <-c.done:
		c.done <- err
		return false
	default:
		return true
	}
}

// TestFDExhaustionIsNotFatal: with 256 descriptors, far more connection
// attempts than fit are refused or delayed, never fatal; registrations stop at
// the budget with limit_exceeded; once the flood ends the server answers
// again, and the process never exits over a descriptor shortage.
func TestFDExhaustionIsNotFatal(t *testing.T) {
	c := startChild(t, 256)
	if !strings.Contains(c.logs.String(), "file descriptor budget") {
		t.Fatalf("budget not logged:\n%s", c.logs)
	}
	m := regexp.MustCompile(`msg="file descriptor budget" fd_limit=256 .*http_connections=(\d+) registrations=(\d+)`).
		FindStringSubmatch(c.logs.String())
	if m == nil {
		t.Fatalf("budget line:\n%s", c.logs)
	}
	var conns, regs int
	fmt.Sscan(m[1], &conns)
	fmt.Sscan(m[2], &regs)
	// (256 - reserve) split: at most half to HTTP, the rest to registrations
	if conns != (256-fdReserve)/2 || regs != (256-fdReserve-conns)/fdsPerRegistration {
		t.Fatalf("budget conns=%d regs=%d", conns, regs)
	}

	// registrations up to the budget succeed, the next is limit_exceeded
	client := &http.Client{Timeout: 10 * time.Second}
	register := func(i int) (int, string) {
		body := fmt.Sprintf(`{"endpoint":"tcp://127.0.0.1:%d","type":"vLLM","modelname":"m","instance_id":"i%d","block_size":16,"dp_rank":0}`, 1+i, i)
		resp, err := client.Post("http://"+c.addr+"/register", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("register %d: %v", i, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range regs {
		if code, body := register(i); code != 200 {
			t.Fatalf("registration %d of %d: %d %s", i, regs, code, body)
		}
	}
	if code, body := register(regs); code != 400 || !strings.Contains(body, "limit_exceeded") {
		t.Fatalf("registration past the budget: %d %s", code, body)
	}
	client.CloseIdleConnections()

	// a flood of 1,000 connections held open
	var held []net.Conn
	refused := 0
	for range 1000 {
		nc, err := net.DialTimeout("tcp", c.addr, time.Second)
		if err != nil {
			refused++
			continue
		}
		held = append(held, nc)
	}
	if !c.alive() {
		t.Fatalf("conductor exited during the flood:\n%s", c.logs)
	}
	for _, nc := range held {
		nc.Close()
	}
	t.Logf("held %d connections, %d dials failed", len(held), refused)

	// the server recovers and answers
	deadline := time.Now().Add(waitBound)
	for {
		resp, err := client.Get("http://" + c.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /health after the flood: %v\n%s", err, c.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !c.alive() {
		t.Fatalf("conductor exited:\n%s", c.logs)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, c.logs)
		}
	case <-time.After(waitBound):
		t.Fatal("no exit after SIGTERM")
	}
}

// TestPlanFDs: the budget split, worked by hand.
func TestPlanFDs(t *testing.T) {
	f := func(limit uint64, conns, regs, wantConns, wantRegs, notes int) {
		t.Helper()
		p := planFDs(limit, limit, conns, regs)
		if p.conns != wantConns || p.registrations != wantRegs || len(p.notes) != notes {
			t.Fatalf("planFDs(%d, %d, %d) = %d conns, %d regs, %q; want %d, %d, %d notes",
				limit, conns, regs, p.conns, p.registrations, p.notes, wantConns, wantRegs, notes)
		}
	}
	if fdsPerRegistration != 6 {
		t.Fatalf("the cases below are worked for 6 descriptors per registration, not %d", fdsPerRegistration)
	}
	f(1<<20, 8192, 4096, 8192, 4096, 0) // 8192 + 4096*6 + 64 fits
	f(1024, 8192, 4096, 480, 80, 2)     // (1024-64)/2 = 480; (960-480)/6 = 80
	f(40000, 8192, 4096, 8192, 4096, 0) // 8192+24576 = 32768 <= 39936
	f(30000, 8192, 4096, 8192, 3624, 1) // (30000-64-8192)/6 = 3624
}
