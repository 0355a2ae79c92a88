// Package hash computes the block-hash chains conductor indexes prefixes by.
//
// A prompt is split into blocks of B tokens and each block gets a 64-bit key that
// depends on every token before it, so a prefix match is a walk over keys. Four
// strategies are supported, each reproducing an external engine byte for byte so
// that keys computed here at query time equal the keys engines publish in their
// KV-cache events:
//
//   - xxh3 (Algorithm xxh3_64, Projection seq64): the RFC #1527 / Dynamo standard.
//     local_i = XXH3-64(u32le tokens of block i, namespace seed), seq_0 = local_0,
//     seq_i = XXH3-64(le64(seq_{i-1}) || le64(local_i), base seed). Complete blocks only.
//   - vllm_v1 (Algorithm sha256, sha256_cbor, xxhash or xxhash_cbor, Projection
//     low64_be): vLLM v1 prefix caching (--prefix-caching-hash-algo).
//     digest_i = H(encode((parent, tuple(tokens_i), extras_i))) where encode is
//     CPython pickle protocol 5 ("sha256", vLLM's default, and "xxhash") or
//     canonical CBOR ("sha256_cbor", "xxhash_cbor"), and H is SHA-256 (32-byte
//     digests) or XXH3-128 (16-byte digests in python-xxhash's canonical order,
//     high 64 bits then low 64 bits, big-endian). parent is the previous
//     block's full digest; for block 0 it is the root digest
//     NONE_HASH = H(encode(PYTHONHASHSEED text)). The key is the last 8 digest
//     bytes, big-endian (for XXH3-128, its low 64 bits), the int vLLM publishes.
//     Complete blocks only.
//   - sglang (sha256_raw, first64_be): digest_i = SHA-256(digest_{i-1} || u32le
//     tokens), final partial block included.
//   - sglang_bigram: as sglang over the len-1 token pairs (EAGLE/MTP drafts).
//
// Byte layouts follow shared/reference/mooncake-conductor.md §2; every layout is
// pinned by the upstream golden vectors in testdata/, and the xxhash algorithms
// also by vectors derived with CPython pickle and the xxHash C library (see
// testdata/README.md).
//
// # Performance contract
//
// Hot functions are append-style (AppendX(dst, ...)) and allocate nothing once dst
// and the Chain scratch have grown: TestZeroAllocs proves it with
// testing.AllocsPerRun for every strategy. Chain hashes lazily, so a query that
// stops matching at block k costs k+1 block hashes, not one per prompt block.
// SHA-256 is dispatched to crypto/sha256, github.com/minio/sha256-simd or this
// package's one-shot SHA-NI routine (shani: the message is padded in the chain's
// own scratch and hashed in one call) through a switch on a small enum captured
// per chain (no interface call per block); see Backend for how the default is
// picked. The CBOR and pickle token encoders are branch-free, with AVX-512 paths
// (8 tokens per step) where the CPU has AVX512F/BW/VBMI2 and AVX paths (4 per
// step) on the other x86-64 CPUs with AVX.
//
// # Digest memo
//
// A Chain given a Memo (SetMemo) looks each SHA-256 block digest (vllm_v1
// sha256 and sha256_cbor, sglang) up by a keyed rolling XXH3-128 of the whole
// prefix before hashing it, and stores the digests it computes; xxh3 and the
// xxhash algorithms hash a block faster than a memo miss costs and skip it. The memo is bounded, shared, lock-free and exact; see Memo
// for the key, the table and its concurrency protocol. A memo made with
// NewMemoWithPrompts also keeps recent prompts that came more than once: a
// prompt sharing leading blocks with one of them gets those blocks' keys and
// digests by a token comparison, with no per-block hash or probe (see
// promptCache in memoprompt.go for lookup, admission and the bound). Storing a
// prompt is the one allocation on the query path: once per stored prompt, on
// its second sight (TestZeroAllocs covers the served walk).
package hash
