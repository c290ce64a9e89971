package membroker_test

import (
	"context"

	"github.com/queuey/queuey/membroker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpChannel lists the *amqp.Channel methods membroker promises to mirror.
// Code written against an interface like this one runs on a live broker and
// on membroker alike.
type amqpChannel interface {
	QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
	QueuePurge(name string, noWait bool) (int, error)
	Qos(prefetchCount, prefetchSize int, global bool) error
	Confirm(noWait bool) error
	NotifyPublish(confirm chan amqp.Confirmation) chan amqp.Confirmation
	NotifyReturn(c chan amqp.Return) chan amqp.Return
	NotifyClose(c chan *amqp.Error) chan *amqp.Error
	NotifyCancel(c chan string) chan string
	GetNextPublishSeqNo() uint64
	Publish(exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error
	PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error
	Consume(queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error)
	Get(queue string, autoAck bool) (msg amqp.Delivery, ok bool, err error)
	Cancel(consumer string, noWait bool) error
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
	Reject(tag uint64, requeue bool) error
	Close() error
	IsClosed() bool
}

// amqpConnection lists the *amqp.Connection methods membroker mirrors with
// the same signatures (Channel differs only in its concrete result type).
type amqpConnection interface {
	Close() error
	IsClosed() bool
	NotifyClose(receiver chan *amqp.Error) chan *amqp.Error
}

// The compile-time proof: both implementations satisfy both interfaces, and
// a membroker channel is an amqp.Acknowledger, as deliveries require.
var (
	_ amqpChannel       = (*amqp.Channel)(nil)
	_ amqpChannel       = (*membroker.Channel)(nil)
	_ amqpConnection    = (*amqp.Connection)(nil)
	_ amqpConnection    = (*membroker.Connection)(nil)
	_ amqp.Acknowledger = (*membroker.Channel)(nil)
)
