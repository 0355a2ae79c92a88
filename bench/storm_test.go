package bench

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRegistrationStorm: a conductor process takes STORM_REGISTRATIONS
// registrations (default 10,000) from STORM_CLIENTS concurrent HTTP clients
// (default 16), as fast as it answers, while this process asks /health every
// 2 ms on a connection of its own; it reports the registrations' rate, the
// /health latency during the storm (p50, p99, max), and the server's threads,
// file descriptors and RSS once every registration is held. The endpoints are
// loopback ports from 10000 up (below the ephemeral range) where no engine
// publishes, so every registration stays pending, costing what a
// registration whose engine is down costs. conductor raises its
// descriptor limit to the hard limit and lowers --max-registrations to fit it
// (6 descriptors each): a machine whose hard limit is too small for the count
// asked for is reported, and measured at the count it holds. The server is
// pinned with taskset to the first half of this process's CPUs, this process
// (the clients and the /health prober) to the rest. Run:
//
//	go test -run '^$' -bench BenchmarkRegistrationStorm -benchtime 1x ./bench/
func BenchmarkRegistrationStorm(b *testing.B) {
	n := envInts(b, "STORM_REGISTRATIONS", []int{10000})[0]
	clients := envInts(b, "STORM_CLIENTS", []int{16})[0]
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if fit := (int(lim.Max) - 8192 - 64) / 6; fit < n {
		b.Logf("the hard RLIMIT_NOFILE of %d holds %d registrations beside 8192 connections: registering %d of %d", lim.Max, fit, fit, n)
		n = fit
	}
	for i := 0; i < b.N; i++ {
		r := runStorm(b, n, clients)
		b.Logf("%d registrations in %v (%.0f/s) from %d clients; /health during the storm: %d answers, p50 %v, p99 %v, max %v; server: %d threads, %d fds, %d MB RSS",
			n, r.took.Round(time.Millisecond), float64(n)/r.took.Seconds(), clients, len(r.health),
			r.pct(0.5), r.pct(0.99), r.pct(1), r.threads, r.fds, r.rss>>20)
		b.ReportMetric(float64(r.pct(0.99).Microseconds()), "health-p99-µs")
		b.ReportMetric(float64(r.pct(1).Microseconds()), "health-max-µs")
		b.ReportMetric(float64(r.threads), "threads")
		b.ReportMetric(float64(r.rss)/float64(n), "RSS-B/reg")
	}
}

type stormResult struct {
	took         time.Duration
	health       []time.Duration // sorted
	threads, fds int
	rss          int64
}

// pct is the q quantile of the /health latencies (1: the largest).
func (r *stormResult) pct(q float64) time.Duration {
	if len(r.health) == 0 {
		return 0
	}
	return r.health[min(int(q*float64(len(r.health))), len(r.health)-1)]
}

func runStorm(tb testing.TB, n, clients int) stormResult {
	if n > 20000 {
		tb.Fatalf("%d registrations: at most 20000 (loopback ports 10000..29999)", n)
	}
	cpus := allowedCPUs(tb)
	l, err := layoutFor(cpus, max(len(cpus)/2, 1), 1)
	if err != nil {
		tb.Fatal(err)
	}
	s := startServerOn(tb, l.server, "--max-registrations", fmt.Sprint(n))
	pinSelf(tb, l.client)
	body := func(i int) string {
		return fmt.Sprintf(`{"endpoint":"tcp://127.0.0.1:%d","type":"vLLM","modelname":"m","instance_id":"storm-%05d","block_size":16,"dp_rank":0}`,
			10000+i, i)
	}
	var (
		stop   atomic.Bool
		health []time.Duration
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		for !stop.Load() {
			t0 := time.Now()
			resp, err := c.Get(s.url("/health"))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != 200 {
				tb.Errorf("/health during the storm: %v %v", err, resp)
				return
			}
			health = append(health, time.Since(t0))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var next atomic.Int64
	start := time.Now()
	var cw sync.WaitGroup
	for c := 0; c < clients; c++ {
		cw.Add(1)
		go func() {
			defer cw.Done()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				resp, err := hc.Post(s.url("/register"), "application/json", strings.NewReader(body(i)))
				if err != nil {
					tb.Errorf("register %d: %v", i, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					tb.Errorf("register %d: %d %s", i, resp.StatusCode, b)
					return
				}
			}
		}()
	}
	cw.Wait()
	took := time.Since(start)
	stop.Store(true)
	wg.Wait()
	slices.Sort(health)
	pid := s.cmd.Process.Pid
	rss, err := ProcRSS(pid)
	if err != nil {
		tb.Fatal(err)
	}
	fds, err := os.ReadDir(filepath.Join("/proc", fmt.Sprint(pid), "fd"))
	if err != nil {
		tb.Fatal(err)
	}
	return stormResult{took: took, health: health, threads: s.threads(tb), fds: len(fds), rss: rss}
}

// TestRegistrationStormHarness runs a small storm: every registration is
// held, /health answered throughout, and the server's thread count is that
// of an idle conductor, not one per registration.
func TestRegistrationStormHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a conductor")
	}
	const n = 300
	r := runStorm(t, n, 4)
	if len(r.health) == 0 {
		t.Fatal("no /health answer during the storm")
	}
	if r.threads > 64 {
		t.Fatalf("%d server threads with %d registrations", r.threads, n)
	}
	t.Logf("%d registrations in %v; /health max %v; %d threads, %d fds", n, r.took, r.pct(1), r.threads, r.fds)
}
