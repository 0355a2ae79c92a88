package core

import (
	"fmt"
	"slices"
)

// Partitions. A context key (tenant, model, LoRA, block size) holds one
// partition per distinct hash profile, and each partition is a context of
// its own: block map, owners, slots and binding. Index.contexts maps the key
// to its first partition; the others follow through context.next in the
// order they were created. The list changes only under Index.mu and is read
// lock-free (queries, appliers).
//
// Why: the profile of a key would otherwise be fixed by whoever registers
// first, so with client tokens one identity could bind a new key to a wrong
// profile and have every later registration of another identity refused
// (profile squatting). A registration that contradicts the profiles present
// is therefore refused only when its own identity bound one of them: that is
// a configuration mistake. Otherwise it gets a partition of its own. Without
// tokens, or with the admin alone, every registration has one identity, a
// key has one partition, and a contradicting profile is a conflict.
//
// Rules (the identity is Registration.Owner, every owner in
// Options.OperatorOwners being one identity, the operator's):
//
//   - An engine or explicit-profile registration joins the partition with its
//     profile; else it adopts the key's pool-only (unbound) partition, which
//     is then the key's only one; else it is refused with ErrConflict when a
//     partition was bound by its own identity; else it starts a new
//     partition bound by it. So an identity binds at most one partition of a
//     key, and two partitions never share a profile.
//   - A pool registration without a profile joins the partition its own
//     identity bound, else the first partition, else starts a pool-only one.
//     A pool-only partition runs under the xxh3 default until bound; the
//     binding clears the blocks filed under keys the new profile does not
//     compute (rebind.go).
//   - A query walks every partition with its own profile's chain and merges
//     the rows (mergeRows in query.go).
//   - An event naming another context in its envelope goes to the partition
//     the subscription already holds state in, else the one with the home
//     partition's profile, else the key's only partition; when the key has
//     several and none matches, nowhere (dropped as unknown_context).
//   - A partition is unlinked when no subscription references it and it
//     holds no block; the key leaves the map with its last partition.

// acquireContextLocked returns the partition of reg's context that reg
// joins, creating it when needed, and takes a reference on it. bind is false
// for a pool registration that named no profile. When reg binds a pool-only
// partition, early are the subscriptions that hold state in it from before:
// the caller brings them up to the binding once it has released ix.mu
// (rebindEarly). Caller holds ix.mu.
func (ix *Index) acquireContextLocked(reg *Registration, bind bool) (c *context, early []*Subscription, err error) {
	k := reg.ContextKey()
	head := ix.lookupContext(k)
	switch {
	case head == nil:
		b := &binding{profile: reg.Profile, bound: bind}
		if bind {
			b.owner = reg.Owner
		}
		c = newContext(k, b, ix.opts.ContextSizeHint)
		ix.contexts.Store(k, c)
	case bind:
		if c, early, err = ix.bindPartitionLocked(head, reg); err != nil {
			return nil, nil, err
		}
	default:
		c = ix.poolPartition(head, reg.Owner)
	}
	c.refs++
	return c, early, nil
}

// bindPartitionLocked applies the binding rule for an engine or
// explicit-profile registration to the key whose first partition is head.
// early is as in acquireContextLocked. Caller holds ix.mu.
func (ix *Index) bindPartitionLocked(head *context, reg *Registration) (*context, []*Subscription, error) {
	var mine, tail *context
	for c := head; c != nil; c = c.next.Load() {
		tail = c
		b := c.bind.Load()
		switch {
		case !b.bound:
			// A pool-only partition is its key's only one: it adopts the
			// first engine or explicit profile. Its blocks were filed under
			// the xxh3 default: those under keys the new profile does not
			// compute go (rebind.go).
			c.bind.Store(&binding{profile: reg.Profile, bound: true, owner: reg.Owner})
			early := c.early
			c.early = nil
			return c, early, nil
		case b.profile == reg.Profile:
			return c, nil, nil
		case mine == nil && ix.sameIdentity(b.owner, reg.Owner):
			mine = c
		}
	}
	if mine != nil {
		k, sp := &head.key, mine.bind.Load().profile.Spec
		return nil, nil, fmt.Errorf("register %s: context %s/%s/%q/%d is bound to hash profile %s/%s/%s/%s by the same identity (one identity's registrations of a context must agree on the profile): %w",
			reg.Key(), k.TenantID, k.ModelName, k.LoraName, k.BlockSize,
			sp.Strategy, sp.Algorithm, sp.PythonHashSeed, sp.IndexProjection, ErrConflict)
	}
	c := newContext(head.key, &binding{profile: reg.Profile, bound: true, owner: reg.Owner}, ix.opts.ContextSizeHint)
	tail.next.Store(c)
	return c, nil, nil
}

// poolPartition is the partition a pool registration without a profile
// joins: the one its own identity bound, else the first.
func (ix *Index) poolPartition(head *context, owner string) *context {
	for c := head; c != nil; c = c.next.Load() {
		if b := c.bind.Load(); b.bound && ix.sameIdentity(b.owner, owner) {
			return c
		}
	}
	return head
}

// sameIdentity reports whether owners a and b are one identity for binding:
// equal, or both the operator's (Options.OperatorOwners).
func (ix *Index) sameIdentity(a, b string) bool {
	return a == b || (slices.Contains(ix.opts.OperatorOwners, a) && slices.Contains(ix.opts.OperatorOwners, b))
}

// releaseContextLocked drops one reference and reclaims the partition when
// nothing references it and it holds no blocks. Caller holds ix.mu.
func (ix *Index) releaseContextLocked(c *context) {
	c.refs--
	if c.refs > 0 || c.reclaimed {
		return
	}
	if c.blocks.Size() > 0 {
		return
	}
	c.reclaimed = true
	ix.unlinkLocked(c)
}

// unlinkLocked removes partition c from its key's list. A query or applier
// that loaded c before may still walk it and its stale next pointer: c is
// empty and unreferenced, and every partition linked after it stays
// reachable from its next. Caller holds ix.mu.
func (ix *Index) unlinkLocked(c *context) {
	head, next := ix.lookupContext(c.key), c.next.Load()
	if head == c {
		if next == nil {
			ix.contexts.Delete(c.key)
		} else {
			ix.contexts.Store(c.key, next)
		}
		return
	}
	for p := head; p != nil; p = p.next.Load() {
		if p.next.Load() == c {
			p.next.Store(next)
			return
		}
	}
}

// partitionFor chooses the partition, among the key's whose first is head,
// that this subscription files an event naming that key in (the envelope
// rule above), with its state there when it has some. It reads the list
// lock-free: a partition the subscription holds state in is referenced, so
// it stays linked and every walk from head reaches it.
func (s *Subscription) partitionFor(head *context) (*context, *subCtx) {
	var match *context
	n := 0
	for c := head; c != nil; c = c.next.Load() {
		if sc, ok := s.state[c]; ok {
			return c, sc
		}
		if match == nil && *c.profile() == *s.home.profile() {
			match = c
		}
		n++
	}
	switch {
	case match != nil:
		return match, nil
	case n == 1:
		return head, nil
	}
	return nil, nil
}
