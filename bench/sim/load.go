package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// LoadOptions configure a query load. Factory and Next are required.
type LoadOptions struct {
	Factory ClientFactory
	// Concurrency is the number of workers, one connection each (default 4).
	Concurrency int
	// Rate > 0 runs open loop at that many queries per second in total, each
	// worker on a fixed schedule; latency is measured from the scheduled
	// start, so a stalled server is not hidden (no coordinated omission).
	// 0 runs closed loop: each worker sends its next query when the previous
	// answer arrives.
	Rate float64
	// Duration bounds the run (default 5s unless Count is set); Count > 0 stops
	// after that many queries in total.
	Duration time.Duration
	Count    int
	// Next picks worker w's next query; rng is the worker's own.
	Next func(w int, rng *rand.Rand) *Query
	// Check, when set, is called with every answer (verify mode); an error
	// counts as a mismatch and the first few are kept.
	Check func(q *Query, a *Answer) error
	Seed  uint64
	// Done, when set, is incremented after every query (live progress).
	Done *atomic.Int64
}

// LoadResult summarises a load run. Latencies are in microseconds.
type LoadResult struct {
	Queries    int64
	Errors     int64
	Mismatches int64
	Elapsed    time.Duration
	QPS        float64
	Latency    Latency
	FirstError string   `json:",omitempty"`
	Mismatch   []string `json:",omitempty"`

	hist *hdrhistogram.Histogram
}

// Latency is a latency distribution in microseconds.
type Latency struct {
	Count                            int64
	Mean, P50, P90, P99, P999, MaxUs float64
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

func latencyOf(h *hdrhistogram.Histogram) Latency {
	return Latency{Count: h.TotalCount(), Mean: h.Mean(), P50: float64(h.ValueAtQuantile(50)),
		P90: float64(h.ValueAtQuantile(90)), P99: float64(h.ValueAtQuantile(99)),
		P999: float64(h.ValueAtQuantile(99.9)), MaxUs: float64(h.Max())}
}

// maxKept bounds the mismatch reports a run keeps.
const maxKept = 5

// RunLoad runs the load until Duration, Count or ctx ends it.
func RunLoad(ctx context.Context, o LoadOptions) (LoadResult, error) {
	if o.Factory == nil || o.Next == nil {
		return LoadResult{}, errors.New("sim: RunLoad needs Factory and Next")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Duration <= 0 && o.Count <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	var (
		issued atomic.Int64
		mu     sync.Mutex
		res    = LoadResult{hist: newHist()}
		wg     sync.WaitGroup
	)
	start := time.Now()
	interval := time.Duration(0)
	if o.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(o.Concurrency) / o.Rate)
	}
	for w := 0; w < o.Concurrency; w++ {
		c, err := o.Factory()
		if err != nil {
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			h := newHist()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(w)))
			var a Answer
			var n, errs, mism int64
			var firstErr string
			var kept []string
			// Open loop: worker w owns slots w, w+C, w+2C, … of the global schedule.
			next := start.Add(time.Duration(float64(interval) * float64(w) / float64(o.Concurrency)))
			for ctx.Err() == nil {
				if o.Count > 0 && issued.Add(1) > int64(o.Count) {
					break
				}
				t0 := time.Now()
				if interval > 0 {
					if d := time.Until(next); d > 0 {
						select {
						case <-ctx.Done():
						case <-time.After(d):
						}
						if ctx.Err() != nil {
							break
						}
					}
					t0 = next
					next = next.Add(interval)
				}
				q := o.Next(w, rng)
				err := c.Query(q, &a)
				_ = h.RecordValue(max(1, time.Since(t0).Microseconds()))
				n++
				if o.Done != nil {
					o.Done.Add(1)
				}
				if err != nil {
					errs++
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				}
				if o.Check != nil {
					if err := o.Check(q, &a); err != nil {
						mism++
						if len(kept) < maxKept {
							kept = append(kept, err.Error())
						}
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.hist.Merge(h)
			res.Queries += n
			res.Errors += errs
			res.Mismatches += mism
			if res.FirstError == "" {
				res.FirstError = firstErr
			}
			res.Mismatch = append(res.Mismatch, kept...)
			if len(res.Mismatch) > maxKept {
				res.Mismatch = res.Mismatch[:maxKept]
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Latency = latencyOf(res.hist)
	if res.Elapsed > 0 {
		res.QPS = float64(res.Queries) / res.Elapsed.Seconds()
	}
	return res, nil
}

// ProcCPU returns the CPU time (user + system) process pid has used, from
// /proc/<pid>/stat (clock ticks, USER_HZ = 100 on Linux: 10 ms resolution, so
// compare phases of seconds, not single requests).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is parenthesised and may hold spaces: split
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("sim: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("sim: malformed /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("sim: malformed /proc/%d/stat", pid)
	}
	const userHZ = 100
	return time.Duration(u+st) * time.Second / userHZ, nil
}
