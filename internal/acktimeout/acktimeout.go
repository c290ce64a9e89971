// Package acktimeout is the consumer timeout queuey asks the broker for
// (docs/consumer-timeout.md): RabbitMQ takes back a delivery left
// unacknowledged for its consumer timeout (30 minutes by default), and a
// job must be settled by the worker first, at its Timeout or when it
// abandons the handler AbandonGrace later; otherwise the job runs again at
// the same attempt while its first run goes on, for ever if every run
// outlasts the broker. So each consumer and, on RabbitMQ 4.0, each work
// queue asks for a limit above the worker's:
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
//
// Package rabbitmq declares and consumes with these arguments; the
// simulator and the property tests subscribe with the same ones.
package acktimeout

import (
	"strings"
	"time"

	"github.com/queuey/queuey/queuey/contract"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Margin is how far the broker's limit sits above the instant a worker
// abandons a handler: room for settling the job (a confirmed publish,
// then the ack) on a slow broker.
const Margin = time.Minute

// Limit is the consumer timeout asked of the broker for a consumer of q
// (WithDefaults applied): the latest a worker settles a job (Timeout, a
// 128th more for the shared deadline, then AbandonGrace) plus Margin. 10
// min 1 min 9.7 s by default.
func Limit(q contract.QueueConfig) time.Duration {
	return q.Timeout + q.Timeout/128 + contract.AbandonGrace + Margin
}

// Arg is x-consumer-timeout's value for q: Limit in milliseconds, rounded
// up.
func Arg(q contract.QueueConfig) int64 {
	return int64((Limit(q) + time.Millisecond - 1) / time.Millisecond)
}

// ConsumeArgs are basic.consume's arguments for a consumer of work queue
// q (WithDefaults applied): x-consumer-timeout on a quorum queue, none on
// a classic one, which RabbitMQ 4.3 would refuse it on.
func ConsumeArgs(q contract.QueueConfig) amqp.Table {
	if q.Type != contract.Quorum {
		return nil
	}
	return amqp.Table{"x-consumer-timeout": Arg(q)}
}

// Release40 reports whether version, a broker's, is RabbitMQ 4.0, the
// release whose consumer timeout only a queue argument raises.
func Release40(version string) bool { return strings.HasPrefix(version, "4.0.") }
