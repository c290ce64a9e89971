package minheap

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestHeapPopsInOrder: any sequence of pushes and pops returns, at each pop,
// the least element pushed and not yet popped.
func TestHeapPopsInOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := Heap[int]{Less: func(a, b *int) bool { return *a < *b }}
		var model []int
		for _, op := range rapid.SliceOf(rapid.IntRange(-5, 100)).Draw(t, "ops") {
			if op < 0 && len(model) > 0 {
				slices.Sort(model)
				if got := h.Pop(); got != model[0] {
					t.Fatalf("Pop = %d, want %d", got, model[0])
				}
				model = model[1:]
				continue
			}
			h.Push(op)
			model = append(model, op)
			if h.Len() != len(model) {
				t.Fatalf("Len = %d, want %d", h.Len(), len(model))
			}
		}
	})
}
