// Package wire turns the bytes KV-cache publishers put on ZMQ into core events.
//
// Four dialects are decoded by one reusable Decoder into a caller-owned *core.Batch:
//
//   - DialectVLLM: vLLM's KVEventBatch, `[ts, events, data_parallel_rank]` (also the
//     2-element form and the batch map `{ts, events, data_parallel_rank}` current vLLM
//     sends), with events in either of vLLM's two encodings: the array era (tag first,
//     fields by position, v0.8 … v0.23) and the map era (`type` key, v0.24+).
//   - DialectSGLang: `[ts, events, attn_dp_rank]` (also the batch map
//     `{ts, events, attn_dp_rank}`) with array-era events, array events carrying a
//     metadata map at position 7 (salted stores), and map-era events; EAGLE bigram
//     token pairs are flattened.
//   - DialectMooncake: the Mooncake store master's `[ts_ms, events, dp_rank]` whose
//     events are RFC #1527 maps with the master's legacy aliases.
//   - DialectStandard: RFC #1527 events in msgpack (a batch, a bare array of events or
//     one event), and, through DecodeStandardJSON, the same shapes in JSON.
//
// Decoder.DecodeAny decodes a payload of a publisher whose dialect is not known
// (conductor probe): it reads what the payload shows of its sender (Evidence:
// envelope, event encodings, keys, hash encodings; detect.go), decodes it with the
// dialect that shows, and reports the Shape; Evidence ORed over a stream's
// payloads decides what one payload cannot.
//
// ParseLive, AppendReplayRequest and ParseReplayReply handle the ZMQ multipart framing
// as pure functions, so transport code stays free of byte fiddling.
//
// The package is pure Go: no cgo, no sockets. The ZMQ transport (sockets,
// subscribers, sequence tracking, replay, ingest control and metrics) is the
// subpackage wire/ingest, which imports this one, so decoders build, test and fuzz
// without libzmq (fuzz/run.sh builds fuzz/ with CGO_ENABLED=0 to keep it so).
//
// # Errors
//
// A payload either fails as a whole or yields a batch. Envelope problems (empty input,
// not a batch, wrong arity, a bad timestamp or rank, truncation anywhere, trailing
// bytes) make Decode return a *DecodeError and leave the batch undefined. Problems
// local to one event (wrong type, missing or duplicate field, inconsistent lengths, a
// short binary hash, an unknown event type) drop only that event: Batch.Skipped counts
// it, Batch.Errors keeps the first MaxBatchErrors errors, and decoding goes on with the
// next event, because one malformed event must not cost an engine its whole step.
// Every error wraps one of the Err* sentinels; use errors.Is.
//
// # Memory and performance contract
//
// Decoding is a zero-copy read of the payload through a codec.EitherReader, the
// codec.Reader over both formats as one concrete type: each dialect is decoded once, and
// Decode runs it in msgpack, DecodeStandardJSON in JSON. Every map of every dialect is
// walked by one loop that finds keys with one switch, so the error context (event,
// field, element) is the same in both formats. The limits are codec's: nesting deeper
// than codec.MaxDepth (64) is ErrTooLarge, a JSON string must be UTF-8. No reflection
// and, once the Batch has grown to the largest batch seen, no heap allocation per
// payload (TestDecodeZeroAllocs proves it). In msgpack a field costs about one direct
// call (a nil-or-value field one too: StrOrNil, Int64OrNil, Uint64OrNil); hash and
// token arrays are read by one call each.
//
// Byte-slice fields of decoded events (Medium, LoraName, ObjectKey, …) alias the
// payload and are valid until the payload buffer is reused; hashes and tokens are
// copied into the batch's reused slices and are valid until the next Decode into the
// same batch. core copies what it keeps.
//
// Every length prefix is checked against the bytes that remain before anything is
// sized from it (each element needs at least one byte), and per-event counts are capped
// by MaxEventHashes and MaxEventTokens, so a 20-byte payload claiming 2^31 elements
// fails at once without a large allocation. No input makes a decoder panic or loop:
// the fuzz targets in fuzz/wire_fuzz_test.go check that.
//
// A Decoder is not safe for concurrent use; use one per subscription goroutine.
package wire
