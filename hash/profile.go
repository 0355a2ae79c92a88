package hash

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Sentinel errors. Resolve wraps the first five in a *ProfileError naming the field;
// Chain.Reset and AppendChain wrap the rest with the offending value.
var (
	ErrUnsupportedStrategy   = errors.New("conductor: unsupported hash strategy")
	ErrUnsupportedAlgorithm  = errors.New("conductor: unsupported hash algorithm")
	ErrUnsupportedProjection = errors.New("conductor: unsupported index projection")
	ErrInvalidSeed           = errors.New("conductor: invalid python_hash_seed")
	ErrEmptyField            = errors.New("conductor: empty hash profile field")

	ErrBlockSize     = errors.New("conductor: block size must be greater than zero")
	ErrNegativeToken = errors.New("conductor: negative token id")
	ErrInvalidUTF8   = errors.New("conductor: lora name or cache salt is not valid UTF-8")
)

// Field names used in ProfileError.Field; they are the hash_profile keys of /register.
const (
	FieldStrategy   = "strategy"
	FieldAlgorithm  = "algorithm"
	FieldSeed       = "python_hash_seed"
	FieldProjection = "index_projection"
)

// ProfileError says which hash_profile field Resolve rejected and why.
type ProfileError struct {
	Field string // one of the Field* constants
	Value string // the rejected text, verbatim (may be invalid UTF-8)
	Err   error  // sentinel: ErrUnsupportedStrategy, ErrUnsupportedAlgorithm, ErrUnsupportedProjection, ErrInvalidSeed or ErrEmptyField
	Msg   string // human detail, e.g. `strategy "xxh3" wants "xxh3_64"`
}

func (e *ProfileError) Error() string {
	return "hash_profile." + e.Field + "=" + strconv.Quote(e.Value) + ": " + e.Msg + ": " + e.Err.Error()
}

func (e *ProfileError) Unwrap() error { return e.Err }

// Is makes an empty python_hash_seed match ErrInvalidSeed as well as ErrEmptyField:
// upstream lists "" among the malformed seed texts, while callers mapping errors to
// the HTTP "missing"/"invalid_value" reasons want to tell it apart.
func (e *ProfileError) Is(target error) bool {
	return target == ErrInvalidSeed && e.Field == FieldSeed && e.Err == ErrEmptyField
}

// Strategy selects the chain recipe.
type Strategy uint8

// The zero Strategy is invalid so that a zero Profile is never mistaken for a usable one.
const (
	StrategyXXH3 Strategy = iota + 1
	StrategyVLLMv1
	StrategySGLang
	StrategySGLangBigram
)

func (s Strategy) String() string {
	switch s {
	case StrategyXXH3:
		return "xxh3"
	case StrategyVLLMv1:
		return "vllm_v1"
	case StrategySGLang:
		return "sglang"
	case StrategySGLangBigram:
		return "sglang_bigram"
	}
	return "invalid"
}

// Algorithm selects the per-block hash function (and, for vLLM, the codec).
type Algorithm uint8

const (
	AlgoXXH3_64      Algorithm = iota + 1 // "xxh3_64"
	AlgoSHA256Pickle                      // "sha256": SHA-256 of CPython pickle protocol 5 (vLLM default)
	AlgoSHA256CBOR                        // "sha256_cbor": SHA-256 of canonical CBOR
	AlgoSHA256Raw                         // "sha256_raw": SHA-256 of raw u32le tokens (SGLang)
	AlgoXXHashPickle                      // "xxhash": XXH3-128 of CPython pickle protocol 5 (vLLM)
	AlgoXXHashCBOR                        // "xxhash_cbor": XXH3-128 of canonical CBOR (vLLM)
)

func (a Algorithm) String() string {
	switch a {
	case AlgoXXH3_64:
		return "xxh3_64"
	case AlgoSHA256Pickle:
		return "sha256"
	case AlgoSHA256CBOR:
		return "sha256_cbor"
	case AlgoSHA256Raw:
		return "sha256_raw"
	case AlgoXXHashPickle:
		return "xxhash"
	case AlgoXXHashCBOR:
		return "xxhash_cbor"
	}
	return "invalid"
}

// DigestSize is the length in bytes of one block digest: 16 for the XXH3-128
// algorithms, 32 for the SHA-256 ones (8 for xxh3_64, whose chain keeps no
// digest beyond the 64-bit key). A vLLM block's parent is the previous digest
// at this length, and low64_be reads its last 8 bytes.
func (a Algorithm) DigestSize() int {
	switch a {
	case AlgoXXHashPickle, AlgoXXHashCBOR:
		return 16
	case AlgoXXH3_64:
		return 8
	}
	return 32
}

// cbor reports whether a vLLM algorithm encodes blocks as canonical CBOR
// (otherwise as pickle).
func (a Algorithm) cbor() bool { return a == AlgoSHA256CBOR || a == AlgoXXHashCBOR }

// xxhash reports whether a vLLM algorithm hashes with XXH3-128 (otherwise SHA-256).
func (a Algorithm) xxhash() bool { return a == AlgoXXHashPickle || a == AlgoXXHashCBOR }

// Projection folds a block digest to the 64-bit index key.
type Projection uint8

const (
	ProjSeq64     Projection = iota + 1 // "seq64": the XXH3 sequence hash itself
	ProjLow64BE                         // "low64_be": last 8 digest bytes, big-endian (vLLM int block hashes)
	ProjFirst64BE                       // "first64_be": first 8 digest bytes, big-endian (SGLang)
)

func (p Projection) String() string {
	switch p {
	case ProjSeq64:
		return "seq64"
	case ProjLow64BE:
		return "low64_be"
	case ProjFirst64BE:
		return "first64_be"
	}
	return "invalid"
}

// DefaultXXH3Seed is Dynamo's CHAIN_XXH3_SEED, the base seed S of the xxh3 strategy.
const DefaultXXH3Seed uint64 = 1337

// maxPythonHashSeed is the largest PYTHONHASHSEED CPython accepts.
const maxPythonHashSeed = 4294967295

// Spec is the textual profile as registered: the four hash_profile strings.
type Spec struct {
	Strategy        string
	Algorithm       string
	PythonHashSeed  string
	IndexProjection string
}

// Describe renders the profile as an operator configures it: "vllm_v1
// sha256 with PYTHONHASHSEED=0", "xxh3 seed 1337", "sglang sha256_raw".
func (s Spec) Describe() string {
	switch s.Strategy {
	case "vllm_v1":
		return "vllm_v1 " + s.Algorithm + " with PYTHONHASHSEED=" + s.PythonHashSeed
	case "xxh3":
		return "xxh3 seed " + s.PythonHashSeed
	}
	return s.Strategy + " " + s.Algorithm
}

// Profile is a resolved, validated hash profile. It holds no slices, maps or
// pointers, so two profiles compare with == (contexts bind one and reject another).
// Build it with Resolve or DefaultProfile; a hand-made Profile is trusted as is.
type Profile struct {
	Strategy   Strategy
	Algorithm  Algorithm
	Projection Projection
	// Spec is the canonical text: vllm_v1 keeps the seed verbatim ("0" != "00"),
	// sglang pins the seed to "0", xxh3 renders the seed in decimal.
	Spec Spec
	// RootDigest is vLLM's NONE_HASH, the parent of block 0, in its first
	// Algorithm.DigestSize() bytes (16 for xxhash*, the rest zero). Zero for
	// sglang (whose sentinel is 64 x '0') and for xxh3.
	RootDigest [32]byte
	// XXH3Seed is the xxh3 strategy's base seed S (DefaultXXH3Seed unless configured).
	XXH3Seed uint64
}

// RootHex renders the root digest in lowercase hex at its length: 32
// characters (16 bytes) for the vllm_v1 xxhash algorithms, as vLLM's NONE_HASH
// is, and 64 otherwise (all zeros for strategies without a root).
func (p *Profile) RootHex() string {
	n := 32
	if p.Strategy == StrategyVLLMv1 && p.Algorithm.xxhash() {
		n = 16
	}
	var b [64]byte
	hex.Encode(b[:], p.RootDigest[:n])
	return string(b[:2*n])
}

// XXH3Seeds returns the two seeds of the xxh3 strategy for a context's LoRA and a
// query's cache salt: local hashes use XXH3NamespaceSeed(XXH3Seed, lora, salt), the
// sequence step always uses the base XXH3Seed (pinned by TestXXH3DynamoVectors).
func (p *Profile) XXH3Seeds(lora, salt []byte) (local, seq uint64) {
	return XXH3NamespaceSeed(p.XXH3Seed, lora, salt), p.XXH3Seed
}

// DefaultProfile is the profile used when a registration names none: the RFC #1527
// XXH3-64 chain with Dynamo's seed 1337.
func DefaultProfile() Profile {
	return Profile{
		Strategy:   StrategyXXH3,
		Algorithm:  AlgoXXH3_64,
		Projection: ProjSeq64,
		Spec:       Spec{Strategy: "xxh3", Algorithm: "xxh3_64", PythonHashSeed: "1337", IndexProjection: "seq64"},
		XXH3Seed:   DefaultXXH3Seed,
	}
}

// Resolve validates s and derives the profile. Fields are checked in the order
// upstream reports them (strategy, algorithm, index_projection, python_hash_seed),
// so the first failure names the same field Mooncake's /register would. Selectors
// are case-sensitive. Errors are *ProfileError.
//
// Empty fields are defaults only for the xxh3 strategy (algorithm xxh3_64, seed 1337,
// projection seq64). For sglang strategies the seed text is accepted unchecked and
// pinned to "0": SGLang has no PYTHONHASHSEED, so differing texts must bind the same
// context.
func Resolve(s Spec) (Profile, error) {
	var p Profile
	switch s.Strategy {
	case "xxh3":
		p.Strategy = StrategyXXH3
	case "vllm_v1":
		p.Strategy = StrategyVLLMv1
	case "sglang":
		p.Strategy = StrategySGLang
	case "sglang_bigram":
		p.Strategy = StrategySGLangBigram
	case "":
		return Profile{}, &ProfileError{Field: FieldStrategy, Err: ErrEmptyField, Msg: "strategy is required"}
	default:
		return Profile{}, &ProfileError{Field: FieldStrategy, Value: s.Strategy, Err: ErrUnsupportedStrategy,
			Msg: `want "xxh3", "vllm_v1", "sglang" or "sglang_bigram"`}
	}

	switch p.Strategy {
	case StrategyXXH3:
		if s.Algorithm != "" && s.Algorithm != "xxh3_64" {
			return Profile{}, &ProfileError{Field: FieldAlgorithm, Value: s.Algorithm, Err: ErrUnsupportedAlgorithm,
				Msg: `strategy "xxh3" wants "xxh3_64"`}
		}
		if s.IndexProjection != "" && s.IndexProjection != "seq64" {
			return Profile{}, &ProfileError{Field: FieldProjection, Value: s.IndexProjection, Err: ErrUnsupportedProjection,
				Msg: `strategy "xxh3" wants "seq64"`}
		}
		seed := DefaultXXH3Seed
		if s.PythonHashSeed != "" {
			v, ok := parseDigits(s.PythonHashSeed, ^uint64(0))
			if !ok {
				return Profile{}, &ProfileError{Field: FieldSeed, Value: s.PythonHashSeed, Err: ErrInvalidSeed,
					Msg: "strategy \"xxh3\" wants a decimal uint64 seed"}
			}
			seed = v
		}
		p.Algorithm, p.Projection, p.XXH3Seed = AlgoXXH3_64, ProjSeq64, seed
		p.Spec = Spec{Strategy: "xxh3", Algorithm: "xxh3_64", PythonHashSeed: strconv.FormatUint(seed, 10), IndexProjection: "seq64"}
		return p, nil

	case StrategyVLLMv1:
		switch s.Algorithm {
		case "sha256":
			p.Algorithm = AlgoSHA256Pickle
		case "sha256_cbor":
			p.Algorithm = AlgoSHA256CBOR
		case "xxhash":
			p.Algorithm = AlgoXXHashPickle
		case "xxhash_cbor":
			p.Algorithm = AlgoXXHashCBOR
		case "":
			return Profile{}, &ProfileError{Field: FieldAlgorithm, Err: ErrEmptyField, Msg: "algorithm is required"}
		default:
			return Profile{}, &ProfileError{Field: FieldAlgorithm, Value: s.Algorithm, Err: ErrUnsupportedAlgorithm,
				Msg: `strategy "vllm_v1" wants "sha256", "sha256_cbor", "xxhash" or "xxhash_cbor"`}
		}
		if err := checkProjection(s.IndexProjection, "low64_be", "vllm_v1"); err != nil {
			return Profile{}, err
		}
		if err := checkVLLMSeed(s.PythonHashSeed); err != nil {
			return Profile{}, err
		}
		p.Projection = ProjLow64BE
		p.Spec = Spec{Strategy: "vllm_v1", Algorithm: s.Algorithm, PythonHashSeed: s.PythonHashSeed, IndexProjection: "low64_be"}
		p.RootDigest = vllmRoot(p.Algorithm, s.PythonHashSeed)
		return p, nil

	default: // sglang, sglang_bigram
		switch s.Algorithm {
		case "sha256_raw":
		case "":
			return Profile{}, &ProfileError{Field: FieldAlgorithm, Err: ErrEmptyField, Msg: "algorithm is required"}
		default:
			return Profile{}, &ProfileError{Field: FieldAlgorithm, Value: s.Algorithm, Err: ErrUnsupportedAlgorithm,
				Msg: "strategy " + strconv.Quote(s.Strategy) + ` wants "sha256_raw"`}
		}
		if err := checkProjection(s.IndexProjection, "first64_be", s.Strategy); err != nil {
			return Profile{}, err
		}
		p.Algorithm, p.Projection = AlgoSHA256Raw, ProjFirst64BE
		p.Spec = Spec{Strategy: s.Strategy, Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"}
		return p, nil
	}
}

// vllmRoot derives vLLM's NONE_HASH for a seed text: the algorithm's hash of
// the encoded str, H(encode(seed)), as init_none_hash does when PYTHONHASHSEED
// is set. Resolve is not hot: stdlib SHA-256 keeps the root independent of the
// backend under test.
func vllmRoot(a Algorithm, seed string) [32]byte {
	var enc [64]byte
	var b []byte
	if a.cbor() {
		b = AppendCBORSeed(enc[:0], seed)
	} else {
		b = AppendPickleSeed(enc[:0], seed)
	}
	if a.xxhash() {
		var d [32]byte
		putXXH128(&d, xxh3.Hash128(b))
		return d
	}
	return sha256.Sum256(b)
}

func checkProjection(got, want, strategy string) error {
	switch got {
	case want:
		return nil
	case "":
		return &ProfileError{Field: FieldProjection, Err: ErrEmptyField, Msg: "index_projection is required"}
	}
	return &ProfileError{Field: FieldProjection, Value: got, Err: ErrUnsupportedProjection,
		Msg: "strategy " + strconv.Quote(strategy) + " wants " + strconv.Quote(want)}
}

// checkVLLMSeed accepts exactly the PYTHONHASHSEED texts that give a reproducible
// NONE_HASH: "random" or ASCII digits up to 4294967295. No sign, whitespace or
// normalisation, because vLLM hashes the text itself ("0" and "00" differ).
// An unset PYTHONHASHSEED makes vLLM use 32 random bytes, so "" is rejected.
func checkVLLMSeed(seed string) error {
	if seed == "" {
		return &ProfileError{Field: FieldSeed, Err: ErrEmptyField, Msg: "python_hash_seed is required (an unset PYTHONHASHSEED is not reproducible)"}
	}
	if !utf8.ValidString(seed) {
		return &ProfileError{Field: FieldSeed, Value: seed, Err: ErrInvalidSeed, Msg: "not valid UTF-8"}
	}
	if seed == "random" {
		return nil
	}
	if _, ok := parseDigits(seed, maxPythonHashSeed); !ok {
		return &ProfileError{Field: FieldSeed, Value: seed, Err: ErrInvalidSeed,
			Msg: `want "random" or ASCII decimal digits with value <= 4294967295`}
	}
	return nil
}

// parseDigits parses a non-empty run of ASCII digits with value <= max. Leading
// zeros are allowed (any count); signs, spaces and non-ASCII digits are not.
func parseDigits(s string, max uint64) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i]) - '0'
		if d > 9 {
			return 0, false
		}
		if v > (max-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
