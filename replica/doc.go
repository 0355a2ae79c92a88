// Package replica scales conductor out over NATS JetStream: a Relay publishes
// what one index applies to a stream, and any number of Replicas build their
// own index from that stream and answer queries from it.
//
// # Roles
//
// The relay runs inside the conductor that subscribes to the engines over ZMQ
// (--nats-publish). It is that index's core.Observer: every batch a
// subscription applies (after the transport's sequence healing: gaps
// replayed, restarts and stale streams cleared), every clear and flush, and
// every registration and unregistration becomes one message, queued in the
// index's order and published by one goroutine.
//
// A replica (--nats-consume) subscribes to no engine. One goroutine consumes
// the stream in order and applies each message through the same core calls
// the relay's ZMQ listeners made (Register, Subscription.Apply, Clear,
// FlushHeld, Unregister), so a replica's index is the relay's by
// construction, not by a second implementation.
//
// # Messages
//
// A message body is a version byte, a kind byte and the kind's payload
// (codec.go has the byte layout; Decoder reads it):
//
//   - KindBatch ('B'): a subscription's key and one decoded, dialect-independent
//     core.Batch, with its ZMQ sequence.
//   - KindClear ('C'): the subscription's blocks were dropped.
//   - KindFlush ('F'): its held RFC events were resolved (idle flush).
//   - KindGap ('G'): events of the subscription were lost for good and the
//     relay applied the gap policy the message names (core.Subscription.Gap;
//     the replica repeats it with GapWith).
//   - KindExpire ('E'): the subscription's oldest pending gap expiry was
//     applied (ExpireOldest).
//   - KindRegister ('R'): a registration (JSON); idempotent on replicas.
//   - KindUnregister ('U'): the subscription was removed.
//   - KindSection ('S'): one part of a state transfer (section.go): the
//     subscription's whole state, replacing what a replica holds for it.
//
// Every message of a registration goes to the subject
// <prefix>.<tenant>.<model> (SubjectToken escapes the names), so a replica
// can be a shard: Options.FilterTenant and FilterModel pick its subjects.
// Decoding is bounded: a malformed or hostile message is ErrMessage, counted
// and skipped, never a crash or an unbounded allocation.
//
// # Consistency
//
// At the same stream position a replica's index holds exactly the relay's
// blocks. A replica is behind the relay by its lag, the messages the stream
// holds that it has not applied (conductor_replica_lag_messages); a query
// meanwhile misses blocks stored, and still sees blocks removed, in that
// window. Replica.Ready (and so /health) reports not ready until the lag is
// within Options.MaxLag and while NATS has been unreachable longer than
// MaxStale; queries are answered from the index the replica has throughout.
//
// A replica with SnapshotInterval > 0 writes its index to the JetStream object
// store between two messages (snapshot.go), and any starting replica loads
// the newest snapshot of its stream and filter and consumes from the message
// after it: start-up costs one snapshot and the messages since, however long
// the history. No snapshot is written between two sections of a state
// transfer (TestSnapshotWaitsForTransfer). A replica orders each
// subscription's batches itself (Replica's sequence checks), so a snapshot
// or transfer it restores takes the dump's sequence into those checks and
// turns core's restored-dump skipping off: a clear right after it applies
// at once (TestReplicaClearAfterWarmStart, TestReplicaClearAfterTransfer).
// If the stream's retention has dropped messages after that snapshot, the
// replica counts it (conductor_replica_stream_gaps_total) and carries on
// from what the stream holds.
//
// # Faults
//
//   - Duplicates: message ids (JetStream's Nats-Msg-Id within
//     Options.Duplicates) name a batch by its ZMQ stream, sequence and body
//     hash, so two relays subscribed to the same engines store each batch
//     once, a resend of a stored message is a no-op, and an engine's
//     post-restart batch with an old sequence but new content is not taken
//     for a duplicate. A clear or gap is named by the sequence of the batch
//     before it, an expiry also by its count since that batch, so a resend
//     of one does not expire a second gap mark (TestRelayExpireResentOnce).
//   - A relay restarted without state while an engine restarted: the new
//     relay never saw the engine's sequence go back, and its index holds
//     the new incarnation only. A replica takes a batch more than
//     Options.RestartThreshold below the last it applied for the
//     subscription for such a restart: it clears the subscription and
//     applies the batch (conductor_replica_restarts_total,
//     TestReplicaEngineRestartedUnderColdRelay); within the threshold a
//     batch at or below the last is an old duplicate. A relay that restarts
//     from its state directory's snapshot sees the restart itself and
//     publishes a clear.
//   - NATS down or slow: the relay holds unacknowledged messages up to
//     Options.BufferBytes and resends a failed publish window from its first
//     failure. Past the bound it drops batches, clears and flushes (never a
//     registration) and counts them (conductor_relay_dropped_total); the
//     subscription that lost a message is dirty: nothing more of it is
//     published until a state transfer replaces the replicas' copy, once the
//     buffer has room. The relay publishes every registration again on each
//     reconnection and every RegistrationInterval, so a replica that starts
//     after the stream's retention dropped one still learns it.
//   - Reordering: a failed message followed in its window by a message of the
//     same service key that was (or may have been) stored reaches replicas
//     out of order. A replica applies the later batch (counting
//     conductor_replica_seq_gaps_total) and skips the earlier as old
//     (conductor_replica_duplicates_total), takes a batch stored before its
//     registration for an orphan, or loses what followed an unregistration
//     resent after the re-registration; the relay counts the reorder
//     (conductor_relay_reordered_total) and transfers the state of the
//     subscription registered under the key, so the replica converges
//     (TestRelayRegistrationReorderTransfers). Only a synchronous publish per message
//     could avoid this across a lost connection; without an outage neither
//     count moves.
//   - Oversize: a batch too large for one NATS message is not published; its
//     subscription goes dirty and a state transfer, cut into sections of
//     sectionChunkBytes, replaces it.
//   - Bad input on a replica: an undecodable message
//     (conductor_replica_decode_errors_total), a message for a subscription
//     it does not know (conductor_replica_orphan_messages_total) or a
//     registration its index refuses (conductor_replica_registration_errors_total)
//     is counted and skipped.
//
// # Proving tests
//
// TestRelayReplicaInProcess: a full replica's /dump equals the relay's byte
// for byte, a shard equals an index fed only its tenant, and a replica
// started from the newest snapshot equals the relay. TestRelayFailoverDedup:
// two relays, one stream, each batch applied once, failover without a gap.
// TestNATSDownAtStart: buffering while NATS is down, catch-up and readiness
// after. TestRelayReorderedWindowTransfers, TestRelayDisconnectedWindowTransfers
// and TestRelayReorderHealsReplica: which failures make a subscription dirty,
// and that a reorder heals by state transfer. TestSectionChunks and
// TestRelayOversizeBatch: transfers larger than one message. At process level,
// cmd/conductor's TestNATSReplicas checks replicas against a directly
// subscribed reference across a replica SIGKILL and a NATS restart.
package replica
