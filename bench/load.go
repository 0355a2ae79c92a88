package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// LoadOptions configure a load run: Connections workers, each on its own
// keep-alive connection, closed loop (the next request when the previous
// answer has arrived and been checked) or open loop (Rate).
//
// The requests are either one fixed request (Addr, Path, ContentType, Body),
// every response checked against ExpectStatus and Expect, or what NewWorker's
// workers send (the simulator's query mix, package bench/sim).
type LoadOptions struct {
	// Addr is the server's host:port (fixed request).
	Addr string
	// Path is the fixed request's path. Default "/query".
	Path string
	// ContentType of the fixed request. Default "application/msgpack".
	ContentType string
	// Body of the fixed request.
	Body []byte
	// ExpectStatus is the status every fixed-request response must have.
	// Default 200.
	ExpectStatus int
	// Expect is checked against every fixed-request response body
	// (ErrLoadAnswer otherwise). Required when ExpectStatus is 200: a run that
	// only checked the status would score a server answering 200 `{}`. A body
	// identical to the last one its connection checked is accepted without
	// decoding it again, so the check costs a comparison and no allocation
	// per request (TestFixedLoadZeroAllocs).
	Expect *Expect
	// Timeout bounds each request. Default 10s.
	Timeout time.Duration

	// NewWorker, when set, replaces the fixed request: NewWorker(w) makes
	// worker w, which RunLoad closes at the end.
	NewWorker func(w int) (Worker, error)

	// Connections is the number of workers. Default 4.
	Connections int
	// Rate > 0 runs open loop at that many requests per second in total, each
	// worker on a fixed schedule; latency is measured from the scheduled
	// start, so a stalled server is not hidden (no coordinated omission).
	// 0 runs closed loop.
	Rate float64
	// Requests stops the run after this many requests in total (spread over
	// the workers); 0 means no count.
	Requests int
	// Duration bounds the run. Default 5s when Requests is 0.
	Duration time.Duration
	// Warmup requests per worker are sent, and must succeed, before
	// measuring. Default none.
	Warmup int
	// KeepGoing counts failed requests (Errors) and wrong answers
	// (Mismatches, errors wrapping ErrLoadAnswer) and runs on. Without it the
	// first failure ends the run and RunLoad returns it.
	KeepGoing bool
	// Done, when set, is incremented after every measured request (live
	// progress).
	Done *atomic.Int64
}

// Worker sends requests over its own connection; one goroutine uses it.
type Worker interface {
	// Do sends one request and checks the answer: an error wrapping
	// ErrLoadAnswer means a wrong answer, any other a failed request.
	Do() error
	Close()
}

// LoadResult summarises a load run. Latencies are per request, from the
// request's start (its scheduled start in open loop) to its checked answer.
type LoadResult struct {
	Requests   int64
	Errors     int64 // failed requests (KeepGoing)
	Mismatches int64 // wrong answers (KeepGoing)
	Elapsed    time.Duration
	RPS        float64
	Latency
	FirstError string   `json:",omitempty"`
	Mismatch   []string `json:",omitempty"` // the first few wrong answers
}

// Latency is a latency distribution, from an HDR histogram with three
// significant digits.
type Latency struct {
	Count                          int64
	Mean, P50, P90, P99, P999, Max time.Duration
}

func (r LoadResult) String() string {
	return fmt.Sprintf("%d requests in %v: %.0f req/s, p50 %v, p90 %v, p99 %v, p99.9 %v, max %v",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.RPS, r.P50, r.P90, r.P99, r.P999, r.Max)
}

// maxKept bounds the wrong answers a run keeps.
const maxKept = 5

// newHist records nanoseconds from 1 ns to a minute.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute), 3) }

func latencyOf(h *hdrhistogram.Histogram) Latency {
	q := func(p float64) time.Duration { return time.Duration(h.ValueAtQuantile(p)) }
	return Latency{Count: h.TotalCount(), Mean: time.Duration(h.Mean()), P50: q(50), P90: q(90), P99: q(99),
		P999: q(99.9), Max: time.Duration(h.Max())}
}

// RunLoad runs the load described by o until Requests, Duration or ctx ends
// it. Without KeepGoing it returns the first failure.
func RunLoad(ctx context.Context, o LoadOptions) (LoadResult, error) {
	if o.Connections <= 0 {
		o.Connections = 4
	}
	if o.Duration <= 0 && o.Requests <= 0 {
		o.Duration = 5 * time.Second
	}
	newWorker := o.NewWorker
	if newWorker == nil {
		var err error
		if newWorker, err = o.fixedWorkers(); err != nil {
			return LoadResult{}, err
		}
	}
	workers := make([]Worker, 0, o.Connections)
	defer func() {
		for _, w := range workers {
			w.Close()
		}
	}()
	for i := 0; i < o.Connections; i++ {
		w, err := newWorker(i)
		if err != nil {
			return LoadResult{}, err
		}
		workers = append(workers, w)
		for range o.Warmup {
			if err := w.Do(); err != nil {
				return LoadResult{}, err
			}
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Duration > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, o.Duration)
		defer stop()
	}
	var (
		issued atomic.Int64
		mu     sync.Mutex // guards res while the workers merge into it
		res    LoadResult
		hist   = newHist()
		wg     sync.WaitGroup
		errs   = make([]error, len(workers))
	)
	interval := time.Duration(0)
	if o.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(len(workers)) / o.Rate)
	}
	start := time.Now()
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := loop{o: &o, w: w, hist: newHist(), issued: &issued}
			// Open loop: worker i owns slots i, i+C, i+2C, … of the schedule.
			errs[i] = l.run(ctx, start.Add(interval*time.Duration(i)/time.Duration(len(workers))), interval)
			if errs[i] != nil {
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			hist.Merge(l.hist)
			res.Requests, res.Errors, res.Mismatches = res.Requests+l.r.Requests, res.Errors+l.r.Errors, res.Mismatches+l.r.Mismatches
			res.Mismatch = append(res.Mismatch, l.r.Mismatch...)
			res.Mismatch = res.Mismatch[:min(len(res.Mismatch), maxKept)]
			if res.FirstError == "" {
				res.FirstError = l.r.FirstError
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.Latency = latencyOf(hist)
	if res.Elapsed > 0 {
		res.RPS = float64(res.Requests) / res.Elapsed.Seconds()
	}
	return res, nil
}

// loop is one worker's measured run.
type loop struct {
	o      *LoadOptions
	w      Worker
	hist   *hdrhistogram.Histogram
	issued *atomic.Int64
	r      LoadResult // counts and kept failures
}

// run sends requests until ctx ends or the count is reached; with interval
// > 0 the first is due at next and each one interval after the previous.
// Without KeepGoing it returns the first failure.
func (l *loop) run(ctx context.Context, next time.Time, interval time.Duration) error {
	var timer *time.Timer
	if interval > 0 {
		timer = time.NewTimer(time.Hour)
		defer timer.Stop()
	}
	for ctx.Err() == nil {
		if l.o.Requests > 0 && l.issued.Add(1) > int64(l.o.Requests) {
			return nil
		}
		t0 := time.Now()
		if interval > 0 {
			if d := next.Sub(t0); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return nil
				case <-timer.C:
				}
			}
			t0, next = next, next.Add(interval)
		}
		err := l.w.Do()
		_ = l.hist.RecordValue(max(1, int64(time.Since(t0))))
		l.r.Requests++
		if l.o.Done != nil {
			l.o.Done.Add(1)
		}
		if err == nil {
			continue
		}
		if !l.o.KeepGoing {
			return err
		}
		if errors.Is(err, ErrLoadAnswer) {
			l.r.Mismatches++
			if len(l.r.Mismatch) < maxKept {
				l.r.Mismatch = append(l.r.Mismatch, err.Error())
			}
			continue
		}
		l.r.Errors++
		if l.r.FirstError == "" {
			l.r.FirstError = err.Error()
		}
	}
	return nil
}

// fixedWorkers checks the fixed request's options and returns its workers'
// constructor.
func (o *LoadOptions) fixedWorkers() (func(int) (Worker, error), error) {
	if o.Path == "" {
		o.Path = "/query"
	}
	if o.ContentType == "" {
		o.ContentType = "application/msgpack"
	}
	if o.ExpectStatus == 0 {
		o.ExpectStatus = 200
	}
	if o.ExpectStatus == 200 && o.Expect == nil {
		return nil, errors.New("bench: RunLoad needs LoadOptions.Expect to check the answers")
	}
	req := AppendPost(nil, o.Addr, o.Path, o.ContentType, o.Body)
	return func(int) (Worker, error) {
		return &fixedWorker{c: NewConn(o.Addr, o.Timeout), req: req, want: o.ExpectStatus, ct: o.ContentType, expect: o.Expect}, nil
	}, nil
}

// fixedWorker sends one prepared request and checks every response.
type fixedWorker struct {
	c       *Conn
	req     []byte
	want    int
	ct      string
	expect  *Expect
	checked []byte // the last body that passed Expect.Check
}

func (f *fixedWorker) Close() { f.c.Close() }

func (f *fixedWorker) Do() error {
	status, body, err := f.c.RoundTrip(f.req)
	if err != nil {
		return err
	}
	if status != f.want {
		return fmt.Errorf("%w: %d (body %.80q)", ErrLoadStatus, status, body)
	}
	if f.expect == nil || f.checked != nil && bytes.Equal(body, f.checked) {
		return nil
	}
	if err := f.expect.Check(f.ct, body); err != nil {
		return err
	}
	f.checked = append(f.checked[:0], body...)
	return nil
}
