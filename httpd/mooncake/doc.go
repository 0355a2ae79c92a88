// Package mooncake serves conductor's Mooncake indexer HTTP API, in two
// dialects chosen per request, over a server.Core (package server: limits,
// access, the error envelope, the preamble and the request readers).
//
// # Routes
//
//	POST /register        subscribe a KV-event publisher (through the Core's Gate)
//	POST /unregister      stop it and remove exactly its contributions
//	POST /query           tiered prefix hits for token ids
//	POST /query_by_hash   the same for precomputed prefix hashes (seq_hashes, alias block_hash)
//	GET  /global_view     contexts, prefix counts, hash profiles, instances → ranks
//	GET  /services        registrations (the C++ conductor's 11 keys plus AdditionalSalt)
//	GET  /health          liveness, version, Go version, hash backend and CPU features
//	GET  /metrics         Prometheus text (VictoriaMetrics/metrics)
//	GET  /dump            the index per registration, streamed (package dump's main form; JSON only)
//
// A known path with the wrong method is 405 (with Allow); an unknown path 404.
//
// # Dialects
//
// The request's Content-Type selects the dialect of the body and the response:
// containing "application/msgpack" → msgpack (the C++ conductor's API, reference
// §1.1); containing "application/json", or absent → JSON (the seed document
// conductor-indexer-api.md); anything else → 400 unsupported_content_type,
// answered in JSON. GET routes have no body: the "format" query argument
// ("json" | "msgpack") wins, then an Accept header naming either type, then a
// msgpack Content-Type; the default is JSON.
//
// Both dialects are strict: unknown keys are 400 unknown_field (except that JSON
// /unregister ignores the seed example's type, modelname, lora_name and
// block_size), duplicate keys are 400 invalid_value, and every failure names its
// reason, field and, for token and hash arrays, the element index, in the
// envelope {"error", "reason", "field", "index"}. A syntax error anywhere in the
// body (reasons invalid_msgpack / invalid_json) wins over field errors. u64
// hashes are exact in both dialects: bodies are read with package codec's JSON
// and msgpack readers (through package server's), never through float64;
// codec's limits apply (nesting deeper than 64 levels is invalid_json /
// invalid_msgpack; JSON strings must be UTF-8).
//
// JSON-only compatibility: /register takes modelname or model_name or model, and
// additionalsalt or additional_salt; /query takes model or model_name or
// modelname; null means "absent" for optional strings and hash_profile; lora_id
// null is ignored, a non-null lora_id resolves through the (lora_id, lora_name)
// pairs engines published for that tenant and model, and is 400 invalid_value
// when no engine published it, when engines published it with two names, or
// when it names another adapter than lora_name. A body that is a JSON object is
// read as JSON whatever its Content-Type (curl's default form type included),
// unless the type names msgpack. JSON token ids are integers in
// -2^31..2^32-1 (u32 in the hashing standard), kept as their 32-bit pattern.
//
// # Query responses
//
// msgpack: {"instances": {id: {longest_matched, dp, rank_matches, device,
// cpu_local, cpu_share, disk}}}. JSON: {tenant: {id: {longest_matched, GPU, CPU,
// DISK, DP, device, cpu_local, cpu_share, disk, rank_matches}}}, or {} without
// rows, with GPU / CPU / DISK = independent longest prefix per medium (G1
// device; G2 host = cpu_local ∪ cpu_share; G3 disk), max over ranks, and
// DP[rank] = the rank's longest prefix across all media.
// Rank keys are decimal strings. An unknown context is 200 with no rows and
// creates no state; its answer carries the X-Conductor-Miss header naming
// the first context field no context matches (server.MissReason).
//
// # Metrics
//
// /metrics writes, in Prometheus text format: conductor_http_requests_total
// {path, code}, conductor_http_request_duration_seconds{path} (histogram, 25 µs
// to 1 s buckets), conductor_http_request_errors_total{path, reason}; the
// Core's set (the query counters and the index gauges, package server, and the
// RPC surface's series when it runs); then every server.Options.ExtraMetrics
// set (the process adds the ingester's conductor_ingest_* series and
// conductor_listeners{state}) and the go_* / process_* metrics.
//
// # Performance
//
// /query and /query_by_hash allocate nothing in steady state for msgpack and
// JSON bodies (package server, "Performance"). TestQueryHandlerAllocs proves
// it through this surface's handler.
package mooncake
