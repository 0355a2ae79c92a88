package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// TestBadFlags: every bad flag is exit status 2 with the reason, before any
// socket or process is started.
func TestBadFlags(t *testing.T) {
	f := func(want string, args ...string) {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 || !strings.Contains(errb.String(), want) {
			t.Fatalf("%v: exit %d, stderr %q; want 2 and %q", args, code, errb.String(), want)
		}
	}
	f(`-profile "md5"`, "-profile", "md5")
	f(`unknown dialect "trtllm"`, "-dialects", "vllm-map,trtllm")
	f(`unknown policy "best"`, "-policy", "best")
	f(`-sweep: bad rate "-5"`, "-sweep", "100,-5")
	f(`unexpected arguments`, "extra")
	f(`flag provided but not defined`, "-nope")
	f(`flag provided but not defined: -nope`, "demo", "-nope")
	f(`use -http-port before --`, "demo", "--", "--http-port=8080")
	f(`no --state-dir`, "demo", "--", "-state-dir", "/tmp/x")
}

func TestProfileSpec(t *testing.T) {
	for _, name := range []string{"sha256_cbor", "sha256", "sglang", "xxh3"} {
		spec, err := profileSpec(name, "7")
		if err != nil {
			t.Fatal(err)
		}
		p, err := hash.Resolve(spec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "sha256" && (p.Algorithm != hash.AlgoSHA256Pickle || p.Spec.PythonHashSeed != "7") {
			t.Fatalf("sha256: %+v", p.Spec)
		}
	}
}
