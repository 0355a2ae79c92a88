package core

// Observer sees what the transport does to each subscription, in the order it
// does it, so that another process can do the same (package replica publishes
// it to NATS JetStream and replays it on query replicas).
//
// Ordering: Registered is called before the subscription's first Apply (the
// transport starts its receiver after Register returns) and Unregistered
// after its last. Applied, Cleared and Flushed are called under the
// subscription's lock, so for one subscription they come in apply order; for
// different subscriptions they interleave as the appliers run.
//
// The methods run on the hot path (Applied once per applied batch): they must
// not block or call back into the index for the same subscription. The
// arguments are valid only during the call (b and its events are reused by
// the transport; copy what is kept).
type Observer interface {
	// Registered: r was created (not for an identical re-registration).
	Registered(r *Registration)
	// Unregistered: r was removed with all its blocks.
	Unregistered(r *Registration)
	// Applied: b was applied to s (not called for a batch skipped because a
	// restored dump holds it, nor after s was unregistered).
	Applied(s *Subscription, b *Batch)
	// Cleared: every block of s is being dropped (stale stream, publisher
	// restart, a gap past a restored dump's watermark).
	Cleared(s *Subscription)
	// Flushed: FlushHeld resolved at least one RFC stream's held events.
	Flushed(s *Subscription)
	// Gapped: the transport lost events of s for good and policy p applies
	// (Subscription.Gap; GapWith repeats it). A GapClear's drop is not also
	// reported as Cleared.
	Gapped(s *Subscription, p GapPolicy)
	// Expired: the oldest pending GapExpire mark of s expired
	// (Subscription.ExpireDue; ExpireOldest repeats it).
	Expired(s *Subscription)
}
