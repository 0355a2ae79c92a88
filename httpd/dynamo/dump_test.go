package dynamo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// simEngine publishes vLLM-like batches under the xxh3 profile: engine hashes
// are a hash of the token prefix (so conductor keeps an engine map), stores
// repeat (copies), removes are per copy, some blocks go to CPU.
type simEngine struct {
	rng     *rand.Rand
	bs      int
	prompts [][]int32
	cached  map[uint64]int
	order   []uint64
	seq     uint64
}

func newSimEngine(seed int64, bs int) *simEngine {
	e := &simEngine{rng: rand.New(rand.NewSource(seed)), bs: bs, cached: map[uint64]int{}}
	for p := 0; p < 10; p++ {
		pr := make([]int32, 6*bs)
		for i := range pr {
			pr[i] = int32(e.rng.Intn(40))
			if i < 2*bs && p%2 == 0 {
				pr[i] = int32(i) // shared prefix
			}
		}
		e.prompts = append(e.prompts, pr)
	}
	return e
}

func (e *simEngine) hashOf(prefix []int32) uint64 {
	b := make([]byte, 0, 4*len(prefix))
	for _, t := range prefix {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return xxh3.HashSeed(b, 99)
}

func (e *simEngine) next() *core.Batch {
	b := &core.Batch{Seq: e.seq, HasSeq: true}
	e.seq++
	ev := b.NextEvent()
	if len(e.order) > 0 && e.rng.Intn(3) == 0 {
		i := e.rng.Intn(len(e.order))
		h := e.order[i]
		ev.Kind = core.EventRemoved
		ev.Hashes = append(ev.Hashes, h)
		if e.cached[h]--; e.cached[h] == 0 {
			delete(e.cached, h)
			e.order = append(e.order[:i], e.order[i+1:]...)
		}
		return b
	}
	pr := e.prompts[e.rng.Intn(len(e.prompts))]
	n := 1 + e.rng.Intn(len(pr)/e.bs)
	ev.Kind, ev.BlockSize, ev.HasTokens = core.EventStored, e.bs, true
	ev.Tokens = append(ev.Tokens, pr[:n*e.bs]...)
	if e.rng.Intn(5) == 0 {
		ev.Medium = []byte("CPU")
	}
	for i := 0; i < n; i++ {
		h := e.hashOf(pr[:(i+1)*e.bs])
		ev.Hashes = append(ev.Hashes, h)
		if ev.Medium == nil {
			if e.cached[h] == 0 {
				e.order = append(e.order, h)
			}
			e.cached[h]++
		}
	}
	return b
}

func dynAnswers(t testing.TB, e *dynEnv, sims ...*simEngine) []string {
	t.Helper()
	var out []string
	for _, s := range sims {
		for _, pr := range s.prompts {
			for n := s.bs; n <= len(pr); n += s.bs {
				r := e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(pr[:n])+`,"model_name":"llama"}`)
				out = append(out, canonJSON(t, string(r.body)))
			}
		}
	}
	return out
}

// TestDumpRoundTripBothForms: a replica restored from either /dump form
// (Dynamo port, main port) answers every query exactly like the source, and
// keeps doing so as the same later events (per-copy removes by engine hash,
// which need the dumped engine map) reach both.
func TestDumpRoundTripBothForms(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	a := startDyn(t, Options{})
	sims := []*simEngine{newSimEngine(seed, 4), newSimEngine(seed+1, 4)}
	ref := startDyn(t, Options{}) // sees every batch
	var subsA, subsRef []*core.Subscription
	for i := range sims {
		subsA = append(subsA, registerDyn(t, a, 1, i, 4, "llama", ""))
		subsRef = append(subsRef, registerDyn(t, ref, 1, i, 4, "llama", ""))
	}
	var later [2][]*core.Batch
	for i, s := range sims {
		for j := 0; j < 300; j++ {
			bt := s.next()
			subsA[i].Apply(bt)
			subsRef[i].Apply(bt)
		}
		for j := 0; j < 150; j++ {
			bt := s.next()
			later[i] = append(later[i], bt)
			subsRef[i].Apply(bt)
		}
	}
	want := dynAnswers(t, a, sims...)
	wantLater := dynAnswers(t, ref, sims...)
	if strings.Join(want, "") == strings.Join(wantLater, "") {
		t.Fatal("later batches changed nothing: the test would not see a lost engine map")
	}

	dynDump := a.do(t, "GET", "/dump", "")
	mainDump := a.main.do(t, "GET", "/dump", "", nil)
	if dynDump.status != 200 || mainDump.status != 200 {
		t.Fatalf("dump status %d %d", dynDump.status, mainDump.status)
	}
	checkDynamoDumpShape(t, dynDump.body)
	checkMainDumpShape(t, mainDump.body)

	for _, form := range []struct {
		name string
		body []byte
	}{{"dynamo", dynDump.body}, {"main", mainDump.body}} {
		t.Run(form.name, func(t *testing.T) {
			b := startDyn(t, Options{})
			var subsB []*core.Subscription
			for i := range sims {
				subsB = append(subsB, registerDyn(t, b, 1, i, 4, "llama", ""))
			}
			st, err := dump.Restore(b.ix, bytes.NewReader(form.body), b.d)
			if err != nil {
				t.Fatal(err)
			}
			if st.Streams != 2 || st.MissingStream != 0 || st.Skipped != 0 || st.Holdings == 0 || st.Engine == 0 {
				t.Fatalf("restore stats %+v", st)
			}
			if got := dynAnswers(t, b, sims...); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("restored replica differs")
			}
			for i := range sims {
				for _, bt := range later[i] {
					if st := subsB[i].Apply(bt); st.Recovered {
						t.Fatalf("batch %d skipped as recovered", bt.Seq)
					}
				}
			}
			if got := dynAnswers(t, b, sims...); strings.Join(got, "\n") != strings.Join(wantLater, "\n") {
				t.Fatalf("replica differs after later events")
			}
		})
	}
}

// checkDynamoDumpShape: {"llama:default": {"block_size": 4, "events": [RouterEvent...]}}
// with exact u64s (a key above 2^53 survives a json.Number round trip).
func checkDynamoDumpShape(t testing.TB, body []byte) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var root map[string]struct {
		BlockSize json.Number `json:"block_size"`
		Events    []struct {
			WorkerID    json.Number `json:"worker_id"`
			StorageTier string      `json:"storage_tier"`
			Event       struct {
				EventID json.Number `json:"event_id"`
				Data    struct {
					Stored struct {
						ParentHash    *json.Number `json:"parent_hash"`
						StartPosition *json.Number `json:"start_position"`
						Blocks        []struct {
							BlockHash  json.Number `json:"block_hash"`
							TokensHash json.Number `json:"tokens_hash"`
						} `json:"blocks"`
					} `json:"stored"`
				} `json:"data"`
				DPRank json.Number `json:"dp_rank"`
			} `json:"event"`
		} `json:"events"`
	}
	if err := d.Decode(&root); err != nil {
		t.Fatalf("dynamo dump is not the seed's shape: %v\n%.400s", err, body)
	}
	ix, ok := root["llama:default"]
	if len(root) != 1 || !ok || ix.BlockSize.String() != "4" || len(ix.Events) == 0 {
		t.Fatalf("dynamo dump root: %d keys, %+v", len(root), ix.BlockSize)
	}
	big := false
	for _, ev := range ix.Events {
		if ev.WorkerID.String() != "1" {
			t.Fatalf("worker_id %s", ev.WorkerID)
		}
		for _, b := range ev.Event.Data.Stored.Blocks {
			var u uint64
			if _, err := fmt.Sscan(b.TokensHash.String(), &u); err != nil || fmt.Sprint(u) != b.TokensHash.String() {
				t.Fatalf("tokens_hash %s is not an exact u64", b.TokensHash)
			}
			big = big || u > 1<<53
		}
	}
	if !big {
		t.Fatal("no hash above 2^53 in the dump (the exactness check saw nothing)")
	}
}

func checkMainDumpShape(t testing.TB, body []byte) {
	t.Helper()
	var root struct {
		Format  string `json:"format"`
		Streams []struct {
			Stream map[string]any    `json:"stream"`
			Events []json.RawMessage `json:"events"`
		} `json:"streams"`
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&root); err != nil {
		t.Fatalf("main dump: %v", err)
	}
	if root.Format != "conductor-dump/1" || len(root.Streams) != 2 {
		t.Fatalf("main dump %+v", root)
	}
	s := root.Streams[0].Stream
	if s["instance_id"] != "1" || s["tenant_id"] != "default" || s["model_name"] != "llama" || s["block_size"] != json.Number("4") {
		t.Fatalf("stream head %v", s)
	}
	if hp, _ := s["hash_profile"].(map[string]any); hp["strategy"] != "xxh3" || hp["python_hash_seed"] != "1337" {
		t.Fatalf("hash_profile %v", s["hash_profile"])
	}
}

// slowReader reads in small steps with a pause, like a slow /dump client.
type slowReader struct {
	r     io.Reader
	pause time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.pause)
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	return s.r.Read(p)
}

// TestDumpOutlivesWriteTimeout: a streamed /dump that takes longer than the
// server's WriteTimeout completes while it keeps moving (the write deadline
// is pushed forward per flush); the client here needs at least twice the
// timeout to read it (over 200 reads of at most 64 KiB, 20 ms apart).
func TestDumpOutlivesWriteTimeout(t *testing.T) {
	ix, _ := buildDumpIndex(t, 100_000)
	var want bytes.Buffer
	bw := bufio.NewWriter(&want)
	if err := dump.Write(ix, bw); err != nil {
		t.Fatal(err)
	}
	s, err := newMooncake(ix, newCoreRegistrar(ix), server.Options{WriteTimeout: 2 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	// Bounded: a dump that stops moving fails here instead of hanging.
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Get("http://" + ln.Addr().String() + "/dump")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	// Read into room for the whole dump: no regrowth copies of a large
	// buffer stall the reader (under -race on a loaded machine they took
	// longer than the write timeout).
	got := make([]byte, 0, want.Len()+64<<10)
	sr := &slowReader{r: resp.Body, pause: 20 * time.Millisecond}
	for err == nil {
		var n int
		n, err = sr.Read(got[len(got):cap(got)])
		got = got[:len(got)+n]
		if len(got) == cap(got) {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	t.Logf("read %d bytes in %v", len(got), time.Since(start))
	if err != nil {
		t.Fatalf("after %d of %d bytes: %v", len(got), want.Len(), err)
	}
	// Engine maps are walked in Go map order: compare sizes and content.
	if len(got) != want.Len() || !json.Valid(got) {
		t.Fatalf("dump of %d bytes, want %d (valid JSON: %v)", len(got), want.Len(), json.Valid(got))
	}
	rix := core.New(core.Options{Logger: quietLogger()})
	rd, _ := newDynamo(rix, newCoreRegistrar(rix), Options{Logger: quietLogger()})
	if err := rd.Register(Worker{InstanceID: 1, Endpoint: "tcp://127.0.0.1:1", ModelName: "m", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	if st, err := dump.Restore(rix, bytes.NewReader(got), rd); err != nil || rix.TierBlocks() != ix.TierBlocks() || st.Engine != 100_000 {
		t.Fatalf("restored %v (%+v, %v), source %v", rix.TierBlocks(), st, err, ix.TierBlocks())
	}
}

// TestDynamoDumpManyIndexers: indexers are walked concurrently and written
// in key order; a replica restored from the dump answers every indexer's
// queries like the source.
func TestDynamoDumpManyIndexers(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	models := []string{"c-model", "a-model", "b-model", "d-model", "e-model"}
	a, b := startDyn(t, Options{}), startDyn(t, Options{})
	sims := make([]*simEngine, len(models))
	for i, m := range models {
		sa := registerDyn(t, a, i+1, 0, 4, m, "")
		registerDyn(t, b, i+1, 0, 4, m, "")
		sims[i] = newSimEngine(seed+int64(i), 4)
		for j := 0; j < 200; j++ {
			sa.Apply(sims[i].next())
		}
	}
	r := a.do(t, "GET", "/dump", "")
	var order []string
	d := json.NewDecoder(bytes.NewReader(r.body))
	if _, err := d.Token(); err != nil {
		t.Fatal(err)
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, k.(string))
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(order, ",") != "a-model:default,b-model:default,c-model:default,d-model:default,e-model:default" {
		t.Fatalf("indexer order %v", order)
	}
	if _, err := dump.Restore(b.ix, bytes.NewReader(r.body), b.d); err != nil {
		t.Fatal(err)
	}
	if a.ix.TierBlocks() != b.ix.TierBlocks() {
		t.Fatalf("replica %v, source %v", b.ix.TierBlocks(), a.ix.TierBlocks())
	}
	for i, m := range models {
		for _, pr := range sims[i].prompts {
			q := `{"token_ids":` + jsonEnc(pr) + `,"model_name":"` + m + `"}`
			if x, y := a.do(t, "POST", "/query", q), b.do(t, "POST", "/query", q); !bytes.Equal(x.body, y.body) {
				t.Fatalf("%s: source %s replica %s", m, x.body, y.body)
			}
		}
	}
}

// TestDynamoDumpAbandoned: a client that goes away mid-dump releases every
// walker and stream lock: ingest continues.
func TestDynamoDumpAbandoned(t *testing.T) {
	ix, d := buildDumpIndex(t, 100_000)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Shutdown(ctx)
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute)) // a stalled server fails the read
	if _, err := conn.Write([]byte("GET /dump HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close() // gone after 64 KiB of a ~18 MB dump
	sub, _ := ix.Lookup(core.ServiceKey{InstanceID: "1", TenantID: "default"})
	applied := make(chan struct{})
	go func() {
		b := &core.Batch{}
		ev := b.NextEvent()
		ev.Kind = core.EventRemoved
		ev.Hashes = append(ev.Hashes, 1)
		sub.Apply(b)
		close(applied)
	}()
	select {
	case <-applied:
	case <-time.After(2 * time.Minute): // a failure bound only
		t.Fatal("the stream's lock is still held after the client left")
	}
}
