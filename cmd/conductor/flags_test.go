package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagGroupsCoverEveryFlag: --help lists every defined flag exactly once,
// under its group, and names no flag that does not exist.
func TestFlagGroupsCoverEveryFlag(t *testing.T) {
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, &help); err != flag.ErrHelp {
		t.Fatalf("--help: %v", err)
	}
	seen := map[string]int{}
	for _, g := range flagGroups {
		for _, n := range g.names {
			seen[n]++
		}
	}
	var all []string // the flags --help prints
	for _, line := range strings.Split(help.String(), "\n") {
		if f, ok := strings.CutPrefix(line, "  --"); ok {
			all = append(all, strings.Fields(f)[0])
		}
	}
	count := 0
	defineFlags(&settings{}).VisitAll(func(f *flag.Flag) {
		count++
		if seen[f.Name] != 1 {
			t.Errorf("flag --%s is in %d groups, want 1", f.Name, seen[f.Name])
		}
	})
	if len(all) != count || len(seen) != count {
		t.Errorf("--help lists %d flags, the groups name %d, %d are defined", len(all), len(seen), count)
	}
	for _, g := range flagGroups {
		if !strings.Contains(help.String(), "\n"+g.title+":\n") {
			t.Errorf("--help lacks the heading %q", g.title)
		}
	}
	if strings.Count(help.String(), "(default 16 MiB;") != 1 || strings.Contains(help.String(), "(default -1)") {
		t.Errorf("defaults printed twice or as sentinels:\n%s", help.String())
	}
}

// TestFlagErrorsAreOneLine: a mistyped flag is one line naming the nearest
// flag; a bad value one line naming the flag; the exit status is 2.
func TestFlagErrorsAreOneLine(t *testing.T) {
	for args, want := range map[string]string{
		"--admin-tokn x":   "conductor: unknown flag --admin-tokn; did you mean --admin-token? (conductor --help lists every flag)\n",
		"--htp-port 1":     "conductor: unknown flag --htp-port; did you mean --http-port? (conductor --help lists every flag)\n",
		"--snapshot 1m":    "conductor: unknown flag --snapshot; did you mean --snapshot-interval? (conductor --help lists every flag)\n",
		"--qqqqqqqqq":      "conductor: unknown flag --qqqqqqqqq (conductor --help lists every flag)\n",
		"--http-port x":    "conductor: invalid value \"x\" for flag --http-port: parse error (conductor --help lists every flag)\n",
		"--insecure=maybe": "conductor: invalid boolean value \"maybe\" for --insecure: parse error (conductor --help lists every flag)\n",
	} {
		var stdout, stderr bytes.Buffer
		a, code := newApp(strings.Fields(args), envOf(nil), &stdout, &stderr)
		if a != nil || code != 2 || stderr.String() != want || stdout.Len() != 0 {
			t.Errorf("%s: code %d, stderr %q, stdout %d bytes; want %q", args, code, stderr.String(), stdout.Len(), want)
		}
	}
	var stdout, stderr bytes.Buffer
	if a, code := newApp([]string{"--help"}, envOf(nil), &stdout, &stderr); a != nil || code != 0 ||
		!strings.HasPrefix(stdout.String(), "conductor is a KV-cache indexer") || stderr.Len() != 0 {
		t.Errorf("--help: code %d, stdout %.80q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestConfigurationDocListsTheFlags: docs/configuration.md shows what
// --help prints, group by group.
func TestConfigurationDocListsTheFlags(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	writeHelp(&help, defineFlags(&settings{}))
	want := help.String()[strings.Index(help.String(), "\nServer:\n")+1:]
	_, after, ok := strings.Cut(string(doc), "## Flags\n")
	start := strings.Index(after, "```text\n")
	if !ok || start < 0 {
		t.Fatal("docs/configuration.md has no ## Flags section with a text block")
	}
	block := after[start+len("```text\n"):]
	block = block[:strings.Index(block, "```")]
	if block != want {
		t.Fatalf("docs/configuration.md's flag list differs from --help; paste the output of\n"+
			"  go run ./cmd/conductor --help | sed -n '/^Server:/,$p'\ngot:\n%s\nwant:\n%s", block, want)
	}
}

// TestTokenFileEmpty: a token file whose contents trim to nothing is refused
// (an empty token would turn the protection off); a file holding a token
// gives it, trimmed; without a file or flag the environment's is taken.
func TestTokenFileEmpty(t *testing.T) {
	dir := t.TempDir()
	empty, full := filepath.Join(dir, "empty.tok"), filepath.Join(dir, "full.tok")
	if err := os.WriteFile(empty, []byte(" \n\t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(string) (string, bool) { return "from-env-0123456789", true }
	if v, err := secret("", empty, "X", env); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("empty file: %q, %v", v, err)
	}
	if v, err := secret("", full, "X", env); err != nil || v != "0123456789abcdef" {
		t.Fatalf("token file: %q, %v", v, err)
	}
	if v, err := secret("", "", "X", env); err != nil || v != "from-env-0123456789" {
		t.Fatalf("environment: %q, %v", v, err)
	}
	s := &settings{queryTokenFile: empty}
	if _, _, err := accessOf(s, func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "--query-token-file") {
		t.Fatalf("accessOf with an empty query token file: %v", err)
	}
}

// TestNoStateHome: with neither XDG_STATE_HOME nor HOME, --state-dir's
// default is off, and the settings say so (a start warning) unless the
// command line chose it (--state-dir "") or --port turned it off by design.
func TestNoStateHome(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "")
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--state-dir", ""}, false},
		{[]string{"--port", "8090", "--block-size", "16"}, false},
	} {
		s, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if s.noStateHome != c.want || s.stateDir != "" {
			t.Errorf("%q: noStateHome %v, state dir %q; want %v, off", c.args, s.noStateHome, s.stateDir, c.want)
		}
	}
	t.Setenv("HOME", t.TempDir())
	if s, err := parseFlags(nil, io.Discard); err != nil || s.noStateHome || s.stateDir == "" {
		t.Fatalf("with HOME: %+v, %v", s, err)
	}
}
