// Package httpd serves conductor's Mooncake indexer HTTP API over
// valyala/fasthttp, in two dialects chosen per request.
//
// # Routes
//
//	POST /register        subscribe a KV-event publisher (through a Registrar)
//	POST /unregister      stop it and remove exactly its contributions
//	POST /query           tiered prefix hits for token ids
//	POST /query_by_hash   the same for precomputed prefix hashes (seq_hashes, alias block_hash)
//	GET  /global_view     contexts, prefix counts, hash profiles, instances → ranks
//	GET  /services        registrations (the C++ conductor's 11 keys plus AdditionalSalt)
//	GET  /health          liveness, version, Go version, hash backend and CPU features
//	GET  /metrics         Prometheus text (VictoriaMetrics/metrics)
//	GET  /dump            the index per registration, streamed (dump.go; JSON only)
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
// hashes are exact in both dialects: JSON numbers are scanned by our own parser
// (jsonscan.go), never through float64.
//
// JSON-only compatibility: /register takes modelname or model_name or model, and
// additionalsalt or additional_salt; /query takes model or model_name or
// modelname; null means "absent" for optional strings and hash_profile; lora_id
// null is ignored, a non-null lora_id is 400 unsupported (numeric LoRA ids
// cannot be mapped to the adapter names contexts are keyed by) or invalid_value
// when given together with lora_name.
//
// # Query responses
//
// msgpack: {"instances": {id: {longest_matched, dp, rank_matches, device,
// cpu_local, cpu_share, disk}}}. JSON: {tenant: {id: {longest_matched, GPU, CPU,
// DISK, DP, device, cpu_local, cpu_share, disk, rank_matches}}}, or {} without
// rows, with GPU = device, CPU = cpu_share, DISK = disk, DP = per-rank device.
// Rank keys are decimal strings. An unknown context is 200 with no rows and
// creates no state.
//
// # Limits
//
// A request fasthttp cannot parse is 400 invalid_request (never echoed back).
// Options.MaxBodyBytes (413 limit_exceeded), Options.MaxQueryTokens (400
// out_of_range on token_ids / seq_hashes), and the registry bound
// core.Options.MaxRegistrations (core.ErrLimit → 400 limit_exceeded).
//
// # Metrics
//
// /metrics writes, in Prometheus text format: conductor_http_requests_total
// {path, code}, conductor_http_request_duration_seconds{path} (histogram, 25 µs
// to 1 s buckets), conductor_http_request_errors_total{path, reason},
// conductor_query_tokens_total, conductor_query_context_misses_total,
// conductor_query_rows_total, conductor_query_hit_rows_total; read from the
// index at scrape time: conductor_contexts, conductor_prefixes,
// conductor_blocks{tier} ((block, owner) holdings; O(blocks) per scrape),
// conductor_registrations{type}, conductor_index_* event counters; then every
// Options.ExtraMetrics set (the process adds the ingester's conductor_ingest_*
// series and conductor_listeners{state}) and the go_* / process_* metrics.
//
// # Performance
//
// /query and /query_by_hash allocate nothing in steady state for msgpack and
// JSON bodies: per-request state (readers, token buffers, core.QueryResult,
// the response encoder) is pooled, request strings are zero-copy views of the
// body (b2s.go), an aligned little-endian token bin is viewed in place, and the
// response is appended into a reused buffer. TestQueryHandlerAllocs proves it.
//
// # Dynamo dialect, /dump and peer recovery
//
// Dynamo (dynamo.go, dynamo_query.go) serves Dynamo's standalone-indexer API
// on its own listener over the same index; the file comment of dynamo.go
// maps its (model_name, routing_group) indexers onto contexts; dynamo_registry.go,
// dynamo_workers.go and dynamo_peers.go hold its registry and routes. GET /dump
// (dump.go) streams per-registration sections with their watermarks in
// either form; Recover and RestoreDump (recover.go, dumpscan.go) restore one
// into a replica whose apply gate is held (core.Index.HoldApplies).
package httpd
