package membroker

// The consumer timeout: how the broker gives up on a delivery its consumer
// left unacknowledged (consumer_timeout, x-consumer-timeout). The two
// profiles differ entirely; docs/rabbitmq-semantics.md §14 has the live
// observations and the source.
//
//   - RabbitMQ40, classic and quorum queues alike: each channel checks its
//     oldest unacknowledged delivery on its periodic tick
//     (rabbit_channel:evaluate_consumer_timeout at v4.0.5), against its
//     queue's x-consumer-timeout argument or else the broker's
//     consumer_timeout; a consumer argument is ignored. A delivery older
//     than that closes the channel with 406 PRECONDITION_FAILED, and the
//     channel's deliveries go back to their queues as on any close.
//   - RabbitMQ43: classic queues have no consumer timeout. A quorum queue
//     times each delivery out exactly at its deadline, by the consumer's
//     x-consumer-timeout argument, else the queue's, else the broker's. At
//     the first, the consumer is cancelled (basic.cancel; the channel stays
//     open) and, like every later one, the delivery goes back to the queue,
//     redelivered but not a failed delivery. The timed-out consumer still
//     counts as one of the queue's consumers until its channel closes,
//     even once its deliveries are settled. A late ack of a timed-out delivery is accepted: it
//     removes the message if it is still waiting in the queue, and
//     otherwise does nothing.

import (
	"slices"
	"time"
)

// queueAckTimeout is q's x-consumer-timeout argument, if it is an integer
// (RabbitMQ ignores any other value: evaluate_consumer_timeout1 compares
// only integers).
func queueAckTimeout(q *queue) (time.Duration, bool) {
	n, ok := asInteger(q.args["x-consumer-timeout"])
	if !ok || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// ackTimeout40 is RabbitMQ 4.0's timeout for a delivery from q
// (rabbit_channel:get_queue_consumer_timeout): the queue's argument, else
// the broker's consumer_timeout; 0 means none.
func (b *Broker) ackTimeout40(q *queue) time.Duration {
	if t, ok := queueAckTimeout(q); ok && !q.deleted {
		return t
	}
	return b.consumerTimeout
}

// ackTimeout43 is the timeout of a RabbitMQ 4.3 consumer of q with
// basic.consume arguments args: none on a classic queue; on a quorum queue
// the consumer's x-consumer-timeout, else the queue's, else the broker's.
// 0 means none.
func (b *Broker) ackTimeout43(q *queue, args map[string]any) time.Duration {
	if !q.isQuorum() {
		return 0
	}
	if n, ok := asInteger(args["x-consumer-timeout"]); ok && n >= 0 {
		return time.Duration(n) * time.Millisecond
	}
	if t, ok := queueAckTimeout(q); ok {
		return t
	}
	return b.consumerTimeout
}

// armAckTimeout starts what will time out a delivery just handed out on
// ch (by consumer c, nil for basic.get): on RabbitMQ40 the channel's tick,
// on RabbitMQ43 the consumer's timer. Each is armed once for the oldest
// delivery it watches and re-armed when it fires, so a delivery costs no
// timer of its own.
func (b *Broker) armAckTimeout(ch *Channel, c *consumer) {
	if b.version == RabbitMQ40 {
		if ch.tickAt.IsZero() {
			ch.tickAt = b.now.Add(b.tick)
			b.scheduleFor(ch.tickAt, evChannelTick, ch, nil)
		}
		return
	}
	if c != nil && c.ackTimeout > 0 && c.timerAt.IsZero() {
		c.timerAt = b.now.Add(c.ackTimeout)
		b.scheduleFor(c.timerAt, evConsumerTimeout, ch, c)
	}
}

// channelTick is a RabbitMQ40 channel's tick: its oldest unacknowledged
// delivery, if older than its queue's timeout, closes the channel. The
// live broker's tick runs from the channel's start and pauses while it
// hibernates; the model's runs from the first delivery left
// unacknowledged, so it closes the channel up to one tick after the
// deadline, as the live broker does, at an instant of its own.
func (b *Broker) channelTick(ch *Channel) {
	ch.tickAt = time.Time{}
	if ch.closed || len(ch.unacked) == 0 {
		return
	}
	p := ch.unacked[0]
	if t := b.ackTimeout40(p.q); t > 0 && p.at.Before(b.now.Add(-t)) {
		ch.fail(preconditionFailed("delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. "+
			"This timeout value can be configured, see consumers doc guide to learn more", ch.id, t.Milliseconds()))
		return
	}
	ch.tickAt = b.now.Add(b.tick)
	b.scheduleFor(ch.tickAt, evChannelTick, ch, nil)
}

// consumerTimedOut is a RabbitMQ43 quorum consumer's timer: every delivery
// of c past its deadline goes back to the queue, and the first cancels c.
func (b *Broker) consumerTimedOut(c *consumer) {
	c.timerAt = time.Time{}
	ch := c.ch
	if ch.closed {
		return
	}
	var next time.Time
	returned := false
	for i := range ch.unacked {
		p := &ch.unacked[i]
		if p.c != c || p.expired {
			continue
		}
		due := p.at.Add(c.ackTimeout)
		if due.After(b.now) {
			next = due // the oldest left: deliveries are in tag order
			break
		}
		if !c.timedOut {
			c.timedOut = true
			if !c.cancelled {
				// Out of the queue's dispatch, still counted among its
				// consumers until the channel closes (teardown).
				ch.serverCancel(c)
				c.q.sacLeave(c) // unprobed with a single active consumer
				c.q.consumers = deleteFirst(c.q.consumers, c)
				c.q.blocked = deleteFirst(c.q.blocked, c)
				ch.timedOut = append(ch.timedOut, c)
			}
		}
		p.expired = true
		p.q.unacked--
		b.settleRequeue(p.q, p.m, false, false)
		p.expiredID = p.m.id
		returned = true
	}
	if returned && !c.q.deleted {
		b.run(c.q)
	}
	if !next.IsZero() {
		c.timerAt = next
		b.scheduleFor(next, evConsumerTimeout, ch, c)
	}
}

// settleExpired settles a delivery the broker timed out (RabbitMQ43): an
// ack removes its message if it is still waiting in the queue; any
// settlement frees the timed-out consumer's last hold on it.
func (b *Broker) settleExpired(p pendingAck, ack bool) {
	if ack && !p.q.deleted && p.m.id == p.expiredID && p.q.returns.remove(p.m) {
		p.q.ready--
		b.recycle(p.m)
	}
	if p.c != nil {
		p.c.unacked--
		b.settled(p.c)
	}
}

// remove takes m out of the fifo if it is there, and reports whether it
// was.
func (f *fifo) remove(m *message) bool {
	live := f.items[f.head:]
	i := slices.Index(live, m)
	if i < 0 {
		return false
	}
	copy(live[i:], live[i+1:])
	live[len(live)-1] = nil
	f.items = f.items[:len(f.items)-1]
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	}
	return true
}
