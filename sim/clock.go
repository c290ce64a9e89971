package sim

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"
)

// Clock is virtual time for a simulation: a clock.Clock whose timers fire
// inline, in (deadline, scheduling order) order, when the simulation moves
// time with Advance or RunUntil, and never otherwise. Unlike clock.Mock it
// sleeps no real time per timer, so millions of events cost only what the
// callbacks do.
//
// It is meant for one goroutine: the simulation's. Callbacks run on the
// goroutine that called Advance or RunUntil, and may schedule more timers,
// including at the current instant (they run in the same call, after the
// ones already due). AfterFunc never calls f before returning, as membroker
// requires of its clock.
//
// Limits, by design: timers cannot be stopped or reset (AfterFunc returns
// nil, Timer and Ticker return values with only C set: membroker and
// queuey's worker use neither Stop nor Reset); Sleep panics, since blocking
// the only goroutine would stop time for good; contexts from WithDeadline
// and WithTimeout are cancelled at the virtual deadline but do not report
// it from Deadline.
type Clock struct {
	start  time.Time
	now    time.Duration // since start: integers compare faster than time.Time
	nowT   time.Time     // start + now, kept up to date by setNow
	seq    uint64
	timers timerHeap
	fired  uint64
}

// NewClock returns a clock standing at start.
func NewClock(start time.Time) *Clock {
	return &Clock{start: start, nowT: start}
}

// setNow moves the clock to d after its start.
func (c *Clock) setNow(d time.Duration) {
	c.now = d
	c.nowT = c.start.Add(d)
}

var _ clock.Clock = (*Clock)(nil)

type timer struct {
	at  time.Duration // since the clock's start
	seq uint64
	f   firer
}

// firer is something the simulation schedules: a method needs no closure.
type firer interface{ fire() }

// funcFirer schedules a plain function (a func is pointer-shaped: putting
// one in an interface does not allocate).
type funcFirer func()

func (f funcFirer) fire() { f() }

func timerBefore(a, b *timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// timerHeap is a binary min-heap of timers by (deadline, sequence). It is
// internal/minheap written out for timer, so that the comparisons inline:
// the clock pushes and pops a few million timers per simulated day.
type timerHeap struct{ items []timer }

func (h *timerHeap) Len() int    { return len(h.items) }
func (h *timerHeap) Min() *timer { return &h.items[0] }

func (h *timerHeap) Push(t timer) {
	h.items = append(h.items, t)
	items := h.items
	i := len(items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !timerBefore(&items[i], &items[p]) {
			break
		}
		items[i], items[p] = items[p], items[i]
		i = p
	}
}

func (h *timerHeap) Pop() timer {
	items := h.items
	top := items[0]
	n := len(items) - 1
	items[0] = items[n]
	items[n] = timer{}
	items = items[:n]
	h.items = items
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && timerBefore(&items[r], &items[l]) {
			m = r
		}
		if !timerBefore(&items[m], &items[i]) {
			break
		}
		items[i], items[m] = items[m], items[i]
		i = m
	}
	return top
}

func (t *timer) run() { t.f.fire() }

// afterFire schedules f.fire to run d from now.
func (c *Clock) afterFire(d time.Duration, f firer) {
	c.seq++
	c.timers.Push(timer{at: c.now + max(d, 0), seq: c.seq, f: f})
}

// schedule adds fn to run d from now (at once, on the next Advance or
// RunUntil, when d <= 0).
func (c *Clock) schedule(d time.Duration, fn func()) {
	c.seq++
	c.timers.Push(timer{at: c.now + max(d, 0), seq: c.seq, f: funcFirer(fn)})
}

// RunUntil moves time to t, firing every timer due by then in order, each
// at its own deadline. Time never moves backwards.
func (c *Clock) RunUntil(t time.Time) {
	until := t.Sub(c.start)
	for c.timers.Len() > 0 && c.timers.Min().at <= until {
		next := c.timers.Pop()
		if next.at > c.now {
			c.setNow(next.at)
		}
		c.fired++
		next.run()
	}
	if until > c.now {
		c.setNow(until)
	}
}

// Step fires the earliest pending timer, moving time to its deadline if
// that is later, and reports whether there was one.
func (c *Clock) Step() bool {
	if c.timers.Len() == 0 {
		return false
	}
	next := c.timers.Pop()
	if next.at > c.now {
		c.setNow(next.at)
	}
	c.fired++
	next.run()
	return true
}

// Advance moves time forward by d; see RunUntil.
func (c *Clock) Advance(d time.Duration) { c.RunUntil(c.Now().Add(d)) }

// Next reports the deadline of the earliest pending timer.
func (c *Clock) Next() (time.Time, bool) {
	if c.timers.Len() == 0 {
		return time.Time{}, false
	}
	return c.start.Add(c.timers.Min().at), true
}

// Pending counts the timers not yet fired; Fired counts those fired.
func (c *Clock) Pending() int  { return c.timers.Len() }
func (c *Clock) Fired() uint64 { return c.fired }

// Now implements clock.Clock.
func (c *Clock) Now() time.Time { return c.nowT }

// Elapsed is the virtual time since the clock's start.
func (c *Clock) Elapsed() time.Duration { return c.now }

// Since implements clock.Clock.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Until implements clock.Clock.
func (c *Clock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// AfterFunc implements clock.Clock. It returns nil: simulation timers
// cannot be stopped (see Stoppable).
func (c *Clock) AfterFunc(d time.Duration, f func()) *clock.Timer {
	c.schedule(d, f)
	return nil
}

// Stoppable calls f after d unless its Stop is called first, or live
// says no when the time comes (a process that died took its timers with
// it). Stop reports whether it stopped the call, as time.Timer.Stop does.
func (c *Clock) Stoppable(d time.Duration, live func() bool, f func()) *StoppableTimer {
	t := &StoppableTimer{}
	c.schedule(d, func() {
		if !t.stopped && live() {
			t.fired = true
			f()
		}
	})
	return t
}

// StoppableTimer is a call Stoppable scheduled.
type StoppableTimer struct{ stopped, fired bool }

// Stop cancels the call, and reports whether it did.
func (t *StoppableTimer) Stop() bool {
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

// After implements clock.Clock: the channel receives the virtual time at
// the deadline (it is buffered, so firing never blocks).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.schedule(d, func() { ch <- c.Now() })
	return ch
}

// Timer implements clock.Clock with a timer whose C fires once; Stop and
// Reset are not supported.
func (c *Clock) Timer(d time.Duration) *clock.Timer {
	return &clock.Timer{C: c.After(d)}
}

// Tick implements clock.Clock.
func (c *Clock) Tick(d time.Duration) <-chan time.Time { return c.Ticker(d).C }

// Ticker implements clock.Clock with a ticker that drops ticks nobody has
// read, as time.Ticker does; Stop and Reset are not supported.
func (c *Clock) Ticker(d time.Duration) *clock.Ticker {
	if d <= 0 {
		panic("sim: non-positive interval for Ticker")
	}
	ch := make(chan time.Time, 1)
	var tick func()
	tick = func() {
		select {
		case ch <- c.Now():
		default:
		}
		c.schedule(d, tick)
	}
	c.schedule(d, tick)
	return &clock.Ticker{C: ch}
}

// Sleep implements clock.Clock by panicking: in a one-goroutine simulation
// nothing could ever wake the sleeper.
func (c *Clock) Sleep(time.Duration) {
	panic("sim: Sleep would block the simulation's only goroutine")
}

// WithDeadline implements clock.Clock: the context is cancelled when
// virtual time reaches d.
func (c *Clock) WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	c.schedule(d.Sub(c.Now()), cancel)
	return ctx, cancel
}

// WithTimeout implements clock.Clock.
func (c *Clock) WithTimeout(parent context.Context, t time.Duration) (context.Context, context.CancelFunc) {
	return c.WithDeadline(parent, c.Now().Add(t))
}
