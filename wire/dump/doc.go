// Package dump is conductor's dump format: the index written out per
// registration, with each stream's watermark, and read back into another
// index. One format serves every carrier: GET /dump on the Mooncake and the
// Dynamo listeners (package httpd's surfaces call Write, WriteDynamo), the
// state directory's index snapshot and the NATS snapshot objects (Write,
// Restore), and peer recovery (Recover fetches a peer's /dump over plain
// net/http and restores it). The package knows nothing of HTTP servers.
//
// # Consistency
//
// Both forms are written from core.Index.DumpStreams: each section is
// written under its subscription's lock, consistent with the stream's
// watermark (the sequence of its last applied batch), so a replica that
// restores it and then skips its own buffered batches up to that watermark
// reproduces the stream exactly. Output is streamed into a bufio.Writer (no
// whole-index buffer) and every u64 is written as an exact decimal integer.
//
// # Main form ("standardized events", RFC #1527 field names)
//
//	{"format":"conductor-dump/1","streams":[
//	 {"stream":{"instance_id","tenant_id","dp_rank","model_name","lora_name",
//	            "block_size","type","hash_profile":{...},"event_id"?,
//	            "gap_marks"?:[ns...]},
//	  "events":[
//	   {"event_type":"stored","tenant_id","model_name","lora_name","block_size",
//	    "instance_id","dp_rank","medium","seq_hashes":[k...],"copies":c,
//	    "stream"?:{"salt","backend_id","medium"},"gap_expires_ns"?}
//	     (shared pool holdings: "backend_id" instead of instance_id/dp_rank)
//	   {"event_type":"engine_hashes","tenant_id",...,"entries":[[h,k,n,p]...]}
//	  ]}, ...]}
//
// A stored dump event lists holdings, not a chain: seq_hashes are
// independent prefix keys held by that owner in that tier with that many
// copies (no parent_hash / base_block_idx); "medium" is the tier. "stream"
// is present for holdings of an RFC #1527 stream owner: the salt, backend_id
// and medium the publisher's stream named (core.StreamDims), so the replica
// re-creates the same owner and a later `cleared` of that stream purges
// exactly these holdings. "gap_expires_ns" is present for holdings that
// the gap policy "expire" drops at that time (Unix nanoseconds) unless the
// owner announces them again (core.Holding.Expires), and a stream's
// "gap_marks" lists the deadlines of all its pending marks, oldest first
// (core.StreamInfo.Marks): the restore re-creates the same marks. The
// Dynamo form carries neither: a peer restoring it keeps those blocks.
// engine_hashes map an engine's own block hash h to
// the prefix key k it was filed under and the plain standard hash p behind k
// (the parent of the engine's next block), with n stores not yet removed, so
// the replica resolves the engine's later removes and parents ([h,k,n] is
// read as p = k). Events hold at most 256 keys each.
//
// # Dynamo form
//
// Dynamo's RouterEvents per indexer (model, routing group), with conductor's
// extensions named conductor_*; see WriteDynamo. An indexer's holdings live
// in the context Indexer.Context names.
//
// # Reading
//
// Restore takes either form (the main form starts with "format"). The
// envelope is walked token by token and each event is read whole into a
// reused buffer (at most 16 MiB) and parsed on package codec's JSON reader:
// exact integers, no encoding/json, nesting bounded by codec.MaxDepth. A
// section whose registration the index lacks is skipped and counted. Errors
// wrap ErrFormat.
package dump
