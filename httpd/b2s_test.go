package httpd

import (
	"testing"
	"unsafe"
)

func TestB2S(t *testing.T) {
	b := []byte("hello")
	s := b2s(b)
	if s != "hello" || unsafe.StringData(s) != &b[0] {
		t.Fatal("not a view")
	}
	if b2s(nil) != "" || b2s([]byte{}) != "" {
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
