package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
)

// Store simulates a Mooncake store master: one pool of blocks shared by every
// engine of a group (conductor files it under cpu_share, visible to every rank
// of the context), published as Mooncake master events (RFC #1527 maps in
// [ts_ms, events, dp_rank], no replay socket). Engines write every block they
// compute through to it; it evicts least recently used blocks.
type Store struct {
	g       *Group
	id      string
	backend string
	pub     *bench.Publisher
	pool    *lru
	pending []bench.MooncakeEvent
	eventID uint64
	buf     []byte

	sentinel    uint64
	hasSentinel bool

	loss *rand.Rand // draws for GroupConfig.StoreLoss
}

func newStore(g *Group, capacity int) (*Store, error) {
	// No replay socket; a ring of one message, since nothing reads it.
	pub, err := bench.NewPublisher(bench.PublisherOptions{NoReplay: true, Ring: 1})
	if err != nil {
		return nil, fmt.Errorf("sim: store: %w", err)
	}
	id := "mooncake-store-" + g.cfg.Model
	return &Store{g: g, id: id, backend: "sim-" + g.cfg.Model, pub: pub, pool: newLRU(capacity),
		loss: rand.New(rand.NewPCG(g.cfg.FaultSeed, streamSeed(id, 0)))}, nil
}

func (s *Store) event(typ string, k uint64) {
	s.eventID++
	s.pending = append(s.pending, bench.MooncakeEvent{EventID: s.eventID, Type: typ, SeqHashes: []uint64{k},
		ObjectKey: fmt.Sprintf("%s/%016x", s.g.cfg.Model, k), Medium: "cpu", TenantID: "default", BackendID: s.backend,
		ModelName: s.g.cfg.Model, BlockSize: s.g.cfg.BlockSize})
}

// put stores k (absent) in the pool, evicting the least recently used block.
func (s *Store) put(k uint64) {
	evicted, ok := s.pool.add(k, nil)
	for _, v := range evicted {
		s.event("removed", v)
	}
	if ok {
		s.event("stored", k)
	}
}

// flush publishes the pending events as one message, as the master flushes
// a request's stores and evictions; a regular one (not a sentinel) is lost
// with probability GroupConfig.StoreLoss.
func (s *Store) flush(regular bool) error {
	if len(s.pending) == 0 {
		return nil
	}
	s.buf = bench.AppendMooncakeBatch(s.buf[:0], uint64(time.Now().UnixMilli()), 0, s.pending...)
	s.pending = s.pending[:0]
	publish := s.pub.Publish
	st := &s.g.Stats
	if regular && s.g.cfg.StoreLoss > 0 && s.loss.Float64() < s.g.cfg.StoreLoss {
		publish = s.pub.PublishHidden
		st.StoreLost++
	}
	if _, err := publish(append([]byte(nil), s.buf...)); err != nil {
		return err
	}
	if regular {
		st.StoreMessages++
		st.StoreMaxBytes = max(st.StoreMaxBytes, int64(len(s.buf)))
		if len(s.buf) > 1<<20 {
			st.StoreOverMiB++
		}
	}
	return nil
}

func (s *Store) publishSentinel(rng *rand.Rand) (tokens []int32, err error) {
	if s.hasSentinel {
		s.event("removed", s.sentinel)
	}
	tokens = randomTokens(nil, s.g.cfg.BlockSize, rng)
	keys, err := hash.AppendChain(nil, &s.g.profile, tokens, s.g.cfg.BlockSize, nil, nil)
	if err != nil || len(keys) != 1 {
		return nil, fmt.Errorf("sim: sentinel hash: %v", err)
	}
	s.sentinel, s.hasSentinel = keys[0], true
	s.event("stored", keys[0])
	return tokens, s.flush(false)
}
