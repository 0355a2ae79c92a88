package mooncake

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestShutdownDrainsInFlight: Shutdown stops accepting new connections at once,
// lets the in-flight request finish with its response, then returns.
func TestShutdownDrainsInFlight(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	br := apitest.NewBlockingRegistrar(ix)
	s, err := newServer(ix, br, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	addr := ln.Addr().String()

	status := make(chan int, 1)
	go func() {
		var req fasthttp.Request
		var resp fasthttp.Response
		req.SetRequestURI("http://" + addr + "/register")
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/msgpack")
		req.SetBody(mp(baseReg()))
		if err := fasthttp.DoTimeout(&req, &resp, apitest.WaitBound); err != nil {
			status <- -1
			return
		}
		status <- resp.StatusCode()
	}()
	select {
	case <-br.Entered:
	case <-time.After(apitest.WaitBound):
		t.Fatal("request never reached the registrar")
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), apitest.WaitBound)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	// the listener closes while the request is in flight
	deadline := time.Now().Add(apitest.WaitBound)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting during shutdown")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) before the in-flight request finished", err)
	default:
	}
	close(br.Release)
	if got := <-status; got != 200 {
		t.Fatalf("in-flight request: status %d", got)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if len(ix.Services()) != 1 {
		t.Fatal("drained registration not applied")
	}
}

// TestConcurrentQueriesAndRegistrations: queries in both dialects run while
// registrations come and go; every response is well-formed and every row keeps
// the tier order. Bounded by a fixed operation count; the seed is logged.
func TestConcurrentQueriesAndRegistrations(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	if r := env.postMP(t, "/register", mp(baseReg())); r.status != 200 {
		t.Fatal(r.status)
	}
	tokens := seqTokens(256, 1)
	h := chain(t, cborProfile(t), tokens, 16, "", "")
	apply(t, env.reg.sub(t, "engine-a", "default", 0), storeBatch("GPU", 16, h, nil))
	seed := rand.Uint64()
	t.Logf("seed %d", seed)

	const workers, ops = 4, 60
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; i < ops; i++ {
				n := rng.IntN(len(tokens) + 1)
				var r response
				if rng.IntN(2) == 0 {
					r = env.postMP(t, "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", tokens[:n]}))
				} else {
					r = env.postJSON(t, "/query", jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", tokens[:n]}))
				}
				if r.status != 200 {
					errs <- fmt.Errorf("query status %d", r.status)
					return
				}
				m := decodeMap(t, r)
				if inst, ok := m["instances"].(map[string]any); ok {
					m = inst
				} else if d, ok := m["default"].(map[string]any); ok {
					m = d
				}
				for id, row := range m {
					rm := row.(map[string]any)
					var v [4]int64
					for i, k := range []string{"device", "cpu_local", "cpu_share", "disk"} {
						v[i], _ = rm[k].(interface{ Int64() (int64, error) }).Int64()
					}
					if !(v[0] <= v[1] && v[1] <= v[2] && v[2] <= v[3] && v[3] <= int64(n/16*16)) {
						errs <- fmt.Errorf("row %s out of order for %d tokens: %v", id, n, v)
						return
					}
				}
			}
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < ops; i++ {
			inst := fmt.Sprintf("churn-%d", i%3)
			body := mp(with(baseReg(), "instance_id", inst, "endpoint", "tcp://churn/"+inst))
			if r := env.postMP(t, "/register", body); r.status != 200 {
				errs <- fmt.Errorf("register status %d: %s", r.status, r.body)
				return
			}
			if r := env.postMP(t, "/unregister", mp(obj{"instance_id", inst, "dp_rank", 0})); r.status != 200 {
				errs <- fmt.Errorf("unregister status %d", r.status)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
