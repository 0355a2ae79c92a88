package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// TestMakeInstall runs the Makefile's install and uninstall targets into a
// staging root (DESTDIR) and checks what they put there: the binary, the
// systemd unit with ExecStart naming $(PREFIX)/bin/conductor, and a default
// configuration that a second install keeps. systemd-analyze verifies the
// unit; its LimitNOFILE must hold the default caps (and the largest
// registration cap) without lowering them, its system call filter must
// allow the calls conductor's own code makes, and its address families the
// sockets conductor opens. Then the installed binary
// runs with the unit's ExecStart arguments (state directory and ports moved
// to temporary ones), answers /health with the installed configuration,
// takes its admin token from the environment, and stops on SIGTERM with
// exit 0, as Restart=on-failure expects of a clean stop.
func TestMakeInstall(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit cannot be verified")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()

	// The binary is built here and dated a day ahead, so the Makefile's
	// $(BIN) rule finds it newer than every source, even one edited while
	// the test runs, and installs it as it is.
	bin := filepath.Join(tmp, "build", "conductor")
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/conductor")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ahead := time.Now().Add(24 * time.Hour)
	if err := os.Chtimes(bin, ahead, ahead); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(tmp, "root")
	runMake := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(makeBin, append([]string{"-C", root, "--no-print-directory", "BIN=" + bin}, args...)...)
		// A make running this test passes its flags and variables down
		// through the environment; this make gets only its arguments.
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if strings.Contains(string(out), "go build") {
			t.Fatalf("make %s rebuilt the binary it was given:\n%s", strings.Join(args, " "), out)
		}
		return string(out)
	}
	runMake("install", "DESTDIR="+dest, "PREFIX=/usr")

	installed := filepath.Join(dest, "usr/bin/conductor")
	unitPath := filepath.Join(dest, "usr/lib/systemd/system/conductor.service")
	configPath := filepath.Join(dest, "etc/conductor/config.json")
	for path, mode := range map[string]os.FileMode{installed: 0o755, unitPath: 0o644, configPath: 0o644} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Mode().IsRegular() || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want a regular file with %v", path, st.Mode(), mode)
		}
	}
	if a, b := readFile(t, bin), readFile(t, installed); !bytes.Equal(a, b) {
		t.Errorf("the installed binary differs from the built one (%d and %d bytes)", len(b), len(a))
	}
	cfg, err := parseConfig(readFile(t, configPath))
	if err != nil {
		t.Fatalf("installed config: %v", err)
	}
	if cfg.HTTPPort != DefaultHTTPPort || cfg.RPCPort != DefaultRPCPort || len(cfg.Static)+len(cfg.Skipped) != 0 {
		t.Errorf("installed config: %+v; want the default ports and nothing else", cfg)
	}

	unit := parseUnit(t, string(readFile(t, unitPath)))
	execStart := unit.one(t, "ExecStart")
	argv := strings.Fields(execStart)
	if argv[0] != "/usr/bin/conductor" {
		t.Fatalf("ExecStart runs %s, want $(PREFIX)/bin/conductor = /usr/bin/conductor", argv[0])
	}
	if strings.Contains(string(readFile(t, unitPath)), "@BINDIR@") {
		t.Error("the installed unit still holds @BINDIR@")
	}
	stateDir := "/var/lib/" + unit.one(t, "StateDirectory")
	configDir := "/etc/" + unit.one(t, "ConfigurationDirectory") + "/"
	if !slices.Contains(argv, stateDir) {
		t.Errorf("ExecStart %q does not name StateDirectory's %s", execStart, stateDir)
	}

	// systemd-analyze verify checks that ExecStart's binary exists on this
	// host, so it reads a copy whose ExecStart names the staged binary.
	verifyDir := filepath.Join(tmp, "verify")
	if err := os.MkdirAll(verifyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	staged := strings.Replace(string(readFile(t, unitPath)), "ExecStart=/usr/bin/conductor ", "ExecStart="+installed+" ", 1)
	if err := os.WriteFile(filepath.Join(verifyDir, "conductor.service"), []byte(staged), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on unknown keys and unparsable values, and says so:
	// any output is a finding.
	if out, err := exec.Command(analyze, "verify", filepath.Join(verifyDir, "conductor.service")).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	checkUnitLimits(t, analyze, unit)

	// Run the installed binary as the unit would: ExecStart's words, with
	// $CONDUCTOR_ARGS split as systemd splits an unbraced variable, the
	// configuration read from the staging root and the state directory a
	// temporary one. The environment holds only what EnvironmentFile= adds.
	const token = "install-test-admin-token"
	env := map[string]string{
		"CONDUCTOR_ARGS":        "--http-port 0 --rpc-port 0 --listen 127.0.0.1",
		"CONDUCTOR_ADMIN_TOKEN": token,
	}
	state := filepath.Join(tmp, "state")
	var args []string
	for _, w := range argv[1:] {
		switch {
		case strings.HasPrefix(w, "$"):
			v, ok := env[strings.TrimPrefix(w, "$")]
			if !ok {
				t.Fatalf("ExecStart names %s, which the test does not set", w)
			}
			args = append(args, strings.Fields(v)...)
		case strings.ContainsAny(w, `$"'\`):
			t.Fatalf("ExecStart word %q needs systemd's quoting or expansion rules, which the test does not implement", w)
		case w == stateDir:
			args = append(args, state)
		case strings.HasPrefix(w, configDir):
			args = append(args, filepath.Join(dest, w))
		case strings.HasPrefix(w, "/"):
			t.Fatalf("ExecStart names %s, which make install does not provide", w)
		default:
			args = append(args, w)
		}
	}
	cmd := exec.Command(installed, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	c := runChild(t, cmd)
	addr, logs := c.addr, c.logs
	code, _, body := httpDo(t, "GET", "http://"+addr+"/health", "", nil)
	if code != 200 || !strings.Contains(string(body), `"status":"ok"`) {
		t.Errorf("/health: %d %s", code, body)
	}
	if want := "msg=\"configuration loaded\" path=" + filepath.Join(dest, "etc/conductor/config.json") + " static_services=0 skipped=0"; !strings.Contains(logs.String(), want) {
		t.Errorf("the log lacks %q:\n%s", want, logs)
	}
	for auth, want := range map[string]int{"": http.StatusUnauthorized, "Bearer " + token: http.StatusOK} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/services", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := boundedClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("/services with Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
	stopChild(t, c)
	if _, err := os.Stat(filepath.Join(state, "index.snapshot")); err != nil {
		t.Errorf("no index snapshot in the state directory ExecStart names: %v", err)
	}

	// A second install replaces the binary and the unit and keeps the
	// configuration an operator edited.
	edited := []byte(`{"http_server_port": 14444}` + "\n")
	if err := os.WriteFile(configPath, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unitPath, []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runMake("install", "DESTDIR="+dest, "PREFIX=/usr")
	if got := readFile(t, configPath); !bytes.Equal(got, edited) {
		t.Errorf("a second install changed the configuration to %q", got)
	}
	if got := parseUnit(t, string(readFile(t, unitPath))).one(t, "ExecStart"); got != execStart {
		t.Errorf("a second install left the unit's ExecStart %q, want %q", got, execStart)
	}

	runMake("uninstall", "DESTDIR="+dest, "PREFIX=/usr")
	for _, path := range []string{installed, unitPath} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("after uninstall %s: %v, want it gone", path, err)
		}
	}
	if got := readFile(t, configPath); !bytes.Equal(got, edited) {
		t.Errorf("uninstall changed the configuration to %q", got)
	}

	// Without PREFIX the binary goes to /usr/local and the unit names it there.
	dest2 := filepath.Join(tmp, "root-default")
	runMake("install", "DESTDIR="+dest2)
	u := parseUnit(t, string(readFile(t, filepath.Join(dest2, "usr/local/lib/systemd/system/conductor.service"))))
	if got := strings.Fields(u.one(t, "ExecStart"))[0]; got != "/usr/local/bin/conductor" {
		t.Errorf("default PREFIX: ExecStart runs %s, want /usr/local/bin/conductor", got)
	}
	if _, err := os.Stat(filepath.Join(dest2, "usr/local/bin/conductor")); err != nil {
		t.Error(err)
	}
}

// checkUnitLimits checks the unit's resource and sandbox settings against
// what conductor does at run time.
func checkUnitLimits(t *testing.T, analyze string, unit systemdUnit) {
	t.Helper()
	// conductor raises its soft RLIMIT_NOFILE to the hard limit, which
	// LimitNOFILE sets; the default connection cap with the default and with
	// the largest registration cap must fit without being lowered.
	n, err := strconv.ParseUint(unit.one(t, "LimitNOFILE"), 10, 64)
	if err != nil {
		t.Fatalf("LimitNOFILE: %v", err)
	}
	for _, regs := range []int{defaultMaxRegistrations, ingest.MaxListenersLimit} {
		if p := planFDs(n, n, server.DefaultMaxConns, regs); len(p.notes) != 0 {
			t.Errorf("LimitNOFILE=%d with --max-registrations %d: %v", n, regs, p.notes)
		}
	}

	// The calls conductor's own code makes beyond ordinary I/O, each of which
	// the system call filter must allow.
	needed := []string{
		"setpriority", "getpriority", // --ingest-nice lowers each listener thread (wire/ingest/thread_linux.go)
		"prlimit64",         // the descriptor budget raises RLIMIT_NOFILE (fdbudget.go)
		"flock",             // one conductor per state directory (statedir/lock_flock.go)
		"fsync", "renameat", // state and snapshot generations (statedir/generations.go)
		"sched_setscheduler", // libzmq sets SCHED_OTHER on its I/O threads
	}
	allowed, denied := map[string]bool{}, map[string]bool{}
	for _, v := range unit.values["SystemCallFilter"] {
		set := allowed
		if strings.HasPrefix(v, "~") {
			set, v = denied, v[1:]
		}
		for _, name := range strings.Fields(v) {
			for _, call := range syscallSet(t, analyze, name) {
				set[call] = true
			}
		}
	}
	if len(allowed) == 0 {
		t.Fatal("the unit has no SystemCallFilter allow list")
	}
	for _, call := range needed {
		if !allowed[call] || denied[call] {
			t.Errorf("SystemCallFilter %q denies %s", unit.values["SystemCallFilter"], call)
		}
	}

	// AF_NETLINK: the endpoint policy lists the host's interfaces and
	// addresses (httpd/server/endpoints.go); AF_UNIX: ipc:// endpoints.
	families := strings.Fields(unit.one(t, "RestrictAddressFamilies"))
	for _, f := range []string{"AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"} {
		if !slices.Contains(families, f) {
			t.Errorf("RestrictAddressFamilies=%s lacks %s", strings.Join(families, " "), f)
		}
	}
}

// syscallSet resolves a SystemCallFilter entry (a call or an @group) to
// calls, with systemd-analyze's own tables.
func syscallSet(t *testing.T, analyze, name string) []string {
	t.Helper()
	if !strings.HasPrefix(name, "@") {
		return []string{name}
	}
	out, err := exec.Command(analyze, "syscall-filter", name).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", name, err)
	}
	var calls []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for first := true; sc.Scan(); first = false {
		line := strings.TrimSpace(sc.Text())
		switch {
		case first || line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "@"):
			calls = append(calls, syscallSet(t, analyze, line)...)
		default:
			calls = append(calls, line)
		}
	}
	if len(calls) == 0 {
		t.Fatalf("systemd-analyze syscall-filter %s: no calls in\n%s", name, out)
	}
	return calls
}

// systemdUnit is a unit file's settings: every assignment of each key, in
// order, whatever its section.
type systemdUnit struct{ values map[string][]string }

func parseUnit(t *testing.T, text string) systemdUnit {
	t.Helper()
	u := systemdUnit{values: map[string][]string{}}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("unit line %q is not KEY=VALUE", line)
		}
		u.values[k] = append(u.values[k], v)
	}
	return u
}

// one returns the key's single value.
func (u systemdUnit) one(t *testing.T, key string) string {
	t.Helper()
	if len(u.values[key]) != 1 {
		t.Fatalf("the unit sets %s %d times, want once", key, len(u.values[key]))
	}
	return u.values[key][0]
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
