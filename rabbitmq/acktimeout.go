package rabbitmq

import (
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The broker's consumer timeout (docs/consumer-timeout.md): RabbitMQ takes
// back a delivery left unacknowledged for its consumer_timeout (30 minutes
// by default). A job must be settled by the worker first, at its Timeout or
// when it abandons the handler AbandonGrace later; otherwise the job runs
// again at the same attempt while its first run goes on, for ever if every
// run outlasts the broker. So the backend asks each release for a limit
// above the worker's:
//
//   - RabbitMQ 4.3 and later, quorum work queue: the consumer argument
//     x-consumer-timeout, which overrides the queue's argument, a policy and
//     consumer_timeout. RabbitMQ 4.0 accepts it and ignores it.
//   - RabbitMQ 4.3, classic queue: no consumer timeout at all, and the
//     argument is refused on both the queue and the consumer.
//   - RabbitMQ 4.0, both types: the queue argument x-consumer-timeout when
//     the queue is created, which overrides consumer_timeout (though a
//     consumer-timeout policy lower than it still wins). RabbitMQ 4.0 checks
//     it on no redeclaration: a queue created without it keeps the broker's
//     limit. RabbitMQ 4.3 checks it on a quorum queue, which it lets a
//     queue carry on after an upgrade.

// ackTimeoutMargin is how far the broker's limit sits above the instant
// a worker abandons a handler: room for settling the job (a confirmed
// publish, then the ack) on a slow broker.
const ackTimeoutMargin = time.Minute

// brokerAckTimeout is the consumer timeout the backend asks the broker
// for on a consumer of q (WithDefaults applied): the latest a worker
// settles a job (Timeout, a 128th more for the shared deadline, then
// AbandonGrace) plus ackTimeoutMargin. 10 min 1 min 9.7 s by default.
func brokerAckTimeout(q queuey.QueueConfig) time.Duration {
	return q.Timeout + q.Timeout/128 + queuey.AbandonGrace + ackTimeoutMargin
}

// ackTimeoutArg is x-consumer-timeout's value for q: milliseconds,
// rounded up.
func ackTimeoutArg(q queuey.QueueConfig) int64 {
	return int64((brokerAckTimeout(q) + time.Millisecond - 1) / time.Millisecond)
}

// release40 reports whether version, a broker's, is RabbitMQ 4.0, the
// release whose consumer timeout only a queue argument raises.
func release40(version string) bool { return strings.HasPrefix(version, "4.0.") }

// workQueueDeclareArgs are q's work queue arguments, with x-consumer-timeout
// on RabbitMQ 4.0.
func (b *Backend) workQueueDeclareArgs(q queuey.QueueConfig) amqp.Table {
	args := WorkQueueArgs(q.Type == queuey.Quorum, *q.MaxPriority, b.top.DeadQueue(q.Name))
	if !release40(b.serverVersion()) {
		return args
	}
	args = maps.Clone(args)
	if args == nil {
		args = amqp.Table{}
	}
	args["x-consumer-timeout"] = ackTimeoutArg(q)
	return args
}

// consumeArgs are basic.consume's arguments for a consumer of queue: the
// consumer timeout on a quorum work queue declared through this backend,
// none otherwise.
func (b *Backend) consumeArgs(queue string) amqp.Table {
	b.mu.Lock()
	q, ok := b.declared[queue]
	b.mu.Unlock()
	if !ok || q.Type != queuey.Quorum {
		return nil
	}
	return amqp.Table{"x-consumer-timeout": ackTimeoutArg(q)}
}

// inequivalentAckTimeout reports whether err is RabbitMQ 4.3 refusing a
// quorum queue's redeclaration over x-consumer-timeout: the queue was
// created with another value, or by a RabbitMQ 4.0, and is usable as it is.
func inequivalentAckTimeout(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed &&
		strings.Contains(ae.Reason, "inequivalent arg 'x-consumer-timeout'")
}

// ackTimedOut reports whether err is the broker closing a channel because
// a delivery outlasted its consumer timeout (RabbitMQ 4.0: 406
// "delivery acknowledgement on channel N timed out").
func ackTimedOut(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed &&
		strings.Contains(ae.Reason, "delivery acknowledgement on channel")
}
