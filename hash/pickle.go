package hash

import (
	"encoding/binary"
	"slices"
)

// CPython pickle protocol 5 (what pickle.dumps(value, protocol=5) emits through the C
// _pickle module) for the shapes vLLM's default "sha256" hashes: a str (the seed) and
// the block 3-tuple (bytes, tuple(int...), None | tuple(str...)).
//
// Framing is the subtle part. After PROTO the pickler buffers output in a frame and
// emits it as FRAME + u64le length + body when:
//   - a save() starts (before each object, not before closing opcodes) while the
//     pending body is already >= frameTarget bytes;
//   - a bytes/str payload >= frameTarget is written: the pending frame is flushed
//     first and opcode + length + payload go out unframed; the next write opens a
//     new frame;
//   - the pickle ends (after STOP).
//
// A frame body shorter than frameMin bytes is emitted without its FRAME header.
//
// Memo back-references (BINGET) occur in one case only: equal extras that CPython
// holds as one shared object, i.e. "" or a single character below U+0100 (e.g. LoRA
// "a" with cache salt "a"). vLLM's extras tuple then holds the same object twice and
// the repeat is pickled as a reference to the first (checked against CPython 3.11
// pickle.dumps in TestPickleSharedLatin1). Any other equal strings are distinct
// objects upstream and are written twice.
const (
	frameTarget = 64 * 1024 // CPython _FRAME_SIZE_TARGET
	frameMin    = 4         // CPython FRAME_SIZE_MIN
	frameHeader = 9         // FRAME opcode + u64le length

	opProto           = 0x80
	opFrame           = 0x95
	opStop            = 0x2e
	opMemoize         = 0x94
	opBinGet          = 0x68
	opLongBinGet      = 0x6a
	opMark            = 0x28
	opTuple           = 0x74
	opEmptyTuple      = 0x29
	opTuple1          = 0x85
	opNone            = 0x4e
	opBinInt          = 0x4a
	opBinInt1         = 0x4b
	opBinInt2         = 0x4d
	opShortBinBytes   = 0x43
	opBinBytes        = 0x42
	opBinBytes8       = 0x8e
	opShortBinUnicode = 0x8c
	opBinUnicode      = 0x58
	opBinUnicode8     = 0x8d
)

// AppendPickleSeed appends pickle.dumps(seed, protocol=5) for a str seed: the bytes
// vLLM's sha256 hashes to derive NONE_HASH from PYTHONHASHSEED.
func AppendPickleSeed(dst []byte, seed string) []byte {
	p := pickler{b: dst, frameStart: -1}
	p.b = append(p.b, opProto, 5)
	pickleStr(&p, seed)
	p.op(opStop)
	p.commit()
	return p.b
}

// AppendPickleBlock appends pickle.dumps((parent, tuple(tokens), extras), protocol=5)
// byte for byte, where extras is None when empty and a tuple of str otherwise.
// extras must be UTF-8 (they are Python str). Output matching CPython includes the
// 64 KiB FRAME rules above (pinned by the frame_boundary_token_stream and
// large_lora_large_payload vectors).
//
// It allocates only if dst lacks capacity.
func AppendPickleBlock(dst []byte, parent []byte, tokens []int32, extras [][]byte) []byte {
	if pickleBlockBound(parent, tokens, extras) < frameTarget {
		return appendPickleBlockSmall(dst, parent, tokens, extras)
	}
	return appendPickleBlockFramed(dst, parent, tokens, extras)
}

// pickleBlockBound is an upper bound on the body of the first frame; below
// frameTarget no frame can be committed early, so the single-frame fast path is exact.
func pickleBlockBound(parent []byte, tokens []int32, extras [][]byte) int {
	n := 16 + len(parent) + 5*len(tokens) + 4
	for _, e := range extras {
		n += 10 + len(e)
	}
	return n
}

// appendPickleBlockSmall is the hot path: one frame, no boundary checks.
func appendPickleBlockSmall(dst []byte, parent []byte, tokens []int32, extras [][]byte) []byte {
	start := len(dst)
	dst = append(dst, opProto, 5, opFrame, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = appendPickleHead(dst, opShortBinBytes, opBinBytes, opBinBytes8, len(parent))
	dst = append(dst, parent...)
	dst = append(dst, opMemoize)
	dst = appendPickleTokens(dst, tokens)
	if len(extras) == 0 {
		dst = append(dst, opNone)
	} else {
		if len(extras) > 3 {
			dst = append(dst, opMark)
		}
		for i, e := range extras {
			if m, ok := sharedMemo(extras, i, tokens); ok {
				dst = appendBinGet(dst, m)
				continue
			}
			dst = appendPickleHead(dst, opShortBinUnicode, opBinUnicode, opBinUnicode8, len(e))
			dst = append(dst, e...)
			dst = append(dst, opMemoize)
		}
		dst = appendTupleEnd(dst, len(extras))
		dst = append(dst, opMemoize)
	}
	dst = append(dst, opTuple1+2, opMemoize, opStop)
	binary.LittleEndian.PutUint64(dst[start+3:], uint64(len(dst)-start-2-frameHeader))
	return dst
}

// appendPickleTokens writes the token tuple (MARK ... TUPLE for more than three,
// TUPLE1/2/3 otherwise) and its MEMOIZE, with one capacity check per block.
func appendPickleTokens(dst []byte, tokens []int32) []byte {
	if len(tokens) == 0 {
		return append(dst, opEmptyTuple) // the empty tuple is a singleton: not memoized
	}
	if len(tokens) > 3 {
		dst = append(dst, opMark)
	}
	n := len(dst)
	dst = slices.Grow(dst, 5*len(tokens)+cborIntSlack)
	p := putPickleInts(dst[n:n+5*len(tokens)+cborIntSlack], tokens)
	dst = dst[:n+p]
	dst = appendTupleEnd(dst, len(tokens))
	return append(dst, opMemoize)
}

// putPickleInts encodes tokens as BININT1 (0..255) / BININT2 (256..65535) / BININT
// (anything else, signed 4 bytes) into out, which needs cborIntSlack bytes of
// slack past the 5*len(tokens) worst case, and returns the bytes used. Groups of
// 8 tokens take the AVX-512 path where the CPU has it (pickleInts8), groups of 4
// the AVX path on the other CPUs with AVX (pickleInts4). Branch-free like
// putCBORInts: the width class is a sum of two compares, and every class is one
// 8-byte store of opcode + little-endian int (the int's high bytes are zero for
// the narrow classes); bytes past the cursor are overwritten by the next token
// or cut off by the caller. TestPutPickleInts checks it against the
// straightforward per-opcode encoder.
func putPickleInts(out []byte, tokens []int32) int {
	p := 0
	if useIntsAVX512 && len(tokens) >= 8 {
		m := len(tokens) &^ 7
		_ = out[5*m+cborIntSlack-1] // its 64-byte stores stay inside out
		p = pickleInts8(out, tokens[:m])
		tokens = tokens[m:]
	}
	if useIntsAVX && len(tokens) >= 4 {
		m := len(tokens) &^ 3
		_ = out[p+5*m+16-1] // its 16-byte stores stay inside out
		p += pickleInts4(out[p:], tokens[:m], &picklePairTab)
		tokens = tokens[m:]
	}
	for _, t := range tokens {
		v := uint64(uint32(t)) // negatives are huge here, so they take the signed 4-byte BININT
		c := (0xff-v)>>63 + (0xffff-v)>>63
		c &= 3
		binary.LittleEndian.PutUint64(out[p:p+8], uint64(pickleIntOp[c])|v<<8) // [p:p+8]: see putCBORInts
		p += int(pickleIntLen[c])
	}
	return p
}

// Per width class of putPickleInts: the opcode and the bytes written.
var (
	pickleIntOp  = [4]uint8{opBinInt1, opBinInt2, opBinInt, opBinInt}
	pickleIntLen = [4]uint8{2, 3, 5, 5}
)

// sharedMemo reports whether extras[i] repeats an earlier extra that CPython holds
// as a shared singleton object ("" or one character below U+0100), and if so the
// memo index to BINGET. Memo slots: 0 is the parent bytes, 1 the token tuple when
// non-empty (the empty tuple is not memoized), then each extra written in full.
// Extras are at most (lora, salt) in practice, so the quadratic scan is two steps.
func sharedMemo(extras [][]byte, i int, tokens []int32) (int, bool) {
	if i == 0 || !singletonStr(extras[i]) {
		return 0, false
	}
	m := 1
	if len(tokens) > 0 {
		m = 2
	}
	for j := 0; j < i; j++ {
		if string(extras[j]) == string(extras[i]) {
			return m, true
		}
		if _, shared := sharedMemo(extras, j, tokens); !shared {
			m++ // extras[j] was written in full and took a memo slot
		}
	}
	return 0, false
}

// appendBinGet writes BINGET, or LONG_BINGET for memo slots past 255.
func appendBinGet(dst []byte, m int) []byte {
	if m <= 0xff {
		return append(dst, opBinGet, byte(m))
	}
	return binary.LittleEndian.AppendUint32(append(dst, opLongBinGet), uint32(m))
}

// singletonStr reports whether CPython represents the UTF-8 string e by a shared
// object: the empty string, or a single code point below U+0100.
func singletonStr(e []byte) bool {
	switch len(e) {
	case 0:
		return true
	case 1:
		return e[0] < 0x80
	case 2:
		return (e[0] == 0xc2 || e[0] == 0xc3) && e[1]&0xc0 == 0x80
	}
	return false
}

// appendTupleEnd closes a non-empty tuple of n elements. For n > 3 the MARK was
// written before the elements.
func appendTupleEnd(dst []byte, n int) []byte {
	if n > 3 {
		return append(dst, opTuple)
	}
	return append(dst, opTuple1+byte(n-1))
}

// appendPickleHead writes the opcode and length of a bytes/str payload, choosing the
// 1-byte, 4-byte or 8-byte length form as CPython does.
func appendPickleHead(dst []byte, short, long, huge byte, n int) []byte {
	switch {
	case n <= 0xff:
		return append(dst, short, byte(n))
	case uint64(n) <= 0xffffffff:
		return binary.LittleEndian.AppendUint32(append(dst, long), uint32(n))
	}
	return binary.LittleEndian.AppendUint64(append(dst, huge), uint64(n))
}

// appendPickleBlockFramed is the general path for values whose pickle may reach
// frameTarget; it mirrors CPython's save()/write sequence step by step.
func appendPickleBlockFramed(dst []byte, parent []byte, tokens []int32, extras [][]byte) []byte {
	p := pickler{b: dst, frameStart: -1}
	p.b = append(p.b, opProto, 5)
	p.boundary() // save(outer tuple)
	p.boundary() // save(parent)
	pickleBytes(&p, parent)
	p.boundary() // save(token tuple)
	if len(tokens) == 0 {
		p.op(opEmptyTuple)
	} else {
		if len(tokens) > 3 {
			p.op(opMark)
		}
		var tmp [16]byte
		for i := range tokens {
			p.boundary() // save(int)
			p.open()
			n := putPickleInts(tmp[:], tokens[i:i+1])
			p.b = append(p.b, tmp[:n]...)
		}
		p.open()
		p.b = appendTupleEnd(p.b, len(tokens))
		p.op(opMemoize)
	}
	p.boundary() // save(extras)
	if len(extras) == 0 {
		p.op(opNone)
	} else {
		if len(extras) > 3 {
			p.op(opMark)
		}
		for i, e := range extras {
			p.boundary() // save(str)
			if m, ok := sharedMemo(extras, i, tokens); ok {
				p.open()
				p.b = appendBinGet(p.b, m)
				continue
			}
			pickleStr(&p, e)
		}
		p.open()
		p.b = appendTupleEnd(p.b, len(extras))
		p.op(opMemoize)
	}
	p.op(opTuple1 + 2)
	p.op(opMemoize)
	p.op(opStop)
	p.commit()
	return p.b
}

// pickler tracks the open frame of a pickle being appended to b.
type pickler struct {
	b          []byte
	frameStart int // offset of the reserved FRAME header of the open frame, -1 if none
}

// open reserves a frame header if no frame is open: CPython starts a frame lazily
// on the first write after framing begins or after a commit.
func (p *pickler) open() {
	if p.frameStart < 0 {
		p.frameStart = len(p.b)
		p.b = append(p.b, opFrame, 0, 0, 0, 0, 0, 0, 0, 0)
	}
}

func (p *pickler) op(c byte) {
	p.open()
	p.b = append(p.b, c)
}

// boundary is CPython's _Pickler_OpcodeBoundary, run at the start of every save().
func (p *pickler) boundary() {
	if p.frameStart >= 0 && len(p.b)-p.frameStart-frameHeader >= frameTarget {
		p.commit()
	}
}

// commit closes the open frame: fill in its header, or drop the header if the body
// is shorter than frameMin (CPython memmoves the body over it).
func (p *pickler) commit() {
	if p.frameStart < 0 {
		return
	}
	body := len(p.b) - p.frameStart - frameHeader
	if body >= frameMin {
		binary.LittleEndian.PutUint64(p.b[p.frameStart+1:], uint64(body))
	} else {
		copy(p.b[p.frameStart:], p.b[p.frameStart+frameHeader:])
		p.b = p.b[:len(p.b)-frameHeader]
	}
	p.frameStart = -1
}

// pickleBytes writes a bytes object and its MEMOIZE.
func pickleBytes(p *pickler, data []byte) {
	p.payloadHead(opShortBinBytes, opBinBytes, opBinBytes8, len(data))
	p.b = append(p.b, data...)
	p.op(opMemoize)
}

// pickleStr writes a str object (its UTF-8 bytes) and its MEMOIZE.
func pickleStr[S ~string | ~[]byte](p *pickler, data S) {
	p.payloadHead(opShortBinUnicode, opBinUnicode, opBinUnicode8, len(data))
	p.b = append(p.b, data...)
	p.op(opMemoize)
}

// payloadHead writes the opcode and length of a bytes/str payload of n bytes.
// Payloads of frameTarget bytes or more bypass the frame (CPython
// _Pickler_write_bytes commits the pending frame and disables framing for them).
func (p *pickler) payloadHead(short, long, huge byte, n int) {
	if n >= frameTarget {
		p.commit()
	} else {
		p.open()
	}
	p.b = appendPickleHead(p.b, short, long, huge, n)
}
