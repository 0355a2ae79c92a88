package core

import (
	"fmt"
	"sort"
	"strings"
)

// DumpEvent is one holding of the index as an RFC #1527 standardized `stored`
// event: one block hash held by one owner in one tier. BackendID is the
// instance id for rank owners and the pool backend for shared owners.
type DumpEvent struct {
	ContextKey
	BackendID string
	Shared    bool
	DPRank    int32
	Medium    string // tier name: device, cpu_local, cpu_share, disk
	// SeqHash is the index key: the plain sequence hash, or under the xxh3
	// profile its key in the block's salt namespace (namespace.go).
	SeqHash uint64
	Copies  uint32
	// Stream is set for holdings of an RFC #1527 stream owner: the stream's
	// salt, backend_id and medium (as the publisher named it, lower-cased),
	// so a restored index keeps `cleared` scoped to the same stream.
	Stream *StreamDims
}

// StreamDims are an RFC stream's dimensions besides context and rank.
type StreamDims struct {
	Salt, BackendID, Medium string
}

// Dump calls f for every holding in the index, context by context (weakly
// consistent with concurrent writers: each block is read atomically). It stops
// at the first error f returns.
func (ix *Index) Dump(f func(*DumpEvent) error) error {
	gv := ix.GlobalView()
	for _, cv := range gv.Contexts {
		c := ix.lookupContext(cv.ContextKey)
		if c == nil {
			continue
		}
		m := c.meta.Load()
		var err error
		var keys []uint64
		c.blocks.Range(func(k uint64, _ blockVal) bool { keys = append(keys, k); return true })
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for _, k := range keys {
			v, ok := c.blocks.Load(k)
			if !ok {
				continue
			}
			for _, w := range v.appendWords(nil) {
				id := wordOwner(w)
				if int(id) >= len(m.owners) || !m.owners[id].live || m.owners[id].gen != wordGen(w) {
					continue
				}
				o := m.owners[id]
				ev := DumpEvent{ContextKey: c.key, BackendID: o.name, Shared: o.shared, DPRank: o.rank,
					Medium: wordTier(w).String(), SeqHash: k, Copies: wordCopies(w)}
				if o.dims != nil {
					ev.Stream = &StreamDims{Salt: o.dims.salt, BackendID: o.dims.backend, Medium: o.dims.medium}
				}
				if err = f(&ev); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// RestoreStats counts what Restore did.
type RestoreStats struct {
	Applied, Skipped int
}

// Restore re-applies dumped holdings (e.g. a peer's /dump) to this index. A
// rank holding is attributed to the registration (instance, tenant, rank) that
// would own it and is skipped when that registration does not exist here;
// shared holdings are attributed to the registered pool subscription of that
// tenant whose instance id equals the backend, else to any pool subscription
// homed in the context, else skipped. Contexts are never created by Restore.
func (ix *Index) Restore(events []DumpEvent) (RestoreStats, error) {
	var st RestoreStats
	for i := range events {
		ev := &events[i]
		t, err := ParseTier(ev.Medium)
		if err != nil {
			return st, fmt.Errorf("restore event %d: %w", i, err)
		}
		sub := ix.restoreOwner(ev)
		if sub == nil {
			st.Skipped++
			continue
		}
		if ix.restoreOne(sub, ev, t) {
			st.Applied++
		} else {
			st.Skipped++
		}
	}
	return st, nil
}

func (ix *Index) restoreOwner(ev *DumpEvent) *Subscription {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ev.Shared {
		s := ix.subs[ServiceKey{InstanceID: ev.BackendID, TenantID: ev.TenantID, DPRank: ev.DPRank}]
		if s != nil && s.reg.ContextKey() == ev.ContextKey {
			return s
		}
		// A batch dp rank may have overridden the registered rank: any
		// registration of that instance in the context owns it.
		for k, s := range ix.subs {
			if k.InstanceID == ev.BackendID && k.TenantID == ev.TenantID && s.reg.ContextKey() == ev.ContextKey && !s.reg.Type.pool() {
				return s
			}
		}
		return nil
	}
	var fallback *Subscription
	for k, s := range ix.subs {
		if !s.reg.Type.pool() || k.TenantID != ev.TenantID {
			continue
		}
		if k.InstanceID == ev.BackendID {
			return s
		}
		if s.reg.ContextKey() == ev.ContextKey && fallback == nil {
			fallback = s
		}
	}
	return fallback
}

func (ix *Index) restoreOne(s *Subscription, ev *DumpEvent, t Tier) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	sc := s.ctxState(&ev.ContextKey)
	if sc == nil {
		return false
	}
	k := ownerKey{sub: s.id, shared: ev.Shared, name: ev.BackendID}
	if !ev.Shared {
		k.rank = ev.DPRank
	}
	var dims *streamDims
	if ev.Stream != nil {
		dims = &streamDims{salt: ev.Stream.Salt, backend: ev.Stream.BackendID, medium: strings.ToLower(ev.Stream.Medium)}
		k.stream = streamTag([]byte(dims.salt), []byte(dims.backend), []byte(dims.medium))
	}
	id, ok := sc.ownerDims(k, dims, ix.opts.MaxStreamsPerSubscription)
	if !ok {
		return false
	}
	n := ev.Copies
	if n == 0 {
		n = 1
	}
	var st ApplyStats
	s.addBlocks(sc, []uint64{ev.SeqHash}, id, t, n, &st)
	return true
}
