// Package codec holds the one JSON reader and the one msgpack reader of
// conductor: the event decoders (wire) and the HTTP request parsers (httpd)
// both build on them, so a limit or a rule is written once.
//
// # Reader
//
// Reader is the cursor both formats share: *JSONReader and *MsgpackReader
// implement it, so a decoder written against it reads JSON and msgpack alike
// (wire decodes each event dialect, and httpd each request body, once over
// it, as *EitherReader, the Reader of either format as one concrete type).
// A Reader steps through one document — EnterMap/NextKey, EnterArray/Next,
// Str, Int64, Uint64, Float64, Nil, the integer array readers Int32s and
// Uint64s, Value for anything, Skip — with three-way results: a value, the
// end of a container (ok=false, nil error), or an error; a type or range
// error consumes nothing, so a caller can Skip the value and let a syntax
// error further on win. Mark and Restore revisit a value (lookahead,
// resynchronising after a bad event).
//
// Underneath are value functions: each takes the unread input at a value's
// first byte and returns the rest after it (JSON* for JSON, Read* and Skip for
// msgpack, on tinylib/msgp's zero-copy Read*Bytes functions). The integer
// array readers (JSONInt32s, ReadInt32s, JSONUint64s, ReadUint64s) hold the
// hot loops, with their fast paths, once for both callers; a Mode says which
// 64-bit forms a reader takes (Unsigned, Bits, Hash). JSONInt32s reads token
// arrays in 64-byte windows, with AVX-512 (VBMI, VBMI2) where the CPU has it
// and a scalar mask-and-multiply loop elsewhere; every path takes the same
// elements (scanUint31s).
//
// Strings and bins are sub-slices of the input, valid as long as it is;
// escaped JSON strings are unescaped into a caller-owned arena, valid until
// its owner reuses it. Valid input never allocates (TestReadersZeroAllocs,
// TestReaderZeroAllocs).
//
// # Limits
//
// One policy for both formats:
//
//   - Depth: a value nests at most MaxDepth (64) containers; a deeper one is
//     ErrTooLarge (an *Error whose reason is "nesting deeper than 64 levels").
//     JSON skipping recurses, bounded by it; msgpack skipping keeps a fixed
//     64-entry stack and does not recurse at all; a Reader enters at most
//     MaxDepth containers. No request or event nests more than a handful of
//     levels.
//   - Size: a msgpack count is checked against the bytes left before anything
//     is sized from it (every element takes at least one byte), and array
//     readers take a maximum element count from the caller (ErrTooLarge beyond
//     it); the caller bounds the input itself (body limit, ZMQ frame).
//   - Numbers: integers are exact over int64 ∪ uint64, read from their digits
//     (JSON) or their encoding (msgpack), never through float64; a JSON
//     fraction or exponent is never an integer.
//   - Text: JSON strings must be valid UTF-8 (RFC 8259 §8.1) with valid
//     escapes and no control characters.
//
// # Errors
//
// Every error is, or wraps (Cause, errors.Is), one of ErrTruncated (the input
// ended inside a value), ErrSyntax, ErrWrongType, ErrOutOfRange or ErrTooLarge
// (and ErrBadHash for a short binary hash). JSON syntax errors are *Error
// values that also say what is wrong in words; all are preallocated.
//
// The value functions keep no state and are safe for concurrent use; a
// Reader is not (one per goroutine).
package codec

// MaxDepth is how many containers a value may nest, in both formats.
const MaxDepth = 64
