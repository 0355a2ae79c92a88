// Package rpc serves the Python ConductorClient API (seed
// conductor-python-api.md; package python/conductor_client) on a listener of
// its own (the process's rpc_server_port), over a server.Core: the same
// index, registration Gate, parsers and validation as the Mooncake API
// (package mooncake), in the RPC dialect. Framing: HTTP/1.1 keep-alive,
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
// (R as in the Mooncake msgpack dialect; plus "miss", the reason token of
// server.MissReason, when no context serves the query), {"context_count",
// "contexts"} (instances id → [ranks]) or {"count", "services"} (the 11 export keys,
// without AdditionalSalt); on failure ret < 0 with the method's empty payload
// plus "error" and, for validation failures, "reason", "field" and "index"
// as in the error envelope (package server). Codes: INVALID_PARAMS -600 for
// every refused request (parse, validation, core.ErrConflict / ErrInvalid /
// ErrLimit on register), SERVICE_NOT_FOUND -2001 for an unknown
// subscription, INTERNAL_ERROR -1 for other failures, all with HTTP 200; an
// unknown method is 404 and another HTTP method 405, both with ret RPC_FAIL
// -900; an unreadable request is 400 (RPC_FAIL) or 413 (INVALID_PARAMS).
//
// Access: Register and Unregister need a registering identity, GetGlobalView
// and ListServices the admin, Query the query token when one is set (the
// Core's server.Access); refusals are RPC_FAIL with 401/403.
//
// Metrics, in the Core's set: conductor_rpc_requests_total{method, ret} and
// conductor_rpc_request_duration_seconds{method}. The Query path allocates
// nothing in steady state (TestRPCQueryAllocs).
package rpc
