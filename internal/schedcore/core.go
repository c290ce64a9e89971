// Package schedcore is the periodic scheduler's core: the decisions of a
// scheduler process, free of goroutines, I/O and clocks. It takes events
// (a token delivered, its channel lost, an action done, the time) and says
// what to do (enqueue a tick's job, publish a token, acknowledge one, wake
// at a time). rabbitmq.Scheduler runs it, on a live broker or on
// membroker. docs/periodic.md is the design.
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
// A new leader enqueues nothing until the first token it published has
// come back to it: the broker hands out a queue's messages in order, so it
// has then read every token that was there before, and knows all the group
// recorded.
// The leader republishes its state every Refresh, and then acknowledges
// the older tokens, so no delivery stays unacknowledged long enough for the
// broker's consumer timeout. A process that holds no token publishes an
// empty one at start and every Refresh, so a group whose tokens were lost
// (a broker that lost its queue's contents) elects a leader again.
//
// # Ticks
//
// A schedule's ticks are the multiples of its interval since the Unix
// epoch, shifted by its offset, so every process computes the same ones, and each tick's job has
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

// Schedule is a job enqueued every Every, Offset past each multiple of
// Every since the Unix epoch.
type Schedule struct {
	Name   string
	Every  time.Duration // a whole number of seconds, at least one
	Offset time.Duration // a whole number of seconds, 0 <= Offset < Every
}

// TickID is the ID of schedule name's job for tick: the name, "@", and the
// tick in RFC 3339, UTC, to the second.
func TickID(name string, tick time.Time) string {
	return name + "@" + tick.UTC().Format(time.RFC3339)
}

// Tick is the latest tick of s at or before now.
func (s Schedule) Tick(now time.Time) time.Time {
	every, off := int64(s.Every/time.Second), int64(s.Offset/time.Second)
	sec := now.Unix() - off
	t := sec - sec%every
	if sec < 0 && sec%every != 0 {
		t -= every
	}
	return time.Unix(t+off, 0).UTC()
}

// Config configures a Core.
type Config struct {
	// ID names this process in the tokens it publishes, so that it knows
	// its own when they come back: unique in the group.
	ID string
	// Refresh is how often a leader republishes its state, and a follower
	// publishes an empty token. It must stay well under the broker's
	// consumer timeout.
	Refresh time.Duration
	// RetryDelay is how long the core waits before it tries again an
	// action that failed: a token's publish or acknowledgement, or one
	// schedule's enqueue (the other schedules go on meanwhile).
	RetryDelay time.Duration
}

// Stepper is what a shell drives: *Core, or a test's wrapper of one that
// rewrites what it answers to break it on purpose.
type Stepper interface {
	Start(now time.Time) []Action
	Token(ref TokenRef, body []byte, now time.Time) []Action
	Lost(gen uint64, now time.Time) []Action
	Time(now time.Time) []Action
	Done(err error, now time.Time) []Action
	Leading() bool
}

var _ Stepper = (*Core)(nil)

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

// held is a token this process holds: its state was merged into the
// core's as it arrived.
type held struct {
	ref TokenRef
	by  string // the process that published it
	seq uint64 // its number among that process's tokens
}

// Core is one scheduler process's decisions. Its methods are not safe for
// concurrent use: a shell calls them from one goroutine.
type Core struct {
	schedules []Schedule
	cfg       Config
	held      []held // the tokens this process holds, in delivery order
	// leading says the broker made this process's consumer the active
	// one, on the channel of generation leadGen: it delivered a token
	// there, and the channel has not been lost since. It stays active
	// until then, whatever tokens it holds.
	leading bool
	leadGen uint64
	last    map[string]int64 // the latest tick enqueued, by schedule, in Unix seconds: what the group knows
	// persisted is the state of this process's last confirmed token since
	// it began to lead, when persistedOK.
	persisted    map[string]int64
	persistedOK  bool
	persistedSeq uint64 // the token that carries it
	seq          uint64 // tokens published so far
	// firstSeq is the first token published since this process began to
	// lead; synced once that token has come back.
	firstSeq  uint64
	synced    bool
	busy      *Action     // the action awaiting its Done
	refreshAt time.Time   // when to publish a token next
	retryAt   time.Time   // after a token's publish or ack failed: none before it
	schedWait []time.Time // by schedule: after its enqueue failed, none before it
}

// New returns a core for schedules, holding no token.
func New(schedules []Schedule, cfg Config) *Core {
	return &Core{schedules: slices.Clone(schedules), cfg: cfg, last: map[string]int64{},
		schedWait: make([]time.Time, len(schedules))}
}

// Leading reports whether this process leads: the broker delivered it a
// token on its current channel.
func (c *Core) Leading() bool { return c.leading }

// Start is the first event: a follower publishes a token at once.
func (c *Core) Start(now time.Time) []Action { return c.next(now) }

// Token is a token delivered to this process, and its body.
func (c *Core) Token(ref TokenRef, body []byte, now time.Time) []Action {
	t := decodeToken(body)
	if !c.leading || ref.Gen > c.leadGen {
		// It leads from now on, knowing only what it has been handed.
		c.leading, c.leadGen = true, ref.Gen
		c.persisted, c.persistedOK, c.persistedSeq, c.firstSeq, c.synced = nil, false, 0, 0, false
	}
	c.held = append(c.held, held{ref: ref, by: t.By, seq: t.Seq})
	for name, tick := range t.Last {
		if tick > c.last[name] {
			c.last[name] = tick
		}
	}
	if t.By == c.cfg.ID && c.firstSeq != 0 && t.Seq >= c.firstSeq {
		c.synced = true
	}
	return c.next(now)
}

// Lost says the channel of generation gen, and every one before it, is
// gone, with the tokens delivered on it: the broker has returned them.
func (c *Core) Lost(gen uint64, now time.Time) []Action {
	c.held = slices.DeleteFunc(c.held, func(h held) bool { return h.ref.Gen <= gen })
	if gen >= c.leadGen {
		c.leading = false
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
		switch a.Kind {
		case Enqueue:
			c.schedWait[a.Schedule] = now.Add(c.cfg.RetryDelay)
		case Ack:
			// Its channel is gone, and with it the token: Lost follows.
			c.drop(a.Token)
			c.retryAt = now.Add(c.cfg.RetryDelay)
		default:
			c.retryAt = now.Add(c.cfg.RetryDelay)
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
		t := decodeToken(a.Body)
		c.refreshAt = now.Add(c.cfg.Refresh)
		if c.leading {
			c.persisted, c.persistedOK, c.persistedSeq = t.Last, true, t.Seq
			if c.firstSeq == 0 {
				c.firstSeq = t.Seq
			}
		}
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
	if a, ok := c.decide(now); ok {
		c.busy = &a
		return []Action{a}
	}
	return []Action{{Kind: Wake, At: c.wake(now)}}
}

func (c *Core) decide(now time.Time) (Action, bool) {
	if now.Before(c.retryAt) {
		return Action{}, false
	}
	if !c.leading {
		if now.Before(c.refreshAt) {
			return Action{}, false
		}
		return c.publish(nil), true
	}
	// Record what the group knows before anything else, so that a token
	// is never acknowledged while it alone carries part of the state.
	if !c.persistedOK || !maps.Equal(c.last, c.persisted) || !now.Before(c.refreshAt) {
		return c.publish(c.last), true
	}
	if ref, ok := c.surplus(); ok {
		return Action{Kind: Ack, Token: ref}, true
	}
	if !c.synced {
		return Action{}, false // older tokens may still carry ticks recorded
	}
	for i, s := range c.schedules {
		if tick := s.Tick(now); tick.Unix() > c.last[s.Name] && !now.Before(c.schedWait[i]) {
			return Action{Kind: Enqueue, Schedule: i, Tick: tick}, true
		}
	}
	return Action{}, false
}

// publish is the action of publishing a token with state.
func (c *Core) publish(state map[string]int64) Action {
	c.seq++
	return Action{Kind: PublishToken, Body: encodeToken(token{V: 1, By: c.cfg.ID, Seq: c.seq, Last: state})}
}

// surplus is a token this process may acknowledge: any but the token
// that carries its persisted state, which stays in the queue. decide asks
// only once the persisted state is all the process knows, which includes
// what every token it holds carries. Tokens ahead of that token in the
// queue are acknowledged as they come, so it reaches this process whatever
// the prefetch.
func (c *Core) surplus() (TokenRef, bool) {
	for _, h := range c.held {
		if !(h.by == c.cfg.ID && h.seq == c.persistedSeq) {
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
	if now.Before(c.retryAt) {
		return c.retryAt
	}
	at := c.refreshAt
	if c.leading && c.synced {
		for i, s := range c.schedules {
			due := s.Tick(now).Add(s.Every)
			if s.Tick(now).Unix() > c.last[s.Name] {
				due = c.schedWait[i] // due now, waiting after a failure
			}
			at = earliest(at, due)
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

// token is a token's body: {"v":1,"by":"…","seq":n,"last":{"name":unix seconds,…}}.
type token struct {
	V    int              `json:"v"`
	By   string           `json:"by"`
	Seq  uint64           `json:"seq"`
	Last map[string]int64 `json:"last"`
}

func encodeToken(t token) []byte {
	b, _ := json.Marshal(t) // strings and integers: cannot fail
	return b
}

// decodeToken reads a token; a body it cannot read (another version, or
// not a token) carries nothing.
func decodeToken(body []byte) token {
	var t token
	if json.Unmarshal(body, &t) != nil || t.V != 1 {
		return token{}
	}
	return t
}
