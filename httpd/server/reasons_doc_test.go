package server

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReasonsDocumented: the error table of docs/http-api.md names every
// reason token a surface can answer with, and no other.
func TestReasonsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Errors\n")
	if !ok {
		t.Fatal("docs/http-api.md has no ## Errors section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	token := regexp.MustCompile("`([a-z_]+)`")
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range token.FindAllStringSubmatch(cells[1], -1) {
			documented = append(documented, m[1])
		}
	}
	var code []string
	for _, r := range reasons {
		code = append(code, r.reason)
	}
	slices.Sort(documented)
	slices.Sort(code)
	if !slices.Equal(documented, code) {
		t.Fatalf("docs/http-api.md's error table lists %v;\nthe reasons are %v", documented, code)
	}
}
