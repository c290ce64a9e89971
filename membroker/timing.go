package membroker

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Timing makes the model's timing as loose as a live broker's. The zero
// Timing is exact: a publish lands in its queue at the instant of the call,
// and every timer fires at its deadline. That is what the conformance suite
// proves against a live RabbitMQ, whose own sloppiness it keeps out of its
// comparisons with margins of tens of milliseconds.
//
// Exact timing hides one class of loss: a queue whose x-expires lease ends
// before the TTL of a message inside it fires is deleted with the message
// (docs/hold-queue-expiry.md). On a live broker that happens when the time
// between the declaration that renewed the lease and the landing of the
// message, plus the lateness of the queue's timers, exceeds x-expires − TTL.
// With Latency and TimerSlack set, the model has both.
//
// Every draw comes from a generator seeded with Seed, in the order of the
// calls into the broker: the same calls give the same draws.
type Timing struct {
	// Latency is the most a published message takes to land in its queue:
	// each client publish draws a delay uniformly from [0, Latency], and
	// its messages' TTLs count from the landing, never earlier than the
	// landing of the message published to the same queue before it (a
	// queue takes its messages in order). The publish is routed, made
	// deliverable and confirmed at the call, as before; only when its TTL
	// starts moves. Dead letters, which the broker moves between its own
	// queues, land at once. Defaults to 0.
	Latency time.Duration
	// TimerSlack is the most a timer fires late: every time a classic
	// queue's head-expiry timer or x-expires timer, or a quorum queue's
	// head-expiry timer, is armed, it draws its lateness uniformly from
	// [0, TimerSlack]. Defaults to 0.
	TimerSlack time.Duration
	// QuorumTick is the interval on which a quorum queue checks its
	// x-expires lease (quorum_tick_interval, 5 s in RabbitMQ 4.x): with
	// it set, a quorum queue's deletion comes late by a draw from
	// [0, QuorumTick). Defaults to 0: on time.
	QuorumTick time.Duration
	// Seed seeds the draws. Defaults to 0, a seed like any other.
	Seed uint64
}

// Validate reports a negative duration.
func (t Timing) Validate() error {
	switch {
	case t.Latency < 0:
		return fmt.Errorf("membroker: Timing.Latency %s is negative", t.Latency)
	case t.TimerSlack < 0:
		return fmt.Errorf("membroker: Timing.TimerSlack %s is negative", t.TimerSlack)
	case t.QuorumTick < 0:
		return fmt.Errorf("membroker: Timing.QuorumTick %s is negative", t.QuorumTick)
	}
	return nil
}

// exact reports whether t draws nothing.
func (t Timing) exact() bool { return t.Latency <= 0 && t.TimerSlack <= 0 && t.QuorumTick <= 0 }

// timing is a broker's Timing with its generator.
type timing struct {
	Timing
	rng *rand.Rand // nil when exact: nothing is drawn
}

func newTiming(t Timing) timing {
	if t.exact() {
		return timing{}
	}
	return timing{Timing: t, rng: rand.New(rand.NewPCG(t.Seed, 0x6d656d62726f6b72))} // "membrokr"
}

// upTo draws uniformly from [0, d]; 0 without a draw when d ≤ 0.
func (t *timing) upTo(d time.Duration) time.Duration {
	if d <= 0 || t.rng == nil {
		return 0
	}
	return time.Duration(t.rng.Int64N(int64(d) + 1))
}

// below draws uniformly from [0, d); 0 without a draw when d ≤ 0.
func (t *timing) below(d time.Duration) time.Duration {
	if d <= 0 || t.rng == nil {
		return 0
	}
	return time.Duration(t.rng.Int64N(int64(d)))
}

// landing is when a client publish made at now lands: zero, meaning "at
// once, in call order", without Latency.
func (t *timing) landing(now time.Time) time.Time {
	if t.Latency <= 0 {
		return time.Time{}
	}
	return now.Add(t.upTo(t.Latency))
}

// slack is how late a timer just armed will fire.
func (t *timing) slack() time.Duration { return t.upTo(t.TimerSlack) }

// leaseSlack is how late q's x-expires deletion comes once its lease has
// run out.
func (t *timing) leaseSlack(q *queue) time.Duration {
	if q.isQuorum() {
		return t.below(t.QuorumTick)
	}
	return t.slack()
}
