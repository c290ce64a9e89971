package conformance_test

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// slots bounds how many runs are on the live brokers at once, across the
// package's tests, and hands a freed slot to the waiting run of lowest
// rank. The hand-written scenarios rank by their place in longestFirst and
// the generated sequences after all of them, so the 62 s consumer-timeout
// scenarios start first and the generated sequences fill the slots the
// short scenarios leave, instead of waiting for the longest to end (as
// they did when TestGenerated began after TestHandWritten).
type slots struct {
	mu      sync.Mutex
	free    int
	waiting []slotWaiter // by rank, then by arrival
}

type slotWaiter struct {
	rank  int
	ready chan struct{}
}

func newSlots(n int) *slots { return &slots{free: n} }

// acquire waits for a slot and returns the function that frees it.
func (s *slots) acquire(rank int) (release func()) {
	s.mu.Lock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		s.mu.Unlock()
		return s.release
	}
	w := slotWaiter{rank: rank, ready: make(chan struct{})}
	i, _ := slices.BinarySearchFunc(s.waiting, rank+1, func(w slotWaiter, r int) int { return w.rank - r })
	s.waiting = slices.Insert(s.waiting, i, w)
	s.mu.Unlock()
	<-w.ready
	return s.release
}

func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	close(s.waiting[0].ready)
	s.waiting = s.waiting[1:]
}

// TestSlotsHandOverByRank: with every slot taken, a freed slot goes to the
// waiting run of lowest rank, and among equal ranks to the first to come.
func TestSlotsHandOverByRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1)
		release := s.acquire(0)
		var mu sync.Mutex
		var order []string
		var wg sync.WaitGroup
		for _, w := range []struct {
			name string
			rank int
		}{{"late", laterRank}, {"third", 3}, {"first", 1}, {"late again", laterRank}, {"third again", 3}} {
			wg.Go(func() {
				free := s.acquire(w.rank)
				mu.Lock()
				order = append(order, w.name)
				mu.Unlock()
				free()
			})
			synctest.Wait() // each waits before the next comes
		}
		release()
		wg.Wait()
		want := []string{"first", "third", "third again", "late", "late again"}
		if !slices.Equal(order, want) {
			t.Fatalf("slots handed over in the order %q, want %q", order, want)
		}
		if s.free != 1 || len(s.waiting) != 0 {
			t.Fatalf("after every release: %d free, %d waiting; want 1 and 0", s.free, len(s.waiting))
		}
	})
}
