package wire

import (
	"math"

	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// Field values shared by the dialects (strings, ranks, hashes, tokens), on a
// codec.EitherReader. On error they return a sentinel and, for array elements, leave
// the element index in d.index.

// setStr sets the string field of e that key names: a key means the same field
// in every dialect.
func setStr(e *core.Event, key mapKey, v []byte) {
	switch key {
	case mkMedium:
		e.Medium = v
	case mkLoraName:
		e.LoraName = v
	case mkSpecKind:
		e.SpecKind = v
	case mkCacheSalt:
		e.CacheSalt = v
	case mkModelName:
		e.ModelName, e.HasModelName = v, v != nil
	case mkAdditionalSalt:
		e.AdditionalSalt = v
	case mkObjectKey:
		e.ObjectKey = v
	case mkTenantID:
		e.TenantID = v
	case mkBackendID:
		e.BackendID = v
	}
}

// setBlockSize sets a block size in tokens: 0..MaxEventTokens.
func setBlockSize(e *core.Event, v int64) error {
	if v < 0 || v > MaxEventTokens {
		return ErrOutOfRange
	}
	e.BlockSize, e.HasBlockSize = int(v), true
	return nil
}

// readU32OrNil reads nil or an integer in [0, 2^32-1] (RFC #1527 u32 fields, ranks).
func readU32OrNil(r *codec.EitherReader) (v uint32, isNil bool, err error) {
	u, isNil, err := r.Uint64OrNil(codec.Unsigned)
	if err != nil || isNil {
		return 0, isNil, err
	}
	if u > math.MaxUint32 {
		return 0, false, ErrOutOfRange
	}
	return uint32(u), false, nil
}

// readHashOrNil reads nil (ok=false) or one block hash, folded to u64 as
// codec.Hash says: an unsigned int as is, a negative int as its two's-complement
// bit pattern (SGLang publishes signed int64, vLLM's old builtin hash() did too),
// a bin digest as its last 8 bytes big-endian — what vLLM's int mode publishes for
// the same digest, so a block has one name in both of vLLM's hash modes (a bin
// shorter than 8 bytes has no such name: ErrBadHash) — and in JSON a decimal or
// 0x-hex string, for producers whose numbers are float64.
func readHashOrNil(r *codec.EitherReader) (h uint64, ok bool, err error) {
	h, isNil, err := r.Uint64OrNil(codec.Hash)
	return h, err == nil && !isNil, err
}

// readHashes reads an array of hashes into e.Hashes, replacing its contents; with
// compare it checks instead that the array equals e.Hashes (the legacy block_hashes
// alias must repeat seq_hashes).
// A repeat of another length is ErrInconsistent, found before its elements are
// read where the encoding states the length (msgpack).
func (d *Decoder) readHashes(r *codec.EitherReader, e *core.Event, compare bool) error {
	n := 0
	if compare {
		n = len(e.Hashes)
		start := r.Mark()
		if k, err := r.EnterArray(MaxEventHashes); err == nil && k >= 0 && k != n {
			return ErrInconsistent
		}
		r.Restore(start)
	}
	hs, bad, err := r.Uint64s(e.Hashes[:n], MaxEventHashes, codec.Hash)
	if err != nil {
		d.index = bad
		return err
	}
	if compare {
		e.Hashes = hs[:n] // keeps the capacity the repeat grew
		return d.sameHashes(e.Hashes, hs[n:])
	}
	e.Hashes = hs
	return nil
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

// readTokens reads nil or an array of token ids into e.Tokens. Engines send them as
// ints; ids are u32 in the RFC and int32 in vLLM, so both ranges are accepted and
// stored as the int32 bit pattern. With bigram set (SGLang) the array may instead
// hold [a, b] pairs (EAGLE), which are flattened [a0, b0, a1, b1, …] and mark the
// event Bigram.
func (d *Decoder) readTokens(r *codec.EitherReader, e *core.Event, bigram bool) error {
	e.Tokens = e.Tokens[:0]
	if isNil, err := r.Nil(); isNil || err != nil {
		e.HasTokens = false
		return err
	}
	if bigram {
		if pairs, err := d.readBigrams(r, e); pairs || err != nil {
			return err
		}
	}
	ts, bad, err := r.Int32s(e.Tokens, MaxEventTokens, math.MaxUint32)
	if err != nil {
		d.index = bad
		return err
	}
	e.Tokens, e.HasTokens = ts, true
	return nil
}

// readBigrams reads the token array at the cursor when its first element is
// itself an array (an EAGLE pair); pairs=false leaves any other array unread.
func (d *Decoder) readBigrams(r *codec.EitherReader, e *core.Event) (pairs bool, err error) {
	start := r.Mark()
	if _, err = r.EnterArray(MaxEventTokens); err != nil {
		return false, err
	}
	if ok, err := r.Next(); !ok || err != nil || r.Kind() != codec.KindArray {
		r.Restore(start)
		return false, nil
	}
	r.Restore(start)
	if _, err = r.EnterArray(MaxEventTokens / 2); err != nil {
		return true, err
	}
	e.Bigram, e.HasTokens = true, true
	ts := e.Tokens[:0]
	for i := 0; ; i++ {
		ok, err := r.Next()
		if !ok {
			e.Tokens = ts
			return true, err
		}
		if ts, err = readPair(r, ts); err != nil {
			d.index = i
			return true, err
		}
	}
}

// readPair appends the two token ids of an [a, b] pair to ts. Any other length
// is ErrWrongType (a shape error, not a size one), found before the elements
// are read where the encoding states it (msgpack).
func readPair(r *codec.EitherReader, ts []int32) ([]int32, error) {
	start := r.Mark()
	n, err := r.EnterArray(2)
	switch {
	case err == ErrTooLarge || (err == nil && n >= 0 && n != 2):
		return ts, ErrWrongType
	case err != nil:
		return ts, err
	}
	r.Restore(start)
	k := len(ts)
	ts, _, err = r.Int32s(ts, 2, math.MaxUint32)
	switch {
	case err == ErrTooLarge || (err == nil && len(ts) != k+2):
		return ts[:k], ErrWrongType
	case err != nil:
		return ts, err
	}
	return ts, nil
}
