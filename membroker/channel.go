package membroker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Channel is an AMQP channel on a Connection. Its methods have the names and
// signatures of *amqp.Channel's and behave as RabbitMQ and amqp091 do
// together: a channel exception closes the channel, notifies its NotifyClose
// listeners and makes later calls return amqp.ErrClosed. Synchronous methods
// (declare, delete, purge, consume, get, qos, confirm) return the
// *amqp.Error; asynchronous ones (publish, ack, nack, reject) return nil and
// the channel closes, as on the wire. It is safe for concurrent use.
type Channel struct {
	b    *Broker
	conn *Connection
	id   uint16

	closed     bool
	prefetch   int
	confirming bool
	published  uint64
	tagSeq     uint64
	lastQueue  string       // for the empty-name shortcut
	unacked    []pendingAck // by delivery tag
	consumers  []*consumer
	tickAt     time.Time   // RabbitMQ40: when its consumer-timeout tick is due; zero if not armed
	timedOut   []*consumer // RabbitMQ43: consumers the broker cancelled for a timeout, counted until the channel closes

	closeL   []chan *amqp.Error
	publishL []chan amqp.Confirmation
	returnL  []chan amqp.Return
	cancelL  []chan string
}

// fail closes the channel with a channel exception and returns it. A reply
// text too long to encode (serverError's 541 INTERNAL_ERROR) closes the
// connection instead, as the broker's channel crash does.
func (ch *Channel) fail(err *amqp.Error) *amqp.Error {
	if err.Code == amqp.InternalError {
		return ch.failConn(err)
	}
	ch.teardown(err)
	return err
}

// failConn closes the whole connection with a connection exception.
func (ch *Channel) failConn(err *amqp.Error) *amqp.Error {
	ch.conn.teardown(err)
	return err
}

// redeclared finishes a declaration of the existing queue q that passed
// the equivalence check.
func (ch *Channel) redeclared(q *queue, noWait bool) amqp.Queue {
	if !noWait && !q.isQuorum() {
		ch.b.renewLease(q)
	}
	ch.lastQueue = q.name
	return amqp.Queue{Name: q.name, Messages: q.ready, Consumers: q.consumerCount()}
}

// QueueDeclare declares a queue on the default exchange's vhost, creating it
// or checking an existing one for equivalence, as queue.declare does.
func (ch *Channel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	var local [8]field
	fields, err := wireFields(local[:0], args) // and Validate, as the client library does
	if err != nil {
		return amqp.Queue{}, err
	}
	if err := checkShortstr("queue name", name); err != nil {
		return amqp.Queue{}, err
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return amqp.Queue{}, amqp.ErrClosed
	}
	durable = durable && !exclusive // the channel forces exclusive queues transient
	var owner *Connection
	if exclusive {
		owner = ch.conn
	}
	if q, ok := b.queues[name]; ok && name != "" && q.owner == owner && q.declaredLike(durable, autoDelete, fields) {
		// What the last declaration that passed asked for, once more (a
		// hold queue's, before every hold): equivalent again.
		return ch.redeclared(q, noWait), nil
	}
	args = make(amqp.Table, len(fields)+1)
	for _, f := range fields {
		args[f.key] = f.val
	}
	if _, ok := args["x-queue-type"]; !ok {
		args["x-queue-type"] = "classic" // 4.x records the node default
	}
	if name == "" {
		s, ok := args["x-queue-type"].(string)
		switch {
		case ok && (s == "classic" || s == "quorum" || s == "stream"):
		case ok && b.version == RabbitMQ43 && s == "":
			// 4.3 takes an empty type for the default (semantics §E13).
		case ok && b.version == RabbitMQ43:
			// 4.3.6 turns the failed type lookup into a channel error
			// (semantics §E13).
			return amqp.Queue{}, ch.fail(preconditionFailed("unknown queue type '%s'", s))
		default:
			// rabbit_channel asks rabbit_queue_type:discover whether the
			// type allows server naming, which crashes on an unknown type
			// (observed on 4.0.5: 541 INTERNAL_ERROR, a connection error;
			// on 4.3.6 for a type that is not a string).
			return amqp.Queue{}, ch.failConn(serverError(amqp.InternalError, "INTERNAL_ERROR"))
		}
		if kindOf(args) == quorumKind {
			return amqp.Queue{}, ch.fail(preconditionFailed(
				"Cannot declare a server-named queue for type rabbit_quorum_queue"))
		}
		name = b.serverName()
	} else if strings.HasPrefix(name, "amq.") {
		return amqp.Queue{}, ch.fail(serverError(amqp.AccessRefused, fmt.Sprintf(
			"ACCESS_REFUSED - queue name '%s' contains reserved prefix 'amq.*'", name)))
	}
	if q, ok := b.queues[name]; ok {
		if q.owner != owner {
			return amqp.Queue{}, ch.fail(resourceLocked(name))
		}
		if err := checkEquivalent(q, durable, autoDelete, args, b.version); err != nil {
			return amqp.Queue{}, ch.fail(err)
		}
		q.lastDecl = declaration{durable: durable, autoDelete: autoDelete, args: append(q.lastDecl.args[:0], fields...), ok: true}
		return ch.redeclared(q, noWait), nil
	}
	cfg, aerr := validateNew(name, durable, autoDelete, exclusive, args, b.version)
	if aerr != nil {
		return amqp.Queue{}, ch.fail(aerr)
	}
	q := &queue{
		name: name, durable: durable, autoDelete: autoDelete, exclusive: exclusive,
		args: args, cfg: cfg, levels: newLevels(cfg, b.version), created: b.now,
	}
	b.observe(Event{Kind: EventQueueCreated, Queue: name})
	if exclusive {
		q.owner = ch.conn
	}
	b.queues[name] = q
	b.renewLease(q)
	ch.lastQueue = name
	return amqp.Queue{Name: name}, nil
}

// QueueDeclarePassive checks that a queue exists and reports its ready
// messages and consumers; a missing queue is a 404 that closes the channel.
// On a classic queue it renews the x-expires lease.
func (ch *Channel) QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	if err := args.Validate(); err != nil {
		return amqp.Queue{}, err
	}
	if err := checkShortstr("queue name", name); err != nil {
		return amqp.Queue{}, err
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return amqp.Queue{}, amqp.ErrClosed
	}
	q, ok := b.queues[name]
	if !ok {
		return amqp.Queue{}, ch.fail(notFoundQueue(name))
	}
	if !noWait && !q.isQuorum() {
		b.renewLease(q) // stat runs before the exclusivity check
	}
	if q.exclusive && q.owner != ch.conn {
		return amqp.Queue{}, ch.fail(resourceLocked(name))
	}
	ch.lastQueue = name
	return amqp.Queue{Name: name, Messages: q.ready, Consumers: q.consumerCount()}, nil
}

// lookup finds a queue this channel may use, closing the channel with 404 or
// 405 otherwise. The caller holds the lock.
func (ch *Channel) lookup(name string) (*queue, error) {
	if ch.closed {
		return nil, amqp.ErrClosed
	}
	name, err := ch.expandName(name)
	if err != nil {
		return nil, err
	}
	q, ok := ch.b.queues[name]
	if !ok {
		return nil, ch.fail(notFoundQueue(name))
	}
	if q.exclusive && q.owner != ch.conn {
		return nil, ch.fail(resourceLocked(name))
	}
	return q, nil
}

// expandName applies AMQP's empty-name shortcut: "" names the queue this
// channel declared last.
func (ch *Channel) expandName(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	if ch.lastQueue == "" {
		return "", ch.fail(serverError(amqp.NotFound, "NOT_FOUND - no previously declared queue"))
	}
	return ch.lastQueue, nil
}

// QueueDelete deletes a queue and reports how many ready messages it held.
// Its messages are not dead-lettered; its consumers are cancelled
// (NotifyCancel). Deleting a missing queue succeeds with 0.
func (ch *Channel) QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error) {
	if err := checkShortstr("queue name", name); err != nil {
		return 0, err
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return 0, amqp.ErrClosed
	}
	name, err := ch.expandName(name)
	if err != nil {
		return 0, err
	}
	if _, ok := b.queues[name]; !ok {
		return 0, nil
	}
	q, err := ch.lookup(name)
	if err != nil {
		return 0, err
	}
	if q.isQuorum() && (ifUnused || ifEmpty) {
		flag := "if-unused"
		if !ifUnused {
			flag = "if-empty"
		}
		return 0, ch.failConn(notImplemented(fmt.Sprintf("cannot delete queue '%s' in vhost '%s'. "+
			"queue.delete operations with %s flag set are not supported by quorum queues", name, vhost, flag)))
	}
	if ifEmpty && q.ready > 0 {
		return 0, ch.fail(preconditionFailed("queue '%s' in vhost '%s' not empty", name, vhost))
	}
	if ifUnused && q.nconsumers > 0 {
		return 0, ch.fail(preconditionFailed("queue '%s' in vhost '%s' in use", name, vhost))
	}
	return b.deleteQueue(q, "deleted"), nil
}

// QueuePurge removes a queue's ready messages (not the unacknowledged ones)
// and reports how many it removed.
func (ch *Channel) QueuePurge(name string, noWait bool) (int, error) {
	if err := checkShortstr("queue name", name); err != nil {
		return 0, err
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	q, err := ch.lookup(name)
	if err != nil {
		return 0, err
	}
	return q.purge(), nil
}

// Qos sets the prefetch limit for consumers this channel creates afterwards
// (RabbitMQ's per-consumer interpretation of global=false). prefetchSize
// must be 0: RabbitMQ closes the connection otherwise. Global QoS is
// silently per-consumer on RabbitMQ43, as on 4.3; on RabbitMQ40, where it
// would be a channel-wide limit, membroker refuses it with NOT_IMPLEMENTED.
func (ch *Channel) Qos(prefetchCount, prefetchSize int, global bool) error {
	if prefetchCount < 0 || prefetchSize < 0 {
		return fmt.Errorf("amqp: Qos values must be non-negative (got prefetchCount=%d, prefetchSize=%d)", prefetchCount, prefetchSize)
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return amqp.ErrClosed
	}
	if prefetchSize != 0 {
		return ch.failConn(notImplemented(fmt.Sprintf("prefetch_size!=0 (%d)", uint32(prefetchSize))))
	}
	if global && b.version == RabbitMQ40 {
		return ch.fail(notImplemented("membroker does not model global QoS"))
	}
	ch.prefetch = int(uint16(prefetchCount)) // the wire field is 16 bits
	return nil
}

// Confirm puts the channel in confirm mode: every later publish is
// acknowledged on NotifyPublish listeners, numbered from 1.
func (ch *Channel) Confirm(noWait bool) error {
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return amqp.ErrClosed
	}
	ch.confirming = true
	return nil
}

// GetNextPublishSeqNo returns the sequence number the next publish will get
// in confirm mode.
func (ch *Channel) GetNextPublishSeqNo() uint64 {
	b := ch.b
	b.lock()
	defer b.unlock()
	return ch.published + 1
}

// NotifyPublish registers a listener for publisher confirms. membroker never
// blocks on it: a confirm that does not fit waits, with everything behind it
// on the connection, until the next call into the broker or a clock tick, so
// size the buffer for the confirms you have in flight, as amqp091 asks.
// The listener is closed when the channel closes.
func (ch *Channel) NotifyPublish(confirm chan amqp.Confirmation) chan amqp.Confirmation {
	return notify(ch, &ch.publishL, confirm)
}

// NotifyReturn registers a listener for mandatory publishes that reached no
// queue (312 NO_ROUTE), sent before the publish's confirm.
func (ch *Channel) NotifyReturn(c chan amqp.Return) chan amqp.Return {
	return notify(ch, &ch.returnL, c)
}

// NotifyClose registers a listener for the channel's closing: it receives the
// *amqp.Error of a channel or connection exception, then is closed. A clean
// close sends nothing.
func (ch *Channel) NotifyClose(c chan *amqp.Error) chan *amqp.Error {
	return notify(ch, &ch.closeL, c)
}

// NotifyCancel registers a listener for consumers the broker cancels (their
// queue was deleted, or, on RabbitMQ43, a delivery of theirs outlasted its
// consumer timeout); it receives the consumer tag.
func (ch *Channel) NotifyCancel(c chan string) chan string {
	return notify(ch, &ch.cancelL, c)
}

func notify[T any](ch *Channel, list *[]chan T, c chan T) chan T {
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		safeClose(c)
		return c
	}
	*list = append(*list, c)
	return c
}

// IsClosed reports whether the channel is closed.
func (ch *Channel) IsClosed() bool {
	b := ch.b
	b.lock()
	defer b.unlock()
	return ch.closed
}

// Close closes the channel cleanly: its consumers are cancelled, its
// unacknowledged deliveries requeued (counted as failed deliveries on quorum
// queues) and its listeners closed. Closing a closed channel returns nil.
func (ch *Channel) Close() error {
	b := ch.b
	b.lock()
	defer b.unlock()
	ch.teardown(nil)
	return nil
}

// PublishWithContext publishes unless ctx is already done, as amqp091 does.
func (ch *Channel) PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ch.Publish(exchange, key, mandatory, immediate, msg)
}

// Publish publishes to the default exchange (""), which
// routes to the queue named by the routing key and by any CC and BCC
// headers. A mandatory publish that reaches no queue is returned (312
// NO_ROUTE) before it is confirmed; one that is not mandatory is dropped and
// still confirmed. A named exchange is a 404, an invalid expiration a 406:
// both close the channel, and Publish itself returns nil, as on the wire.
func (ch *Channel) Publish(exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error {
	var local [8]field
	fields, err := wireFields(local[:0], msg.Headers)
	if err != nil {
		return err
	}
	if err := checkShortstr("exchange name", exchange); err != nil {
		return err
	}
	if err := checkShortstr("routing key", key); err != nil {
		return err
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return amqp.ErrClosed
	}
	if ch.confirming {
		ch.published++
	}
	// The checks run in rabbit_channel's order for basic.publish.
	switch {
	case immediate:
		ch.failConn(notImplemented("immediate=true"))
		return nil
	case len(msg.Body) > maxMessageSize:
		ch.fail(preconditionFailed("message size %d is larger than configured max size %d", len(msg.Body), maxMessageSize))
		return nil
	case exchange != "":
		// "amq.default" is an alias only in AMQP 1.0; over 0-9-1 it is a 404.
		ch.fail(notFoundExchange(exchange))
		return nil
	}
	if msg.Expiration != "" {
		if _, reason := parseExpiration(msg.Expiration); reason != "" {
			ch.fail(invalidExpiration(msg.Expiration, reason))
			return nil
		}
	}
	if msg.UserId != "" && msg.UserId != "guest" {
		ch.fail(preconditionFailed("user_id property set to '%s' but authenticated user was 'guest'", msg.UserId))
		return nil
	}
	m := b.newMessage("", key, msg, fields)
	// Publish's scratch is free again once deliverTo returns; nothing it
	// calls publishes.
	targets := b.route(b.routed[:0], key, m.cc, m.bcc)
	b.routed = targets
	if len(targets) == 0 && mandatory {
		r := amqp.Return{
			ReplyCode: amqp.NoRoute, ReplyText: "NO_ROUTE", Exchange: exchange, RoutingKey: key,
			ContentType: m.pub.ContentType, ContentEncoding: m.pub.ContentEncoding,
			Headers: m.headerTable(b, 0), DeliveryMode: m.pub.DeliveryMode, Priority: m.pub.Priority,
			CorrelationId: m.pub.CorrelationId, ReplyTo: m.pub.ReplyTo, Expiration: m.pub.Expiration,
			MessageId: m.pub.MessageId, Timestamp: m.pub.Timestamp, Type: m.pub.Type,
			UserId: m.pub.UserId, AppId: m.pub.AppId, Body: m.pub.Body,
		}
		for _, l := range ch.returnL {
			ch.conn.send(outItem{kind: outReturn, ret: l, r: &r})
		}
	}
	b.deliverTo(targets, m, nil, ch.confirming, nil)
	if ch.confirming {
		for _, l := range ch.publishL {
			ch.conn.send(outItem{kind: outConfirm, confirm: l, conf: amqp.Confirmation{DeliveryTag: ch.published, Ack: true}})
		}
	}
	return nil
}

// teardown closes the channel; err is nil for a clean close.
func (ch *Channel) teardown(err *amqp.Error) {
	if ch.closed {
		return
	}
	ch.closed = true
	b, conn := ch.b, ch.conn
	var touched []*queue
	for _, c := range ch.consumers {
		b.detach(c)
		conn.dropDeliveries(c)
		conn.send(outItem{kind: outCloseDeliveries, cons: c})
		touched = append(touched, c.q)
	}
	ch.consumers = nil
	for _, c := range ch.timedOut {
		if !c.q.deleted {
			c.q.removeConsumer(c)
			b.lastConsumerLeft(c.q)
			if !slices.Contains(touched, c.q) {
				touched = append(touched, c.q)
			}
		}
	}
	ch.timedOut = nil
	for _, p := range ch.unacked {
		if p.expired {
			b.settleExpired(p, false)
			continue
		}
		p.q.unacked--
		b.releaseGet(p)
		// A channel going down counts as a failed delivery on quorum queues.
		b.settleRequeue(p.q, p.m, true, false)
		if p.c != nil {
			p.c.unacked--
			b.settled(p.c) // a lingering cancelled consumer goes with them
		}
		if !slices.Contains(touched, p.q) {
			touched = append(touched, p.q)
		}
	}
	ch.unacked = nil
	for _, q := range touched {
		if !q.deleted {
			b.run(q)
		}
	}
	for _, l := range ch.closeL {
		if err != nil {
			conn.send(outItem{kind: outError, errc: l, err: err})
		}
		conn.send(outItem{kind: outCloseError, errc: l})
	}
	for _, l := range ch.publishL {
		conn.send(outItem{kind: outCloseConfirm, confirm: l})
	}
	for _, l := range ch.returnL {
		conn.send(outItem{kind: outCloseReturn, ret: l})
	}
	for _, l := range ch.cancelL {
		conn.send(outItem{kind: outCloseCancel, cancel: l})
	}
	ch.closeL, ch.publishL, ch.returnL, ch.cancelL = nil, nil, nil, nil
	conn.channels = slices.DeleteFunc(conn.channels, func(x *Channel) bool { return x == ch })
}
