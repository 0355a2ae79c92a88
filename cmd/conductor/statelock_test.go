package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLockStateDir: a locked state directory is refused to a second store
// (flock belongs to the open file, so even in this process), with the
// directory, the holder's pid and the way out in the error; the lock file
// holds the pid; closing releases the lock.
func TestLockStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	st, err := newStateStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	b, err := os.ReadFile(filepath.Join(dir, stateLockFile))
	if pid := strconv.Itoa(os.Getpid()); err != nil || string(b) != pid+"\n" {
		t.Fatalf("lock file %q (%v), want pid %s", b, err, pid)
	}
	_, err = newStateStore(dir)
	if !errors.Is(err, errStateDirInUse) {
		t.Fatalf("second store: %v", err)
	}
	for _, want := range []string{dir, "pid " + strconv.Itoa(os.Getpid()), "--state-dir DIR", "--state-dir ''"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error lacks %q: %v", want, err)
		}
	}
	st.close()
	st2, err := newStateStore(dir)
	if err != nil {
		t.Fatalf("after close: %v", err)
	}
	st2.close()
	st2.close() // twice is harmless

	// a lock file left behind (a dead holder's) does not block a start
	if err := os.WriteFile(filepath.Join(dir, stateLockFile), []byte("999999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st3, err := newStateStore(dir)
	if err != nil {
		t.Fatalf("with a stale lock file: %v", err)
	}
	st3.close()
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// TestStateDirOneConductor: a second conductor started on a state directory
// in use exits 1 before it binds a port, with one line naming the directory
// and the first's pid; the first's registrations are intact after both have
// stopped and come back when it restarts.
func TestStateDirOneConductor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	c1 := startChild(t, 0, "--state-dir", dir)
	pid := strconv.Itoa(c1.cmd.Process.Pid)

	c2 := exec.Command(os.Args[0], "--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1",
		"--config", "/nonexistent/conductor.json", "--shutdown-timeout", "5s", "--state-dir", dir)
	c2.Env = append(os.Environ(), "CONDUCTOR_TEST_CHILD=1")
	out := &syncBuffer{}
	c2.Stdout, c2.Stderr = out, out
	if err := c2.Start(); err != nil {
		t.Fatal(err)
	}
	c2done := make(chan error, 1)
	go func() { c2done <- c2.Wait() }()
	t.Cleanup(func() {
		_ = c2.Process.Kill()
		if c2done != nil {
			<-c2done
		}
	})
	var c2addr string
	deadline := time.After(waitBound)
	for c2addr == "" && c2done != nil {
		select {
		case err := <-c2done:
			c2done = nil
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("second conductor: %v, want exit status 1\n%s", err, out)
			}
		case <-deadline:
			t.Fatalf("second conductor neither refused nor listening\n%s", out)
		case <-time.After(10 * time.Millisecond):
			if m := listeningRE.FindStringSubmatch(out.String()); m != nil {
				c2addr = m[1]
			}
		}
	}
	if c2addr != "" {
		t.Errorf("second conductor started on %s, which pid %s holds", dir, pid)
	} else {
		var line string // the refusal, one line
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "state directory in use") {
				line = l
			}
		}
		for _, want := range []string{"level=ERROR", dir, "pid " + pid, "--state-dir DIR", "--state-dir ''"} {
			if !strings.Contains(line, want) {
				t.Errorf("refusal line lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out.String(), "listening") {
			t.Errorf("the refused conductor bound a port:\n%s", out)
		}
	}

	register := func(addr, inst string) {
		t.Helper()
		code, _, body := httpDo(t, "POST", "http://"+addr+"/register", "application/json", []byte(fmt.Sprintf(
			`{"endpoint":"tcp://127.0.0.1:%d","type":"vLLM","modelname":"m","instance_id":%q,"block_size":16,"dp_rank":0}`,
			closedPort(t), inst)))
		if code != 200 {
			t.Fatalf("register %s: %d %s", inst, code, body)
		}
	}
	register(c1.addr, "first-a")
	register(c1.addr, "first-b")
	if c2addr != "" { // the other's churn rewrites the file with its own set
		register(c2addr, "second-a")
		stopChild(t, &child{cmd: c2, addr: c2addr, logs: out, done: c2done})
	}
	stopChild(t, c1)

	c3 := startChild(t, 0, "--state-dir", dir)
	if !strings.Contains(c3.logs.String(), "restored=2") {
		t.Errorf("restart did not log restored=2:\n%s", tail(c3.logs.String()))
	}
	svcs := getJSON(t, "http://"+c3.addr+"/services")
	b, _ := json.Marshal(svcs)
	if svcs["count"] != json.Number("2") || !strings.Contains(string(b), `"first-a"`) || !strings.Contains(string(b), `"first-b"`) {
		t.Fatalf("the first conductor's registrations after the restart: %s", b)
	}
}
