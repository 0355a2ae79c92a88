// Package core is conductor's prefix index: contexts, hash profiles, tiers, owners,
// per-stream appliers, the tiered query, the registry of subscriptions, and
// dump/restore.
//
// # Model
//
// A context is (tenant_id, model_name, lora_name, block_size). It holds one
// partition per resolved hash profile (package hash) its registrations
// bound, each bound by one identity (Registration.Owner, the operator's
// owners counting as one, Options.OperatorOwners): a registration
// joins the partition with its profile, and a different profile is a
// conflict when its own identity bound a partition, a partition of its own
// otherwise (partition.go). Without client tokens a context therefore has
// one profile. Each partition holds a concurrent map from the 64-bit prefix
// key of a block to the set of owners holding it, per tier: 64 xsync.MapOf
// shards by the key's top bits (blockmap.go), so a growing index doubles one
// shard at a time. A query answers every partition with its own profile's
// chain and merges the rows. Under an engine profile (vllm_v1,
// sglang) the key is the engine's projected block hash; under the xxh3 standard
// profile it is the plain RFC #1527 rolling sequence hash (seed S, no LoRA or
// salt in the formula), re-computed from the event's token ids when the
// publisher hashes differently, inside the salt namespace of the event or
// registration (namespace.go); a query's cache_salt selects the namespace.
//
// Tiers, fastest first: device, cpu_local, cpu_share, disk. device and
// cpu_local (and an engine's own disk) belong to a rank owner (instance,
// dp_rank); cpu_share and pool disk belong to a shared owner (a pool backend)
// and are visible to every rank of the context.
//
// # Invariants
//
//   - A block entry exists iff at least one owner holds at least one copy of it
//     in some tier; owner words are immutable values swapped atomically per
//     block, so a query never sees a torn owner set.
//   - Events of one subscription are applied by exactly one goroutine (the
//     subscription's receive loop), in order. Different subscriptions may touch
//     the same block concurrently.
//   - After Unregister returns, no block carries an owner of that subscription,
//     and no later Apply on its handle changes the index.
//   - Owner ids are reused after release, but every owner word carries the
//     id's generation: a query or dump reading an older snapshot of the owner
//     table skips words of a newer incarnation (TestOwnerIDReuseDuringQuery).
//   - Index.TierBlocks equals a walk of every block's owner words
//     (TestTierBlocksMatchesIndex): holdings are counted as they change.
//   - Each owner's key set holds exactly the keys of the blocks that carry a
//     word of that owner (TestTierBlocksMatchesIndex, checkKeySets): clearing
//     an owner visits only its own blocks.
//   - An RFC #1527 stream owner is (subscription, instance and rank or pool
//     backend, stream tag of salt/backend_id/medium): a `cleared` removes the
//     words of exactly that stream's owners (TestClearedPurgesOnlyItsStream);
//     an engine AllBlocksCleared those of the engine stream (tag 0).
//   - Events for a context nobody registered create no state; per-subscription
//     stream cursors, stream owners and held events are bounded
//     (TestRFCUnknownContextCreatesNoState, TestRFCStreamCapBound).
//   - A subscription's dump section (DumpStreams) is taken under its lock
//     with the sequence of its last applied batch; a replica that restored
//     it skips batches at or below that sequence, so no batch counts twice
//     and no dumped block outlives a later remove
//     (TestRestoreStreamSkipsDumpedBatches, TestRestoreStreamRemovedAfterDump).
//     A dump of an earlier run (StreamInfo.Prior) whose publisher restarted
//     meanwhile is cleared, not skipped through, once the transport's first
//     sequence shows it (TestFirstLiveAfterPriorRestore).
//   - A dumped holding of a stream owner carries the stream's dimensions;
//     RestoreStream re-creates the same owner and adds through the owner's
//     key set, so a later stream `cleared` purges exactly the restored
//     blocks (TestRestoreStreamKeepsStreamOwners, TestTierBlocksMatchesIndex).
//   - For every query row: device ≤ cpu_local ≤ cpu_share ≤ disk ≤ ⌊len/B⌋·B
//     (or the logical length for SGLang partial/bigram chains), and
//     longest_matched = disk. The tests named *Invariant* check these.
//   - Per-medium prefixes (Media: device; host = cpu_local ∪ cpu_share; disk)
//     are independent of each other, each ≤ disk, and equal a naive model
//     (TestQueryAgreesWithModel, modelMedia).
//   - The partitions of a context have distinct profiles, and an identity
//     binds at most one of them: an engine or explicit-profile registration
//     whose profile no partition has is refused with ErrConflict iff a
//     partition was bound by its own identity, and starts a partition
//     otherwise; pool registrations follow partition.go's rules
//     (TestProfilePartitionRules, TestProfilePartitionModel,
//     TestProfileSquatting in httpd).
//   - A query of a partitioned context equals the queries of separate
//     indexes, one per partition, merged: one row per instance, the union
//     of its ranks, the largest boundary per tier and medium for a rank in
//     several (TestPartitionedQueryMatchesSeparateIndexes, mergeNaive). With
//     one partition it allocates nothing more (TestQueryAllocs,
//     TestPartitionedQueryAllocs for two).
//   - Once a pool-only partition is bound to another profile than the xxh3
//     default it ran under, no block is left under a key that profile does
//     not compute (a salt namespace, a re-hash of token_ids): those are
//     cleared, counted and logged; blocks filed under the published hashes
//     stay (rebind.go; TestPoolBindingSaltNamespace,
//     TestPoolBindingRehashedTokens, TestPoolBindingConcurrentApply).
//   - A registration with AdaptersFromEvents files an engine's stored event
//     naming adapter X in its home context's key with LoraName X, holding a
//     reference there like in any context it touched (at most
//     Options.MaxAdaptersPerRegistration); a remove, which names no adapter,
//     reaches the first of its contexts holding the hash, home first; a
//     clear or Unregister reaches them all (adapter.go;
//     TestAdapterRemovesReachTheirContext, TestAdapterClearAndUnregister,
//     TestAdapterConcurrent).
//   - A partition is unlinked once no subscription references it and it
//     holds no block, the context's key with its last partition
//     (TestPartitionReclaim, TestPartitionSplitConcurrent).
//   - An RFC #1527 event naming another context goes to the partition its
//     subscription holds state in, else the one with its home profile, else
//     the context's only partition, else nowhere
//     (TestRFCEnvelopePartitionRouting); a restored dump re-creates the
//     partitions from the registrations' owners (TestRestoreRecreatesPartitions).
package core
