package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFindUp: the repository is found from a directory inside it, from the
// second start when the first is outside every repository (the working
// directory elsewhere, the executable in the checkout's bin/), and not at
// all from outside.
func TestFindUp(t *testing.T) {
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, chartPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, chartPath, "Chart.yaml"), []byte("name: conductor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(repo, "a", "b")
	bin := filepath.Join(repo, "bin")
	elsewhere := t.TempDir()
	for _, d := range []string{deep, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		starts []string
		want   string
		ok     bool
	}{
		{[]string{repo}, repo, true},
		{[]string{deep}, repo, true},
		{[]string{elsewhere, bin}, repo, true},
		{[]string{elsewhere}, "", false},
	} {
		got, ok := findUp(chartPath, c.starts...)
		if got != c.want || ok != c.ok {
			t.Errorf("findUp(%v) = %q %v, want %q %v", c.starts, got, ok, c.want, c.ok)
		}
	}
	// the real checkout, from this package's directory
	root, ok := findUp(chartPath, ".")
	got, _ := filepath.Abs(root)
	want, _ := filepath.Abs("../..")
	if !ok || got != want {
		t.Errorf("findUp from tools/chartcheck: %q %v, want %s", root, ok, want)
	}
}
