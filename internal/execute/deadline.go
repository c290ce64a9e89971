package execute

import (
	"time"

	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey/contract"
)

// Running handlers are watched per queue, in the order they started: a
// queue has one Timeout, so that is the order they are to be abandoned in,
// and one timer per queue, armed for the oldest, is enough. A timer per
// handler run cost three allocations per job (BenchmarkConsume on
// membroker, 2026-12-03: 18 allocs/op against 15, each run's context
// with a timer of its own in both) and about 3 % of its throughput, within
// the noise of ten paired rounds (docs/performance.md).

// watch is one queue's running handlers and the timer armed for the
// oldest's abandonment.
type watch struct {
	run   []started // from head on, in the order they started
	head  int
	timer Timer // armed, or nil
}

// started is a running handler and when it is to be abandoned.
type started struct {
	id workercore.ID
	at time.Time
}

// start watches handler id of queue q, whose timeout is d. Under x.mu.
func (x *Executor[M]) start(q int, id workercore.ID, d time.Duration) {
	w := &x.watches[q]
	w.run = append(w.run, started{id: id, at: x.shell.Now().Add(d + contract.AbandonGrace)})
	if w.timer == nil {
		x.arm(q)
	}
}

// finish stops watching handler id of queue q, which returned. Under x.mu.
func (x *Executor[M]) finish(q int, id workercore.ID) {
	if _, ok := x.overdueIDs[id]; ok {
		delete(x.overdueIDs, id) // abandoned, or about to find it returned
		return
	}
	w := &x.watches[q]
	if w.head < len(w.run) && w.run[w.head].id == id {
		w.head++
		x.popFinished(w)
		return
	}
	x.finished[id] = struct{}{}
}

// popFinished drops the handlers at the head that have returned, and
// reclaims the slice's front once it is half spent.
func (x *Executor[M]) popFinished(w *watch) {
	for w.head < len(w.run) {
		id := w.run[w.head].id
		if _, ok := x.finished[id]; !ok {
			break
		}
		delete(x.finished, id)
		w.head++
	}
	if w.head == len(w.run) {
		w.run, w.head = w.run[:0], 0
	} else if w.head > len(w.run)/2 {
		n := copy(w.run, w.run[w.head:])
		w.run, w.head = w.run[:n], 0
	}
}

// arm sets q's timer for its oldest running handler. Under x.mu.
func (x *Executor[M]) arm(q int) {
	w := &x.watches[q]
	if w.head == len(w.run) {
		return
	}
	w.timer = x.shell.AfterFunc(w.run[w.head].at.Sub(x.shell.Now()), func() { x.overdue(q) })
}

// overdue abandons queue q's handlers whose time has come, and arms the
// timer for the next.
func (x *Executor[M]) overdue(q int) {
	var due []workercore.ID
	x.mu.Lock()
	w := &x.watches[q]
	w.timer = nil
	now := x.shell.Now()
	for {
		x.popFinished(w)
		if w.head == len(w.run) || w.run[w.head].at.After(now) {
			break
		}
		id := w.run[w.head].id
		due = append(due, id)
		x.overdueIDs[id] = struct{}{}
		w.head++
	}
	if !x.closed {
		x.arm(q)
	}
	x.mu.Unlock()
	for _, id := range due {
		x.abandon(id)
	}
}

// Close stops the executor's timers: call it once the core is done with,
// so that no timer of a worker that stopped fires later.
func (x *Executor[M]) Close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	for i := range x.watches {
		if t := x.watches[i].timer; t != nil {
			t.Stop()
			x.watches[i].timer = nil
		}
	}
	for id, t := range x.timers {
		t.Stop()
		delete(x.timers, id)
	}
}
