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
	// DeferredSuffix names a queue's hold queues: q + DeferredSuffix + "." +
	// TTL in milliseconds. Defaults to ".deferred".
	DeferredSuffix string
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
	// HoldType is the type of the hold queues: queuey.Classic (the
	// default) or queuey.Quorum.
	//
	// A classic hold queue lives on one node of a cluster: while that node
	// is down its jobs wait, and if the node never returns they are gone.
	// A classic queue also dead-letters at most once, so a broker restart
	// can drop a job whose hold expires at the wrong moment
	// (docs/reconnection.md). A quorum hold queue is replicated, and
	// releases its jobs with at-least-once dead-lettering, so neither
	// happens. It costs more per hold (docs/quorum-holds.md has the
	// figures), and quorum hold queues are never deleted by the broker:
	// a quorum queue's x-expires counts from its last basic.get, consumer
	// change or node event, never from a declaration or a publish, so for
	// a hold queue, which has no consumer, from its creation; it would
	// delete a hold queue in use with its jobs inside. There is one per TTL
	// ever used: keep DeferredGranularity coarse enough that the deferrals
	// and EnqueueAfter delays you use map to few TTLs, and delete idle ones
	// as an operator.
	//
	// With queuey.Quorum, dead-letter queues are declared as quorum
	// queues too: a classic one lives on one node, and on a cluster a
	// declaration of it blocks while that node is down, which stalls
	// reconnection to the other nodes (seen on RabbitMQ 4.3.6).
	//
	// A quorum hold queue holds jobs of one priority: a job of priority
	// N > 0 waits in QuorumHoldQueue's name with ".pN" before the TTL
	// (docs/quorum-holds.md says why).
	//
	// The hold type is in the hold queue's name (QuorumHoldQueue), so
	// processes that differ in HoldType use different hold queues and never
	// refuse each other's declarations; each job is released into the same
	// work queue. A dead-letter queue keeps its name, so a process finding
	// it declared with the other type uses it as it is and logs a warning.
	// Releases before HoldType cannot: upgrade every process before
	// switching any to queuey.Quorum.
	HoldType queuey.QueueType
}

// WithDefaults returns t with every unset field at its default.
func (t Topology) WithDefaults() Topology {
	if t.DeadSuffix == "" {
		t.DeadSuffix = ".dead"
	}
	if t.DeferredSuffix == "" {
		t.DeferredSuffix = ".deferred"
	}
	if t.RetryGranularity == 0 {
		t.RetryGranularity = time.Second
	}
	if t.DeferredGranularity == 0 {
		t.DeferredGranularity = time.Second
	}
	return t
}

// Validate reports options that cannot work: negative granularities,
// granularities longer than a hold queue can wait (MaxHoldTTL: every hold
// would round up past it, so every retry and deferral would be
// dead-lettered), and suffixes that would put hold or dead-letter queues
// under "amq." or make them collide with each other.
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
	case t.HoldType != queuey.Classic && t.HoldType != queuey.Quorum:
		return fmt.Errorf("rabbitmq: HoldType %v is neither queuey.Classic nor queuey.Quorum", t.HoldType)
	}
	return nil
}

// DeadQueue is the name of queue's dead-letter queue.
func (t Topology) DeadQueue(queue string) string { return queue + t.WithDefaults().DeadSuffix }

// HoldQueue is the name of queue's hold queue for ttl milliseconds.
func (t Topology) HoldQueue(queue string, ttl int64) string {
	return queue + t.WithDefaults().DeferredSuffix + "." + strconv.FormatInt(ttl, 10)
}

// QuorumHoldQueue is the name of queue's quorum hold queue for ttl
// milliseconds (HoldType queuey.Quorum): HoldQueue's with ".quorum" before
// the TTL, so that it never collides with a classic hold queue.
func (t Topology) QuorumHoldQueue(queue string, ttl int64) string {
	return queue + t.WithDefaults().DeferredSuffix + ".quorum." + strconv.FormatInt(ttl, 10)
}

// deadQueueArgs are the declaration arguments of a dead-letter queue: none
// (the vhost's default type, classic) or, with HoldType queuey.Quorum, a
// quorum queue, so that dead letters survive a node too. That one has no
// delivery limit: it has nowhere to dead-letter to, so with the default
// limit of 20 a dead letter read and returned 20 times (by a consumer that
// crashed, or an operator looking) would be dropped.
func (t Topology) deadQueueArgs() amqp.Table {
	if t.HoldType == queuey.Quorum {
		return amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(-1)}
	}
	return nil
}

// hold is the name and the declaration arguments of queue's hold queue for
// ttl milliseconds and a job of the given priority, of the topology's
// HoldType.
//
// A quorum queue orders its messages by priority, and RabbitMQ 4.0 to 4.2
// expire only the message it would deliver next (docs/rabbitmq-semantics.md
// §1.6 and §12.7): a retry at priority 0 held behind a deferral at the top
// priority with the same TTL would wait for the deferral to expire first.
// So each priority a job is held at has quorum hold queues of its own:
// QuorumHoldQueue's name for priority 0, and for another, the same with
// ".p" and the priority before the TTL (q.deferred.quorum.p10.30000). A
// classic hold queue has no x-max-priority, so it keeps every job in
// order of arrival, and so of expiry, whatever its priority.
func (t Topology) hold(queue string, ttl int64, priority uint8) (string, amqp.Table) {
	if t.HoldType == queuey.Quorum {
		name := t.QuorumHoldQueue(queue, ttl)
		if priority > 0 {
			name = queue + t.WithDefaults().DeferredSuffix + ".quorum.p" + strconv.Itoa(int(priority)) + "." + strconv.FormatInt(ttl, 10)
		}
		return name, quorumHoldQueueArgs(queue, ttl)
	}
	return t.HoldQueue(queue, ttl), holdQueueArgs(queue, ttl)
}

// holdPriority is the priority that picks a hold queue for a job of the
// given priority (see hold): itself for quorum holds, 0 for classic ones.
func (t Topology) holdPriority(priority uint8) uint8 {
	if t.HoldType == queuey.Quorum {
		return priority
	}
	return 0
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

// quorumHoldQueueArgs are the declaration arguments of queue's quorum hold
// queue for ttl milliseconds: a replicated queue that releases each job
// into queue after ttl with at-least-once dead-lettering, which RabbitMQ
// applies only with x-overflow reject-publish (docs/rabbitmq-semantics.md
// §3.6). It has no x-expires: see Topology.HoldType.
func quorumHoldQueueArgs(queue string, ttl int64) amqp.Table {
	return amqp.Table{
		"x-queue-type":              "quorum",
		"x-message-ttl":             ttl,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": queue,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
	}
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
// prefix, invalid UTF-8, or a name whose longest hold queue
// (q + DeferredSuffix + ".2147483647"; with quorum holds,
// q + DeferredSuffix + ".quorum.p255.2147483647") or dead-letter queue
// would exceed 255 bytes. amqp091 would send an over-long name's truncation or break the
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
	}
	if hold, _ := t.hold(queue, MaxHoldTTL, 255); len(hold) > maxNameLen {
		return fmt.Errorf("rabbitmq: queue %q: name too long: its longest hold queue name would be %d bytes, over the %d AMQP allows",
			queue, len(hold), maxNameLen)
	}
	if dead := t.DeadQueue(queue); len(dead) > maxNameLen {
		return fmt.Errorf("rabbitmq: queue %q: name too long: its dead-letter queue name would be %d bytes, over the %d AMQP allows",
			queue, len(dead), maxNameLen)
	}
	return nil
}
