package sim

// jobTable holds the live jobs by number. Numbers are handed out in order
// and jobs mostly end in order, so it keeps a window of slots from the
// oldest live job on; a job that outlives maxJobWindow later ones moves to
// a map, so the window, and memory, stay bounded whatever one job does.
type jobTable struct {
	base  uint64 // job number of slots[0]
	slots []*job // buf[head:]
	buf   []*job
	head  int
	old   map[uint64]*job // live jobs older than base
	live  int
}

// maxJobWindow bounds jobTable's window of slots.
const maxJobWindow = 1 << 16

func (t *jobTable) get(n uint64) *job {
	if n >= t.base {
		if i := n - t.base; i < uint64(len(t.slots)) {
			return t.slots[i]
		}
		return nil
	}
	return t.old[n]
}

// put adds job n, which must be newer than every job added before.
func (t *jobTable) put(n uint64, j *job) {
	if len(t.slots) == 0 {
		t.base = n
	}
	for t.base+uint64(len(t.slots)) < n {
		t.push(nil) // numbers that never became jobs
	}
	t.push(j)
	t.live++
	for len(t.slots) > maxJobWindow {
		if f := t.slots[0]; f != nil {
			if t.old == nil {
				t.old = make(map[uint64]*job)
			}
			t.old[t.base] = f
		}
		t.popFront()
	}
}

func (t *jobTable) remove(n uint64) {
	if n < t.base {
		if _, ok := t.old[n]; ok {
			delete(t.old, n)
			t.live--
		}
		return
	}
	i := n - t.base
	if i >= uint64(len(t.slots)) || t.slots[i] == nil {
		return
	}
	t.slots[i] = nil
	t.live--
	for len(t.slots) > 0 && t.slots[0] == nil {
		t.popFront()
	}
}

func (t *jobTable) push(j *job) {
	t.buf = append(t.buf, j)
	t.slots = t.buf[t.head:]
}

// popFront drops slots[0], moving the window down to the start of its
// storage once more than half the storage is behind it, so the storage is
// reused rather than grown.
func (t *jobTable) popFront() {
	t.buf[t.head] = nil
	t.head++
	t.base++
	if t.head > 64 && t.head > len(t.buf)/2 {
		n := copy(t.buf, t.buf[t.head:])
		clear(t.buf[n:])
		t.buf, t.head = t.buf[:n], 0
	}
	t.slots = t.buf[t.head:]
}

func (t *jobTable) len() int { return t.live }

// each calls f for every live job, in no particular order.
func (t *jobTable) each(f func(n uint64, j *job)) {
	for n, j := range t.old {
		f(n, j)
	}
	for i, j := range t.slots {
		if j != nil {
			f(t.base+uint64(i), j)
		}
	}
}
