package wire

import (
	"math"
	"slices"

	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// Event-level msgpack readers (hashes, tokens, ranks) on codec's value readers. Each
// takes the unread payload and returns the rest; on error they return a sentinel and,
// for array elements, leave the element index in d.index.

// readU32OrNil reads nil or an integer in [0, 2^32-1] (RFC #1527 u32 fields, ranks).
func readU32OrNil(b []byte) (v uint32, isNil bool, rest []byte, err error) {
	if len(b) != 0 && b[0] == codec.Nil {
		return 0, true, b[1:], nil
	}
	u, rest, err := codec.ReadUint(b)
	if err != nil {
		return 0, false, b, err
	}
	if u > math.MaxUint32 {
		return 0, false, b, ErrOutOfRange
	}
	return uint32(u), false, rest, nil
}

// readHash reads one block hash and folds it to u64 (codec.Hash): an unsigned int as
// is, a negative int as its two's-complement bit pattern (SGLang publishes signed
// int64, vLLM's old builtin hash() did too), a bin digest as its last 8 bytes
// big-endian — what vLLM's int mode publishes for the same digest, so a block has one
// name in both of vLLM's hash modes. A bin shorter than 8 bytes has no such name:
// ErrBadHash.
func readHash(b []byte) (uint64, []byte, error) { return codec.ReadUint64(b, codec.Hash) }

// readHashes reads an array of hashes into e.Hashes, replacing its contents; with
// compare it checks instead that the array equals e.Hashes (the legacy block_hashes
// alias must repeat seq_hashes).
func (d *Decoder) readHashes(e *core.Event, b []byte, compare bool) ([]byte, error) {
	n, b, err := codec.ReadArray(b, MaxEventHashes)
	if err != nil {
		return b, err
	}
	if compare && n != len(e.Hashes) {
		return b, ErrInconsistent
	}
	hs := e.Hashes[:0]
	if compare {
		hs = e.Hashes
	}
	hs = slices.Grow(hs, n)
	got := hs[len(hs) : len(hs)+n]
	rest, i, err := codec.ReadUint64s(got, b, codec.Hash)
	switch {
	case err != nil:
		d.index = i
		e.Hashes = hs[:0]
		if compare {
			e.Hashes = hs
		}
		return rest, err
	case compare:
		e.Hashes = hs
		return rest, d.sameHashes(e.Hashes, got)
	}
	e.Hashes = got
	return rest, nil
}

// sameHashes checks that got, a repeat of the hash list, equals want.
func (d *Decoder) sameHashes(want, got []uint64) error {
	if len(got) != len(want) {
		return ErrInconsistent
	}
	for i := range got {
		if got[i] != want[i] {
			d.index = i
			return ErrInconsistent
		}
	}
	return nil
}

// readHashOrNil reads nil (ok=false) or a hash.
func readHashOrNil(b []byte) (h uint64, ok bool, rest []byte, err error) {
	if len(b) != 0 && b[0] == codec.Nil {
		return 0, false, b[1:], nil
	}
	h, rest, err = readHash(b)
	return h, err == nil, rest, err
}

// readParent reads nil (a chain root) or a hash into e.Parent.
func readParent(e *core.Event, b []byte) ([]byte, error) {
	h, ok, rest, err := readHashOrNil(b)
	if err != nil {
		return b, err
	}
	e.Parent, e.HasParent = h, ok
	return rest, nil
}

// readTokens reads nil or an array of token ids into e.Tokens. Engines send them as
// ints; ids are u32 in the RFC and int32 in vLLM, so both ranges are accepted and
// stored as the int32 bit pattern. With bigram set (SGLang)
// the array may instead hold [a, b] pairs (EAGLE), which are flattened
// [a0, b0, a1, b1, …] and mark the event Bigram.
func (d *Decoder) readTokens(e *core.Event, b []byte, bigram bool) ([]byte, error) {
	if len(b) != 0 && b[0] == codec.Nil {
		e.Tokens, e.HasTokens = e.Tokens[:0], false
		return b[1:], nil
	}
	n, b, err := codec.ReadArray(b, MaxEventTokens)
	if err != nil {
		return b, err
	}
	e.HasTokens = true
	if bigram && n > 0 && codec.IsArrayLead(b[0]) {
		return d.readBigrams(e, b, n)
	}
	ts := slices.Grow(e.Tokens[:0], n)[:n]
	rest, k, err := codec.ReadInt32s(ts, b, math.MaxUint32)
	if err != nil {
		e.Tokens, d.index = ts[:0], k
		return rest, err
	}
	e.Tokens = ts
	return rest, nil
}

func (d *Decoder) readBigrams(e *core.Event, b []byte, n int) ([]byte, error) {
	if 2*n > MaxEventTokens {
		return b, ErrTooLarge
	}
	ts := slices.Grow(e.Tokens[:0], 2*n)[:2*n]
	e.Bigram = true
	var err error
	var m int
	for i := 0; i < n; i++ {
		if m, b, err = codec.ReadArray(b, 2); err == nil && m != 2 {
			err = ErrWrongType
		}
		if err == ErrTooLarge {
			err = ErrWrongType // a 3-element "pair" is a shape error, not a size one
		}
		if err == nil {
			b, _, err = codec.ReadInt32s(ts[2*i:2*i+2], b, math.MaxUint32)
		}
		if err != nil {
			e.Tokens, d.index = ts[:0], i
			return b, err
		}
	}
	e.Tokens = ts
	return b, nil
}
