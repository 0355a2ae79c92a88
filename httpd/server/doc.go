// Package server is the core every HTTP surface of conductor is built on
// (valyala/fasthttp): the Mooncake indexer API (package mooncake), the
// Python client's RPC (package rpc) and the Dynamo standalone-indexer
// dialect (package dynamo) each serve their own listener over one Core.
//
// # Surfaces and the preamble
//
// A process builds one Core (New) over the index and the Registrar, then
// its surfaces over the Core. A surface implements Surface (its routes and
// answers) and serves through a Host, whose handler runs the one preamble
// they share: track the connection, take the pooled State, refuse an
// unknown route (404) or method (405, with Allow), authorize the caller for
// the route's AccessClass (401, 403), read a POST body under the limits
// below, then hand the request to the surface; its Done follows, and the
// State goes back to the pool. A request fasthttp cannot parse is 400
// invalid_request (never echoed back), an oversized one 413.
//
// # Requests
//
// The Core also holds what the Mooncake API and the RPC share, so that
// neither surface imports the other: the body reader (Reader, on package
// codec's reader of either syntax: u64 values are exact, never through
// float64; JSON strings must be UTF-8; nesting is at most 64 levels), the
// Dialects that select key names (msgpack: the C++ conductor's keys; JSON:
// the seed's, with aliases; RPC: the Python API's),
// the query parser and runner (RunQuery), the registration decoder
// (DecodeRegistration, which also reads the configuration and state files)
// and the Gate calls behind /register and /unregister (Register,
// Unregister), and the response documents (AppendQueryResult,
// AppendServices, AppendContexts, AppendInstanceRows) written by one
// Encoder in either syntax.
//
// # Errors
//
// A rejected request is a *RequestError wrapping one sentinel per reason;
// every surface that names its cause answers the envelope {"error",
// "reason", "field"?, "index"?} (AppendErrorEnvelope): the reason token
// (ReasonOf), the offending request key and, for token and hash arrays, the
// element index. A syntax error anywhere in the body (invalid_msgpack,
// invalid_json) wins over field errors.
//
// # Limits
//
// Bodies are streamed and read by the preamble: Options.MaxBodyBytes (413
// limit_exceeded as it arrives, or at once for a declared Content-Length
// past it, before any byte of the body and instead of "100 Continue"; a
// surface may set its own, HostOptions), the Limiter's in-flight body budget (503 limit_exceeded with
// Retry-After; a declared length is charged before any byte is read, memory
// grows only with bytes received) and its connection cap (503 and close,
// counted). Accept errors are retried with backoff. Options.MaxQueryTokens
// (400 out_of_range on token_ids / seq_hashes), identity lengths
// core.MaxIdentityBytes / core.MaxEndpointBytes (400 invalid_value naming the
// field) and the registry bound core.Options.MaxRegistrations (core.ErrLimit
// → 400 limit_exceeded). Shutdown closes connections with no request in
// progress at once and drains the others (Host.Shutdown). One Limiter is
// shared by every surface of a process.
//
// # Access
//
// Access checks bearer tokens per route class (the admin token for mutating
// and introspection routes, a query token for queries, client identities
// that own what they registered); the Gate is the one door registrations of
// every surface go through: the EndpointPolicy (checked before any socket is
// created), ownership, then the Registrar, and Gate.OnChange (the durable
// state file).
//
// # Metrics
//
// The Core's metric set (Metrics), written on the main port's /metrics,
// holds conductor_query_tokens_total, conductor_query_rows_total and
// conductor_query_hit_rows_total (counted by RunQuery),
// conductor_query_context_misses_total{reason} (QueryMiss, on every surface;
// the Dynamo listener writes it too: WriteQueryMissMetrics) and, read from
// the index at scrape time (WriteIndexMetrics),
// conductor_contexts, conductor_prefixes, conductor_blocks{tier} ((block,
// owner) holdings; O(1) per scrape: core keeps the counts as blocks change,
// core.Index.TierBlocks), conductor_registrations{type} and the
// conductor_index_* event counters. The surfaces add their request series to
// it; the Limiter's are in its own set (Limiter.Metrics).
//
// # Performance
//
// A query allocates nothing in steady state: the State is pooled (readers,
// token buffers, core.QueryResult, the response Encoder), request strings
// are zero-copy views of the body (B2S), an aligned little-endian token bin
// is viewed in place, and the response is appended into a reused buffer.
// TestQueryHandlerAllocs, TestRPCQueryAllocs and TestDynamoQueryAllocs prove
// it through each surface's handler.
package server
