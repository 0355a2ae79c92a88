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
}

func newStore(g *Group, capacity int) (*Store, error) {
	pub, err := bench.NewPublisher(bench.PublisherOptions{NoReplay: true})
	if err != nil {
		return nil, fmt.Errorf("sim: store: %w", err)
	}
	id := "mooncake-store-" + g.cfg.Model
	return &Store{g: g, id: id, backend: "sim-" + g.cfg.Model, pub: pub, pool: newLRU(capacity)}, nil
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

func (s *Store) flush() error {
	if len(s.pending) == 0 {
		return nil
	}
	s.buf = bench.AppendMooncakeBatch(s.buf[:0], uint64(time.Now().UnixMilli()), 0, s.pending...)
	s.pending = s.pending[:0]
	_, err := s.pub.Publish(append([]byte(nil), s.buf...))
	return err
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
	return tokens, s.flush()
}
