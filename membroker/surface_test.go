package membroker_test

import (
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/membroker/conformance"
	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpConnection lists the *amqp.Connection methods membroker mirrors with
// the same signatures (Channel differs only in its concrete result type).
type amqpConnection interface {
	Close() error
	IsClosed() bool
	NotifyClose(receiver chan *amqp.Error) chan *amqp.Error
}

// The compile-time proof: both implementations satisfy the channel interface
// the conformance suite (and any code meant to run on both) is written
// against, and the connection methods; a membroker channel is an
// amqp.Acknowledger, as deliveries require.
var (
	_ conformance.Channel = (*amqp.Channel)(nil)
	_ conformance.Channel = (*membroker.Channel)(nil)
	_ amqpConnection      = (*amqp.Connection)(nil)
	_ amqpConnection      = (*membroker.Connection)(nil)
	_ amqp.Acknowledger   = (*membroker.Channel)(nil)
)
