// Package minheap is a binary min-heap over a slice of values, for the
// virtual-time event queues of membroker and the simulator. Unlike
// container/heap it never boxes elements in an interface, so pushing and
// popping allocate nothing beyond the slice's growth.
package minheap

// Heap is a min-heap ordered by Less. The zero value with Less set is an
// empty heap.
type Heap[T any] struct {
	Items []T
	Less  func(a, b *T) bool
}

// Len is the number of elements.
func (h *Heap[T]) Len() int { return len(h.Items) }

// Min returns the least element; the heap must not be empty.
func (h *Heap[T]) Min() *T { return &h.Items[0] }

// Push adds x.
func (h *Heap[T]) Push(x T) {
	h.Items = append(h.Items, x)
	i := len(h.Items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.Less(&h.Items[i], &h.Items[p]) {
			break
		}
		h.Items[i], h.Items[p] = h.Items[p], h.Items[i]
		i = p
	}
}

// Pop removes and returns the least element; the heap must not be empty.
func (h *Heap[T]) Pop() T {
	items := h.Items
	top := items[0]
	n := len(items) - 1
	items[0] = items[n]
	var zero T
	items[n] = zero
	items = items[:n]
	h.Items = items
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.Less(&items[r], &items[l]) {
			m = r
		}
		if !h.Less(&items[m], &items[i]) {
			break
		}
		items[i], items[m] = items[m], items[i]
		i = m
	}
	return top
}
