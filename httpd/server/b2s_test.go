package server

import (
	"encoding/binary"
	"slices"
	"testing"
	"unsafe"
)

func TestB2S(t *testing.T) {
	b := []byte("hello")
	s := B2S(b)
	if s != "hello" || unsafe.StringData(s) != &b[0] {
		t.Fatal("not a view")
	}
	if B2S(nil) != "" || B2S([]byte{}) != "" {
		t.Fatal("empty")
	}
}

func TestInt32View(t *testing.T) {
	buf := make([]byte, 20) // Go allocations of this size are 8-byte aligned
	copy(buf, leBin(1, -2, 3, 4))
	v, ok := int32View(buf[:16])
	if littleEndian {
		if !ok || len(v) != 4 || v[0] != 1 || v[1] != -2 || unsafe.Pointer(&v[0]) != unsafe.Pointer(&buf[0]) {
			t.Fatalf("%v %v", ok, v)
		}
	}
	if _, ok := int32View(buf[1:17]); ok {
		t.Fatal("unaligned view")
	}
	if _, ok := int32View(buf[:3]); ok {
		t.Fatal("length not a multiple of 4")
	}
	if v, ok := int32View(buf[:0]); !ok || len(v) != 0 {
		t.Fatal("empty")
	}
}

// TestInt32Bytes: the view aliases v and, on little-endian hosts, copying an
// unaligned u32le bin through it decodes the tokens.
func TestInt32Bytes(t *testing.T) {
	v := make([]int32, 3)
	b := int32Bytes(v)
	if len(b) != 12 || unsafe.Pointer(&b[0]) != unsafe.Pointer(&v[0]) {
		t.Fatal("not a view")
	}
	if littleEndian {
		buf := make([]byte, 13)
		copy(buf[1:], leBin(7, -1, 1<<30))
		copy(b, buf[1:])
		if v[0] != 7 || v[1] != -1 || v[2] != 1<<30 {
			t.Fatalf("%v", v)
		}
	}
	if int32Bytes(nil) != nil {
		t.Fatal("empty")
	}
}

// TestLEInt32s: aligned and unaligned little-endian bins decode to the same
// values (an independent per-element decode), and the copy reuses *buf.
func TestLEInt32s(t *testing.T) {
	want := []int32{1, -1, 1 << 30, -1 << 31, 70000}
	raw := make([]byte, 4+4*len(want))
	for off := 0; off < 4; off++ {
		bin := raw[off : off+4*len(want)]
		for i, v := range want {
			binary.LittleEndian.PutUint32(bin[4*i:], uint32(v))
		}
		buf := make([]int32, 0, 8)
		got := leInt32s(&buf, bin)
		if !slices.Equal(got, want) {
			t.Fatalf("offset %d: %v, want %v", off, got, want)
		}
		if _, view := int32View(bin); !view && &got[0] != &buf[:1][0] {
			t.Fatalf("offset %d: copy did not reuse buf", off)
		}
	}
}
