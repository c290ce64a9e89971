package membroker

// Consuming and settling: consumers and their credit, basic.consume,
// basic.cancel and basic.get, handing a message out with its headers, and
// basic.ack, basic.nack and basic.reject.

import (
	"fmt"
	"slices"
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pendingAck is an unacknowledged delivery on a channel.
type pendingAck struct {
	tag uint64
	q   *queue
	m   *message
	c   *consumer // nil for basic.get
	at  time.Time // when it was handed out, for the consumer timeout
	// expired: the broker timed it out and returned m to q (RabbitMQ43
	// quorum); the tag stays valid, and settling it is settleExpired.
	// expiredID is m's id then: m may have been settled elsewhere and its
	// memory reused for another message (with another id) since.
	expired   bool
	expiredID uint64
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
	// The consumer timeout (acktimeout.go), RabbitMQ43 quorum only:
	// ackTimeout is 0 for none; timerAt is when its timer is armed for,
	// zero when it is not; timedOut once the broker cancelled it for one.
	ackTimeout time.Duration
	timerAt    time.Time
	timedOut   bool
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
	if aerr := checkConsumeArgs(q, args, b.version); aerr != nil {
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
	if !autoAck && b.version == RabbitMQ43 {
		c.ackTimeout = b.ackTimeout43(q, args)
	}
	if exclusive {
		q.exclusiveBy = c
	}
	if q.cfg.singleActive {
		q.sacJoin(c)
	} else {
		q.consumers = append(q.consumers, c)
	}
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
			if (!c.q.isQuorum() || c.q.cfg.singleActive) && !c.q.deleted {
				// stop_consumer ends in requeue_and_run; rabbit_fifo
				// checks out to the consumer it activated.
				b.run(c.q)
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
		// the queue from expiring. Under a single active consumer the next
		// one is active at once.
		q.sacLeave(c)
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
// deleted, or it timed out: acktimeout.go): NotifyCancel listeners get the
// tag, then its deliveries close.
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
	if q.isQuorum() && q.cfg.singleActive {
		// 4.3 prints the queue type as an Erlang binary (conformance
		// scenario sac-basic-get-quorum).
		typ := "quorum"
		if b.version == RabbitMQ43 {
			typ = `<<"quorum">>`
		}
		return amqp.Delivery{}, false, ch.fail(serverError(amqp.ResourceLocked, fmt.Sprintf(
			"RESOURCE_LOCKED - cannot obtain access to locked queue '%s' in vhost '%s'. basic.get operations "+
				"are not supported by %s queues with single active consumer", q.name, vhost, typ)))
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
		ch.unacked = append(ch.unacked, pendingAck{tag: tag, q: q, m: m, c: c, at: ch.b.now})
		q.unacked++
		if c != nil {
			c.unacked++
		} else if q.isQuorum() {
			q.getHolders++
		}
		ch.b.armAckTimeout(ch, c)
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
		if p.expired {
			b.settleExpired(p, op == settleAck)
			continue
		}
		p.q.unacked--
		b.touch(p.q)
		if p.c != nil {
			p.c.unacked--
		}
		b.releaseGet(p)
		switch op {
		case settleAck:
			p.q.acked++
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
