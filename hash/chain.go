package hash

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// sglangSaltPrefix is prepended to an SGLang cache salt to derive the parent of block 0.
const sglangSaltPrefix = "sglang-cache-salt-v1\x00"

// Chain is a lazy hash chain over a borrowed token slice: block i is hashed only
// when At(i) (or a later index) is first requested, and never re-hashed. A query
// walks keys from block 0 and stops at the first miss, so it pays for the matched
// prefix plus one block instead of the whole prompt.
//
// The chain borrows tokens, lora and salt until the next Reset; the caller must not
// modify them meanwhile. Reset keeps the scratch and key capacity, so a reused Chain
// allocates nothing in steady state. A Chain is not safe for concurrent use; keep
// one per goroutine (or per request).
type Chain struct {
	strategy Strategy
	algo     Algorithm
	be       backendID
	bs       int
	blocks   int // Blocks()
	logical  int // token positions covered: len(tokens), or len-1 for bigram
	next     int // index of the next block step() hashes

	tokens []int32
	salt   []byte // sglang: hashed into the parent of block 0
	// extras holds the vLLM extra keys in order (lora, then salt); block 0 uses
	// extras[:nExtras0], later blocks extras[:nExtras] (the salt is block-0 only).
	extras   [2][]byte
	nExtras0 int
	nExtras  int

	keys     []uint64 // projected keys of blocks [0, next) when driven by At
	parent   [32]byte // digest of block next-1 (vLLM: root digest before block 0); xxhash*: [:16], rest zero
	xxLocal  uint64   // xxh3: namespace seed for local hashes
	xxSeq    uint64   // xxh3: base seed for the sequence step
	xxParent uint64   // xxh3: seq hash of block next-1
	buf      []byte   // encode scratch, reused across blocks and Resets

	// Digest memo (SHA-256 profiles only). memo survives Reset; mOn says it
	// applies to the current prompt; mKey is the rolling key of block next-1
	// (the tag before block 0); the counts are flushed to memo by FlushMemoStats.
	memo *Memo
	mOn  bool
	mKey xxh3.Uint128
	// mAhead holds the keys of blocks [mAt, mAt+mN), computed ahead of
	// their lookups and their buckets prefetched (memoAhead): block mAt+j's
	// at (mHead+j) mod memoAheadBlocks.
	mAhead                [memoAheadBlocks]xxh3.Uint128
	mAt, mN, mHead        int
	mHits, mMiss, mEvicts uint32

	// Recent-prompt level (memoprompt.go), when memo has one: rOn says it
	// applies to the current prompt; rE serves blocks [0, rN) (their count
	// is added to the hits when the prompt ends); states records the blocks
	// hashed after the served ones (at most rMax, the blocks an entry may
	// hold) for admission when the query ends.
	rOn    bool
	rE     *promptEntry
	rN     int
	rMax   int
	states []promptState
}

// SetMemo makes the chain look block digests up in m (and store the ones it
// computes) from the next Reset on; nil turns the memo off. Only the SHA-256
// profiles use it (vllm_v1 sha256 and sha256_cbor, sglang; see memoServes);
// keys and Computed are unchanged by it (a memo hit still counts as a
// computed block).
//
// Switching memos first flushes the current prompt's counts (and any recent
// prompt it offers) to the old one.
func (c *Chain) SetMemo(m *Memo) {
	if m != c.memo {
		c.FlushMemoStats()
		c.memo = m
	}
}

// FlushMemoStats ends the prompt's use of the memo: it offers the prompt's
// computed prefix to the memo's recent-prompt level (if it has one; a repeated
// prompt is stored, see promptCache) and adds the chain's hit, miss and
// eviction counts to the memo. Reset flushes too; call it when a query ends so
// that the memo's Stats are current. Later At calls on the same prompt still
// work (without the recent-prompt level).
func (c *Chain) FlushMemoStats() {
	if c.rOn {
		c.promptEnd()
	}
	if c.memo != nil && c.mHits|c.mMiss|c.mEvicts != 0 {
		c.memo.addStats(c.mHits, c.mMiss, c.mEvicts)
	}
	c.mHits, c.mMiss, c.mEvicts = 0, 0, 0
}

// Reset points the chain at a new prompt under profile p. lora is the context's
// LoRA name and salt the query's cache salt; empty means absent (so "" salt == no
// salt). Validation happens here, upfront (one pass over the tokens for sglang), so
// a lazy walk never meets an error half-way. Errors leave the chain empty
// (Blocks() == 0) and wrap:
//   - ErrBlockSize for blockSize <= 0;
//   - ErrNegativeToken for a negative token under sglang strategies;
//   - ErrInvalidUTF8 for a vllm_v1 lora or salt that is not UTF-8 (Python str upstream);
//   - ErrUnsupportedStrategy / ErrUnsupportedAlgorithm for a nil or unresolved profile.
func (c *Chain) Reset(p *Profile, tokens []int32, blockSize int, lora, salt []byte) error {
	c.clear()
	if p == nil {
		return fmt.Errorf("hash profile=nil: %w", ErrUnsupportedStrategy)
	}
	if blockSize <= 0 {
		return fmt.Errorf("block_size=%d: %w", blockSize, ErrBlockSize)
	}
	logical := len(tokens)
	var blocks, need int
	switch p.Strategy {
	case StrategyXXH3:
		blocks = len(tokens) / blockSize
		c.xxLocal, c.xxSeq = p.XXH3Seeds(lora, salt)
		if !nativeLE {
			need = 4 * blockSize
		}
	case StrategyVLLMv1:
		switch p.Algorithm {
		case AlgoSHA256CBOR, AlgoSHA256Pickle, AlgoXXHashCBOR, AlgoXXHashPickle:
		default:
			return fmt.Errorf("algorithm=%v for strategy vllm_v1: %w", p.Algorithm, ErrUnsupportedAlgorithm)
		}
		if !utf8.Valid(lora) {
			return fmt.Errorf("lora_name=%q: %w", lora, ErrInvalidUTF8)
		}
		if !utf8.Valid(salt) {
			return fmt.Errorf("cache_salt=%q: %w", salt, ErrInvalidUTF8)
		}
		blocks = len(tokens) / blockSize
		c.parent = p.RootDigest
		if len(lora) > 0 {
			c.extras[c.nExtras0] = lora
			c.nExtras0++
			c.nExtras = 1
		}
		if len(salt) > 0 {
			c.extras[c.nExtras0] = salt
			c.nExtras0++
		}
		// Both codecs fit in this bound (pickle adds one 9-byte FRAME header per
		// 64 KiB frame, covered by the slack).
		need = 64 + 5*blockSize + 20 + len(lora) + len(salt)
		need += need/frameTarget*2*frameHeader + sha256PadMax // shani pads in place
	case StrategySGLang, StrategySGLangBigram:
		if i := firstNegative(tokens); i >= 0 {
			return &TokenError{Index: i, Value: tokens[i], Err: ErrNegativeToken}
		}
		// Size scratch by the tokens a block can actually hold: the partial
		// tail means blocks > 0 even when blockSize dwarfs the prompt (a
		// registration may say 2^40), see TestChainHugeBlockSize.
		if p.Strategy == StrategySGLang {
			blocks = ceilDiv(len(tokens), blockSize)
			need = 32 + 4*min(blockSize, logical)
		} else {
			logical = max(len(tokens)-1, 0)
			blocks = ceilDiv(logical, blockSize)
			need = 32 + 8*min(blockSize, logical)
		}
		need = max(need, len(sglangSaltPrefix)+len(salt)) + sha256PadMax // shani pads in place
	default:
		return fmt.Errorf("strategy=%v: %w", p.Strategy, ErrUnsupportedStrategy)
	}
	c.strategy, c.algo, c.be = p.Strategy, p.Algorithm, activeBackend()
	c.bs, c.blocks, c.logical = blockSize, blocks, logical
	c.tokens, c.salt = tokens, salt
	if blocks > 0 && c.memo != nil && memoServes(p) {
		c.mOn = true
		need = max(need, 16+4*(min(blockSize, logical)+1), len(memoTagDomain)+3+32+8*4+len(p.Spec.PythonHashSeed)+len(lora)+len(salt))
		c.buf = appendMemoTag(c.buf[:0], p, blockSize, lora, salt)
		c.mKey = xxh3.Hash128Seed(c.buf, c.memo.seed)
		c.rOn = c.memo.prompts != nil
	}
	if blocks > 0 {
		c.buf = slices.Grow(c.buf[:0], need)
	}
	return nil
}

// clear empties the chain and drops borrowed slices, keeping scratch capacity.
func (c *Chain) clear() {
	c.FlushMemoStats()
	keys, buf, memo, states := c.keys[:0], c.buf[:0], c.memo, c.states[:0]
	*c = Chain{keys: keys, buf: buf, memo: memo, states: states}
}

// Blocks returns the number of blocks: floor(len/B) for vllm_v1 and xxh3 (complete
// blocks only), ceil(len/B) for sglang (partial tail included), ceil((len-1)/B) for
// sglang_bigram (0 if len < 2).
func (c *Chain) Blocks() int { return c.blocks }

// Computed returns how many blocks have been hashed since Reset.
func (c *Chain) Computed() int { return c.next }

// At returns the projected 64-bit key of block i, hashing blocks up to i on first
// request. i must be in [0, Blocks()); anything else is a programmer error and panics.
func (c *Chain) At(i int) uint64 {
	if uint(i) < uint(len(c.keys)) {
		return c.keys[i] // inlined fast path: cursors of several ranks re-read blocks
	}
	return c.extend(i)
}

// extend hashes blocks up to i and returns the key of block i.
func (c *Chain) extend(i int) uint64 {
	if uint(i) >= uint(c.blocks) {
		panicIndex(i, c.blocks)
	}
	for len(c.keys) <= i {
		c.keys = append(c.keys, c.step())
	}
	return c.keys[i]
}

//go:noinline
func panicIndex(i, n int) {
	panic(fmt.Sprintf("BUG: hash.Chain.At(%d) out of range [0,%d)", i, n))
}

// MatchedTokens returns how many prompt tokens the first n blocks cover: n*B for
// vllm_v1 and xxh3, min(n*B, logical length) for sglang strategies, whose last block
// may be partial (40 tokens, B=16, bigram: 3 blocks cover 39 positions). n is
// clamped to [0, Blocks()].
func (c *Chain) MatchedTokens(n int) int {
	n = min(max(n, 0), c.blocks)
	return min(n*c.bs, c.logical)
}

// step computes block c.next and returns its projected key.
func (c *Chain) step() uint64 {
	if c.rOn {
		return c.promptStep()
	}
	return c.hashStep()
}

// hashStep hashes block c.next (through the digest table when on) and
// returns its projected key.
func (c *Chain) hashStep() uint64 {
	i := c.next
	c.next++
	switch c.strategy {
	case StrategyXXH3:
		tok := c.tokens[i*c.bs : (i+1)*c.bs]
		var h uint64
		if nativeLE {
			h = xxh3.HashSeed(tokenBytes(tok), c.xxLocal)
		} else {
			c.buf = appendU32LE(c.buf[:0], tok)
			h = xxh3.HashSeed(c.buf, c.xxLocal)
		}
		if i > 0 {
			h = XXH3Seq(c.xxParent, h, c.xxSeq)
		}
		c.xxParent = h
		return h

	case StrategyVLLMv1:
		tok := c.tokens[i*c.bs : (i+1)*c.bs]
		if c.mOn { // SHA-256 algorithms only (memoServes)
			if c.memoGet(tok) {
				return binary.BigEndian.Uint64(c.parent[24:])
			}
		}
		ex := c.extras[:c.nExtras]
		if i == 0 {
			ex = c.extras[:c.nExtras0]
		}
		switch c.algo {
		case AlgoXXHashCBOR:
			c.buf = AppendCBORBlock(c.buf[:0], c.parent[:16], tok, ex)
			return c.xxh128Step()
		case AlgoXXHashPickle:
			c.buf = AppendPickleBlock(c.buf[:0], c.parent[:16], tok, ex)
			return c.xxh128Step()
		case AlgoSHA256CBOR:
			c.buf = AppendCBORBlock(c.buf[:0], c.parent[:], tok, ex)
		default: // AlgoSHA256Pickle
			c.buf = AppendPickleBlock(c.buf[:0], c.parent[:], tok, ex)
		}
		sum256To(c.be, &c.parent, c.buf)
		if c.mOn {
			c.memoPut()
		}
		return binary.BigEndian.Uint64(c.parent[24:])

	default: // sglang, sglang_bigram
		start := i * c.bs
		end := start + min(c.bs, c.logical-start)
		if c.mOn {
			if c.memoGet(c.memoTokens(i)) {
				return binary.BigEndian.Uint64(c.parent[:8])
			}
		}
		b := c.buf[:0]
		if i > 0 {
			b = append(b, c.parent[:]...)
		} else if len(c.salt) > 0 {
			b = append(append(b, sglangSaltPrefix...), c.salt...)
			root := sum256(c.be, b)
			b = append(b[:0], root[:]...)
		}
		if c.strategy == StrategySGLang {
			b = appendU32LE(b, c.tokens[start:end])
		} else {
			for p := start; p < end; p++ {
				b = appendU32LE(b, c.tokens[p:p+2])
			}
		}
		c.buf = b
		sum256To(c.be, &c.parent, b)
		if c.mOn {
			c.memoPut()
		}
		return binary.BigEndian.Uint64(c.parent[:8])
	}
}

// xxh128Step finishes a vllm_v1 xxhash / xxhash_cbor block whose encoding is
// in c.buf: the 16-byte XXH3-128 digest becomes the parent (c.parent[16:]
// stays zero from the root), and its low64_be projection, the last 8 digest
// bytes read big-endian, is the low 64 bits of the hash.
func (c *Chain) xxh128Step() uint64 {
	h := xxh3.Hash128(c.buf)
	putXXH128(&c.parent, h)
	return h.Lo
}

// memoServes reports whether a Memo serves chains under p: the SHA-256
// profiles of vllm_v1 and sglang. xxh3 and the vllm_v1 xxhash algorithms
// skip it. An xxhash_cbor block at B=16 costs about 36-50 ns to encode and
// hash (BenchmarkVLLMChain); with the memo on it cost about 30 ns on a hit
// but 170-225 ns on a miss (the table store), so the memo would pay only
// above ~94% hits, and its entries would displace SHA-256 digests, each of
// which saves about 100 ns.
func memoServes(p *Profile) bool {
	return p.Strategy != StrategyXXH3 && !p.Algorithm.xxhash()
}

// memoGet advances the rolling memo key over the next block's tokens and, on a
// hit, sets c.parent to the memoised digest. Either way it then computes the
// keys of the blocks after it, up to memoAheadBlocks of them, and prefetches
// their buckets (memoAhead), so the probes' memory latency overlaps this
// block's SHA-256 on a miss, and each other on a run of hits.
func (c *Chain) memoGet(tok []int32) bool {
	if i := c.next - 1; c.mN > 0 && c.mAt == i {
		c.mKey = c.mAhead[c.mHead]
		c.mAt, c.mN, c.mHead = i+1, c.mN-1, (c.mHead+1)&(memoAheadBlocks-1)
	} else {
		c.mKey = memoRoll(c.buf[:cap(c.buf)], c.memo, c.mKey, tok)
		c.mN = 0
	}
	ok := c.memo.get(c.mKey, &c.parent)
	if ok {
		c.mHits++
	}
	c.memoAhead()
	return ok
}

// memoAheadBlocks is how many blocks past the one being looked up have their
// memo keys computed and their buckets prefetched: a hit costs about 30 ns
// and a bucket from memory about 100, so a run of hits waits on memory unless
// several probes are in flight. A power of two (mAhead is a ring).
const memoAheadBlocks = 8

// memoAhead extends the keys computed ahead to the memoAheadBlocks blocks
// after block next-1 (the one just looked up) and prefetches their buckets.
// A key is rolled from the one before it, so it costs a hash of the block's
// tokens, not a SHA-256.
func (c *Chain) memoAhead() {
	if c.mN == 0 {
		c.mAt = c.next
	}
	k := c.mKey
	if c.mN > 0 {
		k = c.mAhead[(c.mHead+c.mN-1)&(memoAheadBlocks-1)]
	}
	for j := c.mAt + c.mN; c.mN < memoAheadBlocks && j < c.blocks; j++ {
		k = memoRoll(c.buf[:cap(c.buf)], c.memo, k, c.memoTokens(j))
		c.mAhead[(c.mHead+c.mN)&(memoAheadBlocks-1)] = k
		c.mN++
		prefetch(&c.memo.bucket(k)[0])
	}
}

// memoTokens returns the tokens block i's memo key covers: its span (the
// partial tail included), plus the next token under sglang_bigram (the pairs).
func (c *Chain) memoTokens(i int) []int32 {
	start := i * c.bs
	end := start + min(c.bs, c.logical-start)
	if c.strategy == StrategySGLangBigram {
		end++
	}
	return c.tokens[start:end]
}

// memoPut stores the digest just computed under the current key.
func (c *Chain) memoPut() {
	c.mMiss++
	if c.memo.put(c.mKey, &c.parent, c.mMiss+uint32(c.next)) {
		c.mEvicts++
	}
}

var chainPool = sync.Pool{New: func() any { return new(Chain) }}

// AppendChain appends the projected keys of every block of tokens under p to dst
// (the eager form of Chain). It allocates nothing when dst has room for the keys.
func AppendChain(dst []uint64, p *Profile, tokens []int32, blockSize int, lora, salt []byte) ([]uint64, error) {
	c := chainPool.Get().(*Chain)
	defer putChain(c)
	if err := c.Reset(p, tokens, blockSize, lora, salt); err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, c.blocks)
	for c.next < c.blocks {
		dst = append(dst, c.step())
	}
	return dst, nil
}

// putChain returns a pooled chain without its borrowed slices; oversized scratch
// (a huge LoRA name) is dropped rather than pinned in the pool.
func putChain(c *Chain) {
	c.clear()
	if cap(c.buf) > frameTarget {
		c.buf = nil
	}
	chainPool.Put(c)
}

func ceilDiv(n, d int) int {
	q := n / d
	if n%d != 0 {
		q++
	}
	return q
}

// firstNegative returns the index of the first negative token or -1. The OR-fold
// keeps the common all-valid scan branch-free.
func firstNegative(tokens []int32) int {
	var acc int32
	for _, t := range tokens {
		acc |= t
	}
	if acc >= 0 {
		return -1
	}
	for i, t := range tokens {
		if t < 0 {
			return i
		}
	}
	return -1
}

// TokenError reports the first invalid token id of a prompt (Err is the
// reason, e.g. ErrNegativeToken).
type TokenError struct {
	Index int
	Value int32
	Err   error
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("token_ids[%d]=%d: %v", e.Index, e.Value, e.Err)
}

func (e *TokenError) Unwrap() error { return e.Err }
