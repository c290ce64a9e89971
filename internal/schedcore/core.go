// Package schedcore is the periodic scheduler's core: the decisions of a
// scheduler process, free of goroutines, I/O and clocks. It takes events
// (a token delivered, its channel lost, an action done, the time) and says
// what to do (enqueue a tick's job, publish a token, acknowledge one, wake
// at a time). rabbitmq.Scheduler runs it on a real broker; the simulator
// runs the same core on membroker. docs/periodic.md is the design.
//
// # Election
//
// The schedulers of a group consume one queue with single active consumer
// (docs/rabbitmq-semantics.md §15): the broker delivers to one of them
// only. What it delivers are tokens, messages that carry the group's state
// (the last tick enqueued of each schedule). A process that holds a token,
// unacknowledged, leads: it enqueues the ticks. When its channel goes, the
// broker returns its tokens and hands them to the next consumer, which
// leads from the state they carry.
//
// No token is acknowledged before a token with the leader's whole state
// is confirmed in the queue, so the state survives any loss of the leader.
// The leader republishes its state every Refresh, and then acknowledges
// the older tokens, so no delivery stays unacknowledged long enough for the
// broker's consumer timeout. A process that holds no token publishes an
// empty one at start and every Refresh, so a group whose tokens were lost
// (a broker that lost its queue's contents) elects a leader again.
//
// # Ticks
//
// A schedule's ticks are the multiples of its interval since the Unix
// epoch, so every process computes the same ones, and each tick's job has
// an ID made of the schedule's name and the tick (TickID): a tick enqueued
// twice, by a leader that died before it recorded the tick and by its
// successor, is recognisable. Ticks missed while no process led are
// coalesced: a new leader enqueues the latest tick that is due, once, and
// skips the older ones. A state that names no tick of a schedule (a new
// schedule, or lost tokens) counts as missing every tick before now, so
// the latest is enqueued at once.
package schedcore

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Schedule is a job enqueued every Every.
type Schedule struct {
	Name  string
	Every time.Duration // a whole number of seconds, at least one
}

// TickID is the ID of schedule name's job for tick: the name, "@", and the
// tick in RFC 3339, UTC, to the second.
func TickID(name string, tick time.Time) string {
	return name + "@" + tick.UTC().Format(time.RFC3339)
}

// Tick is the latest tick of s at or before now.
func (s Schedule) Tick(now time.Time) time.Time {
	every := int64(s.Every / time.Second)
	sec := now.Unix()
	t := sec - sec%every
	if sec < 0 && sec%every != 0 {
		t -= every
	}
	return time.Unix(t, 0).UTC()
}

// Config configures a Core.
type Config struct {
	// Refresh is how often a leader republishes its state, and a follower
	// publishes an empty token. It must stay well under the broker's
	// consumer timeout.
	Refresh time.Duration
	// RetryDelay is how long the core waits before it tries again an
	// action that failed.
	RetryDelay time.Duration
}

// ActionKind says what an Action asks for.
type ActionKind int

const (
	// Enqueue the job of Schedule's tick Tick, with ID TickID; report Done.
	Enqueue ActionKind = iota + 1
	// PublishToken publishes Body to the election queue and waits for the
	// broker's confirm; report Done.
	PublishToken
	// Ack acknowledges the token Token; report Done.
	Ack
	// Wake asks for Time no later than At (replacing any earlier request).
	Wake
)

// Action is one thing the core asks of its shell. Every action but Wake
// is answered with exactly one Done, and the core asks for nothing else
// meanwhile.
type Action struct {
	Kind     ActionKind
	Schedule int       // Enqueue: the index of the schedule
	Tick     time.Time // Enqueue
	Body     []byte    // PublishToken
	Token    TokenRef  // Ack
	At       time.Time // Wake
}

// TokenRef names a delivered token: the channel generation it came on and
// an identifier the shell chose, unique within it.
type TokenRef struct {
	Gen uint64
	ID  uint64
}

// held is a token this process holds, and the state it carries.
type held struct {
	ref   TokenRef
	state map[string]int64
}

// Core is one scheduler process's decisions. Its methods are not safe for
// concurrent use: a shell calls them from one goroutine.
type Core struct {
	schedules []Schedule
	cfg       Config
	held      []held           // the tokens this process holds, in delivery order
	last      map[string]int64 // the latest tick enqueued, by schedule, in Unix seconds: what the group knows
	persisted map[string]int64 // the state of this process's last confirmed token; nil before one
	busy      *Action          // the action awaiting its Done
	refreshAt time.Time        // when to publish a token next
	retryAt   time.Time        // after a failure: no effectful action before it
}

// New returns a core for schedules, holding no token.
func New(schedules []Schedule, cfg Config) *Core {
	return &Core{schedules: slices.Clone(schedules), cfg: cfg, last: map[string]int64{}}
}

// Leading reports whether this process holds a token.
func (c *Core) Leading() bool { return len(c.held) > 0 }

// Start is the first event: a follower publishes a token at once.
func (c *Core) Start(now time.Time) []Action { return c.next(now) }

// Token is a token delivered to this process, and its body.
func (c *Core) Token(ref TokenRef, body []byte, now time.Time) []Action {
	state := decodeState(body)
	c.held = append(c.held, held{ref, state})
	for name, tick := range state {
		if tick > c.last[name] {
			c.last[name] = tick
		}
	}
	return c.next(now)
}

// Lost says the channel of generation gen, and every one before it, is
// gone, with the tokens delivered on it: the broker has returned them.
func (c *Core) Lost(gen uint64, now time.Time) []Action {
	c.held = slices.DeleteFunc(c.held, func(h held) bool { return h.ref.Gen <= gen })
	if !c.Leading() {
		c.persisted = nil
	}
	return c.next(now)
}

// Time is the time passing: a Wake came due.
func (c *Core) Time(now time.Time) []Action { return c.next(now) }

// Done reports the end of the action in flight: err is nil when it took
// effect (the broker confirmed the job or token, or took the ack).
func (c *Core) Done(err error, now time.Time) []Action {
	a := c.busy
	c.busy = nil
	if a == nil {
		return c.next(now)
	}
	if err != nil {
		c.retryAt = now.Add(c.cfg.RetryDelay)
		if a.Kind == Ack {
			// Its channel is gone, and with it the token: Lost follows.
			c.drop(a.Token)
		}
		return c.next(now)
	}
	switch a.Kind {
	case Enqueue:
		name := c.schedules[a.Schedule].Name
		if t := a.Tick.Unix(); t > c.last[name] {
			c.last[name] = t
		}
	case PublishToken:
		c.persisted = decodeState(a.Body)
		c.refreshAt = now.Add(c.cfg.Refresh)
	case Ack:
		c.drop(a.Token)
	}
	return c.next(now)
}

// next is what to do now: the one effectful action, if any is due and
// none is in flight, and when to wake next.
func (c *Core) next(now time.Time) []Action {
	if c.busy != nil {
		return nil
	}
	if now.Before(c.retryAt) {
		// After a failure, nothing until RetryDelay has passed.
		return []Action{{Kind: Wake, At: c.retryAt}}
	}
	if a, ok := c.decide(now); ok {
		c.busy = &a
		return []Action{a}
	}
	return []Action{{Kind: Wake, At: c.wake(now)}}
}

func (c *Core) decide(now time.Time) (Action, bool) {
	if !c.Leading() {
		if now.Before(c.refreshAt) {
			return Action{}, false
		}
		return Action{Kind: PublishToken, Body: encodeState(nil)}, true
	}
	// Record what the group knows before anything else, so that a token
	// is never acknowledged while it alone carries part of the state.
	if !maps.Equal(c.last, c.persisted) || !now.Before(c.refreshAt) {
		return Action{Kind: PublishToken, Body: encodeState(c.last)}, true
	}
	if ref, ok := c.surplus(); ok {
		return Action{Kind: Ack, Token: ref}, true
	}
	for i, s := range c.schedules {
		if tick := s.Tick(now); tick.Unix() > c.last[s.Name] {
			return Action{Kind: Enqueue, Schedule: i, Tick: tick}, true
		}
	}
	return Action{}, false
}

// surplus is a token this process may acknowledge: any but the latest
// one that carries the whole state it persisted (the keeper), once it
// holds the keeper. Until its own token comes back to it, it acknowledges
// nothing.
func (c *Core) surplus() (TokenRef, bool) {
	keeper := -1
	for i, h := range c.held {
		if maps.Equal(h.state, c.persisted) {
			keeper = i
		}
	}
	for i, h := range c.held {
		if keeper >= 0 && i != keeper {
			return h.ref, true
		}
	}
	return TokenRef{}, false
}

// drop forgets the token ref.
func (c *Core) drop(ref TokenRef) {
	c.held = slices.DeleteFunc(c.held, func(h held) bool { return h.ref == ref })
}

// wake is when something will be due, with nothing in flight.
func (c *Core) wake(now time.Time) time.Time {
	at := c.refreshAt
	if c.Leading() {
		for _, s := range c.schedules {
			at = earliest(at, s.Tick(now).Add(s.Every))
		}
	}
	return at
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// A token's body: {"v":1,"last":{"name":unix seconds,...}}.
type tokenBody struct {
	V    int              `json:"v"`
	Last map[string]int64 `json:"last"`
}

func encodeState(last map[string]int64) []byte {
	b, _ := json.Marshal(tokenBody{V: 1, Last: last}) // maps of strings to integers: cannot fail
	return b
}

// decodeState reads a token's state; a body it cannot read (another
// version, or not a token) carries none.
func decodeState(body []byte) map[string]int64 {
	var t tokenBody
	if json.Unmarshal(body, &t) != nil || t.V != 1 {
		return nil
	}
	return t.Last
}
