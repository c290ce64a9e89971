package contract

import (
	"context"
	"time"

	"github.com/queuey/queuey/queuey/envelope"
)

// Backend is what queuey needs of a broker: the seam between the core
// (producer, worker) and a transport. Package
// github.com/queuey/queuey/rabbitmq implements it on RabbitMQ, or on
// membroker's in-memory model of it. Implementations are safe for
// concurrent use.
type Backend interface {
	// Declare makes each queue exist with its dead-letter queue, and
	// remembers it: Publish with a hold, and DeadLetter, need the queue to
	// have been declared through this backend. A queue whose existing
	// declaration differs is an error that names it; the backend's other
	// operations keep working.
	Declare(ctx context.Context, queues ...QueueConfig) error

	// Publish publishes env to the work queue env.Queue at priority
	// env.Priority and returns once the broker has confirmed it. With
	// hold > 0 it goes through the hold queue for hold rounded up (to the
	// retry or deferred granularity, by kind) and reaches the work queue
	// when that expires. Errors: ErrUnknownQueue for a hold on a queue not
	// declared through this backend, ErrDelayTooLong, ErrJobTooLarge (refused
	// before anything is sent), and anything the broker refused (the
	// message did not route, was nacked, the channel closed). An error that
	// ended the wait for the broker's confirm after the message was sent
	// (ctx, a nack, a closed channel or connection) wraps ErrMaybeEnqueued.
	// A publish without a hold to a queue that does not exist is an error
	// too, never a silent drop.
	Publish(ctx context.Context, env envelope.Envelope, hold time.Duration, kind HoldKind) error

	// DeadLetter publishes body, unchanged, to queue's dead-letter queue
	// with the reason and the attempts made, and returns once the broker
	// has confirmed it. ErrUnknownQueue if queue was not declared through
	// this backend.
	DeadLetter(ctx context.Context, queue string, body []byte, reason string, attempts int) error

	// Consume starts delivering queue's messages with at most prefetch of
	// them unacknowledged. ctx bounds starting the subscription, not its
	// life: it ends with Cancel or Close, or when the broker or the
	// connection ends it, and Err then says why.
	Consume(ctx context.Context, queue string, prefetch int) (Consumer, error)

	// Close releases the backend's channels, and the connection if the
	// backend owns it (the implementation says which).
	Close() error
}

// HoldKind says which granularity a hold is rounded to.
type HoldKind int

const (
	// HoldRetry rounds to the retry granularity: a backoff tolerates coarse
	// rounding, which bounds how many hold queues exist.
	HoldRetry HoldKind = iota
	// HoldDeferred rounds to the deferred granularity: an EnqueueAfter or a
	// deferral (a Retry-After) is a contract.
	HoldDeferred
)

// Consumer is one subscription to a queue.
//
// A Consumer that survives its connection dropping (a supervised rabbitmq
// backend's) also has a method Lost() <-chan uint64, and its deliveries a
// method Generation() uint64: the number of the channel a delivery came on,
// from 1. Lost yields the number of each channel it loses, before any
// delivery of the next, and queuey.Worker then drops the outcomes of the
// deliveries made on it (the broker has requeued them). A Consumer without
// them ends its Deliveries when its channel goes.
type Consumer interface {
	// Deliveries yields the queue's messages; it is closed when the
	// subscription ends.
	Deliveries() <-chan Delivery
	// Err reports why Deliveries was closed: nil after Cancel or Close,
	// otherwise an error wrapping the broker's *amqp.Error (a channel or
	// connection closed under it).
	Err() error
	// Cancel stops new deliveries (basic.cancel) and closes Deliveries once
	// what was already handed over has been read; deliveries received can
	// still be settled until Close. It is how a worker stops gracefully.
	Cancel() error
	// Close closes the subscription's channel: deliveries not yet settled
	// go back to the queue.
	Close() error
}

// Delivery is one message handed to a consumer.
type Delivery interface {
	Body() []byte
	// Priority is the AMQP priority the message arrived with.
	Priority() uint8
	// Redelivered reports whether the broker has delivered it before.
	Redelivered() bool
	// Ack acknowledges the message: it is gone from the queue.
	Ack() error
	// Requeue returns the message to its queue (basic.reject with requeue,
	// never basic.nack: on RabbitMQ 4.3 only a reject counts toward a
	// quorum queue's delivery limit).
	Requeue() error
}
