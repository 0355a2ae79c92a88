package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
)

// DemoOptions configure the live demo (`conductor-bench demo`).
type DemoOptions struct {
	// Addr is the indexer's HTTP address (host:port, reachable from here).
	Addr string
	// Out receives the summary (default io.Discard).
	Out io.Writer
	// Every is the summary interval (default 1s).
	Every time.Duration
	// Rate is requests per second replayed into each group (default 20).
	Rate float64
	// QPS is the background query load, open loop (default 200).
	QPS  float64
	Seed uint64
}

// Demo is a small mixed fleet replaying the synthetic workload into a running
// indexer: the same requests go to a cache-aware and a random-routed vLLM
// group (so their hit ratios compare), an SGLang group and an RFC #1527
// standard group, while a query load runs and every few seconds a quiescent
// check compares answers with the ground truth.
type Demo struct {
	o      DemoOptions
	groups []*Group
	src    *Synthetic
}

// StartDemo builds the fleet and registers it with the indexer at o.Addr.
func StartDemo(o DemoOptions) (*Demo, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.QPS <= 0 {
		o.QPS = 200
	}
	vllm := func(suffix string) []EngineConfig {
		return []EngineConfig{
			{ID: "vllm-map" + suffix, Dialect: VLLMMap, Ranks: 2, Device: 256, Host: 512, Disk: 1024},
			{ID: "vllm-array" + suffix, Dialect: VLLMArray, Device: 256, Host: 512},
		}
	}
	cfgs := []GroupConfig{
		{Model: "demo-aware", Policy: CacheAware, StoreBlocks: 2048, Engines: vllm("")},
		{Model: "demo-random", Policy: Random, StoreBlocks: 2048, Engines: vllm("-r")},
		{Model: "demo-sglang", Policy: CacheAware, Profile: hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"},
			Engines: []EngineConfig{{ID: "sglang-map", Dialect: SGLangMap, Device: 384, Disk: 1024}, {ID: "sglang-array", Dialect: SGLangArray, Device: 384}}},
		{Model: "demo-standard", Policy: RoundRobin, Profile: hash.Spec{Strategy: "xxh3"},
			Engines: []EngineConfig{{ID: "rfc-std", Dialect: Standard, Ranks: 2, Device: 384, Host: 768}}},
	}
	d := &Demo{o: o,
		src: NewSynthetic(SyntheticOptions{Seed: o.Seed, SystemPrompts: 6, SystemTokens: 768, Conversations: 48})}
	for i, c := range cfgs {
		c.Seed = o.Seed + uint64(i)
		g, err := NewGroup(c)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.groups = append(d.groups, g)
		if err := Register(o.Addr, g.Registrations()); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// Close closes the fleet's publishers (after the indexer stopped, to keep
// its logs quiet).
func (d *Demo) Close() {
	for _, g := range d.groups {
		g.Close()
	}
}

// Run replays until ctx ends, printing the summary every o.Every.
func (d *Demo) Run(ctx context.Context) error {
	factory, _ := NewClient("msgpack", d.o.Addr, 5*time.Second)
	ctl, _ := factory()
	defer ctl.Close()
	for _, g := range d.groups {
		if err := g.Quiesce(ctl, 30*time.Second); err != nil {
			return err
		}
	}
	var (
		mu       sync.Mutex // guards recent prompts (the load reads them)
		recent   [][]int32
		queries  atomic.Int64
		wg       sync.WaitGroup
		verified int64
		mismatch int64
	)
	lctx, stopLoad := context.WithCancel(ctx)
	defer func() { stopLoad(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		load := queryLoad{Factory: factory, Seed: d.o.Seed, Next: func(w int, rng *rand.Rand) *Query {
			mu.Lock()
			defer mu.Unlock()
			g := d.groups[rng.IntN(len(d.groups))]
			var p []int32
			if len(recent) > 0 {
				p = recent[rng.IntN(len(recent))]
			}
			return &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: p}
		}}
		_, _ = bench.RunLoad(lctx, bench.LoadOptions{NewWorker: load.worker, Connections: 2, Rate: d.o.QPS,
			Duration: 365 * 24 * time.Hour, KeepGoing: true, Done: &queries})
	}()

	rng := rand.New(rand.NewPCG(d.o.Seed, 0x64656d6f))
	interval := time.Duration(float64(time.Second) / d.o.Rate)
	start := time.Now()
	next, report := start, start.Add(d.o.Every)
	lastBlocks, lastMsgs, lastQ, lastT := int64(0), int64(0), int64(0), start
	for n := 1; ctx.Err() == nil; n++ {
		p := d.src.Next()
		for _, g := range d.groups {
			if _, err := g.Serve(p, ctl); err != nil {
				return err
			}
		}
		mu.Lock()
		if len(recent) < 256 {
			recent = append(recent, p)
		} else {
			recent[rng.IntN(len(recent))] = p
		}
		mu.Unlock()
		if n%max(1, int(5*d.o.Rate)) == 0 { // every ~5s: quiescent ground-truth check
			v, m, err := d.check(ctl, recent, rng, &mu)
			if err != nil && ctx.Err() == nil {
				return err
			}
			verified, mismatch = verified+v, mismatch+m
		}
		now := time.Now()
		if now.After(report) {
			var blocks, msgs int64
			for _, g := range d.groups {
				blocks += g.Stats.Stored + g.Stats.Removed + g.Stats.StoreStored
				msgs += g.Stats.Messages
			}
			q := queries.Load()
			sec := now.Sub(lastT).Seconds()
			d.summary(ctl, p, now.Sub(start), float64(blocks-lastBlocks)/sec, float64(msgs-lastMsgs)/sec, float64(q-lastQ)/sec, verified, mismatch)
			lastBlocks, lastMsgs, lastQ, lastT = blocks, msgs, q, now
			report = now.Add(d.o.Every)
		}
		next = next.Add(interval)
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
	}
	return nil
}

// check quiesces every group and compares 8 recent prompts per group.
func (d *Demo) check(c Client, recent [][]int32, rng *rand.Rand, mu *sync.Mutex) (checked, mismatches int64, err error) {
	var want, got Answer
	for _, g := range d.groups {
		if err := g.Quiesce(c, 10*time.Second); err != nil {
			return checked, mismatches, err
		}
		for i := 0; i < 8; i++ {
			mu.Lock()
			p := recent[rng.IntN(len(recent))]
			mu.Unlock()
			if err := g.Expect(p, &want); err != nil {
				return checked, mismatches, err
			}
			checked++
			if err := c.Query(&Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: p}, &got); err != nil || Diff(&want, &got) != "" {
				mismatches++
			}
		}
	}
	return checked, mismatches, nil
}

func (d *Demo) summary(c Client, p []int32, el time.Duration, blocksPS, msgsPS, qPS float64, verified, mismatch int64) {
	var b strings.Builder
	tiers, err := scrapeBlocks(d.o.Addr)
	fmt.Fprintf(&b, "[%4ds] events %6.0f blocks/s in %4.0f msgs/s | queries %5.0f/s | ", int(el.Seconds()), blocksPS, msgsPS, qPS)
	if err != nil {
		fmt.Fprintf(&b, "indexed: %v\n", err)
	} else {
		fmt.Fprintf(&b, "indexed blocks: device %d, cpu_local %d, cpu_share %d, disk %d\n", tiers[0], tiers[1], tiers[2], tiers[3])
	}
	aw, rnd := &d.groups[0].Stats, &d.groups[1].Stats
	fmt.Fprintf(&b, "       hit ratio (device / any tier): cache-aware %.1f%% / %.1f%% vs random %.1f%% / %.1f%% | ground truth: %d answers checked, %d mismatches\n",
		100*aw.DeviceHitRatio(), 100*aw.CachedHitRatio(), 100*rnd.DeviceHitRatio(), 100*rnd.CachedHitRatio(), verified, mismatch)
	g := d.groups[0]
	var a Answer
	if err := c.Query(&Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: p}, &a); err == nil {
		fmt.Fprintf(&b, "       example: %s, %d-token prompt →", g.cfg.Model, len(p))
		for _, r := range a.Rows {
			for _, rr := range r.Ranks {
				fmt.Fprintf(&b, " %s/%d {device %d, cpu_local %d, cpu_share %d, disk %d}", r.Instance, rr.Rank,
					rr.Tiers[0], rr.Tiers[1], rr.Tiers[2], rr.Tiers[3])
			}
		}
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(d.o.Out, b.String())
}

// scrapeBlocks reads conductor_blocks{tier=...} from /metrics.
func scrapeBlocks(addr string) ([numTiers]int64, error) {
	var out [numTiers]int64
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, `conductor_blocks{tier="`) {
			continue
		}
		rest := line[len(`conductor_blocks{tier="`):]
		name, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if t := tierKey(name); t >= 0 {
			v, err := strconv.ParseFloat(val, 64)
			if err == nil {
				out[t], found = int64(v), true
			}
		}
	}
	if !found {
		return out, errors.New("no conductor_blocks series on /metrics")
	}
	return out, sc.Err()
}
