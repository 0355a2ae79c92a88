package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmePackageTable: README.md's package table names every package of
// the module exactly once, and each row's "imports" column lists exactly the
// module's packages it imports (`go list`), so the picture of the layout a
// newcomer reads is the layout.
func TestReadmePackageTable(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{join .Imports \",\"}}", "github.com/seed-c7a81618/conductor/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/seed-c7a81618/conductor/"
	want := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, " ")
		var own []string
		for _, imp := range strings.Split(imports, ",") {
			if strings.HasPrefix(imp, mod) {
				own = append(own, strings.TrimPrefix(imp, mod))
			}
		}
		slices.Sort(own)
		want[strings.TrimPrefix(path, mod)] = own
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Packages\n")
	if !ok {
		t.Fatal("README.md has no ## Packages section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	got := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		path := strings.Trim(strings.TrimSpace(cells[1]), "`/")
		if _, dup := got[path]; dup {
			t.Errorf("README.md lists %s twice", path)
		}
		var imports []string
		for _, f := range strings.Split(cells[3], ",") {
			if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" && f != "—" {
				imports = append(imports, f)
			}
		}
		slices.Sort(imports)
		got[path] = imports
	}
	for path, imports := range want {
		g, ok := got[path]
		switch {
		case !ok:
			t.Errorf("README.md's package table lacks %s (imports %v)", path, imports)
		case !slices.Equal(g, imports):
			t.Errorf("README.md says %s imports %v; it imports %v", path, g, imports)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("README.md lists %s, which is not a package of the module", path)
		}
	}
}

// TestReadmeDocsMap: README.md's documentation table links every page of
// docs/ exactly once, and every page it links exists, so a new page cannot
// be left out of the map a newcomer starts from.
func TestReadmeDocsMap(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Documentation\n")
	if !ok {
		t.Fatal("README.md has no ## Documentation section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	linked := map[string]int{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| [") {
			continue
		}
		_, rest, _ := strings.Cut(line, "](")
		target, _, _ := strings.Cut(rest, ")")
		if strings.HasPrefix(target, "docs/") {
			linked[target]++
		}
	}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs/*.md: %v %v", pages, err)
	}
	for _, p := range pages {
		name := "docs/" + filepath.Base(p)
		if linked[name] != 1 {
			t.Errorf("README.md's documentation table links %s %d times, want once", name, linked[name])
		}
		delete(linked, name)
	}
	for name := range linked {
		t.Errorf("README.md's documentation table links %s, which does not exist", name)
	}
}

// TestLicense: LICENSE is the Apache License 2.0, the official text
// unchanged (its published SHA-256), which python/pyproject.toml declares
// for the Python client too.
func TestLicense(t *testing.T) {
	b, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30" {
		t.Errorf("LICENSE is not the Apache License 2.0 text (sha256 %x)", sum)
	}
	py, err := os.ReadFile("../../python/pyproject.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(py), `license = { text = "Apache-2.0" }`) {
		t.Errorf("python/pyproject.toml declares another license:\n%s", py)
	}
}

// TestDocsAgreeOnDiscovery: conductor has Kubernetes engine discovery
// (--discover-kubernetes, deploy.md's "Engine discovery"), so no page says
// it has none, and the engines guide, where registrations are explained,
// points to it.
func TestDocsAgreeOnDiscovery(t *testing.T) {
	if defineFlags(&settings{}).Lookup("discover-kubernetes") == nil {
		t.Fatal("no --discover-kubernetes flag")
	}
	deploy, err := os.ReadFile("../../docs/deploy.md")
	if err != nil || !strings.Contains(string(deploy), "\n## Engine discovery\n") {
		t.Fatalf("docs/deploy.md has no Engine discovery section (%v)", err)
	}
	pages, _ := filepath.Glob("../../docs/*.md")
	pages = append(pages, "../../README.md")
	denials := regexp.MustCompile(`(?i)no (kubernetes|service) discovery|no kubernetes or other|discovers no publishers`)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := denials.Find(b); m != nil {
			t.Errorf("%s says %q, but --discover-kubernetes discovers engines", filepath.Base(p), m)
		}
	}
	engines, err := os.ReadFile("../../docs/engines.md")
	if err != nil || !strings.Contains(string(engines), "(deploy.md#engine-discovery)") {
		t.Errorf("docs/engines.md does not point to deploy.md#engine-discovery (%v)", err)
	}
}
