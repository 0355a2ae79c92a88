package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Accuracy tallies answers compared with the ground truth: how many agree
// exactly, and per tier how far the instance rows' boundaries are off.
//
// Each answer contributes one (row, tier) pair per tier for every instance
// in the truth or the answer (an instance missing from either side counts
// as 0 tokens there); a pair is exact when both boundaries are equal, and
// over-reports max(0, got−want) tokens and under-reports max(0, want−got).
// The rows' boundaries are the maxima over an instance's ranks (what
// longest_matched and the per-instance tiers report); an answer is exact
// when Diff finds no difference at all, ranks included. A coarse answer
// (Answer.Coarse) is compared with the truth projected the same way.
//
// The zero value is empty and ready to use; not safe for concurrent use.
type Accuracy struct {
	Answers int64 // answers compared, failed queries included
	Exact   int64 // answers with no difference at all
	Errors  int64 // failed queries: not exact, no pairs
	Tiers   [numTiers]TierAccuracy
}

// TierAccuracy is one tier's tally over (instance row, tier) pairs.
type TierAccuracy struct {
	Pairs int64 // pairs compared
	Exact int64 // pairs with equal boundaries
	Over  int64 // tokens over-reported, summed over pairs
	Under int64 // tokens under-reported, summed over pairs
}

// ExactFraction is the fraction of pairs exactly right (1 with no pairs).
func (t *TierAccuracy) ExactFraction() float64 {
	if t.Pairs == 0 {
		return 1
	}
	return float64(t.Exact) / float64(t.Pairs)
}

// OverMean is the mean over-reported tokens per pair.
func (t *TierAccuracy) OverMean() float64 { return perPair(t.Over, t.Pairs) }

// UnderMean is the mean under-reported tokens per pair.
func (t *TierAccuracy) UnderMean() float64 { return perPair(t.Under, t.Pairs) }

func perPair(n, pairs int64) float64 {
	if pairs == 0 {
		return 0
	}
	return float64(n) / float64(pairs)
}

// MarshalJSON adds the derived fractions and means to the counts.
func (t TierAccuracy) MarshalJSON() ([]byte, error) {
	type counts TierAccuracy
	return json.Marshal(struct {
		counts
		ExactFraction, OverMean, UnderMean float64
	}{counts(t), t.ExactFraction(), t.OverMean(), t.UnderMean()})
}

// ExactAnswers is the fraction of answers with no difference (1 with none).
func (a *Accuracy) ExactAnswers() float64 {
	if a.Answers == 0 {
		return 1
	}
	return float64(a.Exact) / float64(a.Answers)
}

// MarshalJSON adds ExactAnswers to the counts.
func (a Accuracy) MarshalJSON() ([]byte, error) {
	type counts Accuracy
	return json.Marshal(struct {
		counts
		ExactAnswers float64
	}{counts(a), a.ExactAnswers()})
}

// Add tallies one answer: got compared with want. It returns Diff's
// description ("" when exact).
func (a *Accuracy) Add(want, got *Answer) string {
	a.Answers++
	d := Diff(want, got)
	if d == "" {
		a.Exact++
	}
	if got.Coarse {
		want = coarsen(want)
	}
	for i := range want.Rows {
		w := &want.Rows[i]
		var gt [numTiers]int64
		if g := got.Row(w.Instance); g != nil {
			gt = g.Tiers
		}
		a.addRow(w.Tiers, gt)
	}
	for i := range got.Rows {
		if want.Row(got.Rows[i].Instance) == nil {
			a.addRow([numTiers]int64{}, got.Rows[i].Tiers)
		}
	}
	return d
}

// AddError tallies a query that failed.
func (a *Accuracy) AddError() {
	a.Answers++
	a.Errors++
}

func (a *Accuracy) addRow(want, got [numTiers]int64) {
	for t := range want {
		ta := &a.Tiers[t]
		ta.Pairs++
		switch d := got[t] - want[t]; {
		case d == 0:
			ta.Exact++
		case d > 0:
			ta.Over += d
		default:
			ta.Under -= d
		}
	}
}

// Merge adds b's tally to a.
func (a *Accuracy) Merge(b *Accuracy) {
	a.Answers += b.Answers
	a.Exact += b.Exact
	a.Errors += b.Errors
	for t := range a.Tiers {
		x, y := &a.Tiers[t], &b.Tiers[t]
		x.Pairs += y.Pairs
		x.Exact += y.Exact
		x.Over += y.Over
		x.Under += y.Under
	}
}

// Limit is an optional bound; the zero value checks nothing.
type Limit struct {
	Set   bool
	Value float64
}

// Thresholds turn verification from "any mismatch fails" into bounds on a
// run's accuracy (RunOptions.Thresholds). The zero value checks nothing.
type Thresholds struct {
	// MinExactAnswers: the fraction of answers with no difference at all.
	MinExactAnswers Limit
	// Per tier: the fraction of exact (row, tier) pairs, and the mean
	// over- and under-reported tokens per pair.
	MinExact, MaxOverMean, MaxUnderMean [numTiers]Limit
}

// ErrBelowThreshold is returned by Run when the accuracy is outside a
// threshold.
var ErrBelowThreshold = errors.New("sim: accuracy outside the thresholds")

// ErrBadThreshold is returned for a threshold that cannot be a bound.
var ErrBadThreshold = errors.New("sim: bad threshold")

// Validate reports every bound out of range: fractions in [0, 1], token
// means ≥ 0.
func (t *Thresholds) Validate() error {
	var errs []error
	frac := func(name string, l Limit) {
		if l.Set && !(l.Value >= 0 && l.Value <= 1) {
			errs = append(errs, fmt.Errorf("%w: %s=%v: want a fraction in [0, 1]", ErrBadThreshold, name, l.Value))
		}
	}
	frac("MinExactAnswers", t.MinExactAnswers)
	for i, n := range TierNames {
		frac("MinExact["+n+"]", t.MinExact[i])
		for _, m := range []struct {
			name string
			l    Limit
		}{{"MaxOverMean[" + n + "]", t.MaxOverMean[i]}, {"MaxUnderMean[" + n + "]", t.MaxUnderMean[i]}} {
			if m.l.Set && !(m.l.Value >= 0) {
				errs = append(errs, fmt.Errorf("%w: %s=%v: want tokens ≥ 0", ErrBadThreshold, m.name, m.l.Value))
			}
		}
	}
	return errors.Join(errs...)
}

// Any reports whether any bound is set.
func (t *Thresholds) Any() bool {
	if t.MinExactAnswers.Set {
		return true
	}
	for i := range t.MinExact {
		if t.MinExact[i].Set || t.MaxOverMean[i].Set || t.MaxUnderMean[i].Set {
			return true
		}
	}
	return false
}

// Check returns nil when a is within every bound, else ErrBelowThreshold
// wrapped with each bound a misses.
func (t *Thresholds) Check(a *Accuracy) error {
	var out []string
	if l := t.MinExactAnswers; l.Set && a.ExactAnswers() < l.Value {
		out = append(out, fmt.Sprintf("exact answers %.4f < %v", a.ExactAnswers(), l.Value))
	}
	for i, n := range TierNames {
		ta := &a.Tiers[i]
		if l := t.MinExact[i]; l.Set && ta.ExactFraction() < l.Value {
			out = append(out, fmt.Sprintf("%s exact %.4f < %v", n, ta.ExactFraction(), l.Value))
		}
		if l := t.MaxOverMean[i]; l.Set && ta.OverMean() > l.Value {
			out = append(out, fmt.Sprintf("%s over-reported mean %.2f tokens > %v", n, ta.OverMean(), l.Value))
		}
		if l := t.MaxUnderMean[i]; l.Set && ta.UnderMean() > l.Value {
			out = append(out, fmt.Sprintf("%s under-reported mean %.2f tokens > %v", n, ta.UnderMean(), l.Value))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBelowThreshold, strings.Join(out, "; "))
}

// ParseTierLimits reads per-tier bounds: one number for every tier ("0.95"),
// or tier=value pairs separated by commas ("device=1,cpu_share=0.5"; tiers
// not named are not checked). "" sets nothing.
func ParseTierLimits(s string) ([numTiers]Limit, error) {
	var out [numTiers]Limit
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	if !strings.Contains(s, "=") {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return out, fmt.Errorf("%w: %q: want a number or tier=value pairs", ErrBadThreshold, s)
		}
		for i := range out {
			out[i] = Limit{true, v}
		}
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		t := tierKey(strings.TrimSpace(k))
		if !ok || t < 0 {
			return out, fmt.Errorf("%w: %q: want tier=value with tier one of %s", ErrBadThreshold, kv, strings.Join(TierNames[:], ", "))
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return out, fmt.Errorf("%w: %q: %v", ErrBadThreshold, kv, err)
		}
		if out[t].Set {
			return out, fmt.Errorf("%w: tier %s given twice", ErrBadThreshold, k)
		}
		out[t] = Limit{true, f}
	}
	return out, nil
}
