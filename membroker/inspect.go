package membroker

import (
	"time"

	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueInfo describes one queue at one moment, for tests and operators.
type QueueInfo struct {
	Name       string
	Type       string // "classic" or "quorum"
	Durable    bool
	AutoDelete bool
	Exclusive  bool
	// Arguments as declared, in the types amqp091 decodes them to, with the
	// x-queue-type RabbitMQ 4 records when the client gave none.
	Arguments amqp.Table
	Ready     int // messages waiting to be delivered
	Unacked   int // messages delivered and not yet settled
	// DeadLettering counts the at-least-once dead letters the queue holds
	// for a resend after a target refused them (Timing.DeadLetterResend):
	// expired, neither ready nor delivered, still the queue's, as the
	// management API shows a quorum queue's messages beyond its ready
	// and unacknowledged ones.
	DeadLettering int
	Consumers     []string // consumer tags, sorted
	// Published counts the messages a client published that were routed
	// to the queue, and Acked the deliveries acknowledged from it, since
	// it was declared: the management API's message_stats publish and
	// ack. A dead-lettered message (expired from a hold queue, say) is not
	// counted as published to the queue it reaches: live on 4.0.5, three
	// messages expired into a dead-letter queue left it with no
	// message_stats (docs/dashboard.md).
	Published, Acked int64
}

// NextEvent reports the earliest virtual instant after now at which the
// broker will act without being called (a message's expiry, a queue's
// x-expires, a channel's tick or a consumer's timeout: acktimeout.go), if
// it has one. A driver of a mock clock steps to it, lets
// the broker's clients answer what happened there (a relay of the hold
// ladder, say), and steps on, rather than jumping past it. Nothing may
// turn out to happen at that instant.
func (b *Broker) NextEvent() (time.Time, bool) {
	b.lock()
	defer b.unlock()
	if b.events.Len() == 0 {
		return time.Time{}, false
	}
	return b.events.Min().at, true
}

// Queues describes every queue, sorted by name.
func (b *Broker) Queues() []QueueInfo {
	b.lock()
	defer b.unlock()
	names := b.queueNames()
	out := make([]QueueInfo, len(names))
	for i, n := range names {
		out[i] = b.queues[n].info()
	}
	return out
}

// Queue describes one queue; ok is false when it does not exist (never
// declared, deleted, or expired).
func (b *Broker) Queue(name string) (info QueueInfo, ok bool) {
	b.lock()
	defer b.unlock()
	q, ok := b.queues[name]
	if !ok {
		return QueueInfo{}, false
	}
	return q.info(), true
}

func (q *queue) info() QueueInfo {
	tags := make([]string, 0, q.nconsumers)
	for _, c := range q.allConsumers() {
		tags = append(tags, c.tag)
	}
	slices.Sort(tags)
	return QueueInfo{
		Name: q.name, Type: q.cfg.kind.String(), Durable: q.durable, AutoDelete: q.autoDelete,
		Exclusive: q.exclusive, Arguments: copyTable(q.args, 0), Ready: q.ready, Unacked: q.unacked, DeadLettering: len(q.dlxHeld) + len(q.dlxWaiting),
		Consumers: tags, Published: q.published, Acked: q.acked,
	}
}

// Connections returns the open connections, in the order they were dialled.
func (b *Broker) Connections() []*Connection {
	b.lock()
	defer b.unlock()
	var out []*Connection
	for _, c := range b.conns {
		if !c.closed {
			out = append(out, c)
		}
	}
	return out
}

// CloseConnection closes c from the broker's side with err, as a
// connection.close from RabbitMQ would (err is typically 320
// CONNECTION_FORCED): every channel and the connection notify their
// NotifyClose listeners with err, unacknowledged deliveries are requeued
// (counting as failed deliveries on quorum queues), and exclusive queues go.
// A nil err is replaced by 320 CONNECTION_FORCED.
func (b *Broker) CloseConnection(c *Connection, err *amqp.Error) {
	b.lock()
	defer b.unlock()
	if err == nil {
		err = forced
	}
	c.teardown(err)
}

// CloseChannel closes ch from the broker's side with err, as a channel
// exception would; the connection stays open. A nil err is replaced by
// 406 PRECONDITION_FAILED.
func (b *Broker) CloseChannel(ch *Channel, err *amqp.Error) {
	b.lock()
	defer b.unlock()
	if err == nil {
		err = preconditionFailed("closed by membroker fault injection")
	}
	ch.teardown(err)
}

var forced = serverError(amqp.ConnectionForced,
	"CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")

// Restart models a broker restart: every connection is closed with 320
// CONNECTION_FORCED, non-durable queues vanish, durable classic queues keep
// only their persistent messages (delivery mode 2), quorum queues keep all
// of theirs, and unacknowledged messages are back on their queues first.
// x-expires periods start again. With Timing.StopSpan, a classic queue's
// message that would expire into a queue already stopped is lost
// (EventLost).
func (b *Broker) Restart() {
	b.lock()
	defer b.unlock()
	b.restart(false)
}

// ReadyHeaders returns the headers of queue's ready messages as a consumer
// would receive them, in no set order, or nil if queue does not exist. It
// changes nothing: not the messages' order, delivery counts or redelivered
// flags (unlike a basic.get and requeue, or the management UI's Get
// messages). A test reads, say, which work queue each job waiting on the
// shared hold ladder returns to.
func (b *Broker) ReadyHeaders(queue string) []amqp.Table {
	b.lock()
	defer b.unlock()
	q, ok := b.queues[queue]
	if !ok {
		return nil
	}
	out := make([]amqp.Table, 0, q.ready)
	add := func(f *fifo) {
		for _, m := range f.items[f.head:] {
			out = append(out, b.headersOf(q, m))
		}
	}
	add(&q.returns)
	for i := range q.levels {
		add(&q.levels[i])
	}
	return out
}
