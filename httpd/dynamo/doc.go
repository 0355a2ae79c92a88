// Package dynamo serves the Dynamo standalone-indexer dialect
// (seeds/dynamo-standalone-indexer.md) on its own listener (--dynamo-port),
// over a server.Core: the same core.Index as the Mooncake API, the Core's
// Limiter (connections and streamed bodies; its body limit and timeouts
// are its own), its Access (each route's class: dynClass) and its Gate,
// which takes every registration and unregistration with the requester's
// Principal.
//
// # Indexers and contexts
//
// Dynamo keeps one indexer per (model_name, routing_group), its block size
// fixed by the first registration. dynamoContext is the one place this
// surface maps it onto a conductor context (dump.Indexer.Context states the
// mapping): tenant_id = routing_group, model_name = model_name, lora_name =
// "", block_size = the indexer's. So a Dynamo registration of model M in
// group "default" and a Mooncake registration of model M, tenant "default",
// the same block size and no LoRA feed (and query) the same context. Dynamo
// workers are registered with the xxh3 standard profile (seed 1337), whose
// local block hash is Dynamo's LocalBlockHash, so /query_by_hash takes Dynamo
// local block hashes (rolled into conductor's prefix keys by
// dynamoRollHashes).
//
// LoRA: Dynamo indexes every adapter's blocks in the indexer's one tree
// (salted hashes), and a /query's lora_name finds them. Here each adapter is
// the context of the indexer with LoraName = the adapter: registrations set
// core.Registration.AdaptersFromEvents, so a worker's stored event naming an
// adapter is filed in that adapter's context (made on first use, at most
// core.Options.MaxAdaptersPerRegistration per worker rank), and
// dynamoNamespace selects it for a /query naming lora_name. vLLM's
// BlockRemoved names no adapter: core removes each hash from whichever of the
// worker's contexts holds it. /query_by_hash takes no lora_name (ignored, as
// Dynamo does) and answers from the base model's context only. The Dynamo
// form of /dump names an adapter's holdings with "conductor_lora" inside
// the indexer's member, so peer recovery files them in the adapter's
// context again; the main form (and so a state-directory snapshot) keeps
// them too.
//
// instance_id is a u64 (a number, or a string holding one); in the index it
// is its decimal text. tenant_id and additional_salt / additionalsalt are
// accepted and ignored, as Dynamo does.
//
// A Dynamo client parses every instance id of a /query answer as a u64, so
// /query and /query_by_hash write only the rows whose id is the canonical
// decimal text of one (dynamoInstanceID), in scores, frequencies and
// instances alike. A Mooncake holder of the shared context with such an id
// ("42") is kept: it holds the blocks, and the two APIs query one context by
// design; one with any other id ("mc-node", "07") is left out, as it would
// fail the whole response, and is seen through the Mooncake API only.
//
// # Routes
//
// /health, /metrics, /reopen_logs, /register, /unregister, /workers,
// /query, /query_by_hash, /dump (the Dynamo form of package dump, per
// indexer; holdings of RFC #1527 stream owners carry their stream in it, so
// a replica re-creates the same owners), /register_peer, /deregister_peer
// and /peers (the peer list peer recovery starts from: dump.Recover; peers
// never sync continuously). Failures answer the error envelope of package
// server; an unknown indexer is 404, while a query whose indexer exists but
// whose context does not answers the empty scores with the X-Conductor-Miss
// header (server.MissReason), counted by the Core. The registry
// (registry.go, workers.go) and the peer list (peers.go) live beside the
// index; Server implements dump.Indexers, so a restored Dynamo-form dump
// rebuilds its indexers.
package dynamo
