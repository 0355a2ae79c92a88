package apitest

import (
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// QuietLogger logs nowhere.
func QuietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Bearer tokens of the access tests.
const (
	AdminTok = "admin-token-0123456789"
	QueryTok = "query-token-0123456789"
	TeamATok = "team-a-token-0123456789"
	TeamBTok = "team-b-token-0123456789"
)

// LeBin is tokens as little-endian int32s (a msgpack bin's content).
func LeBin(tokens ...int32) []byte {
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
	}
	return b
}

// BaseReg is a valid /register body (msgpack keys; the JSON dialect takes
// them too).
func BaseReg() Obj {
	return Obj{
		"endpoint", "tcp://127.0.0.1:5557",
		"type", "vLLM",
		"modelname", "m",
		"instance_id", "engine-a",
		"block_size", 16,
		"dp_rank", 0,
		"hash_profile", CborSpec(),
	}
}

// BlockingRegistrar holds Register until Release is closed (Entered is
// closed when a registration arrives).
type BlockingRegistrar struct {
	*Registrar
	Entered chan struct{}
	Release chan struct{}
}

// NewBlockingRegistrar returns a BlockingRegistrar over ix.
func NewBlockingRegistrar(ix *core.Index) BlockingRegistrar {
	return BlockingRegistrar{NewRegistrar(ix), make(chan struct{}), make(chan struct{})}
}

// Register waits for Release, then registers.
func (b BlockingRegistrar) Register(r core.Registration) (bool, error) {
	close(b.Entered)
	<-b.Release
	return b.Registrar.Register(r)
}

// Benchmark fixture: one vLLM sha256_cbor (seed "0") instance, B=16, holding the
// first FixtureBlocks blocks of the fixture's prompt on GPU, so prompts of up to
// 8192 tokens are full hits and the 131072-token prompt hits its first 512 blocks.
const (
	FixtureBS     = 16
	FixtureBlocks = 512
	FixtureMax    = 131072
)

// Fixture is the index part of the /query fixture; each surface's tests
// put their handler over Ix and Reg.
type Fixture struct {
	Ix     *core.Index
	Reg    *Registrar
	Prompt []int32 // FixtureMax tokens
	Hashes []uint64
}

// NewFixture builds the fixture, with a hash digest memo (nil: off).
func NewFixture(tb testing.TB, memo *hash.Memo) *Fixture {
	tb.Helper()
	ix := core.New(core.Options{Logger: QuietLogger(), HashMemo: memo})
	reg := NewRegistrar(ix)
	f := &Fixture{Ix: ix, Reg: reg, Prompt: SeqTokens(FixtureMax, 1000)}
	r := core.Registration{Endpoint: "tcp://127.0.0.1:1", Type: core.PublisherVLLM, ModelName: "m", InstanceID: "engine-a",
		BlockSize: FixtureBS, Profile: CborProfile(tb), ProfileExplicit: true}
	if _, err := reg.Register(r); err != nil {
		tb.Fatal(err)
	}
	f.Hashes = Chain(tb, CborProfile(tb), f.Prompt[:FixtureBlocks*FixtureBS], FixtureBS, "", "")
	Apply(tb, reg.Sub(tb, "engine-a", "default", 0), StoreBatch("GPU", FixtureBS, f.Hashes, nil))
	return f
}

// Body encodes a /query body for the first n prompt tokens in the given form:
// "msgpack" (int array), "bin" (msgpack LE int32 bin), "json", and for
// /query_by_hash "json_hash", "msgpack_hash".
func (f *Fixture) Body(form string, n int) []byte {
	q := Obj{"model", "m", "block_size", FixtureBS}
	switch form {
	case "msgpack":
		return MP(append(q, "token_ids", f.Prompt[:n]))
	case "bin":
		return MP(append(q, "token_ids", LeBin(f.Prompt[:n]...)))
	case "json":
		return []byte(JSONEnc(append(q, "token_ids", f.Prompt[:n])))
	case "json_hash":
		return []byte(JSONEnc(append(q, "seq_hashes", f.Hashes[:n/FixtureBS])))
	case "msgpack_hash":
		return MP(append(q, "seq_hashes", f.Hashes[:n/FixtureBS]))
	}
	panic(form)
}

// CtOf is the path and Content-Type of a fixture body form.
func CtOf(form string) (string, string) {
	switch form {
	case "json":
		return "/query", "application/json"
	case "json_hash":
		return "/query_by_hash", "application/json"
	case "msgpack_hash":
		return "/query_by_hash", "application/msgpack"
	}
	return "/query", "application/msgpack"
}

// HostileBodies is a corpus of bodies no endpoint may accept: broken syntax
// in both dialects, wrong types, huge or negative numbers, deep nesting,
// invalid UTF-8, and shapes of the wrong endpoint. Seeded random junk is
// added by HostileCorpus.
func HostileBodies() []string {
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	return []string{
		"", "{", "}", "[]", "null", "0", `"x"`, "{}}", `{"a":}`, `{"a" 1}`, `{,}`,
		`{"model":1}`, `{"model":"m","block_size":"16"}`, `{"model":"m","block_size":-1,"token_ids":[1]}`,
		`{"model":"m","block_size":16,"token_ids":[1e400]}`, `{"model":"m","block_size":16,"token_ids":[NaN]}`,
		`{"model":"m","block_size":16,"token_ids":[99999999999999999999999]}`,
		`{"model":"m","block_size":16,"token_ids":"` + strings.Repeat("A", 7) + `"}`,
		`{"model":"m","block_size":16,"token_ids":[1,2,` + deep + `]}`, deep,
		`{"model":"\xff\xfe","block_size":16,"token_ids":[1]}`, "\xff\xfe\xfd",
		`{"endpoint":"tcp://a:1","type":"vLLM","modelname":"m","instance_id":"x","block_size":16,"dp_rank":-5}`,
		`{"endpoint":"tcp://a:1","type":"nope","modelname":"m","instance_id":"x","block_size":16,"dp_rank":0}`,
		`{"endpoint":"tcp://169.254.169.254:80","type":"vLLM","modelname":"m","instance_id":"x","block_size":0,"dp_rank":0}`,
		`{"instance_id":123,"dp_rank":0}`, `{"instance_id":"x","dp_rank":"0"}`,
		`{"model":"m","block_size":16,"token_ids":[1],"model":"m"}`,
		`{"model_name":"m","block_size":16,"token_ids":"!!!notbase64"}`,
		"\x81\xa5model", "\xdd\xff\xff\xff\xff", "\xc1", "\x82\xa5model\xa1m\xaablock_size\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
		strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300),
	}
}

// HostileCorpus is HostileBodies plus 200 random bodies from seed.
func HostileCorpus(seed uint64) []string {
	out := HostileBodies()
	rng := rand.New(rand.NewPCG(seed, 77))
	for range 200 {
		b := make([]byte, rng.IntN(96))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		out = append(out, string(b))
	}
	return out
}

// IndexState is what a refused request must leave unchanged.
type IndexState struct {
	Services []core.Registration
	View     core.GlobalView
	Tiers    [core.NumTiers]int
}

// SnapshotIndex is ix's IndexState now.
func SnapshotIndex(ix *core.Index) IndexState {
	return IndexState{Services: ix.Services(), View: ix.GlobalView(), Tiers: ix.TierBlocks()}
}

// TieredRegs are the /register bodies (msgpack) of the tiered example:
// engine-a ranks 0 and 1 and engine-b rank 0, model "m", B=16, the vLLM
// sha256_cbor profile.
func TieredRegs() [][]byte {
	var out [][]byte
	for _, r := range []struct {
		inst string
		rank int
	}{{"engine-a", 0}, {"engine-a", 1}, {"engine-b", 0}} {
		out = append(out, MP(With(BaseReg(), "instance_id", r.inst, "dp_rank", r.rank,
			"endpoint", "tcp://127.0.0.1:1/"+r.inst+strconv.Itoa(r.rank))))
	}
	return out
}

// TieredApply stores the tiered example's blocks through reg once
// TieredRegs are registered: engine-a rank 0 holds block 0 on CPU, 1 on GPU,
// 2 on EXTERNAL and 3 on DISK; engine-b rank 0 holds blocks 0-1 on GPU. It
// returns the 64 prompt tokens and their block keys.
func TieredApply(t testing.TB, reg *Registrar) ([]int32, []uint64) {
	tokens := SeqTokens(64, 1)
	h := Chain(t, CborProfile(t), tokens, 16, "", "")
	a0 := reg.Sub(t, "engine-a", "default", 0)
	Apply(t, a0, StoreBatch("CPU", 16, h[0:1], nil))
	Apply(t, a0, StoreBatch("GPU", 16, h[1:2], nil))
	Apply(t, a0, StoreBatch("EXTERNAL", 16, h[2:3], nil))
	Apply(t, a0, StoreBatch("DISK", 16, h[3:4], nil))
	Apply(t, reg.Sub(t, "engine-b", "default", 0), StoreBatch("GPU", 16, h[0:2], nil))
	return tokens, h
}

// TieredMsgpack is the tiered example's /query answer in the msgpack dialect
// (the RPC Query's hits are its instances).
const TieredMsgpack = `{"instances":{
 "engine-a":{"longest_matched":64,"dp":{"0":0,"1":0},
   "rank_matches":{"0":{"device":0,"cpu_local":32,"cpu_share":48,"disk":64},"1":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0}},
   "device":0,"cpu_local":32,"cpu_share":48,"disk":64},
 "engine-b":{"longest_matched":48,"dp":{"0":32},
   "rank_matches":{"0":{"device":32,"cpu_local":32,"cpu_share":48,"disk":48}},
   "device":32,"cpu_local":32,"cpu_share":48,"disk":48}}}`
