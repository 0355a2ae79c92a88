package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestBufferConcurrent: writers and a reader at once (run under -race);
// every write is kept whole.
func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if _, err := b.Write([]byte("line\n")); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			_ = b.String()
		}
	}()
	wg.Wait()
	<-done
	if got := strings.Count(b.String(), "line\n"); got != 8*500 || len(b.String()) != 8*500*5 {
		t.Fatalf("%d whole lines in %d bytes, want %d", got, len(b.String()), 8*500)
	}
}
