package membroker

import (
	"slices"
	"time"
)

// What reaches disk when, for Crash (a kill -9). RabbitMQ 4.0.5 and 4.3.6
// confirm a persistent publish once it is written, so a kill keeps it; a
// message that arrives with no confirm (a dead letter, or a publish on a
// channel not in confirm mode) waits in its classic queue's write buffers
// until the queue next writes them out: at a confirmed publish into it, at
// 4,096 buffered, or when it hibernates after an idle second. A quorum queue
// keeps whatever its log has, except that one created about a second before
// the kill was never recorded in Ra's table of names and restarts empty.
// docs/rabbitmq-semantics.md §13 has the sources and the live figures.
//
// The model follows only what a Crash can lose, and only while
// Timing.ClassicSync or Timing.QuorumRegister is set. It leaves out what a
// kill only duplicates: an ack, or a hold queue's removal of a message it
// dead-lettered, that had not reached disk comes back on a live broker.

// syncBatch is how many unwritten messages make a classic queue write them
// at once (rabbit_classic_queue_index_v2's ?WRITE_BUFFER_SIZE flush).
const syncBatch = 4096

// tracksSync reports whether q's unwritten arrivals are followed.
func (b *Broker) tracksSync(q *queue) bool { return b.timing.ClassicSync > 0 && !q.isQuorum() }

// touch records activity on classic queue q at the broker's now: an
// arrival, a delivery, a settlement or an expiry. A queue idle for
// ClassicSync before it has hibernated in between, writing what it held.
func (b *Broker) touch(q *queue) {
	if !b.tracksSync(q) {
		return
	}
	if !q.touched.IsZero() && b.now.Sub(q.touched) >= b.timing.ClassicSync {
		b.sync(q)
	}
	q.touched = b.now
}

// sync writes classic queue q's unwritten arrivals to disk, and with them
// its removals so far. A message that has moved on since (dead-lettered
// into another classic queue) is that queue's to write.
func (b *Broker) sync(q *queue) {
	for _, m := range q.unsynced {
		if m.in == q {
			m.unsynced, m.in = false, nil
		}
	}
	clear(q.unsynced)
	q.unsynced = q.unsynced[:0]
	q.syncs++
}

// landed notes m's arrival in classic queue q: confirmed says a publisher
// confirm covers it, which writes it and everything before it; src is the
// classic queue that dead-lettered it, or nil.
func (b *Broker) landed(q *queue, m *message, confirmed bool, src *queue) {
	if !b.tracksSync(q) {
		return
	}
	b.touch(q)
	if confirmed {
		m.unsynced, m.in = false, nil
		b.sync(q)
		return
	}
	if m.unsynced && m.in == src && src != nil {
		// src never wrote it either: whether it survives is still up to
		// where it came from before (or nothing, if nothing wrote it).
		m.in = q
	} else {
		m.unsynced, m.in, m.src = true, q, nil
		if src != nil && !src.isQuorum() {
			m.src, m.srcSyncs = src, src.syncs
		}
	}
	q.unsynced = append(q.unsynced, m)
	if len(q.unsynced) >= syncBatch {
		b.sync(q)
	}
}

// lostInCrash reports whether a Crash now loses classic message m: its
// arrival is not on disk, and the removal from the queue that dead-lettered
// it is (else that queue releases it again at boot, which the model
// shortens to keeping it). A queue that is not durable writes nothing and
// is gone after the crash, so it releases nothing again.
func lostInCrash(m *message) bool {
	if !m.unsynced {
		return false
	}
	return m.src == nil || !m.src.durable || m.src.deleted || m.src.syncs != m.srcSyncs
}

// expiresIntoStopped reports whether classic queue q, stopping at stops[q],
// would dead-letter m after the queue it dead-letters into had stopped:
// m expires in [stops[target], stops[q]).
func (b *Broker) expiresIntoStopped(q *queue, m *message, stops map[*queue]time.Time) bool {
	if !m.hasExpiry || !q.cfg.hasDLX || q.cfg.dlx != "" {
		return false
	}
	key := m.routingKey
	if q.cfg.hasDLRK {
		key = q.cfg.dlrk
	}
	target, ok := b.queues[key]
	if !ok {
		return false
	}
	targetStop, ok := stops[target]
	return ok && !m.expiry.Before(targetStop) && m.expiry.Before(stops[q])
}

// Crash models a kill -9 of the broker's node and its start: Restart, except
// that what had not reached disk is gone (see Timing.ClassicSync and
// Timing.QuorumRegister). With neither set it is Restart.
func (b *Broker) Crash() {
	b.lock()
	defer b.unlock()
	b.restart(true)
}

// restart is Restart, or with crash, Crash; the lock is held.
func (b *Broker) restart(crash bool) {
	if crash {
		// Idle queues have hibernated since their last activity.
		for _, name := range b.queueNames() {
			if q := b.queues[name]; b.tracksSync(q) && !q.touched.IsZero() && b.now.Sub(q.touched) >= b.timing.ClassicSync {
				b.sync(q)
			}
		}
	}
	for _, c := range slices.Clone(b.conns) {
		c.teardown(forced)
	}
	var stops map[*queue]time.Time
	if !crash && b.timing.StopSpan > 0 {
		// Every classic queue is told to stop at once; each stops when it
		// gets to it, in no order.
		stops = map[*queue]time.Time{}
		for _, name := range b.queueNames() {
			if q := b.queues[name]; q.durable && !q.isQuorum() {
				stops[q] = b.now.Add(b.timing.upTo(b.timing.StopSpan))
			}
		}
	}
	// When each quorum queue starts again, set before any of them expires
	// a message (Timing.BootSpan).
	for _, name := range b.queueNames() {
		if q := b.queues[name]; q.durable && q.isQuorum() {
			b.rebootQueue(q, crash)
		}
	}
	for _, name := range b.queueNames() {
		q := b.queues[name]
		if !q.durable {
			b.deleteQueue(q, "restart")
			continue
		}
		switch {
		case !q.isQuorum():
			kept := q.readyMessages()
			q.purge()
			for _, m := range kept {
				switch {
				case !m.persistent:
				case crash && lostInCrash(m):
					b.observe(Event{Kind: EventLost, Queue: q.name, MessageID: m.pub.MessageId, Priority: m.pub.Priority, Reason: "unwritten"})
				case stops != nil && b.expiresIntoStopped(q, m, stops):
					b.observe(Event{Kind: EventLost, Queue: q.name, MessageID: m.pub.MessageId, Priority: m.pub.Priority, Reason: "target stopped"})
				default:
					m.unsynced, m.in, m.src = false, nil, nil
					q.levels[m.level].pushBack(m)
					q.ready++
				}
			}
			// What it kept is on disk now. Its syncs stay: a queue after it
			// in this loop still reads them in lostInCrash.
			clear(q.unsynced)
			q.unsynced, q.touched = q.unsynced[:0], b.now
		case crash && b.now.Sub(q.created) < b.timing.QuorumRegister:
			// Never registered: its member starts as a new one, empty, and
			// registers anew.
			for _, m := range q.readyMessages() {
				b.observe(Event{Kind: EventLost, Queue: q.name, MessageID: m.pub.MessageId, Priority: m.pub.Priority, Reason: "unregistered"})
			}
			for _, dl := range q.dlxHeld {
				b.observe(Event{Kind: EventLost, Queue: q.name, MessageID: dl.m.pub.MessageId, Priority: dl.m.pub.Priority, Reason: "unregistered"})
			}
			q.dlxHeld = nil // rebootQueue has moved what waited here
			q.purge()
			q.created = b.now
		case !crash:
			// A clean stop writes out Ra's table of members
			// (ra_directory:deinit/1): every quorum queue is registered.
			q.created = time.Time{}
		}
		b.renewLease(q)
		b.run(q)
	}
}
