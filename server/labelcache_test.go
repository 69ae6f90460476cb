package server

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestLabelCache checks that concurrent gets resolve each key once and all
// see its value.
func TestLabelCache(t *testing.T) {
	var resolved atomic.Int64
	c := labelCache[int, *int]{resolve: func(k int) *int {
		resolved.Add(1)
		return &k
	}}
	const keys = 20
	var (
		wg  sync.WaitGroup
		got [8][keys]*int
	)
	for g := range got {
		wg.Go(func() {
			for k := range keys {
				got[g][k] = c.get(k)
			}
		})
	}
	wg.Wait()
	if n := resolved.Load(); n != keys {
		t.Errorf("resolved %d times, want %d", n, keys)
	}
	for g := range got {
		for k, v := range got[g] {
			if *v != k || v != got[0][k] {
				t.Errorf("goroutine %d: key %d: got %d (%p), want %d (%p)", g, k, *v, v, k, got[0][k])
			}
		}
	}
}
