package fuzz

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/dynamo"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// Fuzz targets for the Dynamo dialect's request parsers (through the real
// handler) and for the /dump reader used by peer recovery.

// coreOnly registers directly in the index (no ZMQ).
type coreOnly struct{ ix *core.Index }

func (c coreOnly) Register(r core.Registration) (bool, error) {
	_, created, err := c.ix.Register(r)
	return created, err
}

func (c coreOnly) Unregister(k core.ServiceKey) (core.Registration, error) {
	return c.ix.Unregister(k)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// dynFixture is a Dynamo server over an index holding one worker's blocks.
func dynFixture(t testing.TB) (*dynamo.Server, *core.Index) {
	ix := core.New(core.Options{Logger: quiet()})
	c, err := server.New(ix, coreOnly{ix}, server.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamo.New(c, dynamo.Options{Logger: quiet(), MaxQueryTokens: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(dynamo.Worker{InstanceID: 1, Endpoint: "tcp://127.0.0.1:1", ModelName: "m", BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	s, _ := ix.Lookup(core.ServiceKey{InstanceID: "1", TenantID: "default"})
	b := &core.Batch{}
	e := b.NextEvent()
	e.Kind, e.BlockSize, e.HasTokens = core.EventStored, 4, true
	for i := int32(1); i <= 16; i++ {
		e.Tokens = append(e.Tokens, i)
	}
	e.Hashes = append(e.Hashes, 11, 12, 13, 14)
	s.Apply(b)
	return d, ix
}

var dynPaths = []string{"/register", "/unregister", "/query", "/query_by_hash", "/register_peer", "/deregister_peer"}

// FuzzDynamoHTTP: no panic; a known status; a JSON body; a 200 query has
// gpu ≤ cpu ≤ disk = longest_matched ≤ 4 × blocks sent and dp ≤ gpu.
func FuzzDynamoHTTP(f *testing.F) {
	for _, s := range []string{
		`{"token_ids":[1,2,3,4,5,6,7,8],"model_name":"m"}`,
		`{"block_hashes":[14643705804678351452,-1],"model_name":"m","routing_group":"default"}`,
		`{"block_hashes":[1],"model_name":"m","cache_salt":"x"}`,
		`{"instance_id":"2","endpoint":"tcp://127.0.0.1:9","model_name":"m","block_size":4,"dp_rank":1,"tenant_id":"t"}`,
		`{"instance_id":1,"model_name":"m","dp_rank":0}`,
		`{"url":"http://peer:1"}`, `{`, `[]`, `{"token_ids":[1.5]}`,
	} {
		for i := range dynPaths {
			f.Add([]byte(s), uint8(i))
		}
	}
	d, _ := dynFixture(f)
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		if len(body) > httpdMaxInput {
			return
		}
		path := dynPaths[int(which)%len(dynPaths)]
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBody(body)
		d.Handler(&ctx)
		st := ctx.Response.StatusCode()
		switch st {
		case 200, 201, 400, 404, 409, 415, 429:
		default:
			t.Fatalf("%s: status %d %s", path, st, ctx.Response.Body())
		}
		if !json.Valid(ctx.Response.Body()) {
			t.Fatalf("%s: response is not JSON: %q", path, ctx.Response.Body())
		}
		if st != 200 || (path != "/query" && path != "/query_by_hash") {
			return
		}
		var res struct {
			Instances map[string]struct {
				Longest, GPU, CPU, Disk int64
				DP                      map[string]int64
			}
		}
		dec := json.NewDecoder(bytes.NewReader(ctx.Response.Body()))
		if err := dec.Decode(&res); err != nil {
			t.Fatal(err)
		}
		for id, r := range res.Instances {
			if !(0 <= r.GPU && r.GPU <= r.CPU && r.CPU <= r.Disk) || r.Disk > 16 {
				t.Fatalf("instance %s: %+v", id, r)
			}
			for _, v := range r.DP {
				if v > r.GPU {
					t.Fatalf("instance %s: dp %d > gpu %d", id, v, r.GPU)
				}
			}
		}
	})
}

// FuzzRestoreDump: the dump reader never panics, fails only with
// dump.ErrFormat (or a registry conflict from a Dynamo indexer's block size),
// and whatever it restored dumps and restores again to the same holdings.
func FuzzRestoreDump(f *testing.F) {
	_, src := dynFixture(f)
	var main bytes.Buffer
	w := bufio.NewWriter(&main)
	if err := dump.Write(src, w); err != nil {
		f.Fatal(err)
	}
	f.Add(main.Bytes())
	f.Add([]byte(`{"m:default":{"block_size":4,"events":[{"worker_id":1,"storage_tier":"device","event":{"event_id":3,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[]}},"dp_rank":0},"conductor_stream":{"instance_id":"1","dp_rank":0,"has_seq":true}},
	  {"worker_id":1,"storage_tier":"host_pinned","event":{"event_id":3,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":5,"tokens_hash":5,"mm_extra_info":null}]}},"dp_rank":0},"conductor_copies":2},
	  {"worker_id":1,"storage_tier":"device","event":{"event_id":3,"data":"cleared","dp_rank":0},"conductor_engine_hashes":[[1,2,3]]}]}}`))
	f.Add([]byte(`{"format":"conductor-dump/1","streams":[{"stream":{"instance_id":"1","dp_rank":0,"tenant_id":"default","model_name":"m","lora_name":"","block_size":4,"event_id":18446744073709551615},"events":[{"event_type":"stored","tenant_id":"default","model_name":"m","lora_name":"","block_size":4,"instance_id":"1","dp_rank":0,"medium":"disk","seq_hashes":[18446744073709551615],"copies":65535}]}]}`))
	f.Add([]byte(`{"format":"conductor-dump/1","streams":[{"stream":{"instance_id":"1","dp_rank":0,"tenant_id":"default","model_name":"m","lora_name":"","block_size":4,"gap_marks":[1800000000000000000,1800000000000000001]},"events":[{"event_type":"stored","tenant_id":"default","model_name":"m","lora_name":"","block_size":4,"instance_id":"1","dp_rank":0,"medium":"gpu","seq_hashes":[7,8],"copies":1,"gap_expires_ns":1800000000000000001}]}]}`))
	f.Add([]byte(`{"format":"x"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > httpdMaxInput {
			return
		}
		d, ix := dynFixture(t)
		_, err := dump.Restore(ix, bytes.NewReader(body), d)
		if err != nil && !errors.Is(err, dump.ErrFormat) && !errors.Is(err, core.ErrConflict) {
			t.Fatalf("error %T %v", err, err)
		}
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		if err := dump.Write(ix, bw); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out.Bytes()) {
			t.Fatalf("dump is not JSON: %.300s", out.Bytes())
		}
		ix2 := core.New(core.Options{Logger: quiet()})
		if _, _, err := ix2.Register(core.Registration{Endpoint: "tcp://127.0.0.1:1", Type: core.PublisherVLLM, ModelName: "m",
			InstanceID: "1", BlockSize: 4}); err != nil {
			t.Fatal(err)
		}
		if _, err := dump.Restore(ix2, bytes.NewReader(out.Bytes()), nil); err != nil {
			t.Fatalf("re-restore: %v", err)
		}
		if ix2.TierBlocks() != ix.TierBlocks() {
			t.Fatalf("holdings %v after a round trip, %v before", ix2.TierBlocks(), ix.TierBlocks())
		}
	})
}
