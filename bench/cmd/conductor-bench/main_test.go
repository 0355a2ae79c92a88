package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench/sim"
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
	f(`-loss-store 1: want a probability in [0, 1)`, "-loss-store", "1")
	f(`-loss-engines -0.1: want a probability`, "-loss-engines", "-0.1")
	f(`-crash-at needs -spawn`, "-crash-at", "10")
	f(`-replica needs -spawn`, "-replica")
	f(`-gap-expire-after needs -gap-policy expire`, "-spawn", "x", "-gap-expire-after", "1s")
	f(`-min-exact: sim: bad threshold: "gpu=1"`, "-verify", "-min-exact", "gpu=1")
	f(`MinExactAnswers=2: want a fraction`, "-verify", "-min-exact-answers", "2")
	f(`MaxUnderMean[disk]=-3: want tokens`, "-verify", "-max-under-tokens-mean", "disk=-3")
	f(`threshold flags need -verify`, "-min-exact", "0.9")
	f(`-expect-large-store needs a store`, "-expect-large-store", "3")
	f(`-trace is required`, "gaps")
	f(`unknown policy "drop"`, "gaps", "-trace", "t", "-policies", "clear,drop")
	f(`-rates: "1.5"`, "gaps", "-trace", "t", "-rates", "0.1,1.5")
	f(`-snapshot-intervals: "0s"`, "gaps", "-trace", "t", "-snapshot-intervals", "0s")
	f(`-seeds 0: want at least 1`, "gaps", "-trace", "t", "-seeds", "0")
	f(`-snapshot-at: want it before -crash-at`, "-spawn", "x", "-snapshot-at", "50", "-crash-at", "40")
	f(`-snapshot-at: want it before -crash-at, and no -snapshot-interval`, "-spawn", "x", "-snapshot-at", "50", "-crash-at", "60", "-snapshot-interval", "1s")
	f(`-snapshot-at needs -spawn`, "-snapshot-at", "5", "-crash-at", "10")
}

// TestSnapshotPoint: the request after which the last snapshot was
// written, on hand-made trace timestamps (ms) 0, 1000, 2000, 2500, 10000,
// 10500 and a kill after request 6 (at 10500).
func TestSnapshotPoint(t *testing.T) {
	ts := []int64{0, 1000, 2000, 2500, 10000, 10500}
	for _, c := range []struct {
		interval time.Duration
		want     int
	}{
		{time.Second, 5},              // 10000 is within 1 s of 10500
		{9 * time.Second, 3},          // 2000 is the first within 9 s
		{10500 * time.Millisecond, 1}, // all of it
		{20 * time.Second, 0},         // the run spans less: no snapshot
		{100 * time.Millisecond, 5},   // none within: the request before the kill
	} {
		if got := snapshotPoint(ts, 6, c.interval); got != c.want {
			t.Errorf("snapshotPoint(%v) = %d, want %d", c.interval, got, c.want)
		}
	}
}

// TestThresholdFlags: the threshold flags become the run's Thresholds.
func TestThresholdFlags(t *testing.T) {
	f, err := parse([]string{"-verify", "-min-exact-answers", "0.5", "-min-exact", "device=1,cpu_share=0.9",
		"-max-over-tokens-mean", "0", "-max-under-tokens-mean", "disk=800"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	th := f.thresholds
	if th.MinExactAnswers != (sim.Limit{Set: true, Value: 0.5}) ||
		th.MinExact != [4]sim.Limit{{Set: true, Value: 1}, {}, {Set: true, Value: 0.9}, {}} ||
		th.MaxOverMean != [4]sim.Limit{{Set: true}, {Set: true}, {Set: true}, {Set: true}} ||
		th.MaxUnderMean != [4]sim.Limit{{}, {}, {}, {Set: true, Value: 800}} {
		t.Fatalf("%+v", th)
	}
	f, err = parse([]string{"-verify"}, io.Discard)
	if err != nil || f.thresholds.Any() {
		t.Fatalf("no threshold flags: %+v, %v", f.thresholds, err)
	}
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
