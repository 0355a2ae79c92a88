package probe

import (
	"hash/maphash"
	"slices"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire"
)

// What `conductor probe` keeps of the messages it receives. Everything is
// bounded: the tallies keep at most maxDistinct distinct values each
// (and count the rest), the hash samples at most maxSamples distinct
// root events, and nothing keeps a payload (the last one is remembered by
// its checksum, for the replay check).

const (
	maxDistinct = 16
	maxSamples  = 32
	// sampleBlocks is how many blocks of a root event a sample checks,
	// as the registration's self-check does.
	sampleBlocks = 4
	// maxSampleTokens caps the tokens one sample keeps (fewer blocks
	// when blocks are large; none past this many tokens a block), so the
	// samples hold at most 2 MiB.
	maxSampleTokens = 16 << 10
)

// tally counts the distinct values of one field, in order of first sight.
type tally struct {
	keys   []string
	counts []int
	more   int // values past maxDistinct distinct ones
}

func (t *tally) add(v []byte) {
	for i, k := range t.keys {
		if k == string(v) {
			t.counts[i]++
			return
		}
	}
	if len(t.keys) >= maxDistinct {
		t.more++
		return
	}
	t.keys = append(t.keys, string(v))
	t.counts = append(t.counts, 1)
}

// most returns the most frequent value (the first seen among equals).
func (t *tally) most() (string, bool) {
	best := -1
	for i, c := range t.counts {
		if best < 0 || c > t.counts[best] {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	return t.keys[best], true
}

// intTally is a tally of small integers (ranks, block sizes).
type intTally struct {
	keys   []int64
	counts []int
	more   int
}

func (t *intTally) add(v int64) {
	if i := slices.Index(t.keys, v); i >= 0 {
		t.counts[i]++
		return
	}
	if len(t.keys) >= maxDistinct {
		t.more++
		return
	}
	t.keys = append(t.keys, v)
	t.counts = append(t.counts, 1)
}

func (t *intTally) most() (int64, bool) {
	best := -1
	for i, c := range t.counts {
		if best < 0 || c > t.counts[best] || (c == t.counts[best] && t.keys[i] > t.keys[best]) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	return t.keys[best], true
}

func (t *intTally) sorted() []int64 {
	out := append([]int64{}, t.keys...)
	slices.Sort(out)
	return out
}

// hashSample is one distinct root event with token_ids, and what
// reproduces it (checked when it is taken).
type hashSample struct {
	s        hash.Sample
	found    bool
	spec     hash.Spec
	withLora bool
	standard bool // an RFC #1527 event: checked against the xxh3 standard only
	lora     bool // the event names a LoRA
}

// observation is what the probe saw.
type observation struct {
	messages   int
	malformed  int
	firstBad   string
	decodeErrs int
	firstErr   string // the first payload or event decode error

	hasSeq          bool
	firstSeq, last  uint64
	gaps            int
	missing         uint64
	backwards       int
	lastSum         uint64 // checksum of the last live payload
	seed            maphash.Seed
	decodedMessages int

	evidence  wire.Evidence
	envelopes [wire.EnvelopeEvent + 1]int

	stored, removed, cleared, standard, dropped int
	storedTokens, roots, rootsTokens            int
	noBlockSize                                 int // root events with token_ids but no block size to sample them by

	batchRanks, eventRanks intTally
	nilRank                int // batches without a rank
	media, loras, salts    tally
	models, tenants        tally
	blockSizes             intTally
	bigram                 bool

	samples  []hashSample
	scratch  []uint64
	bigramTk []int32
	cands    []hash.Profile // engine candidates (hash.Candidates of --seed)
	std      hash.Profile   // the RFC #1527 standard chain
}

func newObservation(seed string) *observation {
	o := &observation{seed: maphash.MakeSeed(), std: hash.DefaultProfile()}
	o.cands = hash.Candidates(hash.Spec{Strategy: "vllm_v1", PythonHashSeed: seed})
	return o
}

// live records one live message's sequence number and payload checksum.
func (o *observation) live(seq uint64, payload []byte) {
	o.messages++
	o.lastSum = maphash.Bytes(o.seed, payload)
	switch {
	case !o.hasSeq:
		o.hasSeq, o.firstSeq = true, seq
	case seq > o.last+1:
		o.gaps++
		o.missing += seq - o.last - 1
	case seq <= o.last:
		o.backwards++
	}
	o.last = seq
}

// batch records one decoded batch; blockSize is --block-size (0: none).
func (o *observation) batch(s wire.Shape, b *core.Batch, blockSize int) {
	o.decodedMessages++
	o.evidence |= s.Evidence
	o.envelopes[s.Envelope]++
	if b.HasDPRank {
		o.batchRanks.add(int64(b.DPRank))
	} else {
		o.nilRank++
	}
	o.dropped += b.Skipped
	if len(b.Errors) > 0 {
		o.decodeErrs++
		if o.firstErr == "" {
			o.firstErr = b.Errors[0].Error()
		}
	}
	for i := range b.Events {
		o.event(&b.Events[i], blockSize)
	}
}

func (o *observation) event(e *core.Event, blockSize int) {
	if e.Standard {
		o.standard++
	}
	if e.HasDPRank {
		o.eventRanks.add(int64(e.DPRank))
	}
	if e.ModelName != nil {
		o.models.add(e.ModelName)
	}
	if len(e.TenantID) > 0 {
		o.tenants.add(e.TenantID)
	}
	switch e.Kind {
	case core.EventRemoved:
		o.removed++
		return
	case core.EventCleared:
		o.cleared++
		return
	}
	o.stored++
	if e.Medium != nil {
		o.media.add(e.Medium)
	} else {
		o.media.add(nil)
	}
	if e.LoraName != nil {
		o.loras.add(e.LoraName)
	}
	if e.CacheSalt != nil {
		o.salts.add(e.CacheSalt)
	}
	if e.AdditionalSalt != nil {
		o.salts.add(e.AdditionalSalt)
	}
	if e.BlockSize > 0 && !e.Partial && e.FullAttention() {
		o.blockSizes.add(int64(e.BlockSize))
	}
	o.bigram = o.bigram || e.Bigram
	if e.HasTokens && len(e.Tokens) > 0 {
		o.storedTokens++
	}
	if e.HasParent || len(e.Hashes) == 0 {
		return
	}
	o.roots++
	if !e.HasTokens || len(e.Tokens) == 0 || e.Partial || !e.FullAttention() {
		return
	}
	o.rootsTokens++
	bs := e.BlockSize
	if bs <= 0 {
		bs = blockSize
	}
	if bs <= 0 {
		o.noBlockSize++
		return
	}
	o.sample(e, bs)
}

// sample keeps a root event with token_ids as a hash sample, once per
// distinct chain start, and checks it at once.
func (o *observation) sample(e *core.Event, bs int) {
	if len(o.samples) >= maxSamples {
		return
	}
	n := min(len(e.Hashes), sampleBlocks, max(maxSampleTokens/bs, 1))
	if n*bs > maxSampleTokens {
		return
	}
	for i := range o.samples {
		if s := &o.samples[i].s; s.Hashes[0] == e.Hashes[0] && len(s.Hashes) >= n && s.BlockSize == bs {
			return
		}
	}
	toks := e.Tokens
	need := n * bs
	if e.Bigram {
		var ok bool
		if o.bigramTk, ok = hash.UnflattenBigram(o.bigramTk[:0], e.Tokens); !ok {
			return
		}
		toks, need = o.bigramTk, need+1
	}
	if len(toks) < need {
		return
	}
	ps := hashSample{standard: e.Standard, lora: len(e.LoraName) > 0, s: hash.Sample{
		Tokens: slices.Clone(toks[:need]), Hashes: slices.Clone(e.Hashes[:n]), BlockSize: bs,
		Lora: slices.Clone(e.LoraName), Salt: slices.Clone(e.CacheSalt)}}
	if ps.standard {
		// The standard's plain formula: no LoRA and no salt in it.
		ps.s.Lora, ps.s.Salt = nil, nil
		ps.found = ps.s.Reproduces(&o.std, false, &o.scratch)
		ps.spec = o.std.Spec
	} else {
		var p hash.Profile
		p, ps.withLora, ps.found = hash.Identify(&ps.s, o.cands, &o.scratch)
		ps.spec = p.Spec
	}
	o.samples = append(o.samples, ps)
}

// profileVote is one profile and the samples it reproduces.
type profileVote struct {
	spec     hash.Spec
	withLora bool
	n        int
}

// engineProfile returns the profile that reproduces most engine samples
// (none: ok false), and how many engine samples there are.
func (o *observation) engineProfile() (best profileVote, total int, ok bool) {
	var votes []profileVote
	for i := range o.samples {
		s := &o.samples[i]
		if s.standard {
			continue
		}
		total++
		if !s.found {
			continue
		}
		j := slices.IndexFunc(votes, func(v profileVote) bool { return v.spec == s.spec && v.withLora == s.withLora })
		if j < 0 {
			votes = append(votes, profileVote{spec: s.spec, withLora: s.withLora})
			j = len(votes) - 1
		}
		votes[j].n++
	}
	for _, v := range votes {
		if v.n > best.n {
			best, ok = v, true
		}
	}
	return best, total, ok
}

// standardSamples counts the RFC #1527 samples and those whose seq_hashes
// follow the standard.
func (o *observation) standardSamples() (total, follow int) {
	for i := range o.samples {
		if s := &o.samples[i]; s.standard {
			total++
			if s.found {
				follow++
			}
		}
	}
	return total, follow
}

// settled reports whether the probe has seen enough to identify everything
// it can: a few messages with events, the dialect sure, and for engines a
// hash profile that reproduces their hashes.
func (o *observation) settled() bool {
	if o.messages < 3 || o.stored+o.removed+o.cleared == 0 {
		return false
	}
	d, sure := o.evidence.Dialect()
	if d == wire.DialectStandard || d == wire.DialectMooncake {
		return sure
	}
	_, _, ok := o.engineProfile()
	return ok
}
