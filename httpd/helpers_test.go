package httpd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// coreRegistrar registers directly in the index (no ZMQ) and keeps the
// subscriptions so tests can apply batches as a publisher would.
type coreRegistrar struct {
	ix   *core.Index
	mu   sync.Mutex
	subs map[core.ServiceKey]*core.Subscription
}

func newCoreRegistrar(ix *core.Index) *coreRegistrar {
	return &coreRegistrar{ix: ix, subs: map[core.ServiceKey]*core.Subscription{}}
}

func (r *coreRegistrar) Register(reg core.Registration) (bool, error) {
	sub, created, err := r.ix.Register(reg)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	r.subs[sub.Key()] = sub
	r.mu.Unlock()
	return created, nil
}

func (r *coreRegistrar) Unregister(k core.ServiceKey) (core.Registration, error) {
	reg, err := r.ix.Unregister(k)
	if err == nil {
		r.mu.Lock()
		delete(r.subs, k)
		r.mu.Unlock()
	}
	return reg, err
}

func (r *coreRegistrar) sub(t testing.TB, inst, tenant string, rank int32) *core.Subscription {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.subs[core.ServiceKey{InstanceID: inst, TenantID: tenant, DPRank: rank}]
	if s == nil {
		t.Fatalf("no subscription %s|%s|%d", inst, tenant, rank)
	}
	return s
}

// testEnv is a real server on a loopback port.
type testEnv struct {
	s      *Server
	ix     *core.Index
	reg    *coreRegistrar
	addr   string
	client *fasthttp.HostClient
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startEnv(t testing.TB, opts Options, copts core.Options) *testEnv {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if copts.Logger == nil {
		copts.Logger = opts.Logger
	}
	ix := core.New(copts)
	reg := newCoreRegistrar(ix)
	s, err := New(ix, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	env := &testEnv{s: s, ix: ix, reg: reg, addr: ln.Addr().String(),
		client: &fasthttp.HostClient{Addr: ln.Addr().String(), MaxResponseBodySize: 256 << 20}}
	t.Cleanup(func() {
		env.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return env
}

type response struct {
	status int
	ct     string
	body   []byte
	allow  string
}

// do sends one request; ct "" sends no Content-Type header.
func (e *testEnv) do(t testing.TB, method, path, ct string, body []byte, hdr ...string) response {
	t.Helper()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + e.addr + path)
	req.Header.SetMethod(method)
	if ct != "" {
		req.Header.SetContentType(ct)
	} else {
		req.Header.SetNoDefaultContentType(true)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if body != nil {
		req.SetBody(body)
	}
	if err := e.client.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return response{status: resp.StatusCode(), ct: string(resp.Header.ContentType()),
		body: append([]byte(nil), resp.Body()...), allow: string(resp.Header.Peek("Allow"))}
}

func (e *testEnv) postMP(t testing.TB, path string, body []byte) response {
	t.Helper()
	return e.do(t, "POST", path, "application/msgpack", body)
}

func (e *testEnv) postJSON(t testing.TB, path, body string) response {
	t.Helper()
	return e.do(t, "POST", path, "application/json", []byte(body))
}

// obj is an ordered map for building request bodies (key, value, key, value...).
type obj []any

// has reports whether o has key k.
func (o obj) has(k string) bool {
	for i := 0; i+1 < len(o); i += 2 {
		if o[i] == k {
			return true
		}
	}
	return false
}

// mpRaw is a pre-encoded msgpack value.
type mpRaw []byte

// mpEnc encodes v: obj as a map in order; []int32, []uint64, []any as arrays;
// []byte as bin; mpRaw verbatim; scalars as msgp.AppendIntf does.
func mpEnc(b []byte, v any) []byte {
	switch x := v.(type) {
	case obj:
		b = msgp.AppendMapHeader(b, uint32(len(x)/2))
		for i := 0; i < len(x); i += 2 {
			if k, ok := x[i].(string); ok {
				b = msgp.AppendString(b, k)
			} else {
				b = mpEnc(b, x[i])
			}
			b = mpEnc(b, x[i+1])
		}
		return b
	case mpRaw:
		return append(b, x...)
	case []int32:
		b = msgp.AppendArrayHeader(b, uint32(len(x)))
		for _, t := range x {
			b = msgp.AppendInt32(b, t)
		}
		return b
	case []uint64:
		b = msgp.AppendArrayHeader(b, uint32(len(x)))
		for _, t := range x {
			b = msgp.AppendUint64(b, t)
		}
		return b
	case []any:
		b = msgp.AppendArrayHeader(b, uint32(len(x)))
		for _, t := range x {
			b = mpEnc(b, t)
		}
		return b
	}
	b, err := msgp.AppendIntf(b, v)
	if err != nil {
		panic(err)
	}
	return b
}

func mp(v any) []byte { return mpEnc(nil, v) }

// with returns o with key k set to v (replaced in place or appended); a nil v
// of type drop removes the key.
type dropKey struct{}

var drop = dropKey{}

func with(o obj, kvs ...any) obj {
	out := append(obj(nil), o...)
	for j := 0; j+1 < len(kvs); j += 2 {
		k, v := kvs[j], kvs[j+1]
		found := false
		for i := 0; i < len(out); i += 2 {
			if out[i] == k {
				found = true
				if _, ok := v.(dropKey); ok {
					out = append(out[:i:i], out[i+2:]...)
				} else {
					out[i+1] = v
				}
				break
			}
		}
		if !found {
			if _, ok := v.(dropKey); !ok {
				out = append(out, k, v)
			}
		}
	}
	return out
}

// jsonEnc renders o as JSON in key order (numbers as written by fmt).
func jsonEnc(v any) string {
	var b bytes.Buffer
	var enc func(v any)
	enc = func(v any) {
		switch x := v.(type) {
		case obj:
			b.WriteByte('{')
			for i := 0; i < len(x); i += 2 {
				if i > 0 {
					b.WriteByte(',')
				}
				enc(x[i])
				b.WriteByte(':')
				enc(x[i+1])
			}
			b.WriteByte('}')
		case rawJSON:
			b.WriteString(string(x))
		case []int32:
			b.WriteByte('[')
			for i, t := range x {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprint(&b, t)
			}
			b.WriteByte(']')
		case []uint64:
			b.WriteByte('[')
			for i, t := range x {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprint(&b, t)
			}
			b.WriteByte(']')
		default:
			j, err := json.Marshal(x)
			if err != nil {
				panic(err)
			}
			b.Write(j)
		}
	}
	enc(v)
	return b.String()
}

// rawJSON is a JSON fragment inserted verbatim by jsonEnc.
type rawJSON string

// canon decodes a response body (JSON or msgpack by its Content-Type) into a
// canonical JSON text: sorted keys, exact integers.
func canon(t testing.TB, r response) string {
	t.Helper()
	var v any
	switch {
	case r.ct == "application/msgpack":
		x, rest, err := msgp.ReadIntfBytes(r.body)
		if err != nil || len(rest) != 0 {
			t.Fatalf("response is not one msgpack object (%v, %d trailing): %x", err, len(rest), r.body)
		}
		v = x
	case r.ct == "application/json":
		d := json.NewDecoder(bytes.NewReader(r.body))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatalf("response is not JSON (%v): %s", err, r.body)
		}
		if d.More() {
			t.Fatalf("trailing JSON: %s", r.body)
		}
	default:
		t.Fatalf("unexpected content type %q: %s", r.ct, r.body)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// canonJSON canonicalises an expected JSON text.
func canonJSON(t testing.TB, s string) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("bad expected JSON %q: %v", s, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// decodeMap decodes a response into a generic map.
func decodeMap(t testing.TB, r response) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader([]byte(canon(t, r))))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("response is not a map: %v", err)
	}
	return m
}

// errorCase is one validation row: body → status, reason, field, index (-1: none).
type errorCase struct {
	name   string
	body   []byte
	status int
	reason string
	field  string
	index  int
}

// checkError asserts the error envelope of r.
func checkError(t testing.TB, r response, status int, reason, field string, index int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, canon(t, r))
	}
	m := decodeMap(t, r)
	if _, ok := m["error"].(string); !ok {
		t.Fatalf("no error text: %v", m)
	}
	if got, _ := m["reason"].(string); got != reason {
		t.Fatalf("reason %q, want %q (%v)", got, reason, m)
	}
	if got, _ := m["field"].(string); got != field {
		t.Fatalf("field %q, want %q (%v)", got, field, m)
	}
	gotIndex := -1
	if n, ok := m["index"].(json.Number); ok {
		i, _ := n.Int64()
		gotIndex = int(i)
	}
	if gotIndex != index {
		t.Fatalf("index %d, want %d (%v)", gotIndex, index, m)
	}
	wantKeys := 2
	if field != "" {
		wantKeys++
	}
	if index >= 0 {
		wantKeys++
	}
	if len(m) != wantKeys {
		t.Fatalf("error envelope has keys %v, want %d keys", keys(m), wantKeys)
	}
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func deepEqual(a, b any) bool { return reflect.DeepEqual(a, b) }

// Profiles used across tests.
func cborSpec() obj {
	return obj{"strategy", "vllm_v1", "algorithm", "sha256_cbor", "python_hash_seed", "0", "index_projection", "low64_be"}
}

func mustResolve(t testing.TB, s hash.Spec) hash.Profile {
	t.Helper()
	p, err := hash.Resolve(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func cborProfile(t testing.TB) hash.Profile {
	return mustResolve(t, hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
}

// chain returns the projected block keys of tokens under p.
func chain(t testing.TB, p hash.Profile, tokens []int32, bs int, lora, salt string) []uint64 {
	t.Helper()
	var l, s []byte
	if lora != "" {
		l = []byte(lora)
	}
	if salt != "" {
		s = []byte(salt)
	}
	h, err := hash.AppendChain(nil, &p, tokens, bs, l, s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// storeBatch is a one-event stored batch carrying engine hashes and, when
// tokens is non-nil, the blocks' token ids (needed under the xxh3 profile).
func storeBatch(medium string, bs int, hashes []uint64, tokens []int32) *core.Batch {
	b := &core.Batch{}
	e := b.NextEvent()
	e.Kind = core.EventStored
	e.Hashes = append(e.Hashes, hashes...)
	if tokens != nil {
		e.Tokens = append(e.Tokens, tokens...)
		e.HasTokens = true
	}
	e.BlockSize = bs
	if medium != "" {
		e.Medium = []byte(medium)
	}
	return b
}

func apply(t testing.TB, s *core.Subscription, b *core.Batch) {
	t.Helper()
	st := s.Apply(b)
	if st.Dropped != 0 || st.Closed {
		t.Fatalf("apply dropped events: %+v", st)
	}
}

func seqTokens(n int, base int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

// trunc drops the last n bytes of b.
func trunc(b []byte, n int) []byte { return b[:len(b)-n] }
