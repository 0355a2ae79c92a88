#!/usr/bin/env python3
"""Derive derived_vllm_xxhash_vectors.json (see README.md in this folder).

vLLM's `xxhash` / `xxhash_cbor` prefix-caching algorithms hash the same bytes as
`sha256` / `sha256_cbor` (pickle protocol 5 / canonical CBOR of
(parent, tuple(tokens), extras)) with XXH3-128 instead of SHA-256, and return
python-xxhash's xxh3_128_digest: the canonical 16 bytes (high 64 bits, then low
64 bits, each big-endian). NONE_HASH is that hash of the encoded PYTHONHASHSEED
text. This script re-runs every case of the two Mooncake golden files under the
xxhash algorithms, using tools independent of conductor's Go code:

  - pickle: CPython's own pickle.dumps(value, protocol=5);
  - CBOR: the small canonical encoder below (only the value shapes vLLM hashes);
  - XXH3-128: the reference xxHash C library (libxxhash.so.0, called through
    ctypes: XXH3_128bits + XXH128_canonicalFromHash).

Before writing anything it proves the encodings: the same encoders with
hashlib.sha256 must reproduce every digest (and every pickle_hex) of the two
Mooncake goldens, and the CBOR encoder plus libxxhash must reproduce every
xxhash_cbor fixture of loxilb_vllm_kv_hash_vectors.json (a real vLLM 0.17.0
deployment), its NONE_HASH included. It also records XXH3-128 of a fixed byte
pattern at lengths crossing every XXH3 size class.

Run from this folder: python3 derive_vllm_xxhash_vectors.py
"""

import ctypes
import hashlib
import json
import pickle
import struct
import sys

LIB = ctypes.CDLL("libxxhash.so.0")


class _H128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


class _Canon(ctypes.Structure):
    _fields_ = [("digest", ctypes.c_ubyte * 16)]


LIB.XXH3_128bits.restype = _H128
LIB.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
LIB.XXH128_canonicalFromHash.restype = None
LIB.XXH128_canonicalFromHash.argtypes = [ctypes.POINTER(_Canon), _H128]
LIB.XXH_versionNumber.restype = ctypes.c_uint


def xxh3_128_digest(b):
    c = _Canon()
    LIB.XXH128_canonicalFromHash(ctypes.byref(c), LIB.XXH3_128bits(b, len(b)))
    return bytes(c.digest)


def _head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes([major << 5 | info]) + n.to_bytes(width, "big")
    raise ValueError(n)


def cbor(v):
    """Canonical CBOR (shortest heads, definite lengths) of the shapes vLLM hashes."""
    if v is None:
        return b"\xf6"
    if isinstance(v, bytes):
        return _head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode("utf-8")
        return _head(3, len(b)) + b
    if isinstance(v, int):
        return _head(0, v) if v >= 0 else _head(1, -1 - v)
    if isinstance(v, (tuple, list)):
        return _head(4, len(v)) + b"".join(cbor(x) for x in v)
    raise TypeError(type(v))


def pkl(v):
    return pickle.dumps(v, protocol=5)


def expand(case):
    if case.get("token_ids_repeat"):
        r = case["token_ids_repeat"]
        tokens = [r["value"]] * r["count"]
    else:
        tokens = case["token_ids"]
    if case.get("lora_name_repeat"):
        r = case["lora_name_repeat"]
        lora = r["value"] * r["count"]
    else:
        lora = case.get("lora_name") or ""
    return tokens, lora, case.get("cache_salt") or ""


def chain(hash_fn, enc, root, case):
    """vLLM's hash_block_tokens over the complete blocks of a case."""
    tokens, lora, salt = expand(case)
    bs = case["block_size"]
    parent, out = root, []
    for i in range(len(tokens) // bs):
        extras = []
        if lora:
            extras.append(lora)
        if i == 0 and salt:
            extras.append(salt)
        msg = enc((parent, tuple(tokens[i * bs:(i + 1) * bs]), tuple(extras) if extras else None))
        parent = hash_fn(msg)
        out.append((msg, parent))
    return out


def sha(b):
    return hashlib.sha256(b).digest()


def low64(d):
    return int.from_bytes(d, "big") & ((1 << 64) - 1)


def check(cond, what):
    if not cond:
        sys.exit("cross-check failed: " + what)


def prove_golden(path, enc):
    g = json.load(open(path))
    for v in g["seed_root_vectors"]:
        e = enc(v["python_hash_seed"])
        check(e.hex() == v.get("canonical_cbor_hex", v.get("pickle_hex")), path + " seed bytes " + v["python_hash_seed"])
        check(sha(e).hex() == v["root_digest"], path + " seed root " + v["python_hash_seed"])
    root = sha(enc(g["profile"]["python_hash_seed"]))
    check(root.hex() == g["profile"]["root_digest"], path + " profile root")
    for c in g["cases"]:
        got = chain(sha, enc, root, c)
        check(len(got) == len(c["expected"]), path + " " + c["name"] + " block count")
        for (msg, d), want in zip(got, c["expected"]):
            check(d.hex() == want["digest"], path + " " + c["name"] + " digest")
            if "pickle_hex" in want:
                check(msg.hex() == want["pickle_hex"], path + " " + c["name"] + " pickle bytes")
            if "pickle_len" in want:
                check(len(msg) == want["pickle_len"], path + " " + c["name"] + " pickle length")
    return g


def prove_loxilb(path):
    v = json.load(open(path))
    check(xxh3_128_digest(cbor(v["none_hash_seed"])).hex() == v["none_hash_xxhash_hex"], "loxilb NONE_HASH")
    n = 0
    fixtures = v["fixtures"] + v["models"]["Qwen/Qwen2.5-7B-Instruct"]["fixtures"]
    for f in fixtures:
        if f["hash_algo"] != "xxhash_cbor":
            continue
        msg = cbor((bytes.fromhex(f["parent_hash_hex"]), tuple(f["tokens"]), None))
        if f.get("cbor_hex"):
            check(msg.hex() == f["cbor_hex"], f["name"] + " cbor")
        d = xxh3_128_digest(msg)
        check(d.hex() == f["expected_digest_hex"], f["name"] + " digest")
        check(low64(d) == int(f["expected_hash_uint64"]), f["name"] + " u64")
        n += 1
    check(n == 6, "loxilb xxhash_cbor fixture count")


def derive(g, algo, enc):
    seeds = [v["python_hash_seed"] for v in g["seed_root_vectors"]]
    seed = g["profile"]["python_hash_seed"]
    root = xxh3_128_digest(enc(seed))
    cases = []
    for c in g["cases"]:
        out = {k: c[k] for k in ("name", "block_size", "lora_name", "cache_salt", "token_ids",
                                 "token_ids_repeat", "lora_name_repeat") if k in c}
        out["expected"] = [{
            "digest": d.hex(),
            "projected_hex": "%016x" % low64(d),
            "projected_decimal": str(low64(d)),
            "encoded_len": len(msg),
        } for msg, d in chain(xxh3_128_digest, enc, root, c)]
        cases.append(out)
    return {
        "profile": {"strategy": "vllm_v1", "algorithm": algo, "python_hash_seed": seed,
                    "root_digest": root.hex(), "index_projection": "low64_be"},
        "seed_root_vectors": [{"python_hash_seed": s, "encoded_hex": enc(s).hex(),
                               "root_digest": xxh3_128_digest(enc(s)).hex()} for s in seeds],
        "cases": cases,
    }


def pattern(n):
    return bytes((i * 131 + 7) & 0xFF for i in range(n))


LENGTHS = [0, 1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129,
           160, 200, 239, 240, 241, 255, 256, 257, 511, 512, 1023, 1024, 1025, 2047, 2048, 2049,
           4096, 65536 + 7]


def main():
    cbor_golden = prove_golden("mooncake_vllm_sha256_cbor_golden.json", cbor)
    pickle_golden = prove_golden("mooncake_vllm_sha256_pickle_golden.json", pkl)
    prove_loxilb("loxilb_vllm_kv_hash_vectors.json")
    v = LIB.XXH_versionNumber()
    doc = {
        "_provenance": ("DERIVED by derive_vllm_xxhash_vectors.py: CPython %s pickle protocol 5, "
                        "a canonical CBOR encoder cross-checked against the Mooncake sha256_cbor golden "
                        "and the loxilb xxhash_cbor fixtures, XXH3-128 from the xxHash C library %d.%d.%d "
                        "(XXH3_128bits + XXH128_canonicalFromHash). Inputs are the cases of "
                        "mooncake_vllm_sha256_cbor_golden.json (xxhash_cbor) and "
                        "mooncake_vllm_sha256_pickle_golden.json (xxhash).")
                       % (sys.version.split()[0], v // 10000, v // 100 % 100, v % 100),
        "xxhash_cbor": derive(cbor_golden, "xxhash_cbor", cbor),
        "xxhash": derive(pickle_golden, "xxhash", pkl),
        "xxh3_128_pattern": "byte i = (i*131 + 7) mod 256",
        "xxh3_128_lengths": [{"len": n, "digest": xxh3_128_digest(pattern(n)).hex()} for n in LENGTHS],
    }
    with open("derived_vllm_xxhash_vectors.json", "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
