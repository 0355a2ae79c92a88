package ingest

import (
	"os"
	"regexp"
	"testing"
)

// TestPebbeVersionPinned guards socketHandle (zmq_recv.go), which reads the
// unexported libzmq handle of pebbe/zmq4 through a mirror of v1.4.0's Socket
// layout. Another version may lay Socket out differently in a way the run-time
// checks cannot see: upgrading pebbe/zmq4 must start here, by re-checking the
// mirror against the new source. (Test binaries carry no dependency build
// info, so the module file is read.)
func TestPebbeVersionPinned(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/pebbe/zmq4 (\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod does not require github.com/pebbe/zmq4")
	}
	if v := string(m[1]); v != "v1.4.0" {
		t.Fatalf("pebbe/zmq4 %s: pebbeSocket mirrors v1.4.0's Socket; re-check it, then update this test", v)
	}
	if regexp.MustCompile(`(?m)^replace\s.*pebbe/zmq4|^\s*github\.com/pebbe/zmq4\s*=>`).Match(mod) {
		t.Fatal("pebbe/zmq4 is replaced in go.mod: re-check pebbeSocket")
	}
}
