package core

import (
	"fmt"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// HashCheckState says whether a registration's hash profile is known to give
// the keys its engine publishes. A wrong profile (algorithm, PYTHONHASHSEED,
// strategy) makes every query for the engine's prompts miss, silently: the
// self-check turns that into a state an operator sees.
type HashCheckState uint8

const (
	// HashUnverified: no event has shown the engine's chain yet (no root
	// event with token_ids).
	HashUnverified HashCheckState = iota
	// HashVerified: the registered profile reproduced the hashes the engine
	// published, or conductor computes the keys itself from token_ids (the
	// xxh3 strategy).
	HashVerified
	// HashMismatch: the registered profile does not reproduce the engine's
	// hashes; HashCheck.Found names the profile that does, when one does.
	HashMismatch
)

func (s HashCheckState) String() string {
	switch s {
	case HashVerified:
		return "verified"
	case HashMismatch:
		return "mismatch"
	}
	return "unverified"
}

// HashCheck is a registration's self-check result.
type HashCheck struct {
	State HashCheckState
	// Found is the profile that reproduces the engine's hashes when State is
	// HashMismatch and one of hash.Candidates does; zero otherwise.
	Found hash.Spec
	// FoundWithoutLora: the engine's hashes do not include the LoRA name the
	// context hashes.
	FoundWithoutLora bool
	// Detail is the operator's sentence: what the engine publishes and what
	// to change ("" when verified or unverified).
	Detail string
	// Samples counts the events checked.
	Samples uint64
}

// The sampling protocol: the first hashCheckBurst root events with token_ids
// of a subscription are checked, then at most one per hashCheckInterval.
// A check hashes at most hashCheckBlocks blocks with the registered profile,
// and, when that fails, with each of hash.Candidates (about 10 chains of 4
// blocks: tens of microseconds), on the subscription's applier.
//
// A candidate that reproduces the hashes makes the state a mismatch at once
// (a different profile giving the exact hashes is decisive). Hashes that no
// profile reproduces are expected now and then (a salted or multimodal
// prompt hashes extra keys conductor does not see), so they make a mismatch
// only after hashCheckNoMatch consecutive samples without any success. A
// sample the registered profile reproduces makes the state verified.
const (
	hashCheckBurst    = 8
	hashCheckInterval = time.Second
	hashCheckBlocks   = 4
	hashCheckNoMatch  = 3
)

// hashChecker is a subscription's self-check state (single writer: the
// subscription's applier). Readers see results through Subscription.check.
type hashChecker struct {
	samples  uint64
	last     time.Time
	noMatch  int
	cands    []hash.Profile // hash.Candidates of the context's profile, built on first need
	candsFor hash.Spec
	scratch  []uint64
	tokens   []int32 // unflattened bigram tokens
}

// HashCheck returns the subscription's self-check result.
func (s *Subscription) HashCheck() HashCheck {
	if c := s.check.Load(); c != nil {
		return *c
	}
	return HashCheck{}
}

// publishCheck stores a new result (a sample at most, a handful per second),
// logging a mismatch once per change of what it says.
func (s *Subscription) publishCheck(c HashCheck) {
	old := s.check.Load()
	s.check.Store(&c)
	if c.State == HashMismatch && (old == nil || old.State != HashMismatch || old.Detail != c.Detail) {
		s.ix.opts.Logger.Warn("hash profile mismatch: queries for this engine's prompts will miss",
			"service", s.reg.Key().String(), "detail", c.Detail)
	}
}

// hashesKeyed notes that conductor computed a stored event's keys from its
// token_ids itself (the xxh3 strategy): the engine's own hashing does not
// matter for queries.
func (s *Subscription) hashesKeyed() {
	if c := s.check.Load(); c == nil || c.State != HashVerified {
		s.hc.samples++
		s.publishCheck(HashCheck{State: HashVerified, Samples: s.hc.samples})
	}
}

// sampleHashes runs the self-check on a stored engine event when it starts a
// chain, carries token_ids and the sampling protocol admits it.
func (s *Subscription) sampleHashes(sc *subCtx, ev *Event) {
	if ev.HasParent || !ev.HasTokens || len(ev.Hashes) == 0 || ev.Partial {
		return
	}
	prof := sc.ctx.profile()
	if prof.Strategy == hash.StrategyXXH3 {
		return // keys are computed from token_ids (hashesKeyed)
	}
	hc := &s.hc
	if hc.samples >= hashCheckBurst {
		now := time.Now()
		if now.Sub(hc.last) < hashCheckInterval {
			return
		}
		hc.last = now
	} else {
		hc.last = time.Now()
	}
	smp := hash.Sample{Tokens: ev.Tokens, Hashes: ev.Hashes[:min(len(ev.Hashes), hashCheckBlocks)],
		BlockSize: sc.ctx.key.BlockSize, Lora: sc.ctx.lora, Salt: ev.CacheSalt}
	if ev.Bigram {
		toks, ok := unflattenBigram(hc.tokens[:0], ev.Tokens)
		hc.tokens = toks
		if !ok {
			return
		}
		smp.Tokens = toks
	}
	hc.samples++
	cur := s.HashCheck()
	if smp.Reproduces(prof, true, &hc.scratch) {
		hc.noMatch = 0
		s.publishCheck(HashCheck{State: HashVerified, Samples: hc.samples})
		return
	}
	if hc.cands == nil || hc.candsFor != prof.Spec {
		// The registered profile without the LoRA name first: an engine
		// that does not hash the adapter.
		hc.cands = append([]hash.Profile{*prof}, hash.Candidates(prof.Spec)...)
		hc.candsFor = prof.Spec
	}
	found, withLora, ok := hash.Identify(&smp, hc.cands, &hc.scratch)
	if ok { // a different profile, or the registered one without the LoRA name
		hc.noMatch = 0
		noLora := !withLora && len(smp.Lora) > 0
		s.publishCheck(HashCheck{State: HashMismatch, Found: found.Spec, FoundWithoutLora: noLora,
			Samples: hc.samples, Detail: mismatchDetail(s.reg.InstanceID, prof.Spec, found.Spec, noLora)})
		return
	}
	hc.noMatch++
	if hc.noMatch >= hashCheckNoMatch && cur.State != HashVerified {
		s.publishCheck(HashCheck{State: HashMismatch, Samples: hc.samples, Detail: fmt.Sprintf(
			"engine %s: no known profile reproduces its block hashes (registration says %s); "+
				"for vLLM, set PYTHONHASHSEED on the engine (unset, vLLM seeds its root hash at random) and register the same seed",
			s.reg.InstanceID, prof.Spec.Describe())})
		return
	}
	cur.Samples = hc.samples // the state stands
	s.check.Store(&cur)
}

// mismatchDetail is the operator's sentence for a profile that reproduces
// the engine's hashes where the registered one does not.
func mismatchDetail(instance string, reg, found hash.Spec, noLora bool) string {
	if noLora && found == reg {
		return fmt.Sprintf("engine %s publishes %s without the LoRA name in its block hashes; queries for the adapter hash it",
			instance, found.Describe())
	}
	return fmt.Sprintf("engine %s publishes %s; registration says %s", instance, found.Describe(), reg.Describe())
}

// unflattenBigram is hash.UnflattenBigram.
func unflattenBigram(dst, pairs []int32) ([]int32, bool) { return hash.UnflattenBigram(dst, pairs) }
