package sim

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestAccuracyAdd tallies a worked example by hand. Truth: A [32 32 48 64],
// B [0 0 0 16]; answer: A [32 16 48 80], C [16 16 16 16], B missing. Every
// tier has three pairs (A, B, and C, which the truth lacks):
//
//	device     A 32/32 exact, B 0/0 exact, C +16       → exact 2, over 16, under 0
//	cpu_local  A 16 for 32 (−16), B exact, C +16        → exact 1, over 16, under 16
//	cpu_share  A exact, B exact, C +16                  → exact 2, over 16, under 0
//	disk       A 80 for 64 (+16), B 0 for 16 (−16), C +16 → exact 0, over 32, under 16
//
// A second, identical answer is exact and adds three exact pairs per tier.
func TestAccuracyAdd(t *testing.T) {
	want := &Answer{Rows: []Row{
		{Instance: "A", Longest: 64, Tiers: [numTiers]int64{32, 32, 48, 64}},
		{Instance: "B", Longest: 16, Tiers: [numTiers]int64{0, 0, 0, 16}},
	}}
	got := &Answer{Rows: []Row{
		{Instance: "A", Longest: 80, Tiers: [numTiers]int64{32, 16, 48, 80}},
		{Instance: "C", Longest: 16, Tiers: [numTiers]int64{16, 16, 16, 16}},
	}}
	var a Accuracy
	if d := a.Add(want, got); d == "" {
		t.Fatal("Add: no difference reported for a wrong answer")
	}
	wantTiers := [numTiers]TierAccuracy{
		{Pairs: 3, Exact: 2, Over: 16, Under: 0},
		{Pairs: 3, Exact: 1, Over: 16, Under: 16},
		{Pairs: 3, Exact: 2, Over: 16, Under: 0},
		{Pairs: 3, Exact: 0, Over: 32, Under: 16},
	}
	if a.Answers != 1 || a.Exact != 0 || a.Errors != 0 || a.Tiers != wantTiers {
		t.Fatalf("after one answer: %+v, want tiers %+v", a, wantTiers)
	}
	if f := a.Tiers[tierDisk].OverMean(); math.Abs(f-32.0/3) > 1e-12 {
		t.Errorf("disk OverMean = %v, want 32/3", f)
	}
	if f := a.Tiers[tierHost].ExactFraction(); math.Abs(f-1.0/3) > 1e-12 {
		t.Errorf("cpu_local ExactFraction = %v, want 1/3", f)
	}
	if d := a.Add(want, want); d != "" {
		t.Fatalf("identical answer: %q", d)
	}
	a.AddError()
	// 2 answers + 1 error; pairs 3+2 (the exact answer has rows A and B).
	if a.Answers != 3 || a.Exact != 1 || a.Errors != 1 || a.Tiers[tierDevice] != (TierAccuracy{Pairs: 5, Exact: 4, Over: 16}) ||
		a.Tiers[tierDisk] != (TierAccuracy{Pairs: 5, Exact: 2, Over: 32, Under: 16}) {
		t.Fatalf("after three: %+v", a)
	}
	if f := a.ExactAnswers(); math.Abs(f-1.0/3) > 1e-12 {
		t.Errorf("ExactAnswers = %v, want 1/3", f)
	}
	var m Accuracy
	m.Merge(&a)
	m.Merge(&a)
	if m.Answers != 6 || m.Exact != 2 || m.Errors != 2 || m.Tiers[tierDisk] != (TierAccuracy{Pairs: 10, Exact: 4, Over: 64, Under: 32}) {
		t.Fatalf("merged twice: %+v", m)
	}
}

// TestAccuracyRankOnly: an answer whose rows agree but one rank differs is
// not exact, while every (row, tier) pair is.
func TestAccuracyRankOnly(t *testing.T) {
	want := &Answer{Rows: []Row{{Instance: "A", Longest: 32, Tiers: [numTiers]int64{32, 32, 32, 32},
		Ranks: []RankRow{{0, [numTiers]int64{32, 32, 32, 32}}, {1, [numTiers]int64{16, 16, 16, 16}}}}}}
	got := &Answer{Rows: []Row{{Instance: "A", Longest: 32, Tiers: [numTiers]int64{32, 32, 32, 32},
		Ranks: []RankRow{{0, [numTiers]int64{32, 32, 32, 32}}, {1, [numTiers]int64{0, 0, 0, 0}}}}}}
	var a Accuracy
	if d := a.Add(want, got); !strings.Contains(d, "rank 1") {
		t.Fatalf("diff %q", d)
	}
	if a.Exact != 0 || a.Tiers[tierShare] != (TierAccuracy{Pairs: 1, Exact: 1}) {
		t.Fatalf("%+v", a)
	}
}

// TestAccuracyCoarse: a coarse answer (Dynamo) is compared with the truth
// projected onto it: cpu_share reads as disk.
func TestAccuracyCoarse(t *testing.T) {
	want := &Answer{Rows: []Row{{Instance: "1", Longest: 64, Tiers: [numTiers]int64{16, 32, 48, 64}}}}
	got := &Answer{Coarse: true, Rows: []Row{{Instance: "1", Longest: 64, Tiers: [numTiers]int64{16, 32, 64, 64}}}}
	var a Accuracy
	if d := a.Add(want, got); d != "" {
		t.Fatalf("diff %q", d)
	}
	if a.Exact != 1 || a.Tiers[tierShare] != (TierAccuracy{Pairs: 1, Exact: 1}) {
		t.Fatalf("%+v", a)
	}
}

// TestAccuracyJSON: the derived fractions and means travel with the counts.
func TestAccuracyJSON(t *testing.T) {
	a := Accuracy{Answers: 4, Exact: 1}
	a.Tiers[tierDisk] = TierAccuracy{Pairs: 8, Exact: 6, Over: 4, Under: 12}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Answers, Exact int64
		ExactAnswers   float64
		Tiers          [numTiers]struct {
			Pairs, Exact                       int64
			ExactFraction, OverMean, UnderMean float64
		}
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	d := back.Tiers[tierDisk]
	if back.Answers != 4 || back.ExactAnswers != 0.25 || d.Pairs != 8 || d.ExactFraction != 0.75 || d.OverMean != 0.5 || d.UnderMean != 1.5 {
		t.Fatalf("%s", b)
	}
}

func TestParseTierLimits(t *testing.T) {
	f := func(in string, want [numTiers]Limit) {
		t.Helper()
		got, err := ParseTierLimits(in)
		if err != nil || got != want {
			t.Fatalf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	f("", [numTiers]Limit{})
	f("0.95", [numTiers]Limit{{true, 0.95}, {true, 0.95}, {true, 0.95}, {true, 0.95}})
	f("device=1, cpu_share=0.5", [numTiers]Limit{{true, 1}, {}, {true, 0.5}, {}})
	f("disk=0", [numTiers]Limit{{}, {}, {}, {true, 0}})
	for _, bad := range []string{"x", "gpu=1", "device=", "device=one", "device=1,device=2", "device"} {
		if _, err := ParseTierLimits(bad); !errors.Is(err, ErrBadThreshold) {
			t.Errorf("%q: err %v, want ErrBadThreshold", bad, err)
		}
	}
}

func TestThresholdsValidate(t *testing.T) {
	var th Thresholds
	if err := th.Validate(); err != nil || th.Any() {
		t.Fatalf("zero value: %v, Any %v", err, th.Any())
	}
	th.MinExactAnswers = Limit{true, 1.5}
	th.MinExact[tierDisk] = Limit{true, -0.1}
	th.MaxOverMean[tierDevice] = Limit{true, -1}
	th.MaxUnderMean[tierHost] = Limit{true, 10}
	err := th.Validate()
	if !errors.Is(err, ErrBadThreshold) {
		t.Fatalf("err %v", err)
	}
	for _, name := range []string{"MinExactAnswers", "MinExact[disk]", "MaxOverMean[device]"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%v does not name %s", err, name)
		}
	}
	if strings.Contains(err.Error(), "MaxUnderMean") {
		t.Errorf("%v names a good bound", err)
	}
}

// TestThresholdsCheck: bounds are inclusive, and every bound missed is named.
func TestThresholdsCheck(t *testing.T) {
	var a Accuracy // 10 answers, 9 exact; device 20 pairs, 19 exact, 32 over, 0 under
	a.Answers, a.Exact = 10, 9
	a.Tiers[tierDevice] = TierAccuracy{Pairs: 20, Exact: 19, Over: 32}
	a.Tiers[tierShare] = TierAccuracy{Pairs: 20, Exact: 10, Under: 400}
	ok := Thresholds{MinExactAnswers: Limit{true, 0.9}}
	ok.MinExact[tierDevice] = Limit{true, 0.95}
	ok.MaxOverMean[tierDevice] = Limit{true, 1.6}
	ok.MaxUnderMean[tierShare] = Limit{true, 20}
	if err := ok.Check(&a); err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	bad := Thresholds{MinExactAnswers: Limit{true, 0.91}}
	bad.MinExact[tierShare] = Limit{true, 0.51}
	bad.MaxOverMean[tierDevice] = Limit{true, 1.5}
	bad.MaxUnderMean[tierShare] = Limit{true, 19.9}
	bad.MaxOverMean[tierDisk] = Limit{true, 0} // no pairs: 0 over, met
	err := bad.Check(&a)
	if !errors.Is(err, ErrBelowThreshold) {
		t.Fatalf("err %v", err)
	}
	for _, s := range []string{"exact answers 0.9000 < 0.91", "cpu_share exact 0.5000 < 0.51", "device over-reported mean 1.60 tokens > 1.5",
		"cpu_share under-reported mean 20.00 tokens > 19.9"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%v lacks %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "disk") {
		t.Errorf("%v names disk", err)
	}
}
