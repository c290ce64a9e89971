package membroker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

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

	closeL   []chan *amqp.Error
	publishL []chan amqp.Confirmation
	returnL  []chan amqp.Return
	cancelL  []chan string
}

// pendingAck is an unacknowledged delivery on a channel.
type pendingAck struct {
	tag uint64
	q   *queue
	m   *message
	c   *consumer // nil for basic.get
}

// consumer is one basic.consume subscription.
type consumer struct {
	tag        string
	ch         *Channel
	q          *queue
	autoAck    bool
	limit      int // unacknowledged deliveries allowed; 0 means no limit
	unacked    int
	deliveries chan amqp.Delivery
	pending    int  // deliveries waiting in the connection's outbox
	blocked    bool // at its limit, parked in q.blocked
	unsent     bool // delivery channel full, parked in Broker.unsentBlocked
	cancelled  bool
	// lingering: cancelled on a quorum queue with deliveries unsettled;
	// rabbit_fifo keeps it (status cancelled) until they are, so it still
	// counts as one of the queue's consumers.
	lingering bool
}

// Delivery channel sizes. A consumer with a prefetch limit up to
// maxBuffered gets a buffer of its limit, so handing it a delivery never
// blocks. Others (no limit, auto-ack, or a larger limit) get unsentLimit,
// RabbitMQ's classic_queue_consumer_unsent_message_limit: messages beyond it
// stay ready on the queue until the consumer drains its channel.
const (
	maxBuffered             = 2000
	unsentLimit             = 200
	quorumUnlimitedPrefetch = 2000 // rabbit_fifo_client ?UNLIMITED_PREFETCH_COUNT
)

func (c *consumer) hasCredit() bool { return c.autoAck || c.limit == 0 || c.unacked < c.limit }
func (c *consumer) hasRoom() bool   { return len(c.deliveries)+c.pending < cap(c.deliveries) }

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
		if err := checkEquivalent(q, durable, autoDelete, args); err != nil {
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
// queue was deleted); it receives the consumer tag.
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

// Consume starts a consumer. Deliveries arrive on the returned channel,
// round robin with the queue's other consumers, up to the prefetch limit set
// by Qos before this call (quorum queues cap "unlimited" at 2000). An empty
// consumer tag gets a generated one ("ctag-membroker-N", deterministic per
// broker). The channel is closed when the consumer is cancelled or its
// channel closes.
func (ch *Channel) Consume(queue, consumerTag string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	if err := checkShortstr("queue name", queue); err != nil {
		return nil, err
	}
	if err := checkShortstr("consumer tag", consumerTag); err != nil {
		return nil, err
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return nil, amqp.ErrClosed
	}
	if consumerTag == "" {
		// amqp091 names the consumer client-side; so does membroker.
		b.nameSeq++
		consumerTag = fmt.Sprintf("ctag-membroker-%d", b.nameSeq)
	}
	for _, c := range ch.consumers {
		if c.tag == consumerTag {
			return nil, ch.failConn(serverError(amqp.NotAllowed, fmt.Sprintf(
				"NOT_ALLOWED - attempt to reuse consumer tag '%s'", consumerTag)))
		}
	}
	q, err := ch.lookup(queue)
	if err != nil {
		return nil, err
	}
	if aerr := checkConsumeArgs(q, args); aerr != nil {
		return nil, ch.fail(aerr)
	}
	if q.isQuorum() {
		exclusive = false // rabbit_fifo has no exclusive consumers
	}
	if q.exclusiveBy != nil || (exclusive && q.nconsumers > 0) {
		return nil, ch.fail(serverError(amqp.AccessRefused, fmt.Sprintf(
			"ACCESS_REFUSED - queue '%s' in vhost '%s' in exclusive use", queue, vhost)))
	}
	limit := ch.prefetch
	if autoAck {
		limit = 0
	} else if limit == 0 && q.isQuorum() {
		limit = quorumUnlimitedPrefetch
	}
	size := unsentLimit
	if limit > 0 && limit <= maxBuffered {
		size = limit
	}
	c := &consumer{tag: consumerTag, ch: ch, q: q, autoAck: autoAck, limit: limit,
		deliveries: make(chan amqp.Delivery, size)}
	if exclusive {
		q.exclusiveBy = c
	}
	q.consumers = append(q.consumers, c)
	q.nconsumers++
	q.hadConsumer = true
	q.suspendLease() // a queue with consumers does not expire
	ch.consumers = append(ch.consumers, c)
	b.serve(q)
	return c.deliveries, nil
}

// Cancel stops a consumer: its delivery channel is closed after what was
// already handed to it. Its unacknowledged deliveries stay unacknowledged
// (RabbitMQ neither requeues nor discards them on basic.cancel). An unknown
// tag is not an error.
func (ch *Channel) Cancel(consumer string, noWait bool) error {
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return amqp.ErrClosed
	}
	for i, c := range ch.consumers {
		if c.tag == consumer {
			ch.consumers = slices.Delete(ch.consumers, i, i+1)
			b.detach(c)
			ch.conn.send(outItem{kind: outCloseDeliveries, cons: c})
			if !c.q.isQuorum() && !c.q.deleted {
				b.run(c.q) // stop_consumer ends in requeue_and_run
			}
			break
		}
	}
	return nil
}

// detach removes a consumer from its queue; the last one leaving deletes an
// auto-delete queue or starts its x-expires period.
func (b *Broker) detach(c *consumer) {
	c.cancelled = true
	q := c.q
	if q.deleted {
		return
	}
	if q.isQuorum() && c.unacked > 0 {
		// rabbit_fifo maybe_return_all(cancel): the consumer stays, with no
		// credit, until its last delivery is settled (update_or_remove_con):
		// it counts in queue.declare's consumer count (query_stat) and keeps
		// the queue from expiring.
		q.consumers = deleteFirst(q.consumers, c)
		q.blocked = deleteFirst(q.blocked, c)
		c.lingering = true
		return
	}
	q.removeConsumer(c)
	b.lastConsumerLeft(q)
}

// settled finishes a lingering quorum consumer once its last delivery is
// settled: rabbit_fifo removes it then and records the queue as last active.
func (b *Broker) settled(c *consumer) {
	if !c.lingering || c.unacked > 0 {
		return
	}
	c.lingering = false
	if q := c.q; !q.deleted {
		q.removeConsumer(c)
		b.lastConsumerLeft(q)
	}
}

// lastConsumerLeft deletes an auto-delete queue or starts its x-expires
// period when its last consumer has gone.
func (b *Broker) lastConsumerLeft(q *queue) {
	if q.nconsumers == 0 {
		if q.autoDelete {
			b.deleteQueue(q, "auto_delete")
			return
		}
		b.renewLease(q)
	}
}

// releaseGet ends the one-shot consumer of a settled quorum basic.get; the
// last one leaving starts the queue's x-expires period, as a consumer does.
func (b *Broker) releaseGet(p pendingAck) {
	q := p.q
	if p.c != nil || !q.isQuorum() || q.deleted {
		return
	}
	q.getHolders--
	if q.consumerCount() == 0 {
		b.renewLease(q)
	}
}

// serverCancel tells the channel that the broker cancelled c (its queue was
// deleted): NotifyCancel listeners get the tag, then its deliveries close.
func (ch *Channel) serverCancel(c *consumer) {
	c.cancelled = true
	ch.consumers = deleteFirst(ch.consumers, c)
	for _, l := range ch.cancelL {
		ch.conn.send(outItem{kind: outCancel, cancel: l, tag: c.tag})
	}
	ch.conn.send(outItem{kind: outCloseDeliveries, cons: c})
}

// Get fetches one message, as basic.get does; ok is false when the queue has
// none ready. It renews the queue's x-expires lease even when empty.
func (ch *Channel) Get(queue string, autoAck bool) (amqp.Delivery, bool, error) {
	if err := checkShortstr("queue name", queue); err != nil {
		return amqp.Delivery{}, false, err
	}
	b := ch.b
	b.lock()
	defer b.unlock()
	q, err := ch.lookup(queue)
	if err != nil {
		return amqp.Delivery{}, false, err
	}
	b.renewLease(q)
	if !q.isQuorum() {
		// basic_get is fetch/2: it takes the head, even one that expired
		// with no timer covering it, then drops what has expired behind.
		m := q.take(b.version)
		if m == nil {
			return amqp.Delivery{}, false, nil
		}
		var d amqp.Delivery
		ch.handOut(&d, q, nil, m, autoAck)
		b.dropExpired(q)
		d.MessageCount = uint32(q.ready)
		return d, true, nil
	}
	b.reapExpired(q)
	m := q.take(b.version)
	if m == nil {
		b.armHeadExpiry(q)
		return amqp.Delivery{}, false, nil
	}
	var d amqp.Delivery
	ch.handOut(&d, q, nil, m, autoAck)
	if q.isQuorum() && !autoAck {
		// rabbit_fifo reports messages_ready right after the checkout:
		// expired messages now at the head still count until reaped. (A
		// no-ack get is settled within the same command, and the
		// settlement's checkout reaps them first: the code below.)
		d.MessageCount = uint32(q.ready)
		b.run(q)
		return d, true, nil
	}
	b.run(q) // a classic queue drops expired heads before counting
	d.MessageCount = uint32(q.ready)
	return d, true, nil
}

// deliver hands m to consumer c, the head of q's round robin, through its
// connection, and moves c to the back of the round robin. A quorum queue
// parks a consumer as soon as it runs out of credit (rabbit_fifo drops it
// from the service queue); a classic queue finds out only when it next tries
// to deliver to it, which is visible in who goes first once acks free them.
func (b *Broker) deliver(q *queue, c *consumer, m *message) {
	// Built in place: a delivery is a few hundred bytes, copied once more
	// into the Go channel.
	var it outItem
	it.kind, it.cons = outDelivery, c
	c.ch.handOut(&it.d, q, c, m, c.autoAck)
	it.d.ConsumerTag = c.tag
	c.ch.conn.sendItem(&it)
	if len(q.consumers) == 0 || q.consumers[0] != c {
		return
	}
	if q.isQuorum() && !c.hasCredit() {
		q.consumers = dropFront(q.consumers)
		c.blocked = true
		q.blocked = append(q.blocked, c)
		return
	}
	q.consumers = rotate(q.consumers)
}

// handOut records an unacknowledged delivery (unless autoAck) and builds what
// the client sees in d.
func (ch *Channel) handOut(d *amqp.Delivery, q *queue, c *consumer, m *message, autoAck bool) {
	ch.b.touch(q)
	ch.tagSeq++
	tag := ch.tagSeq
	if !autoAck {
		ch.unacked = append(ch.unacked, pendingAck{tag: tag, q: q, m: m, c: c})
		q.unacked++
		if c != nil {
			c.unacked++
		} else if q.isQuorum() {
			q.getHolders++
		}
	}
	p := &m.pub
	// Classic: the is_delivered flag. Quorum: add_delivery_count_header's
	// Redelivered, an acquired count (or a delivery count standing in for
	// one) above 0 (semantics §12).
	*d = amqp.Delivery{
		Acknowledger: ch, Headers: ch.b.headersOf(q, m),
		ContentType: p.ContentType, ContentEncoding: p.ContentEncoding, DeliveryMode: p.DeliveryMode,
		Priority: p.Priority, CorrelationId: p.CorrelationId, ReplyTo: p.ReplyTo,
		Expiration: p.Expiration, MessageId: p.MessageId, Timestamp: p.Timestamp, Type: p.Type,
		UserId: p.UserId, AppId: p.AppId,
		DeliveryTag: tag, Redelivered: m.redelivered || (q.isQuorum() && (m.acquired > 0 || m.failed > 0)),
		Exchange: m.exchange, RoutingKey: m.routingKey,
		Body: ch.b.bodyCopy(p.Body),
	}
	if ch.b.observer != nil {
		tagName := ""
		if c != nil {
			tagName = c.tag
		}
		ch.b.observe(Event{Kind: EventDelivered, Queue: q.name, MessageID: p.MessageId, Priority: p.Priority,
			ConsumerTag: tagName, Redelivered: d.Redelivered})
	}
}

// headersOf builds a delivery's header table: the message's own headers,
// the broker's death records, and the quorum delivery counters.
func (b *Broker) headersOf(q *queue, m *message) amqp.Table {
	// A message can reach a quorum queue with a delivery count and no
	// acquired count (dead-lettered with a delivery_count annotation):
	// rabbit_fifo_client add_delivery_count_header then takes the delivery
	// count for the acquired count (semantics §12).
	quorumCount := q.isQuorum() && (m.acquired > 0 || m.failed > 0)
	if len(m.deaths) == 0 && !quorumCount {
		return m.headerTable(b, 0)
	}
	// Exactly the entries to come: a map for at most 8 stays one group.
	extra := 0
	if quorumCount {
		extra += 2 // x-delivery-count, x-acquired-count
	}
	if len(m.deaths) > 0 {
		extra += 7 // x-death and the x-first/last-death-* headers
	}
	h := m.headerTable(b, extra)
	if h == nil {
		h = b.table(extra)
	}
	if len(m.deaths) > 0 {
		b.deathHeaders(h, m)
	}
	if quorumCount {
		if b.version == RabbitMQ40 {
			n := m.acquired
			if n == 0 {
				n = m.failed
			}
			h["x-delivery-count"] = int64(n)
		} else {
			n := m.acquired
			if n == 0 {
				n = m.failed
			}
			if m.failed > 0 {
				h["x-delivery-count"] = int64(m.failed)
			}
			h["x-acquired-count"] = int64(n)
		}
	}
	return h
}

// Ack acknowledges a delivery, or with multiple every delivery up to it (all
// of them for tag 0). An unknown or already settled tag closes the channel
// with 406 PRECONDITION_FAILED, and Ack returns nil, as on the wire.
func (ch *Channel) Ack(tag uint64, multiple bool) error {
	return ch.settle(tag, multiple, settleAck)
}

// Nack negatively acknowledges like Reject, for one delivery or with
// multiple for every delivery up to tag. On RabbitMQ43 a nack, with or
// without requeue, is not a failed delivery: it does not count toward the
// quorum delivery limit or the delivery count a dead letter carries
// (semantics §12); on RabbitMQ40 a quorum nack counts as a reject does.
func (ch *Channel) Nack(tag uint64, multiple, requeue bool) error {
	if requeue {
		return ch.settle(tag, multiple, settleNackRequeue)
	}
	return ch.settle(tag, multiple, settleNackDiscard)
}

// Reject negatively acknowledges one delivery: with requeue it returns to
// its queue (original position on classic queues, the front on quorum
// queues, counting toward the delivery limit), without it is dead-lettered
// with reason "rejected" or dropped.
func (ch *Channel) Reject(tag uint64, requeue bool) error {
	if requeue {
		return ch.settle(tag, false, settleRejectRequeue)
	}
	return ch.settle(tag, false, settleDiscard)
}

// settleOp is what a settlement does with each delivery it covers.
type settleOp int

const (
	settleAck settleOp = iota
	settleNackRequeue
	settleRejectRequeue
	settleDiscard     // reject without requeue: dead-letter "rejected"
	settleNackDiscard // nack without requeue: the same, not a failed delivery on RabbitMQ43
)

func (ch *Channel) settle(tag uint64, multiple bool, op settleOp) error {
	b := ch.b
	b.lock()
	defer b.unlock()
	if ch.closed {
		return amqp.ErrClosed
	}
	i := sort.Search(len(ch.unacked), func(i int) bool { return ch.unacked[i].tag >= tag })
	var lo, hi int // settle ch.unacked[lo:hi]
	switch {
	case multiple && tag == 0:
		lo, hi = 0, len(ch.unacked)
	case i == len(ch.unacked) || ch.unacked[i].tag != tag:
		ch.fail(preconditionFailed("unknown delivery tag %d", tag))
		return nil
	case multiple:
		lo, hi = 0, i+1
	default:
		lo, hi = i, i+1
	}
	var touchedBuf [4]*queue
	touched := touchedBuf[:0]
	settling := ch.unacked[lo:hi]
	if (op == settleDiscard || op == settleNackDiscard) && hi-lo > 1 {
		settling = discardOrder(settling)
	}
	for _, p := range settling {
		p.q.unacked--
		b.touch(p.q)
		if p.c != nil {
			p.c.unacked--
		}
		b.releaseGet(p)
		switch op {
		case settleAck:
			b.recycle(p.m)
		case settleNackRequeue, settleRejectRequeue:
			b.settleRequeue(p.q, p.m, op == settleRejectRequeue, true)
		case settleDiscard, settleNackDiscard:
			if !p.q.deleted {
				b.countDiscard(p.q, p.m, op == settleDiscard)
				b.deadLetter(p.q, p.m, "rejected")
			}
		}
		if p.c != nil {
			b.unblock(p.c)
			b.settled(p.c)
		}
		if !slices.Contains(touched, p.q) {
			touched = append(touched, p.q)
		}
	}
	clear(ch.unacked[lo:hi])
	ch.unacked = slices.Delete(ch.unacked, lo, hi)
	requeued := op == settleNackRequeue || op == settleRejectRequeue
	for _, q := range touched {
		switch {
		case q.deleted:
		case requeued:
			b.run(q) // requeue_and_run
		default:
			b.serve(q) // an ack or a dead-lettering only frees the consumer
		}
	}
	return nil
}

// discardOrder is the order in which one basic.reject or basic.nack
// without requeue dead-letters ps: queue by queue, and on a classic
// priority queue from the highest priority down, oldest first within one.
// RabbitMQ 4.0.5 groups a channel's settlements by queue
// (rabbit_channel:foreach_per_queue), and a classic priority queue folds
// its per-priority queues from the highest
// (rabbit_priority_queue:ackfold, over priorities/1's descending list),
// dead-lettering each message as it goes
// (rabbit_amqqueue_process:dead_letter_msgs). A dead letter routed back to
// a queue with a consumer waiting is delivered as it lands, so the order
// shows (docs/membroker.md, "Dead-lettering several messages at once").
func discardOrder(ps []pendingAck) []pendingAck {
	out := make([]pendingAck, 0, len(ps))
	for i, p := range ps {
		if slices.ContainsFunc(ps[:i], func(o pendingAck) bool { return o.q == p.q }) {
			continue // its queue's group is out already
		}
		start := len(out)
		for _, o := range ps[i:] {
			if o.q == p.q {
				out = append(out, o)
			}
		}
		if q := p.q; !q.isQuorum() && q.cfg.hasMaxPriority {
			slices.SortStableFunc(out[start:], func(a, b pendingAck) int { return b.m.level - a.m.level })
		}
	}
	return out
}

// countDiscard counts a delivery settled without requeue (reject says
// rejected, else nack) in m's counts before it is dead-lettered: on a
// quorum queue the discard raises acquired_count, and delivery_count
// unless it is a RabbitMQ43 nack (rabbit_fifo discard with DeliveryFailed
// false); on a RabbitMQ43 classic queue a reject raises the delivery count
// (ackfold with DelFailed true), a nack does not (semantics §12).
func (b *Broker) countDiscard(q *queue, m *message, rejected bool) {
	failed := rejected || b.version == RabbitMQ40
	switch {
	case q.isQuorum():
		m.acquired++
		if failed {
			m.failed++
		}
	case rejected && b.version != RabbitMQ40:
		m.failed++
	}
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
	for _, p := range ch.unacked {
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
