package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/hash"
)

// memoMetrics exposes the hash memo's counters at scrape time:
// conductor_hash_memo_{hits,misses,evictions}_total (blocks; hits include the
// blocks served from recent prompts), conductor_hash_memo_bytes (the table's
// fixed size; 0 when off), and for the recent-prompt level
// conductor_hash_memo_prompt_hits_total (blocks served from a stored prompt),
// conductor_hash_memo_prompt_{admissions,evictions}_total (prompts stored and
// dropped), conductor_hash_memo_prompt_bytes (stored now) and
// conductor_hash_memo_prompt_limit_bytes (its bound; 0 when off).
func memoMetrics(m *hash.Memo) *metrics.Set {
	set := metrics.NewSet()
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := m.Stats()
		metrics.WriteCounterUint64(w, "conductor_hash_memo_hits_total", st.Hits)
		metrics.WriteCounterUint64(w, "conductor_hash_memo_misses_total", st.Misses)
		metrics.WriteCounterUint64(w, "conductor_hash_memo_evictions_total", st.Evictions)
		metrics.WriteGaugeUint64(w, "conductor_hash_memo_bytes", uint64(st.Bytes))
		metrics.WriteCounterUint64(w, "conductor_hash_memo_prompt_hits_total", st.PromptHits)
		metrics.WriteCounterUint64(w, "conductor_hash_memo_prompt_admissions_total", st.PromptAdmissions)
		metrics.WriteCounterUint64(w, "conductor_hash_memo_prompt_evictions_total", st.PromptEvictions)
		metrics.WriteGaugeUint64(w, "conductor_hash_memo_prompt_bytes", uint64(st.PromptBytes))
		metrics.WriteGaugeUint64(w, "conductor_hash_memo_prompt_limit_bytes", uint64(st.PromptLimit))
	})
	return set
}

// errPprofAddr rejects a --pprof-addr that is not a loopback host:port.
var errPprofAddr = errors.New("conductor: --pprof-addr must be a loopback host:port (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)")

// startPprof serves net/http/pprof on its own loopback listener, apart from
// the API server (profiles expose internals, and the API stays fasthttp).
// The returned server is closed at shutdown.
func startPprof(addr string, log *slog.Logger) (*http.Server, net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errPprofAddr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, nil, fmt.Errorf("%w: got %q", errPprofAddr, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
	log.Info("pprof listening", "addr", ln.Addr().String())
	return srv, ln, nil
}
