package rabbitmq

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Channel is the part of an AMQP channel the backend uses: publishing with
// confirms, declaring work and hold queues, and consuming with a prefetch
// limit and settling deliveries. It lives here, where it is consumed, and
// lists nothing else; *amqp091.Channel and *membroker.Channel both satisfy
// it, so the backend runs unchanged on a live broker and on the in-memory
// model.
//
// Nack is deliberately absent: the backend settles a failed delivery with
// Reject, never basic.nack, because only a reject counts toward a quorum
// queue's delivery limit on RabbitMQ 4.3. Deliveries carry their channel as
// an amqp.Acknowledger, so d.Ack and d.Reject work on both implementations.
type Channel interface {
	// Publishing with confirms (see publisher).
	Confirm(noWait bool) error
	NotifyPublish(confirm chan amqp.Confirmation) chan amqp.Confirmation
	NotifyReturn(c chan amqp.Return) chan amqp.Return
	GetNextPublishSeqNo() uint64
	PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error

	// Declaring queues.
	QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)

	// Consuming and settling.
	Qos(prefetchCount, prefetchSize int, global bool) error
	Consume(queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error)
	Cancel(consumer string, noWait bool) error
	Ack(tag uint64, multiple bool) error
	Reject(tag uint64, requeue bool) error

	// Lifecycle.
	NotifyClose(c chan *amqp.Error) chan *amqp.Error
	IsClosed() bool
	Close() error
}
