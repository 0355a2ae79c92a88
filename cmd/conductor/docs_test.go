package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The runnable-docs convention. A fenced block whose info string carries the
// word `runnable` is run by TestDocs (`make docs-test`), exactly as written
// and as a reader pastes it:
//
//   - ```sh runnable``` — shell commands. The runnable blocks of one file form
//     one session, run in order by one bash in a fresh directory that looks
//     like the repository's root (a link to each of its top-level entries,
//     bin/ holding the built binaries), with bin/ on PATH, HOME in that
//     directory and no CONDUCTOR_* variables: commands written for a checkout
//     run as written, and what they create stays there. Every command runs
//     once, in that one shell, as pasted into a terminal: a background job
//     of one block is there in the next (`jobs`, `kill`, `wait` see it), and
//     nothing is retried. A block that needs to wait (a server takes a moment
//     to listen, a publisher's events a moment to apply) shows the wait
//     itself, as a loop a reader runs too. `runnable:NAME` starts a separate
//     session NAME, for examples that must not run together.
//   - the commands run in steps: a line ending in a lone `&` (a background
//     job) is a step of its own; the other lines run up to a line
//     `# => TEXT`, which states what the step's output shows, a background
//     line, or the block's end. Each command must succeed (errexit, as in
//     `bash -e`), and a step before `# => TEXT` must print TEXT.
//   - ```json runnable``` — must parse as JSON; with `file=NAME` the block is
//     also written to NAME in the session's directory before its commands run
//     (a configuration file the commands then use).
//
// Ports are the ones the docs name: examples of one session are written not to
// collide, and sessions run one after another. A session that has not ended
// after docsSessionLimit fails, naming the step it was in.

// docsSessionLimit bounds one session: it only decides when a failure (a
// step that does not end) is declared.
const docsSessionLimit = 4 * time.Minute

// docBlock is one runnable fenced block.
type docBlock struct {
	file    string
	line    int
	lang    string
	session string
	name    string // file=NAME
	text    string
}

var fenceRE = regexp.MustCompile("^```+(.*)$")

// parseDocBlocks returns the runnable blocks of one markdown file, in order.
func parseDocBlocks(path string, data []byte) ([]docBlock, error) {
	var out []docBlock
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur *docBlock
	var body strings.Builder
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		m := fenceRE.FindStringSubmatch(strings.TrimSpace(line))
		if cur == nil {
			if m == nil {
				continue
			}
			words := strings.Fields(m[1])
			b := &docBlock{file: path, line: n}
			runnable := false
			for i, w := range words {
				switch {
				case i == 0:
					b.lang = w
				case w == "runnable":
					runnable, b.session = true, filepath.Base(path)
				case strings.HasPrefix(w, "runnable:"):
					runnable, b.session = true, filepath.Base(path)+":"+strings.TrimPrefix(w, "runnable:")
				case strings.HasPrefix(w, "file="):
					b.name = strings.TrimPrefix(w, "file=")
				}
			}
			if !runnable {
				b.lang = "skip"
			}
			cur = b
			body.Reset()
			continue
		}
		if m != nil && strings.TrimSpace(m[1]) == "" {
			if cur.lang != "skip" {
				cur.text = body.String()
				switch cur.lang {
				case "sh", "bash", "console", "shell":
					cur.lang = "sh"
				case "json":
					if !json.Valid([]byte(cur.text)) {
						return nil, fmt.Errorf("%s:%d: runnable json block is not valid JSON", path, cur.line)
					}
				default:
					return nil, fmt.Errorf("%s:%d: runnable block in %q: only sh and json run", path, cur.line, cur.lang)
				}
				out = append(out, *cur)
			}
			cur = nil
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: unterminated fenced block", path, cur.line)
	}
	return out, sc.Err()
}

// docStep is one step of a shell block.
type docStep struct {
	script string
	expect string // "" = must succeed
	once   bool   // a background line: its output goes to the session log
}

// splitSteps cuts a shell block into steps: each background line alone, the
// other lines up to a `# => TEXT` line, a background line or the end.
func splitSteps(text string) []docStep {
	var steps []docStep
	var cur strings.Builder
	flush := func(expect string) {
		s := cur.String()
		cur.Reset()
		if strings.TrimSpace(s) == "" && expect == "" {
			return
		}
		steps = append(steps, docStep{script: s, expect: expect})
	}
	// Logical lines: a line ending in a backslash continues on the next.
	var lines []string
	for _, line := range strings.SplitAfter(text, "\n") {
		if n := len(lines); n > 0 && strings.HasSuffix(strings.TrimRight(lines[n-1], "\n"), "\\") {
			lines[n-1] += line
			continue
		}
		lines = append(lines, line)
	}
	for _, line := range lines {
		switch t := strings.TrimSpace(line); {
		case strings.HasPrefix(t, "# => "):
			flush(strings.TrimPrefix(t, "# => "))
		case background(line):
			flush("")
			steps = append(steps, docStep{script: line, once: true})
		default:
			cur.WriteString(line)
		}
	}
	flush("")
	return steps
}

// background reports whether a line starts a background job: it ends in a
// lone &, outside a comment.
func background(line string) bool {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	t := strings.TrimSpace(line)
	return strings.HasSuffix(t, "&") && !strings.HasSuffix(t, "&&")
}

// sessionScript is the bash program of one session: every step, once, in
// order, in one shell; a step that fails or lacks its expected output ends
// the session with its output and where it was.
func sessionScript(dir string, blocks []docBlock) (string, error) {
	var sb strings.Builder
	sb.WriteString(`set -e
__where="the session's start"
trap '__rc=$?; if [ "$__rc" != 0 ]; then cat .step.out 2>/dev/null; echo "FAILED at $__where: exit $__rc"; fi' EXIT
__step() { # file expect once where
	__where=$4
	echo "--- $4"
	: >.step.out
	if [ "$3" = 1 ]; then . "$1"; return; fi
	{ . "$1"; } >.step.out 2>&1
	cat .step.out
	if [ -n "$2" ] && ! grep -qF -- "$2" .step.out; then
		: >.step.out
		echo "FAILED at $4: output lacks: $2"
		exit 1
	fi
}
`)
	n := 0
	for _, b := range blocks {
		switch b.lang {
		case "json":
			if b.name != "" {
				if err := os.WriteFile(filepath.Join(dir, b.name), []byte(b.text), 0o644); err != nil {
					return "", err
				}
			}
		case "sh":
			for i, st := range splitSteps(b.text) {
				n++
				f := filepath.Join(dir, fmt.Sprintf(".step-%03d.sh", n))
				if err := os.WriteFile(f, []byte(st.script), 0o644); err != nil {
					return "", err
				}
				once := 0
				if st.once {
					once = 1
				}
				fmt.Fprintf(&sb, "__step %q %q %d %q\n", f, st.expect, once,
					fmt.Sprintf("%s:%d step %d", filepath.Base(b.file), b.line, i+1))
			}
		}
	}
	return sb.String(), nil
}

// TestDocsParse: the convention's parser and step splitter on a hand-made
// page.
func TestDocsParse(t *testing.T) {
	page := "intro\n```sh\nnot run\n```\n```sh runnable\nconductor --port 8090 &\n```\n" +
		"```json runnable file=c.json\n{\"a\": 1}\n```\n```sh runnable:two\ncurl -s x\n# => {\"ok\":1}\necho done\n```\n"
	blocks, err := parseDocBlocks("p.md", []byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 || blocks[0].session != "p.md" || blocks[1].name != "c.json" || blocks[2].session != "p.md:two" {
		t.Fatalf("blocks %+v", blocks)
	}
	steps := splitSteps(blocks[2].text)
	if len(steps) != 2 || steps[0].expect != `{"ok":1}` || steps[0].script != "curl -s x\n" || steps[1].script != "echo done\n" || steps[1].expect != "" {
		t.Fatalf("steps %+v", steps)
	}
	if s := splitSteps(blocks[0].text); len(s) != 1 || !s[0].once {
		t.Fatalf("background step %+v", s)
	}
	if s := splitSteps("a &\nb\nc\nd &\ne\n# => x\n"); len(s) != 4 || !s[0].once || s[1].script != "b\nc\n" || s[1].once ||
		!s[2].once || s[3].script != "e\n" || s[3].expect != "x" {
		t.Fatalf("mixed steps %+v", s)
	}
	if s := splitSteps("a --x \\\n  --y &\nb\n"); len(s) != 2 || s[0].script != "a --x \\\n  --y &\n" || !s[0].once || s[1].script != "b\n" {
		t.Fatalf("continued background line %+v", s)
	}
	if background("a && b") || background("echo x # run later &") || !background("x &") {
		t.Fatal("background")
	}
	if _, err := parseDocBlocks("p.md", []byte("```json runnable\n{bad\n```\n")); err == nil {
		t.Fatal("invalid JSON accepted")
	}
	if _, err := parseDocBlocks("p.md", []byte("```python runnable\nx\n```\n")); err == nil {
		t.Fatal("runnable python accepted")
	}
}

// TestDocs runs every runnable block of README.md and docs/*.md against
// fresh processes: the binaries in $CONDUCTOR_DOCS_BIN (conductor,
// fake-engine, nats-server; `make docs-test` builds them there and runs this
// test). Without it the test is not run here: the race and unit stages would
// otherwise build and start every binary twice.
func TestDocs(t *testing.T) {
	root, bin := docsEnv(t)
	sessions, order := docSessions(t, root)
	if len(order) == 0 {
		t.Fatal("no runnable blocks in README.md or docs/")
	}
	for _, name := range order {
		t.Run(name, func(t *testing.T) { runDocSession(t, root, bin, sessions[name]) })
	}
}

// TestDocsInOneShell: a new user's first hour, as one reader pastes it into
// one terminal with the default state directory: the README's quick start,
// then docs/engines.md's vLLM example, then docs/python.md's example, then
// the README's quick start again. Each ends in its documented result (its
// `# =>` lines), so none leaves behind state or processes that break the
// next; nothing is retried beyond the waits the blocks show. Like TestDocs
// it runs under `make docs-test`.
func TestDocsInOneShell(t *testing.T) {
	root, bin := docsEnv(t)
	sessions, _ := docSessions(t, root)
	var blocks []docBlock
	for _, name := range []string{"README.md", "engines.md:vllm", "python.md", "README.md"} {
		if len(sessions[name]) == 0 {
			t.Fatalf("no runnable session %s", name)
		}
		blocks = append(blocks, sessions[name]...)
	}
	dir := runDocSession(t, root, bin, blocks)
	// the default state directory ($HOME/.local/state/conductor) held the
	// registrations, and the last example left none there
	b, err := os.ReadFile(filepath.Join(dir, ".local", "state", "conductor", "registrations.json"))
	if err != nil {
		t.Fatalf("the default state directory was not used: %v", err)
	}
	var doc struct{ Registrations []json.RawMessage }
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Registrations) != 0 {
		t.Fatalf("registrations left in the state directory (%v): %s", err, b)
	}
}

// docsEnv is the repository root and $CONDUCTOR_DOCS_BIN; the test is not
// run without the latter (see TestDocs).
func docsEnv(t *testing.T) (root, bin string) {
	bin = os.Getenv("CONDUCTOR_DOCS_BIN")
	if bin == "" {
		t.Skip("make docs-test runs this test (it builds the binaries it needs into $CONDUCTOR_DOCS_BIN)")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	root, err = filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root, bin
}

// docSessions reads the runnable blocks of README.md and docs/*.md, by
// session, and the sessions in the order they first appear.
func docSessions(t *testing.T, root string) (map[string][]docBlock, []string) {
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	sessions := map[string][]docBlock{}
	var order []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseDocBlocks(f, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if _, ok := sessions[b.session]; !ok {
				order = append(order, b.session)
			}
			sessions[b.session] = append(sessions[b.session], b)
		}
	}
	return sessions, order
}

// runDocSession runs one session's blocks in a fresh directory (also its
// HOME), which it returns, and kills whatever they left running.
func runDocSession(t *testing.T, root, bin string, blocks []docBlock) string {
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		target := filepath.Join(root, e.Name())
		switch e.Name() {
		case ".git":
			continue
		case "bin":
			target = bin
		}
		if err := os.Symlink(target, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "bin")); err != nil {
		if err := os.Symlink(bin, filepath.Join(dir, "bin")); err != nil {
			t.Fatal(err)
		}
	}
	script, err := sessionScript(dir, blocks)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), docsSessionLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		// What a user's shell would not have: the test binary's own
		// settings and anything naming conductor's configuration.
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != "HOME" && k != "XDG_STATE_HOME" && !strings.HasPrefix(k, "CONDUCTOR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A file, not a pipe: background processes keep their output open
	// after bash exits, and Wait must not wait for them.
	out, err := os.Create(filepath.Join(dir, ".session.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Start()
	if err == nil {
		err = cmd.Wait()
		// Background processes of the session share its process group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	log, _ := os.ReadFile(out.Name())
	if err != nil {
		t.Fatalf("%s: %v\n%s", blocks[0].session, err, log)
	}
	t.Logf("%s:\n%s", blocks[0].session, log)
	return dir
}
