package dump

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// RecoverOptions configure Recover. The zero value is valid.
type RecoverOptions struct {
	// Timeout bounds connecting to a peer and receiving its response headers
	// (the body may take longer). Default 10s (Dynamo's).
	Timeout time.Duration
	// Indexers, when set, receives the indexers (and block sizes) of a
	// Dynamo-form dump (the Dynamo surface). Default nil.
	Indexers Indexers
	// Token, when set, is sent as "Authorization: Bearer <Token>" (a peer
	// with an admin token answers /dump only to it). Default "": none.
	Token string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Recover tries each peer (a base URL: http://host:port) in order, fetches
// GET <peer>/dump (either port of a conductor, either form) and restores the
// first dump it receives into ix (Restore). The caller holds the index's
// apply gate (core.Index.HoldApplies) from before its listeners subscribe
// until Recover returns, so the listeners buffer meanwhile; each restored
// stream then skips its buffered batches up to the dumped watermark
// (core.RestoreStream).
//
// No reachable peer is not an error (ok=false: start empty). A dump that
// fails part-way is not retried from another peer (what was restored stays;
// live events converge the rest) and is returned as an error.
func Recover(ctx context.Context, ix *core.Index, peers []string, opts RecoverOptions) (st Stats, ok bool, err error) {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		ResponseHeaderTimeout: opts.Timeout,
		DisableCompression:    true,
	}}
	defer client.CloseIdleConnections()
	for _, p := range peers {
		url := strings.TrimRight(p, "/") + "/dump"
		req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if rerr != nil {
			opts.Logger.Warn("peer recovery: bad peer URL", "peer", p, "err", rerr)
			continue
		}
		if opts.Token != "" {
			req.Header.Set("Authorization", "Bearer "+opts.Token)
		}
		resp, rerr := client.Do(req)
		if rerr != nil {
			opts.Logger.Warn("peer recovery: peer unreachable", "peer", p, "err", rerr)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			opts.Logger.Warn("peer recovery: peer refused", "peer", p, "status", resp.StatusCode)
			continue
		}
		start := time.Now()
		st, err = Restore(ix, resp.Body, opts.Indexers)
		_ = resp.Body.Close()
		st.Peer, st.Duration = p, time.Since(start)
		if err != nil {
			return st, true, fmt.Errorf("recover from %s: %w", p, err)
		}
		opts.Logger.Info("peer recovery done", "peer", p, "streams", st.Streams, "holdings", st.Holdings,
			"engine_entries", st.Engine, "missing_streams", st.MissingStream, "skipped", st.Skipped,
			"bytes", st.Bytes, "duration", st.Duration)
		return st, true, nil
	}
	opts.Logger.Info("peer recovery: no peer answered; starting empty", "peers", len(peers))
	return st, false, nil
}
