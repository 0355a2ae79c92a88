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
// hashes are exact in both dialects: bodies are read with package codec's JSON
// and msgpack readers (jsonscan.go and mpscan.go walk the top-level object on
// them), never through float64; codec's limits apply (nesting deeper than 64
// levels is invalid_json / invalid_msgpack; JSON strings must be UTF-8).
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
// creates no state.
//
// # RPC (the Python client)
//
// RPCServer serves the Python ConductorClient API (seed
// conductor-python-api.md; package python/conductor_client) on a listener of
// its own (the process's rpc_server_port), over the same index, registrar,
// parsers and validation as the routes above. Framing: HTTP/1.1 keep-alive,
//
//	POST /rpc/Query          {model_name, block_size, token_ids, lora_name?, tenant_id?, cache_salt?, instance_filter?}
//	POST /rpc/Register       the Python register() config: instance_id, endpoint, model_name, block_size,
//	                         hash_profile (required), replay_endpoint?, publisher_type? (vLLM | SGLang |
//	                         Mooncake, default vLLM), lora_name?, tenant_id?, dp_rank? (default 0), cache_group?
//	POST /rpc/Unregister     {instance_id, tenant_id?, dp_rank? (default 0)}
//	POST /rpc/GetGlobalView  empty body or {}
//	POST /rpc/ListServices   empty body or {}
//
// with a JSON object each way (the RPC dialect: the Python names only; the
// HTTP names modelname, type, model, instance_id (in a query) are
// unknown_field). Query also takes its map in msgpack when the Content-Type
// says application/msgpack, token_ids then an int array or a bin of
// little-endian int32s viewed in place: the Python client's form. In JSON,
// token_ids is an array or the base64 text (standard alphabet, padded) of
// little-endian int32s, decoded into pooled scratch. Every answer is JSON
// and carries the integer "ret" of the Python API: 0 with {"hits": {id: R}}
// (R as in the msgpack dialect), {"context_count", "contexts"} (instances
// id → [ranks]) or {"count", "services"} (the 11 export keys, without
// AdditionalSalt); on failure ret < 0 with the method's
// empty payload plus "error" and, for validation failures, "reason", "field"
// and "index" as in the envelope above. Codes: INVALID_PARAMS -600 for every
// refused request (parse, validation, core.ErrConflict / ErrInvalid / ErrLimit
// on register), SERVICE_NOT_FOUND -2001 for an unknown subscription,
// INTERNAL_ERROR -1 for other failures, all with HTTP 200; an unknown method
// is 404 and another HTTP method 405, both with ret RPC_FAIL -900; an
// unreadable request is 400 (RPC_FAIL) or 413 (INVALID_PARAMS). Metrics:
// conductor_rpc_requests_total{method, ret} and
// conductor_rpc_request_duration_seconds{method}. The Query path allocates
// nothing in steady state (TestRPCQueryAllocs).
//
// # Limits
//
// A request fasthttp cannot parse is 400 invalid_request (never echoed back).
// Bodies are streamed and read by readBody: Options.MaxBodyBytes (413
// limit_exceeded, declared or as it arrives), the Limiter's in-flight body
// budget (503 limit_exceeded with Retry-After; a declared length is charged
// before any byte is read, memory grows only with bytes received) and its
// connection cap (503 and close, counted). Accept errors are retried with
// backoff. Options.MaxQueryTokens (400 out_of_range on token_ids /
// seq_hashes), identity lengths core.MaxIdentityBytes / core.MaxEndpointBytes
// (400 invalid_value naming the field) and the registry bound
// core.Options.MaxRegistrations (core.ErrLimit → 400 limit_exceeded).
// Shutdown closes connections that have not sent a complete request at once.
//
// # Metrics
//
// /metrics writes, in Prometheus text format: conductor_http_requests_total
// {path, code}, conductor_http_request_duration_seconds{path} (histogram, 25 µs
// to 1 s buckets), conductor_http_request_errors_total{path, reason},
// conductor_query_tokens_total, conductor_query_context_misses_total,
// conductor_query_rows_total, conductor_query_hit_rows_total; read from the
// index at scrape time: conductor_contexts, conductor_prefixes,
// conductor_blocks{tier} ((block, owner) holdings; O(1) per scrape: core keeps the
// counts as blocks change, core.Index.TierBlocks),
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
// into a replica whose apply gate is held (core.Index.HoldApplies). Like the
// RPC surface, the Dynamo listener is built over a Server (NewDynamo): the
// Server's Limiter bounds its connections and streamed bodies, its Access
// authorizes each route (dynClass), and its Gate takes every registration
// and unregistration with the requester's Principal. Holdings of RFC #1527
// stream owners carry their stream (salt, backend_id, medium) in both dump
// forms, so a replica re-creates the same owners.
package httpd
