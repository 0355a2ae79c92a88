package hash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// Loaders for the upstream vectors in testdata/ (provenance in testdata/README.md).

type repeatSpec struct {
	Value json.RawMessage `json:"value"`
	Count int             `json:"count"`
}

type vllmExpected struct {
	Digest           string `json:"digest"`
	ProjectedHex     string `json:"projected_hex"`
	ProjectedDecimal string `json:"projected_decimal"`
	PickleHex        string `json:"pickle_hex"`
	PickleLen        int    `json:"pickle_len"`
	EncodedLen       int    `json:"encoded_len"` // derived xxhash vectors: bytes hashed
}

type vllmCase struct {
	Name           string         `json:"name"`
	BlockSize      int            `json:"block_size"`
	LoraName       string         `json:"lora_name"`
	CacheSalt      *string        `json:"cache_salt"`
	TokenIDs       []int32        `json:"token_ids"`
	TokenIDsRepeat *repeatSpec    `json:"token_ids_repeat"`
	LoraNameRepeat *repeatSpec    `json:"lora_name_repeat"`
	Expected       []vllmExpected `json:"expected"`
	IncorrectLow64 string         `json:"incorrect_low64_parent_digest"`
}

// tokens expands token_ids / token_ids_repeat.
func (c *vllmCase) tokens(t *testing.T) []int32 {
	t.Helper()
	if c.TokenIDsRepeat == nil {
		return c.TokenIDs
	}
	var v int32
	mustUnmarshal(t, c.TokenIDsRepeat.Value, &v)
	out := make([]int32, c.TokenIDsRepeat.Count)
	for i := range out {
		out[i] = v
	}
	return out
}

// lora expands lora_name / lora_name_repeat.
func (c *vllmCase) lora(t *testing.T) []byte {
	t.Helper()
	if c.LoraNameRepeat == nil {
		return []byte(c.LoraName)
	}
	var s string
	mustUnmarshal(t, c.LoraNameRepeat.Value, &s)
	return []byte(strings.Repeat(s, c.LoraNameRepeat.Count))
}

func (c *vllmCase) salt() []byte {
	if c.CacheSalt == nil {
		return nil
	}
	return []byte(*c.CacheSalt)
}

type vllmGolden struct {
	Profile struct {
		Strategy        string `json:"strategy"`
		Algorithm       string `json:"algorithm"`
		PythonHashSeed  string `json:"python_hash_seed"`
		RootDigest      string `json:"root_digest"`
		IndexProjection string `json:"index_projection"`
	} `json:"profile"`
	SeedRootVectors []struct {
		PythonHashSeed   string `json:"python_hash_seed"`
		CanonicalCBORHex string `json:"canonical_cbor_hex"`
		PickleHex        string `json:"pickle_hex"`
		EncodedHex       string `json:"encoded_hex"` // derived xxhash vectors
		RootDigest       string `json:"root_digest"`
	} `json:"seed_root_vectors"`
	Cases []vllmCase `json:"cases"`
}

func (g *vllmGolden) spec() Spec {
	return Spec{g.Profile.Strategy, g.Profile.Algorithm, g.Profile.PythonHashSeed, g.Profile.IndexProjection}
}

type loxilbFixture struct {
	Name          string      `json:"name"`
	HashAlgo      string      `json:"hash_algo"`
	ParentHashHex string      `json:"parent_hash_hex"`
	Tokens        []int32     `json:"tokens"`
	CBORHex       string      `json:"cbor_hex"`
	DigestHex     string      `json:"expected_digest_hex"`
	HashUint64    json.Number `json:"expected_hash_uint64"`
}

type loxilbVectors struct {
	NoneHashSeed      string          `json:"none_hash_seed"`
	NoneHashSHA256Hex string          `json:"none_hash_sha256_hex"`
	NoneHashXXHashHex string          `json:"none_hash_xxhash_hex"`
	BlockSize         int             `json:"block_size"`
	Fixtures          []loxilbFixture `json:"fixtures"`
	Models            map[string]struct {
		NoneHashSHA256Hex string          `json:"none_hash_sha256_hex"`
		NoneHashXXHashHex string          `json:"none_hash_xxhash_hex"`
		BlockSize         int             `json:"block_size"`
		Fixtures          []loxilbFixture `json:"fixtures"`
	} `json:"models"`
}

// xxhashDerived is derived_vllm_xxhash_vectors.json: the Mooncake golden cases
// re-hashed under vLLM's xxhash_cbor and xxhash, and XXH3-128 at lengths
// crossing every size class.
type xxhashDerived struct {
	XXHashCBOR    vllmGolden `json:"xxhash_cbor"`
	XXHashPickle  vllmGolden `json:"xxhash"`
	LengthPattern string     `json:"xxh3_128_pattern"`
	Lengths       []struct {
		Len    int    `json:"len"`
		Digest string `json:"digest"`
	} `json:"xxh3_128_lengths"`
}

type dynamoCase struct {
	Name           string   `json:"name"`
	BlockSize      int      `json:"block_size"`
	TokenIDs       []int32  `json:"token_ids"`
	LoraName       *string  `json:"lora_name"`
	CacheSalt      *string  `json:"cache_salt"`
	Seed           string   `json:"seed"`
	LocalHashes    []string `json:"local_block_hashes"`
	SequenceHashes []string `json:"sequence_hashes"`
}

type sglangIntegration struct {
	BlockSize         int      `json:"block_size"`
	TokenIDs          []int32  `json:"token_ids"`
	UpstreamHexDigest []string `json:"upstream_hex_digests"`
	BlockHashesSigned []string `json:"block_hashes_signed"`
}

func loadJSON(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
}

func loadCBORGolden(t testing.TB) *vllmGolden {
	var g vllmGolden
	loadJSON(t, "mooncake_vllm_sha256_cbor_golden.json", &g)
	return &g
}

func loadPickleGolden(t testing.TB) *vllmGolden {
	var g vllmGolden
	loadJSON(t, "mooncake_vllm_sha256_pickle_golden.json", &g)
	return &g
}

func loadXXHashDerived(t testing.TB) *xxhashDerived {
	var d xxhashDerived
	loadJSON(t, "derived_vllm_xxhash_vectors.json", &d)
	return &d
}

func loadDynamo(t testing.TB) []dynamoCase {
	var v struct {
		Cases []dynamoCase `json:"cases"`
	}
	loadJSON(t, "derived_dynamo_xxh3_hash_vectors.json", &v)
	return v.Cases
}

func loadSGLangIntegration(t testing.TB) sglangIntegration {
	var v struct {
		Integration sglangIntegration `json:"integration"`
	}
	loadJSON(t, "mooncake_sglang_map_event_vectors.json", &v)
	return v.Integration
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func parseU64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("bad u64 %q: %v", s, err)
	}
	return v
}

func parseI64AsU64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("bad i64 %q: %v", s, err)
	}
	return uint64(v)
}

// backends lists every SHA-256 backend this CPU runs; every vector test runs
// under each.
var backends = availableBackends()

func availableBackends() []string {
	if haveSHANI {
		return []string{"stdlib", "simd", "shani"}
	}
	return []string{"stdlib", "simd"}
}

// forEachBackend runs f once per SHA-256 backend and restores auto afterwards.
func forEachBackend(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func() {
		if err := SetBackend("auto"); err != nil {
			t.Fatal(err)
		}
	}()
	for _, be := range backends {
		if err := SetBackend(be); err != nil {
			t.Fatal(err)
		}
		t.Run(be, f)
	}
}

// vllmExtras builds the extra keys of block i the way the chain must.
func vllmExtras(i int, lora, salt []byte) [][]byte {
	var ex [][]byte
	if len(lora) > 0 {
		ex = append(ex, lora)
	}
	if i == 0 && len(salt) > 0 {
		ex = append(ex, salt)
	}
	return ex
}

// mustResolve resolves s or fails the test.
func mustResolve(t testing.TB, s Spec) Profile {
	t.Helper()
	p, err := Resolve(s)
	if err != nil {
		t.Fatalf("Resolve(%+v): %v", s, err)
	}
	return p
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

// Block digests of the vLLM algorithms as the tests compute them, outside the
// Chain: stdlib SHA-256, and XXH3-128 in python-xxhash's canonical byte order
// (xxh3_128_digest: high 64 bits, then low 64 bits, big-endian).
func sha256Digest(b []byte) []byte {
	d := sha256.Sum256(b)
	return d[:]
}

func xxh128Digest(b []byte) []byte {
	h := xxh3.Hash128(b)
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, h.Hi), h.Lo)
}
