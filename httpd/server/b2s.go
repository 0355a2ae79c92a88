package server

import (
	"encoding/binary"
	"unsafe"
)

// B2S views b as a string without copying.
//
// Safety: the string aliases b; callers pass it only where it is read during
// the current request (core.QueryRequest fields are read only during Query) and
// never retain it. b is not modified while the view is alive. Tested by TestB2S.
func B2S(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// int32View returns b (whose length is a multiple of 4) viewed as native-endian
// int32s, or ok=false when b is not 4-byte aligned or the host is big-endian; the
// caller then decodes with encoding/binary.
//
// Safety: the pointer conversion needs b's start to be 4-byte aligned (checked;
// checkptr enforces it under -race) and the result aliases b, so it is valid
// only as long as b (the request body, for the handler's duration). Tested by
// TestInt32View.
func int32View(b []byte) (v []int32, ok bool) {
	if !littleEndian || len(b)%4 != 0 {
		return nil, false
	}
	if len(b) == 0 {
		return nil, true
	}
	p := unsafe.SliceData(b)
	if uintptr(unsafe.Pointer(p))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(p)), len(b)/4), true
}

// int32Bytes views v as its in-memory bytes (4*len(v)), so that an unaligned
// little-endian token bin is decoded by one copy (memmove) into v instead of a
// per-element loop.
//
// Safety: a byte view of int32 memory needs no alignment; it aliases v and is
// only written through by copy during the call that made it. Callers use it
// only where littleEndian holds (the bytes then are the u32le encoding).
// Tested by TestInt32Bytes.
func int32Bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// leInt32s returns bin, little-endian int32s (len(bin) a multiple of 4), as
// []int32: viewed in place when int32View allows, else decoded into *buf
// (grown as needed) with one memmove on little-endian hosts (int32Bytes) or a
// per-element loop. Both the msgpack token bin and the RPC's base64 tokens
// take this path.
func leInt32s(buf *[]int32, bin []byte) []int32 {
	if v, ok := int32View(bin); ok {
		return v
	}
	n := len(bin) / 4
	dst := (*buf)[:0]
	if cap(dst) < n {
		dst = make([]int32, n)
	}
	dst = dst[:n]
	if littleEndian {
		copy(int32Bytes(dst), bin) // unaligned: one memmove
	} else {
		for i := range dst {
			dst[i] = int32(binary.LittleEndian.Uint32(bin[4*i:]))
		}
	}
	*buf = dst[:0]
	return dst
}
