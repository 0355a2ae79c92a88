package dynamo

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/internal/suggest"
)

// Keys of a request body that its route does not know are ignored, as
// Dynamo (serde) ignores them, so a router written for Dynamo works
// unchanged; but a misspelled routing_group, lora_name or cache_salt then
// changes the answer with no error. So the first such key of a request is
// named back in the X-Conductor-Ignored-Key response header, counted in
// conductor_dynamo_ignored_keys_total{endpoint} and logged at WARN with the
// known key nearest to it, at most once per ignoredLogEvery
// (TestDynamoIgnoredKeys). The keys Dynamo itself accepts and ignores
// (tenant_id, additional_salt on /register) are not reported.

const (
	ignoredHeader   = "X-Conductor-Ignored-Key"
	ignoredLogEvery = 10 * time.Second
)

// routeKeys are the keys each route with a body knows, for suggestions.
var routeKeys = [numDynRoutes][]string{
	dRegister:    {"instance_id", "endpoint", "model_name", "block_size", "routing_group", "dp_rank", "replay_endpoint", "type", "additional_salt", "tenant_id"},
	dUnregister:  {"instance_id", "model_name", "routing_group", "dp_rank"},
	dQuery:       {"token_ids", "model_name", "routing_group", "lora_name", "cache_salt"},
	dQueryByHash: {"block_hashes", "model_name", "routing_group", "cache_salt"},
}

// ignore notes key as skipped unless an earlier one was.
func ignore(st *server.State, key []byte) {
	if st.Ignored == nil {
		st.Ignored = key
	}
}

// noteIgnored reports the key the request's parser skipped, if any.
func (d *Server) noteIgnored(ctx *fasthttp.RequestCtx, st *server.State, r int) {
	k := st.Ignored
	if k == nil {
		return
	}
	ctx.Response.Header.Set(ignoredHeader, headerText(k))
	if c := d.m.ignored[r]; c != nil {
		c.Inc()
	}
	now := time.Now().UnixNano()
	next := d.ignoredLogNext.Load()
	if now < next || !d.ignoredLogNext.CompareAndSwap(next, now+int64(ignoredLogEvery)) {
		d.ignoredQuiet.Add(1)
		return
	}
	args := []any{"endpoint", dynPaths[r], "key", string(k), "suppressed", d.ignoredQuiet.Swap(0)}
	if n := suggest.Nearest(string(k), routeKeys[r]); n != "" {
		args = append(args, "did_you_mean", n)
	}
	d.opts.Logger.Warn("request key ignored, as Dynamo ignores keys it does not know: check its spelling", args...)
}

// headerText is k as a header value: as is when it is printable ASCII
// without quotes or backslashes, else quoted with Go escapes.
func headerText(k []byte) string {
	for _, c := range k {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return strconv.QuoteToASCII(string(k))
		}
	}
	return string(k)
}
