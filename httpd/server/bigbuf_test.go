package server

import "testing"

// TestBigBufs: take gives the smallest kept buffer large enough and removes
// it; put keeps buffers up to one each and total in all, making room by
// dropping smaller ones, never larger ones.
func TestBigBufs(t *testing.T) {
	p := bigBufs{one: 100, total: 250}
	if p.take(1) != nil {
		t.Fatal("take from an empty keep")
	}
	if p.put(make([]byte, 0, 101)) {
		t.Fatal("kept a buffer over one")
	}
	for _, c := range []int{60, 90, 80} {
		if !p.put(make([]byte, 5, c)) {
			t.Fatalf("did not keep %d", c)
		}
	}
	if p.bytes != 230 {
		t.Fatalf("bytes %d, want 230", p.bytes)
	}
	// 230 + 70 > 250: the 60 goes (the smallest below 70), leaving 240.
	if !p.put(make([]byte, 0, 70)) || p.bytes != 240 {
		t.Fatalf("put 70: bytes %d, want 240", p.bytes)
	}
	// Nothing kept is smaller than 20 and 240 + 20 > 250: refused.
	if p.put(make([]byte, 0, 20)) || p.bytes != 240 {
		t.Fatalf("put 20 kept it: bytes %d", p.bytes)
	}
	b := p.take(75)
	if cap(b) != 80 || len(b) != 0 || p.bytes != 160 {
		t.Fatalf("take 75: cap %d len %d, bytes %d; want the 80, empty, 160 left", cap(b), len(b), p.bytes)
	}
	if p.take(91) != nil {
		t.Fatal("take 91 found a buffer")
	}
	if b := p.take(1); cap(b) != 70 {
		t.Fatalf("take 1: cap %d, want the 70", cap(b))
	}
	if b := p.take(1); cap(b) != 90 || p.bytes != 0 || len(p.bufs) != 0 {
		t.Fatalf("take 1: cap %d, bytes %d, %d kept; want the 90 and none left", cap(b), p.bytes, len(p.bufs))
	}
}
