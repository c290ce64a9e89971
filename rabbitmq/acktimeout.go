package rabbitmq

import (
	"errors"
	"github.com/queuey/queuey/internal/acktimeout"
	"maps"
	"strings"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The broker's consumer timeout (docs/consumer-timeout.md): the limit and
// the arguments that ask for it are internal/acktimeout's, which the
// simulator subscribes with too.

// workQueueDeclareArgs are q's work queue arguments, with x-consumer-timeout
// on RabbitMQ 4.0.
func (b *Backend) workQueueDeclareArgs(q queuey.QueueConfig) amqp.Table {
	args := WorkQueueArgs(q.Type == queuey.Quorum, *q.MaxPriority, b.top.DeadQueue(q.Name))
	if !acktimeout.Release40(b.serverVersion()) {
		return args
	}
	args = maps.Clone(args)
	if args == nil {
		args = amqp.Table{}
	}
	args["x-consumer-timeout"] = acktimeout.Arg(q)
	return args
}

// consumeArgs are basic.consume's arguments for a consumer of queue: the
// consumer timeout on a quorum work queue declared through this backend,
// none otherwise.
func (b *Backend) consumeArgs(queue string) amqp.Table {
	b.mu.Lock()
	q, ok := b.declared[queue]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	return acktimeout.ConsumeArgs(q)
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
