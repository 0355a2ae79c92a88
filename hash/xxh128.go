package hash

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// putXXH128 writes h into d[:16] in XXH3-128's canonical form, high 64 bits
// then low 64 bits, each big-endian: the bytes of python-xxhash's
// xxh3_128_digest (XXH128_canonicalFromHash), which is what vLLM's xxhash and
// xxhash_cbor return as a block digest. low64_be of that digest (its last 8
// bytes, big-endian) is therefore h.Lo. d[16:] is left as is.
func putXXH128(d *[32]byte, h xxh3.Uint128) {
	binary.BigEndian.PutUint64(d[0:8], h.Hi)
	binary.BigEndian.PutUint64(d[8:16], h.Lo)
}
