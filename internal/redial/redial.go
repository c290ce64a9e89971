// Package redial is the reconnection loop of a supervised connection, as a
// state machine with no goroutines, channels or clock: which node to dial
// next, how long to wait first, when to give up. rabbitmq.Connect's
// supervisor runs it on a goroutine with real timers; package sim runs the
// same code on its virtual clock for its restart and outage faults, so the
// simulator exercises the product's backoff, not a copy of it.
package redial

import (
	"fmt"
	"time"
)

// Backoff is exponential backoff with full jitter: before attempt n (from
// 1) a wait drawn uniformly from [0, min(Max, Initial × 2^(n−1))).
type Backoff struct {
	Initial, Max time.Duration // both positive
}

// Delay is the wait before attempt n, given u, a uniform draw in [0, 1).
func (b Backoff) Delay(n int, u float64) time.Duration {
	return time.Duration(u * float64(b.Bound(n)))
}

// Bound is the longest wait before attempt n (from 1; less counts as 1):
// min(Max, Initial × 2^(n−1)). Every Delay(n, u) is under it.
func (b Backoff) Bound(n int) time.Duration {
	bound := b.Max
	if n < 1 {
		n = 1
	}
	if n-1 < 62 {
		if d := b.Initial << (n - 1); d > 0 && d < bound {
			bound = d
		}
	}
	return bound
}

// Kind is what an action asks the shell to do.
type Kind int

const (
	// Dial: dial URLs[URL] (and, on a reconnection, declare again what was
	// declared), then report DialDone.
	Dial Kind = iota + 1
	// Wait: after Delay, report TimerFired.
	Wait
	// Report: the state changed (Event).
	Report
)

// State is a connection's state, as reported.
type State int

const (
	Connecting State = iota + 1
	Connected
	Disconnected
	Failed
	Closed
)

func (s State) String() string {
	switch s {
	case Connecting:
		return "connecting"
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Failed:
		return "failed"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Event is one change of state.
type Event struct {
	State   State
	URL     int           // Connecting, Connected: the index of the URL dialled
	Gen     uint64        // Connected, Disconnected, Closed: the connection, from 1
	Attempt int           // Connecting: dial attempts since the last connection, from 1
	Delay   time.Duration // Connecting: the wait before this attempt
	Err     error         // Disconnected, Failed, and Connecting after a failed attempt
}

// Action is one thing for the shell to do.
type Action struct {
	Kind  Kind
	URL   int           // Dial
	Delay time.Duration // Wait
	Event Event         // Report
}

type phase int

const (
	idle    phase = iota
	dialing       // a Dial is out
	waiting       // a Wait is out
	up
	over // failed or closed
)

// Core is the loop's state machine.
type Core struct {
	urls    int
	backoff Backoff
	rand    func() float64

	phase   phase
	gen     uint64
	attempt int // of the dial out, or the next one
	delay   time.Duration
	next    int   // the URL the next attempt dials
	prev    error // the last failed attempt's error
	url     int   // of the dial out
}

// Stepper is what a shell drives: *Core, or a test's wrapper around one
// that rewrites what it answers.
type Stepper interface {
	Gen() uint64
	Start() []Action
	DialDone(err error, fatal bool) []Action
	TimerFired() []Action
	Lost(err error) []Action
	Close() []Action
}

var _ Stepper = (*Core)(nil)

// New returns a core for urls URLs (at least one), waiting as backoff says
// with jitter drawn from rand.
func New(urls int, backoff Backoff, rand func() float64) *Core {
	if urls < 1 || backoff.Initial <= 0 || backoff.Max <= 0 {
		panic("redial: New needs a URL and a positive backoff")
	}
	return &Core{urls: urls, backoff: backoff, rand: rand}
}

// Gen is the current (or last) connection's number; 0 before the first.
func (c *Core) Gen() uint64 { return c.gen }

// Start dials the first URL at once.
func (c *Core) Start() []Action {
	if c.phase != idle {
		panic("redial: Start twice")
	}
	c.attempt, c.delay = 1, 0
	return c.dial(nil)
}

func (c *Core) dial(acts []Action) []Action {
	c.phase = dialing
	c.url = c.next % c.urls
	c.next++
	return append(acts,
		Action{Kind: Report, Event: Event{State: Connecting, URL: c.url, Attempt: c.attempt, Delay: c.delay, Err: c.prev}},
		Action{Kind: Dial, URL: c.url})
}

// DialDone reports the dial's outcome: nil, an error retrying can fix, or
// (fatal) one it cannot. It answers Report Connected; Wait; or Report
// Failed.
func (c *Core) DialDone(err error, fatal bool) []Action {
	if c.phase != dialing {
		panic("redial: DialDone with no dial out")
	}
	switch {
	case err == nil:
		c.phase, c.prev = up, nil
		c.gen++
		return []Action{{Kind: Report, Event: Event{State: Connected, URL: c.url, Gen: c.gen}}}
	case fatal:
		c.phase = over
		return []Action{{Kind: Report, Event: Event{State: Failed, Err: err}}}
	}
	c.prev = err
	c.attempt++
	return c.wait(nil)
}

func (c *Core) wait(acts []Action) []Action {
	c.phase = waiting
	c.delay = c.backoff.Delay(c.attempt, c.rand())
	return append(acts, Action{Kind: Wait, Delay: c.delay})
}

// TimerFired reports that the Wait is over: it answers the next Dial.
func (c *Core) TimerFired() []Action {
	if c.phase != waiting {
		return nil // closed meanwhile
	}
	return c.dial(nil)
}

// Lost reports that the connection went, with err: it answers Report
// Disconnected and the Wait before the first attempt to reconnect.
func (c *Core) Lost(err error) []Action {
	if c.phase != up {
		panic("redial: Lost with no connection up")
	}
	c.attempt, c.prev = 1, nil
	acts := []Action{{Kind: Report, Event: Event{State: Disconnected, Gen: c.gen, Err: err}}}
	return c.wait(acts)
}

// Close ends the loop: it answers Report Closed, once.
func (c *Core) Close() []Action {
	if c.phase == over {
		return nil
	}
	c.phase = over
	return []Action{{Kind: Report, Event: Event{State: Closed, Gen: c.gen}}}
}

// Shell is what carrying out a reconnection loop does in the process that
// reconnects: rabbitmq's supervisor, or the simulator.
type Shell interface {
	// Dial dials URLs[url] and sets the connection up (on a reconnection,
	// declares again what was declared). err is why it failed; fatal says
	// retrying cannot fix it.
	Dial(url int) (fatal bool, err error)
	// Report is told of each change of state but the one that ends the
	// run (Connected, Failed or Closed), which Drive returns.
	Report(ev Event)
}

// Drive carries out acts, and what s answers to each, through sh, until
// the loop asks for a wait or a run of it ends: it returns the wait (wait
// true; once it is over, the shell calls Drive with s.TimerFired()), or
// the event that ended the run (Connected, Failed or Closed). The shell
// waits as it likes, on a timer of its goroutine or on the simulation's
// clock: only that differs between shells, never the order of the rest.
func Drive(s Stepper, acts []Action, sh Shell) (delay time.Duration, wait bool, end Event) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case Report:
			switch a.Event.State {
			case Connected, Failed, Closed:
				return 0, false, a.Event
			}
			sh.Report(a.Event)
		case Wait:
			return a.Delay, true, Event{}
		case Dial:
			fatal, err := sh.Dial(a.URL)
			acts = append(acts, s.DialDone(err, fatal)...)
		}
	}
	return 0, false, Event{}
}
