package rabbitmq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// MaxHoldTTL is the longest TTL a hold queue is declared with, in
// milliseconds: the largest signed 32-bit value.
const MaxHoldTTL = 2147483647

// maxHold is MaxHoldTTL as a duration.
const maxHold = time.Duration(MaxHoldTTL) * time.Millisecond

// maxNameLen is the longest queue name AMQP 0-9-1 can carry (a short string).
const maxNameLen = 255

// Topology options. The zero value of each field means its default.
type Topology struct {
	// DeadSuffix names a queue's dead-letter queue: q + DeadSuffix.
	// Defaults to ".dead".
	DeadSuffix string
	// DeferredSuffix names a queue's classic hold queues, q +
	// DeferredSuffix + "." + TTL in milliseconds, and its warm marker
	// (WarmQueue). Defaults to ".deferred".
	DeferredSuffix string
	// Ladder names the hold ladder the work queues of a virtual host
	// share: its rungs are Ladder + ".ladder." + TTL in milliseconds, its
	// relay queue Ladder + ".relay" and its warm marker Ladder + ".warm".
	// Every process of a virtual host should use the same name; two names
	// make two ladders, each working on its own. No work queue may be
	// named like one of its queues. Defaults to "queuey".
	Ladder string
	// RetryGranularity is what retry delays are rounded up to. It bounds how
	// many hold queues a busy, failing queue can have at once: with a
	// 5-minute backoff cap, 1 s allows up to 300 and 10 s up to 30.
	// Defaults to 1 second; a positive value under a millisecond counts as
	// one millisecond, and Validate refuses one over MaxHoldTTL.
	RetryGranularity time.Duration
	// DeferredGranularity is what EnqueueAfter delays and deferrals are
	// rounded up to. A Retry-After is a contract, so keep it fine.
	// Defaults to 1 second; a positive value under a millisecond counts as
	// one millisecond, and Validate refuses one over MaxHoldTTL.
	DeferredGranularity time.Duration
	// ClassicHolds makes every hold queue a classic queue of its own TTL
	// (HoldQueue), as releases before the hold ladder did. Defaults to
	// false: a ladder of quorum queues (LadderQueue, RelayQueue).
	//
	// Classic holds lose jobs. A classic queue dead-letters at most once,
	// and a hold that expires while the broker restarts, or whose release
	// had not reached disk at a kill -9, is gone: measured live, 14 of
	// 81,651 jobs over ten stop_app/start_app runs and thousands per
	// kill -9 (docs/hold-ladder.md, docs/rabbitmq-semantics.md §13). A
	// classic queue also lives on one node of a cluster. Choose them only
	// where a lost retry is acceptable and a quorum queue is not (a broker
	// without quorum queues).
	//
	// The ladder's price is a relay per rung a hold uses (a few to a few
	// tens of milliseconds each), 24 quorum queues for the virtual host
	// with the default granularities (22 rungs, the relay queue and the
	// ladder's warm marker), and a warm marker per work queue
	// (docs/hold-ladder.md, docs/performance.md). A dead-letter queue is a
	// quorum queue with the ladder and a classic one with classic holds; a
	// process finding it declared with the other type uses it as it is and
	// logs a warning.
	ClassicHolds bool
	// HoldWarmup is how long after this process first declared a work
	// queue it waits before it publishes a hold, a job into a quorum work
	// queue, or a dead letter: RabbitMQ forgets a quorum queue younger than
	// about 3.5 s, with everything in it, on a kill -9
	// (docs/rabbitmq-semantics.md §13.4). Once it has waited it declares
	// the warm markers of the ladder and the queue (LadderWarmQueue,
	// WarmQueue); a process that finds both when it declares the queue
	// does not wait. So only a fresh deployment's first publishes wait,
	// for what remains of the warm-up.
	// Defaults to DefaultHoldWarmup; negative means no wait, for a broker
	// that is never killed (membroker in tests). It does not apply with
	// ClassicHolds.
	HoldWarmup time.Duration
}

// DefaultHoldWarmup is the default Topology.HoldWarmup: RabbitMQ's
// registration of a new quorum queue reaches disk within about 3.5 s
// (a DETS auto-save of 500 ms behind a write cache of 3 s), plus a margin.
const DefaultHoldWarmup = 5 * time.Second

// WithDefaults returns t with every unset field at its default.
func (t Topology) WithDefaults() Topology {
	if t.DeadSuffix == "" {
		t.DeadSuffix = ".dead"
	}
	if t.DeferredSuffix == "" {
		t.DeferredSuffix = ".deferred"
	}
	if t.Ladder == "" {
		t.Ladder = "queuey"
	}
	if t.RetryGranularity == 0 {
		t.RetryGranularity = time.Second
	}
	if t.DeferredGranularity == 0 {
		t.DeferredGranularity = time.Second
	}
	if t.HoldWarmup == 0 {
		t.HoldWarmup = DefaultHoldWarmup
	}
	return t
}

// Validate reports options that cannot work: negative granularities,
// granularities longer than a hold queue can wait (MaxHoldTTL: every hold
// would round up past it, so every retry and deferral would be
// dead-lettered), suffixes that would make hold and dead-letter queues
// collide, and a Ladder name under "amq.", not valid UTF-8, or too long
// for its longest rung's name.
func (t Topology) Validate() error {
	t = t.WithDefaults()
	switch {
	case t.RetryGranularity < 0:
		return fmt.Errorf("rabbitmq: RetryGranularity %s is negative", t.RetryGranularity)
	case t.DeferredGranularity < 0:
		return fmt.Errorf("rabbitmq: DeferredGranularity %s is negative", t.DeferredGranularity)
	case t.RetryGranularity > maxHold:
		return fmt.Errorf("rabbitmq: RetryGranularity %s is over the %s a hold queue can wait", t.RetryGranularity, maxHold)
	case t.DeferredGranularity > maxHold:
		return fmt.Errorf("rabbitmq: DeferredGranularity %s is over the %s a hold queue can wait", t.DeferredGranularity, maxHold)
	case t.DeadSuffix == t.DeferredSuffix:
		return fmt.Errorf("rabbitmq: DeadSuffix and DeferredSuffix are both %q", t.DeadSuffix)
	case strings.HasPrefix(t.Ladder, "amq."):
		return fmt.Errorf("rabbitmq: Ladder %q: the prefix amq. is reserved by RabbitMQ", t.Ladder)
	case !utf8.ValidString(t.Ladder):
		return fmt.Errorf("rabbitmq: Ladder %q is not valid UTF-8", t.Ladder)
	case len(t.LadderQueue(MaxHoldTTL)) > maxNameLen:
		return fmt.Errorf("rabbitmq: Ladder %q is too long: its longest rung's name would be %d bytes, over the %d AMQP allows",
			t.Ladder, len(t.LadderQueue(MaxHoldTTL)), maxNameLen)
	}
	return nil
}

// DeadQueue is the name of queue's dead-letter queue.
func (t Topology) DeadQueue(queue string) string { return queue + t.WithDefaults().DeadSuffix }

// HoldQueue is the name of queue's hold queue for ttl milliseconds.
func (t Topology) HoldQueue(queue string, ttl int64) string {
	return queue + t.WithDefaults().DeferredSuffix + "." + strconv.FormatInt(ttl, 10)
}

// LadderQueue is the name of the shared ladder's rung for ttl
// milliseconds: Ladder + ".ladder." + TTL. See docs/hold-ladder.md.
func (t Topology) LadderQueue(ttl int64) string {
	return t.WithDefaults().Ladder + ".ladder." + strconv.FormatInt(ttl, 10)
}

// RelayQueue is the name of the queue the shared ladder's rungs release
// into: Ladder + ".relay". Every worker with the ladder consumes it, and
// takes each job from there to its next rung or, its wait over, to its
// work queue (Relay).
func (t Topology) RelayQueue() string {
	return t.WithDefaults().Ladder + ".relay"
}

// isLadderQueue reports whether name is, by its name, one of the shared
// ladder's queues: its relay queue, its warm marker or a rung.
func (t Topology) isLadderQueue(name string) bool {
	if name == t.RelayQueue() || name == t.LadderWarmQueue() {
		return true
	}
	_, ok := t.ladderRungTTL(name)
	return ok
}

// ladderRungTTL is the TTL of the shared ladder's rung name, in
// milliseconds, if name is one.
func (t Topology) ladderRungTTL(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, t.WithDefaults().Ladder+".ladder.")
	if !ok {
		return 0, false
	}
	ttl, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || ttl <= 0 || strconv.FormatInt(ttl, 10) != rest {
		return 0, false
	}
	return ttl, true
}

// deadQueueArgs are the declaration arguments of a dead-letter queue: a
// quorum queue, so that dead letters survive a node too, or with
// ClassicHolds none (the vhost's default type, classic). That one has no
// delivery limit: it has nowhere to dead-letter to, so with the default
// limit of 20 a dead letter read and returned 20 times (by a consumer that
// crashed, or an operator looking) would be dropped.
func (t Topology) deadQueueArgs() amqp.Table {
	if t.ClassicHolds {
		return nil
	}
	return amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(-1)}
}

// RetryTTL rounds a retry delay up to a whole multiple of
// RetryGranularity and returns it in whole milliseconds, rounding up
// again: a job is never released early. A delay of zero or less is 0,
// meaning "publish to the work queue now"; a rounded delay over MaxHoldTTL
// is an error wrapping queuey.ErrDelayTooLong.
func (t Topology) RetryTTL(delay time.Duration) (int64, error) {
	return holdTTL(delay, t.WithDefaults().RetryGranularity)
}

// DeferredTTL is RetryTTL for an EnqueueAfter delay or a deferral: it
// rounds up to DeferredGranularity.
func (t Topology) DeferredTTL(delay time.Duration) (int64, error) {
	return holdTTL(delay, t.WithDefaults().DeferredGranularity)
}

// holdTTL rounds delay up to a whole multiple of granularity (a
// granularity under a millisecond counts as one) and returns it in whole
// milliseconds, rounding up again: a job is never released early. A delay
// of zero or less is 0, meaning "publish to the work queue now". A rounded
// delay over MaxHoldTTL is an error wrapping queuey.ErrDelayTooLong.
func holdTTL(delay, granularity time.Duration) (int64, error) {
	if delay <= 0 {
		return 0, nil
	}
	granularity = max(granularity, time.Millisecond)
	if delay > maxHold {
		return 0, fmt.Errorf("%w: %s is over the %s a hold queue can wait", queuey.ErrDelayTooLong, delay, maxHold)
	}
	steps := (delay + granularity - 1) / granularity // no overflow: delay ≤ ~24.8 days
	rounded := steps * granularity
	ms := int64((rounded + time.Millisecond - 1) / time.Millisecond)
	if ms > MaxHoldTTL {
		return 0, fmt.Errorf("%w: %s rounds up to %s, over the %s a hold queue can wait",
			queuey.ErrDelayTooLong, delay, time.Duration(ms)*time.Millisecond, maxHold)
	}
	return ms, nil
}

// holdExpiryMargin is the least time a hold queue outlives the TTL of the
// last message published to it: holdExpires(ttl) - ttl. See holdExpires.
const holdExpiryMargin = 60 * time.Second

// holdExpires is a hold queue's x-expires, in milliseconds, for a TTL of
// ttl milliseconds: ttl + max(ttl, 60 s). It is a pure function of the TTL
// in the queue's name, so every process computes the same arguments.
//
// RabbitMQ deletes a queue that nothing has declared, consumed from or
// fetched from for x-expires, and drops the messages inside it without
// dead-lettering them. Publishing does not renew that lease. A hold queue is
// declared just before each publish into it, so its lease counts from that
// declaration while its message's TTL counts from when the message landed
// and fires when the queue's timer gets to it: the margin x-expires − TTL
// must cover the broker's latency between the two and its timer slack. One
// TTL of margin (x-expires = 2 × TTL) lost 15 to 41% of confirmed jobs
// under load on a live RabbitMQ 4.0.5 at a 1 ms TTL. From a TTL of one minute up this
// is 2 × TTL as before, so the longest hold (MaxHoldTTL) is unchanged.
// docs/hold-queue-expiry.md has the mechanism, the figures and what a fleet
// mixing older processes sees.
func holdExpires(ttl int64) int64 {
	return ttl + max(ttl, holdExpiryMargin.Milliseconds())
}

// holdQueueArgs are the declaration arguments of queue's hold queue for ttl
// milliseconds: a pure function of what its name encodes (x-expires is
// holdExpires(ttl)). The type is set explicitly so that a vhost whose
// default queue type is quorum cannot turn it into a queue whose x-expires
// lease is not renewed by declaring it.
func holdQueueArgs(queue string, ttl int64) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "classic",
		"x-message-ttl":             ttl,
		"x-expires":                 holdExpires(ttl),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
	}
}

// ladderQueueArgs are the declaration arguments of the shared ladder's
// rung for ttl milliseconds: a replicated queue that releases each job
// into the relay queue after ttl with at-least-once dead-lettering, which
// RabbitMQ applies only with x-overflow reject-publish
// (docs/rabbitmq-semantics.md §3.6). It has no x-expires: a quorum
// queue's lease counts from its last consumer change, never from a
// publish, so it would delete a rung in use (docs/quorum-holds.md). There
// are at most 32 rungs.
func ladderQueueArgs(ttl int64, top Topology) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "quorum",
		"x-message-ttl":             ttl,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": top.RelayQueue(),
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	}
}

// relayQueueArgs are the relay queue's declaration arguments: a quorum
// queue without a delivery limit, since it has nowhere to dead-letter to
// and a job its workers return time and again (a relay publish that keeps
// failing) must wait there, not be dropped.
func relayQueueArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(-1)}
}

// WorkQueueArgs are the declaration arguments of the work queue. A classic
// queue with maxPriority 0 gets none at all, declared exactly as a plain
// queue; a quorum queue never gets x-max-priority (RabbitMQ refuses it) and
// dead-letters to deadQueue, where a message past the delivery limit lands.
func WorkQueueArgs(quorum bool, maxPriority uint8, deadQueue string) amqp.Table {
	if quorum {
		return amqp.Table{
			"x-queue-type":              "quorum",
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": deadQueue,
		}
	}
	if maxPriority == 0 {
		return nil
	}
	return amqp.Table{"x-max-priority": int32(maxPriority)}
}

// CheckQueueName refuses a queue name this topology cannot serve, before
// anything reaches the client library: an empty name, the reserved "amq."
// prefix, invalid UTF-8, the name of one of the shared ladder's queues,
// or a name whose longest hold queue (q + DeferredSuffix + ".2147483647";
// with the ladder, its warm marker q + DeferredSuffix + ".warm") or
// dead-letter queue would exceed 255 bytes. amqp091 would send an over-long name's truncation or break the
// whole connection; this error names the queue instead.
func (t Topology) CheckQueueName(queue string) error {
	t = t.WithDefaults()
	switch {
	case queue == "":
		return fmt.Errorf("rabbitmq: queue name is empty")
	case strings.HasPrefix(queue, "amq."):
		return fmt.Errorf("rabbitmq: queue %q: the prefix amq. is reserved by RabbitMQ", queue)
	case !utf8.ValidString(queue):
		return fmt.Errorf("rabbitmq: queue %q: name is not valid UTF-8", queue)
	case !t.ClassicHolds && t.isLadderQueue(queue):
		return fmt.Errorf("rabbitmq: queue %q: the name is one of the hold ladder's queues (Topology.Ladder %q)", queue, t.Ladder)
	}
	hold, what := t.HoldQueue(queue, MaxHoldTTL), "longest hold queue"
	if !t.ClassicHolds {
		hold, what = t.WarmQueue(queue), "warm marker"
	}
	if len(hold) > maxNameLen {
		return fmt.Errorf("rabbitmq: queue %q: name too long: its %s's name would be %d bytes, over the %d AMQP allows",
			queue, what, len(hold), maxNameLen)
	}
	if dead := t.DeadQueue(queue); len(dead) > maxNameLen {
		return fmt.Errorf("rabbitmq: queue %q: name too long: its dead-letter queue name would be %d bytes, over the %d AMQP allows",
			queue, len(dead), maxNameLen)
	}
	return nil
}
