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
// word `runnable` is run by TestDocs (`make docs-test`), exactly as written:
//
//   - ```sh runnable``` — shell commands. The runnable blocks of one file form
//     one session, run in order by one bash (set -euo pipefail) in a fresh
//     directory that looks like the repository's root (a link to each of its
//     top-level entries, bin/ holding the built binaries), with bin/ on PATH,
//     HOME in that directory and no CONDUCTOR_* variables: commands written
//     for a checkout run as written, and what they create stays there. `runnable:NAME` starts a
//     separate session NAME, for examples that must not run together.
//   - a line ending in a lone `&` starts a background process: it runs once,
//     and the process lives until its session ends.
//   - the other commands run in steps, retried until they succeed, for up to
//     docsStepWait (a server takes a moment to listen, a publisher's events a
//     moment to apply). A step ends at a background line, at the block's end,
//     or at a line `# => TEXT`, which states what the step's output shows:
//     the step is then retried until it succeeds and prints TEXT.
//   - ```json runnable``` — must parse as JSON; with `file=NAME` the block is
//     also written to NAME in the session's directory before its commands run
//     (a configuration file the commands then use).
//
// Ports are the ones the docs name: examples of one session are written not to
// collide, and sessions run one after another.

// docsStepWait bounds the retries of one step: it only decides when a
// failure is declared.
const docsStepWait = 90 * time.Second

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

// docStep is one retried unit of a shell block.
type docStep struct {
	script string
	expect string // "" = must succeed
	once   bool   // starts background processes: run once
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

// sessionScript is the bash program of one session: every step, with its
// retries and expectation, in order.
func sessionScript(dir string, blocks []docBlock) (string, error) {
	var sb strings.Builder
	sb.WriteString(`set -euo pipefail
__step() { # file expect once where
	local deadline=$((SECONDS + ` + fmt.Sprint(int(docsStepWait/time.Second)) + `)) out rc p
	echo "--- $4"
	if [ "$3" = 1 ]; then . "$1"; return; fi
	while :; do
		# In a background subshell, so that a step that does not end is
		# cut at the deadline too.
		(. "$1") >.step.out 2>&1 &
		p=$!
		while kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
		kill -9 "$p" 2>/dev/null || true
		rc=0; wait "$p" || rc=$?
		out=$(cat .step.out)
		if [ "$rc" = 0 ] && { [ -z "$2" ] || grep -qF -- "$2" <<<"$out"; }; then
			printf '%s\n' "$out"; return 0
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			printf '%s\n' "$out"
			if [ "$rc" != 0 ]; then echo "FAILED at $4: exit $rc"; else echo "FAILED at $4: output lacks: $2"; fi
			exit 1
		fi
		sleep 0.2
	done
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
	bin := os.Getenv("CONDUCTOR_DOCS_BIN")
	if bin == "" {
		t.Skip("make docs-test runs this test (it builds the binaries it needs into $CONDUCTOR_DOCS_BIN)")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
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
	if len(order) == 0 {
		t.Fatal("no runnable blocks in README.md or docs/")
	}
	for _, name := range order {
		t.Run(name, func(t *testing.T) { runDocSession(t, root, bin, sessions[name]) })
	}
}

// runDocSession runs one session's blocks in a fresh directory and kills
// whatever they left running.
func runDocSession(t *testing.T, root, bin string, blocks []docBlock) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
}
