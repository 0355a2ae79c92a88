// Package apitest holds what the tests of the HTTP surfaces (packages
// server, mooncake, rpc and dynamo) share: a Registrar that registers
// straight into an index, request body builders for both syntaxes,
// canonical response decoding and the error-envelope check, loopback
// serving and raw connections, and the /query fixture. It imports no
// surface, so every surface's internal tests may use it; production code
// never imports it.
package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// Registrar registers directly in the index (no ZMQ) and keeps the
// subscriptions so tests can apply batches as a publisher would.
type Registrar struct {
	ix   *core.Index
	mu   sync.Mutex
	subs map[core.ServiceKey]*core.Subscription
}

// NewRegistrar returns a Registrar over ix.
func NewRegistrar(ix *core.Index) *Registrar {
	return &Registrar{ix: ix, subs: map[core.ServiceKey]*core.Subscription{}}
}

// Register registers reg in the index.
func (r *Registrar) Register(reg core.Registration) (bool, error) {
	sub, created, err := r.ix.Register(reg)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	r.subs[sub.Key()] = sub
	r.mu.Unlock()
	return created, nil
}

// Unregister removes k from the index.
func (r *Registrar) Unregister(k core.ServiceKey) (core.Registration, error) {
	reg, err := r.ix.Unregister(k)
	if err == nil {
		r.mu.Lock()
		delete(r.subs, k)
		r.mu.Unlock()
	}
	return reg, err
}

// Sub is the subscription of (inst, tenant, rank).
func (r *Registrar) Sub(t testing.TB, inst, tenant string, rank int32) *core.Subscription {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.subs[core.ServiceKey{InstanceID: inst, TenantID: tenant, DPRank: rank}]
	if s == nil {
		t.Fatalf("no subscription %s|%s|%d", inst, tenant, rank)
	}
	return s
}

// Obj is an ordered map for building request bodies (key, value, key, value...).
type Obj []any

// Has reports whether o has key k.
func (o Obj) Has(k string) bool {
	for i := 0; i+1 < len(o); i += 2 {
		if o[i] == k {
			return true
		}
	}
	return false
}

// MPRaw is a pre-encoded msgpack value.
type MPRaw []byte

// MPEnc encodes v: Obj as a map in order; []int32, []uint64, []any as arrays;
// []byte as bin; MPRaw verbatim; scalars as msgp.AppendIntf does.
func MPEnc(b []byte, v any) []byte {
	switch x := v.(type) {
	case Obj:
		b = msgp.AppendMapHeader(b, uint32(len(x)/2))
		for i := 0; i < len(x); i += 2 {
			if k, ok := x[i].(string); ok {
				b = msgp.AppendString(b, k)
			} else {
				b = MPEnc(b, x[i])
			}
			b = MPEnc(b, x[i+1])
		}
		return b
	case MPRaw:
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
			b = MPEnc(b, t)
		}
		return b
	}
	b, err := msgp.AppendIntf(b, v)
	if err != nil {
		panic(err)
	}
	return b
}

// MP encodes v (MPEnc).
func MP(v any) []byte { return MPEnc(nil, v) }

// DropKey is the type of Drop.
type DropKey struct{}

// Drop as a value given to With removes the key.
var Drop = DropKey{}

// With returns o with each key k set to v (replaced in place or appended);
// v = Drop removes the key.

func With(o Obj, kvs ...any) Obj {
	out := append(Obj(nil), o...)
	for j := 0; j+1 < len(kvs); j += 2 {
		k, v := kvs[j], kvs[j+1]
		found := false
		for i := 0; i < len(out); i += 2 {
			if out[i] == k {
				found = true
				if _, ok := v.(DropKey); ok {
					out = append(out[:i:i], out[i+2:]...)
				} else {
					out[i+1] = v
				}
				break
			}
		}
		if !found {
			if _, ok := v.(DropKey); !ok {
				out = append(out, k, v)
			}
		}
	}
	return out
}

// JSONEnc renders o as JSON in key order (numbers as written by fmt).
func JSONEnc(v any) string {
	var b bytes.Buffer
	var enc func(v any)
	enc = func(v any) {
		switch x := v.(type) {
		case Obj:
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
		case RawJSON:
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

// RawJSON is a JSON fragment inserted verbatim by JSONEnc.
type RawJSON string

// Canon decodes a response body (JSON or msgpack by its Content-Type ct)
// into a canonical JSON text: sorted keys, exact integers.
func Canon(t testing.TB, ct string, body []byte) string {
	t.Helper()
	var v any
	switch {
	case ct == "application/msgpack":
		x, rest, err := msgp.ReadIntfBytes(body)
		if err != nil || len(rest) != 0 {
			t.Fatalf("response is not one msgpack object (%v, %d trailing): %x", err, len(rest), body)
		}
		v = x
	case ct == "application/json":
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatalf("response is not JSON (%v): %s", err, body)
		}
		if d.More() {
			t.Fatalf("trailing JSON: %s", body)
		}
	default:
		t.Fatalf("unexpected content type %q: %s", ct, body)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// CanonJSON canonicalises an expected JSON text.
func CanonJSON(t testing.TB, s string) string {
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

// DecodeMap decodes a response body into a generic map.
func DecodeMap(t testing.TB, ct string, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader([]byte(Canon(t, ct, body))))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("response is not a map: %v", err)
	}
	return m
}

// CheckError asserts the error envelope of a response (gotStatus, ct,
// body): status, reason, field and index (-1: none), and no other key.
func CheckError(t testing.TB, gotStatus int, ct string, body []byte, status int, reason, field string, index int) {
	t.Helper()
	if gotStatus != status {
		t.Fatalf("status %d, want %d; body %s", gotStatus, status, Canon(t, ct, body))
	}
	m := DecodeMap(t, ct, body)
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
		t.Fatalf("error envelope has keys %v, want %d keys", Keys(m), wantKeys)
	}
}

// Keys lists m's keys, sorted.
func Keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// DeepEqual is reflect.DeepEqual.
func DeepEqual(a, b any) bool { return reflect.DeepEqual(a, b) }

// CborSpec is the vLLM sha256_cbor profile (seed "0", low64_be) as a
// hash_profile body value.
func CborSpec() Obj {
	return Obj{"strategy", "vllm_v1", "algorithm", "sha256_cbor", "python_hash_seed", "0", "index_projection", "low64_be"}
}

// MustResolve resolves s.
func MustResolve(t testing.TB, s hash.Spec) hash.Profile {
	t.Helper()
	p, err := hash.Resolve(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// CborProfile is CborSpec resolved.
func CborProfile(t testing.TB) hash.Profile {
	return MustResolve(t, hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
}

// Chain returns the projected block keys of tokens under p.
func Chain(t testing.TB, p hash.Profile, tokens []int32, bs int, lora, salt string) []uint64 {
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

// StoreBatch is a one-event stored batch carrying engine hashes and, when
// tokens is non-nil, the blocks' token ids (needed under the xxh3 profile).
func StoreBatch(medium string, bs int, hashes []uint64, tokens []int32) *core.Batch {
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

// Apply applies b to s as its publisher would, failing on a dropped event.
func Apply(t testing.TB, s *core.Subscription, b *core.Batch) {
	t.Helper()
	st := s.Apply(b)
	if st.Dropped != 0 || st.Closed {
		t.Fatalf("apply dropped events: %+v", st)
	}
}

// SeqTokens is n token ids from base up.
func SeqTokens(n int, base int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

// Trunc drops the last n bytes of b.
func Trunc(b []byte, n int) []byte { return b[:len(b)-n] }
