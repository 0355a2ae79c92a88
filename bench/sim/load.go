package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
)

// queryLoad is a query load over a surface, run by bench.RunLoad: each worker
// has its own Client and random source (seeded by Seed and its index), asks
// Next for its next query and, when Check is set, checks every answer.
type queryLoad struct {
	Factory ClientFactory
	Seed    uint64
	// Next picks worker w's next query; rng is the worker's own.
	Next func(w int, rng *rand.Rand) *Query
	// Check, when set, is called with every answer (verify mode); an error is
	// a wrong answer (the run counts it and keeps the first few).
	Check func(q *Query, a *Answer) error
}

// run runs the load: connections workers, open loop at rate q/s (0: closed
// loop), for d; failures are counted, not fatal.
func (l queryLoad) run(ctx context.Context, connections int, rate float64, d time.Duration) (bench.LoadResult, error) {
	return bench.RunLoad(ctx, bench.LoadOptions{NewWorker: l.worker, Connections: connections, Rate: rate,
		Duration: d, KeepGoing: true})
}

func (l queryLoad) worker(w int) (bench.Worker, error) {
	c, err := l.Factory()
	if err != nil {
		return nil, err
	}
	return &queryWorker{l: l, w: w, c: c, rng: rand.New(rand.NewPCG(l.Seed, uint64(w)))}, nil
}

// queryWorker is one worker of a queryLoad.
type queryWorker struct {
	l   queryLoad
	w   int
	c   Client
	rng *rand.Rand
	a   Answer
}

func (q *queryWorker) Close() { q.c.Close() }

func (q *queryWorker) Do() error {
	qq := q.l.Next(q.w, q.rng)
	if err := q.c.Query(qq, &q.a); err != nil {
		return err
	}
	if q.l.Check == nil {
		return nil
	}
	if err := q.l.Check(qq, &q.a); err != nil {
		return fmt.Errorf("%w: %v", bench.ErrLoadAnswer, err)
	}
	return nil
}
