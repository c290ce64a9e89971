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
// The model does a declaration and the publish after it at one instant;
// with Latency and TimerSlack set, it has both gaps.
//
// Every draw comes from a generator seeded with Seed, in the order of the
// calls into the broker: the same calls give the same draws.
type Timing struct {
	// Latency is the most the broker's taking of a call precedes the
	// landing of the client's next operation: the round trip of a
	// declaration's reply and the publish that follows it. The model does
	// both at one instant, so it moves the earlier one back: each renewal
	// of a queue's x-expires lease (a declaration, a basic.get, the last
	// consumer leaving) counts from a time drawn uniformly from
	// [now − Latency, now]. A message published right after the
	// declaration that renewed its queue's lease so lands up to Latency
	// into the lease, as on a live broker, while everything a client can
	// observe (what is delivered, counted, confirmed, and when a TTL
	// starts) stays at the call. Defaults to 0.
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
	// ClassicSync is how long a classic queue stays idle (no arrival,
	// delivery or settlement) before it writes to disk the messages it took
	// without a publisher confirm: dead letters, which RabbitMQ delivers
	// with none, and publishes on a channel not in confirm mode. A
	// confirmed publish into the queue, or 4,096 such messages waiting,
	// writes them at once. With it set, Crash loses every such message not
	// yet written, unless the classic queue that dead-lettered it has not
	// written its removal either: then that queue has it again, and releases
	// it twice. RabbitMQ hibernates an idle classic queue, writing what it
	// holds, after at least 1 s (docs/rabbitmq-semantics.md §13).
	// Defaults to 0: every message is on disk as it lands, and Crash loses
	// only what a Restart does.
	ClassicSync time.Duration
	// QuorumRegister is how long after its creation a quorum queue is
	// recorded on disk in Ra's table of names. Crash restarts a queue
	// younger than that empty, whatever was confirmed into it. RabbitMQ
	// 4.0.5 and 4.3.6 write the table about 1 s after a lone creation, at
	// most 3 s (docs/rabbitmq-semantics.md §13). Defaults to 0: at once.
	QuorumRegister time.Duration
	// StopSpan is how far apart a Restart stops the classic queues: each
	// stops at a time drawn uniformly from [now, now + StopSpan]. A
	// classic queue's dead letter sent after its target stopped is gone
	// (RabbitMQ delivers it with no confirm), so Restart loses every
	// message of a classic queue that would expire between its target's
	// stop and its own. RabbitMQ stops every classic queue at once, in no
	// order, after the connections (docs/rabbitmq-semantics.md §13.1).
	// Defaults to 0: all at one instant, losing nothing.
	StopSpan time.Duration
	// BootSpan is how far apart a Restart or Crash starts the quorum
	// queues again: each starts at a time drawn uniformly from [now, now +
	// BootSpan]. Until it has, a quorum queue expires nothing and refuses
	// the at-least-once dead letters another quorum queue sends it (see
	// DeadLetterResend). RabbitMQ recovers a node's quorum queues one by
	// one, in no set order, and a rung whose dead-letter worker starts
	// before the relay queue it sends to has a leader has its first sends
	// refused (docs/rabbitmq-semantics.md §13.7). Defaults to 0: every queue
	// at once, refusing nothing.
	BootSpan time.Duration
	// DeadLetterResend is how long a quorum queue's at-least-once
	// dead-letter worker waits before it sends again a dead letter a target
	// refused: RabbitMQ's dead_letter_worker_publisher_confirm_timeout,
	// 180 s by default. The worker has 32 dead letters out at most: the
	// model refuses that many, holds them and sends them together, and
	// lets the later ones wait only for the target to start, as the live
	// broker did (docs/rabbitmq-semantics.md §13.7). With it zero, a
	// refused dead letter is sent at once.
	DeadLetterResend time.Duration
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
	case t.ClassicSync < 0:
		return fmt.Errorf("membroker: Timing.ClassicSync %s is negative", t.ClassicSync)
	case t.QuorumRegister < 0:
		return fmt.Errorf("membroker: Timing.QuorumRegister %s is negative", t.QuorumRegister)
	case t.StopSpan < 0:
		return fmt.Errorf("membroker: Timing.StopSpan %s is negative", t.StopSpan)
	case t.BootSpan < 0:
		return fmt.Errorf("membroker: Timing.BootSpan %s is negative", t.BootSpan)
	case t.DeadLetterResend < 0:
		return fmt.Errorf("membroker: Timing.DeadLetterResend %s is negative", t.DeadLetterResend)
	}
	return nil
}

// exact reports whether t draws nothing.
func (t Timing) exact() bool {
	return t.Latency <= 0 && t.TimerSlack <= 0 && t.QuorumTick <= 0 && t.StopSpan <= 0 && t.BootSpan <= 0
}

// timing is a broker's Timing with its generator.
type timing struct {
	Timing
	rng *rand.Rand // nil when exact: nothing is drawn
}

func newTiming(t Timing) timing {
	if t.exact() {
		return timing{Timing: t}
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

// latency is how long before the model's instant a lease renewal took
// effect.
func (t *timing) latency() time.Duration { return t.upTo(t.Latency) }

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
