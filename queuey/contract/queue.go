package contract

import (
	"errors"
	"fmt"
	"time"
)

// QueueType is a work queue's RabbitMQ queue type.
type QueueType int

const (
	// Classic is a classic queue: priorities with x-max-priority, requeues
	// uncounted.
	Classic QueueType = iota
	// Quorum is a replicated quorum queue: it counts failed deliveries and
	// dead-letters a message past its delivery limit (20 by default on
	// RabbitMQ 4), and has two priority tiers on 4.0–4.2 (strict levels on
	// 4.3) instead of x-max-priority.
	Quorum
)

func (t QueueType) String() string {
	if t == Quorum {
		return "quorum"
	}
	return "classic"
}

// DefaultMaxPriority is a classic work queue's x-max-priority unless its
// QueueConfig says otherwise.
const DefaultMaxPriority = 10

// quorumDeferPriority is the priority a deferral is published at on a
// quorum queue: above 4, so in the high tier RabbitMQ 4.0–4.2 serves 2:1
// against the normal one, and above the level 4 that 4.3 gives messages
// without a priority, so it is served strictly first there.
const quorumDeferPriority = 10

// QueueConfig defines a logical queue. The zero value of each optional
// field means its default; WithDefaults fills them and Validate checks the
// result, once, when a producer or worker is built.
type QueueConfig struct {
	// Name is the work queue's name. Required.
	Name string
	// Type is the RabbitMQ queue type. Defaults to Classic.
	Type QueueType
	// Prefetch is how many deliveries a worker holds at once on this queue,
	// which is also how many of its handlers run at once. Defaults to 10.
	Prefetch int
	// MaxPriority is a classic queue's x-max-priority: deferred jobs are
	// published at this priority so they come back ahead of the backlog.
	// new(uint8(0)) declares a plain queue without priorities (deferred
	// jobs then come back FIFO), which is how to keep a queue declared
	// before priorities existed. Ignored for quorum queues.
	// Defaults to 10.
	MaxPriority *uint8
	// Retry is the queue's retry policy; its unset fields take their
	// defaults (see RetryPolicy).
	Retry RetryPolicy
	// Timeout is how long a handler of this queue's jobs may run. Its
	// context ends then (up to a 128th of Timeout later: handlers that
	// start together share one deadline), and an error it returns after that
	// counts as a timed-out attempt (a *TimeoutError): retried after the
	// policy's backoff like any failure, and dead-lettered with
	// ReasonTimedOut once the attempts are spent. A deferral or a Fatal
	// returned late keeps its meaning. A handler that ignores
	// its context and has not returned AbandonGrace later is abandoned:
	// its job is settled as timed out, and what it returns in the end is
	// dropped, so no job outlives its attempts however its handler
	// behaves. The rabbitmq backend asks the broker for a consumer
	// timeout above that, where the release allows it; where it does not,
	// docs/consumer-timeout.md says what to configure. Defaults to
	// DefaultTimeout, 10 minutes; Validate refuses a negative one.
	Timeout time.Duration
}

// DefaultTimeout is QueueConfig.Timeout's default: a third of RabbitMQ's
// default consumer timeout.
const DefaultTimeout = 10 * time.Minute

// AbandonGrace is how long after its timeout a worker waits for a handler
// that ignores its context before it settles the job as timed out.
const AbandonGrace = 5 * time.Second

// WithDefaults returns c with every unset field at its default.
func (c QueueConfig) WithDefaults() QueueConfig {
	if c.Prefetch == 0 {
		c.Prefetch = 10
	}
	if c.MaxPriority == nil {
		c.MaxPriority = new(uint8(DefaultMaxPriority))
	}
	c.Retry = c.Retry.WithDefaults()
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports what is wrong with c, naming the queue and the field.
func (c QueueConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("queuey: queue config: Name is empty"))
	}
	if c.Type != Classic && c.Type != Quorum {
		errs = append(errs, fmt.Errorf("queuey: queue %q: Type %d is neither Classic nor Quorum", c.Name, int(c.Type)))
	}
	if c.Prefetch < 0 || c.Prefetch > 65535 {
		errs = append(errs, fmt.Errorf("queuey: queue %q: Prefetch %d is outside 1..65535", c.Name, c.Prefetch))
	}
	if err := c.Retry.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("queuey: queue %q: Retry: %w", c.Name, err))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("queuey: queue %q: Timeout %s is negative", c.Name, c.Timeout))
	}
	return errors.Join(errs...)
}

// TopPriority is the priority a deferred job is published at: the classic
// queue's MaxPriority (0 for a plain queue: deferrals come back FIFO), or
// the high tier on a quorum queue.
func (c QueueConfig) TopPriority() uint8 {
	c = c.WithDefaults()
	if c.Type == Quorum {
		return quorumDeferPriority
	}
	return *c.MaxPriority
}
