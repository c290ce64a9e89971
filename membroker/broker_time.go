package membroker

// The broker's time: its event queue of expiries and leases, one clock
// timer armed for the earliest, and what each event does when its time
// comes.

import (
	"time"
)

// Event kinds on the virtual-time heap.
const (
	evHeadExpiry       = iota // a queue's head message may have expired
	evQueueExpiry             // a queue's x-expires lease may have run out
	evChannelTick             // a RabbitMQ40 channel's tick (acktimeout.go)
	evConsumerTimeout         // a RabbitMQ43 quorum consumer's timer (acktimeout.go)
	evDeadLetterResend        // a quorum queue sends its held dead letters again (deadletter_resend.go)
	evDeadLetterWait          // a quorum queue's dead letters behind a full worker go out (deadletter_resend.go)
)

type event struct {
	at   time.Time
	seq  uint64
	kind int
	q    *queue
	ch   *Channel  // evChannelTick, evConsumerTimeout
	c    *consumer // evConsumerTimeout
}

// eventBefore orders the virtual-time heap by (deadline, insertion).
func eventBefore(a, b *event) bool {
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return a.seq < b.seq
}

func (b *Broker) schedule(at time.Time, kind int, q *queue) {
	b.eventSeq++
	b.events.Push(event{at: at, seq: b.eventSeq, kind: kind, q: q})
}

// scheduleFor schedules an event of a channel or a consumer.
func (b *Broker) scheduleFor(at time.Time, kind int, ch *Channel, c *consumer) {
	b.eventSeq++
	b.events.Push(event{at: at, seq: b.eventSeq, kind: kind, ch: ch, c: c})
}

// advance processes every event due at or before now, each at its own
// deadline, in (deadline, insertion) order.
func (b *Broker) advance(now time.Time) {
	for b.events.Len() > 0 && !b.events.Min().at.After(now) {
		ev := b.events.Pop()
		if ev.at.After(b.now) {
			b.now = ev.at
		}
		switch ev.kind {
		case evChannelTick:
			b.channelTick(ev.ch)
			b.landDeadLetters()
			continue
		case evConsumerTimeout:
			b.consumerTimedOut(ev.c)
			b.landDeadLetters()
			continue
		}
		q := ev.q
		if q.deleted {
			continue
		}
		switch ev.kind {
		case evDeadLetterResend:
			if q.dlxResendAt.Equal(ev.at) {
				b.resendDeadLetters(q)
			}
		case evDeadLetterWait:
			if q.dlxWaitAt.Equal(ev.at) {
				b.sendWaiting(q)
			}
		case evHeadExpiry:
			if !q.isQuorum() {
				// A classic queue's one TTL timer ({drop_expired,Vsn}); an
				// event it was re-armed away from never fires.
				if q.ttlFires.Equal(ev.at) {
					q.ttlArmed, q.ttlFires = time.Time{}, time.Time{}
					b.dropExpired(q)
				}
				break
			}
			if q.ttlFires.Equal(ev.at) {
				q.ttlArmed, q.ttlFires = time.Time{}, time.Time{}
			}
			if b.version == RabbitMQ43 {
				// rabbit_fifo expire_shallow: the timer expires the
				// expired heads of every level, whatever comes next.
				b.expireBatch(q)
			}
			b.run(q)
		case evQueueExpiry:
			q.leaseArmed = false
			switch {
			case q.leaseDue.IsZero():
				// Suspended by a consumer; renewLease arms it again.
			case q.leaseDue.After(q.leaseArmedFor):
				b.armLease(q) // renewed since: wait for the new deadline
			case q.consumerCount() == 0:
				b.deleteQueue(q, "expired")
			}
		}
		b.landDeadLetters() // before anything due later
	}
	if now.After(b.now) {
		b.now = now
	}
}

// pollInterval is how soon membroker retries handing over outputs that found
// their channel full.
const pollInterval = time.Millisecond

// arm makes sure a clock timer is pending for the earliest thing the model
// must do without being called: an event deadline, or a retry of outputs
// that did not fit their channels.
func (b *Broker) arm() {
	var next time.Time
	if b.events.Len() > 0 {
		next = b.events.Min().at
	}
	if b.pendingOutput() {
		if p := b.now.Add(pollInterval); next.IsZero() || p.Before(next) {
			next = p
		}
	}
	if next.IsZero() || (!b.armedAt.IsZero() && !next.Before(b.armedAt)) {
		return
	}
	b.armedAt = next
	b.clk.AfterFunc(next.Sub(b.clk.Now()), b.fired)
}

func (b *Broker) onTimer() {
	b.mu.Lock()
	if !b.armedAt.After(b.clk.Now()) {
		b.armedAt = time.Time{}
	}
	b.advance(b.clk.Now())
	b.retryUnsent()
	b.unlock()
}

func (b *Broker) pendingOutput() bool {
	if len(b.unsentBlocked) > 0 {
		return true
	}
	return b.queued > 0
}

// flush hands buffered outputs to their Go channels, connection by
// connection, in order, stopping at the first that does not fit.
func (b *Broker) flush() {
	if b.queued == 0 && !b.reap {
		return // nothing held back, no closed connection to let go
	}
	b.reap = false
	open := b.conns[:0]
	for _, c := range b.conns {
		c.flush()
		if !c.closed || len(c.out) > 0 {
			open = append(open, c)
			b.reap = b.reap || c.closed // let go once its outputs are out
		}
	}
	clear(b.conns[len(open):])
	b.conns = open
}

// armHeadExpiry schedules an expiry check for q's head if it has a deadline
// earlier than the one already scheduled.
func (b *Broker) armHeadExpiry(q *queue) {
	at, ok := q.headDeadline(b.version)
	if ok && at.Before(q.bootAt) {
		at = q.bootAt // it expires nothing before it has started
	}
	if !ok || (!q.ttlArmed.IsZero() && !at.Before(q.ttlArmed)) {
		return
	}
	b.armHeadTimer(q, at)
}

// armHeadTimer arms q's head-expiry timer for a head due at, to fire that
// late as the timing draws.
func (b *Broker) armHeadTimer(q *queue, at time.Time) {
	q.ttlArmed = at
	q.ttlFires = at.Add(b.timing.slack())
	b.schedule(q.ttlFires, evHeadExpiry, q)
}

// armLease arms q's x-expires timer for its lease as it stands, to fire that
// late as the timing draws.
func (b *Broker) armLease(q *queue) {
	q.leaseArmed = true
	q.leaseArmedFor = q.leaseDue
	b.schedule(q.leaseDue.Add(b.timing.leaseSlack(q)), evQueueExpiry, q)
}

// renewLease restarts q's x-expires period from now, if it has one and no
// consumers: from up to Timing.Latency before now, as the timing draws.
func (b *Broker) renewLease(q *queue) {
	q.lastActive = b.now
	if !q.cfg.hasExpires || q.consumerCount() > 0 {
		q.leaseDue = time.Time{}
		return
	}
	q.leaseDue = b.now.Add(time.Duration(q.cfg.expires)*time.Millisecond - b.timing.latency())
	if !q.leaseArmed {
		b.armLease(q)
	}
}

// run expires what has expired at the head of q and dispatches to its
// consumers, then re-arms the head-expiry timer. On a classic queue this is
// requeue_and_run: drop_expired_msgs, then run_message_queue.
func (b *Broker) run(q *queue) {
	if !q.isQuorum() {
		b.dropExpired(q)
		b.dispatch(q)
		return
	}
	b.reapExpired(q)
	b.dispatch(q)
	b.armHeadExpiry(q)
}

// reapExpired dead-letters (or drops) every expired message at the head of
// q, as far as the queue type looks (see queue.popExpired). On RabbitMQ43 a
// quorum queue whose next message has expired expires the expired heads of
// the returns and of every priority level at once (semantics §12.7).
func (b *Broker) reapExpired(q *queue) {
	if b.now.Before(q.bootAt) {
		return // a quorum queue not started again yet (Timing.BootSpan)
	}
	if q.isQuorum() && b.version == RabbitMQ43 {
		if m := q.peek(b.version); m != nil && m.hasExpiry && !b.now.Before(m.expiry) {
			b.expireBatch(q)
		}
		return
	}
	for m := q.popExpired(b.now, b.version); m != nil; m = q.popExpired(b.now, b.version) {
		b.deadLetter(q, m, "expired")
	}
}

// expireBatch is rabbit_fifo expire_batch on RabbitMQ 4.3: it dead-letters
// the expired messages at the head of the returns, then at the head of each
// priority level from the highest (semantics §12.7).
func (b *Broker) expireBatch(q *queue) {
	if b.now.Before(q.bootAt) {
		return
	}
	for m := q.returns.front(); m != nil && m.hasExpiry && !b.now.Before(m.expiry); m = q.returns.front() {
		q.returns.popFront()
		q.ready--
		b.deadLetter(q, m, "expired")
	}
	for l := len(q.levels) - 1; l >= 0; l-- {
		for m := q.levels[l].front(); m != nil && m.hasExpiry && !b.now.Before(m.expiry); m = q.levels[l].front() {
			q.levels[l].popFront()
			q.ready--
			b.deadLetter(q, m, "expired")
		}
	}
}

// serve hands ready messages to q's consumers after something freed or
// added one (consume, ack, reject without requeue, a drained delivery
// channel). On a classic queue this is run_message_queue alone, with no
// expiry check first; on a quorum queue it is run.
func (b *Broker) serve(q *queue) {
	if q.isQuorum() {
		b.run(q)
		return
	}
	b.dispatch(q)
}

// dropExpired is a classic queue's drop_expired_msgs: it dead-letters (or
// drops) what has expired at the head, walking priority levels from the
// top, and makes sure the queue's one TTL timer covers the new head. The
// timer is only ever moved earlier, by more than a millisecond
// (ensure_ttl_timer); an empty queue keeps its timer as it is.
// RabbitMQ runs this after enqueueing into an empty queue, after every
// fetch (basic.get or a delivery), after a requeue, when a consumer is
// cancelled and when the timer fires: nowhere else. So a head that became
// the head otherwise (a higher-priority message published into a non-empty
// priority queue) expires only when one of those comes, and a fetch before
// that hands it out expired.
func (b *Broker) dropExpired(q *queue) {
	if q.ready == 0 {
		return
	}
	b.reapExpired(q)
	at, ok := q.headDeadline(b.version)
	if !ok || (!q.ttlArmed.IsZero() && !at.Add(time.Millisecond).Before(q.ttlArmed)) {
		return
	}
	b.armHeadTimer(q, at)
}
