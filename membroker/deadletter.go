package membroker

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// death is one x-death entry: a {queue, reason} pair with its count and the
// values of its first occurrence.
type death struct {
	queue, reason, exchange string
	count                   int64
	time                    time.Time
	routingKey              string   // routing-keys: this one first,
	cc                      []string // then these (shared, never modified)
	originalExpiration      string

	// The header values, boxed once at the death rather than on every
	// delivery (a string put in an interface allocates).
	queueV, reasonV, keyV any
}

// deathSite is where and why a message last died: x-first-death-* and
// x-last-death-*.
type deathSite struct {
	queue, reason, exchange string
	queueV, reasonV         any // boxed, as in death
}

// deadLetter removes m from q's custody for reason ("expired", "rejected",
// "delivery_limit"). Without a dead-letter exchange the message is dropped;
// with one, its death is recorded and it is routed again, except to queues
// that would close a cycle with no rejection in it.
func (b *Broker) deadLetter(q *queue, m *message, reason string) {
	dropped := !q.cfg.hasDLX || q.cfg.dlx != "" // membroker has no named exchanges: a missing DLX drops silently
	b.observe(Event{Kind: EventDeadLettered, Queue: q.name, MessageID: m.pub.MessageId, Priority: m.pub.Priority, Reason: reason, Dropped: dropped})
	if dropped {
		return
	}
	if m.failed > 0 {
		// The header's delivery_count goes with the message as an annotation
		// (rabbit_fifo:annotate_msg), and on RabbitMQ43 a classic queue's
		// delivery count too (annotate_delivery_count); a RabbitMQ40 classic
		// queue keeps none, so failed is 0 there (semantics §12).
		m.deliveryCountAnn = m.failed
	}
	found := -1
	for i := range m.deaths {
		if m.deaths[i].queue == q.name && m.deaths[i].reason == reason {
			found = i
			break
		}
	}
	if found >= 0 {
		d := m.deaths[found]
		d.count++
		copy(m.deaths[1:found+1], m.deaths[:found])
		m.deaths[0] = d
	} else {
		keyV := q.boxedName()
		if m.routingKey != q.name {
			keyV = b.box(m.routingKey)
		}
		d := death{
			queue: q.name, reason: reason, exchange: m.exchange, count: 1,
			time: time.Unix(b.now.Unix(), 0), routingKey: m.routingKey, cc: m.cc,
			originalExpiration: m.pub.Expiration,
			queueV:             q.boxedName(), reasonV: boxReason(reason), keyV: keyV,
		}
		m.deaths = append(m.deaths, death{})
		copy(m.deaths[1:], m.deaths)
		m.deaths[0] = d
	}
	this := deathSite{queue: q.name, reason: reason, exchange: m.exchange, queueV: q.boxedName(), reasonV: boxReason(reason)}
	if !m.died {
		m.first, m.died = this, true
	}
	m.last = this
	m.pub.Expiration = "" // removed so it cannot expire again downstream

	// The targets of every dead letter in flight share one arena, reset
	// once they have all landed.
	start := len(b.dlTargets)
	if q.cfg.hasDLRK {
		m.routingKey = q.cfg.dlrk
		m.cc, m.bcc = nil, nil
		b.dlTargets = b.route(b.dlTargets, m.routingKey, nil, nil)
	} else {
		b.dlTargets = b.route(b.dlTargets, m.routingKey, m.cc, m.bcc)
	}
	targets := b.dlTargets[start:len(b.dlTargets):len(b.dlTargets)]
	m.exchange = q.cfg.dlx
	if reason != "rejected" {
		kept := targets[:0]
		for _, t := range targets {
			if !closesCycle(m.deaths, t.name) {
				kept = append(kept, t)
			}
		}
		targets = kept
	}
	// RabbitMQ republishes a dead letter as a message to the target queue
	// (a quorum queue, as a Ra effect): it lands once the source queue has
	// finished the step that dead-lettered it, after that step's own
	// deliveries. A consumer freed by a reject is served from what was
	// already on the queue before the rejected message comes back.
	b.touch(q)
	b.deadLetters = append(b.deadLetters, deadLetterInFlight{targets: targets, m: m, from: this, src: q})
}

// deadLetterInFlight is a dead letter on its way to its target queues.
type deadLetterInFlight struct {
	targets []*queue
	m       *message
	from    deathSite // the queue it left and why
	src     *queue    // that queue
}

// landDeadLetters delivers the dead letters in flight: those a classic
// queue sent first, then those of quorum queues, each in the order they
// were sent, and then any that landing them sends in turn, the same way.
//
// A classic queue publishes its dead letters while it handles the
// operation that killed them; a quorum queue publishes its own only once
// the command is committed in its Raft log and read back from it, a few
// milliseconds later. So when one operation (a basic.nack with multiple
// over deliveries of both kinds) dead-letters out of a classic and a
// quorum queue, the classic queue's dead letters land first, whatever the
// delivery tags' order (docs/rabbitmq-semantics.md §3.7, measured 40 of 40
// each way on 4.0.5 and 4.3.6).
func (b *Broker) landDeadLetters() {
	for len(b.deadLetters) > 0 {
		batch := b.deadLetters
		b.deadLetters = b.dlSpare[:0]
		for _, quorum := range [2]bool{false, true} {
			for i := range batch {
				if dl := batch[i]; dl.src.isQuorum() == quorum {
					b.landDeadLetter(dl)
				}
			}
		}
		clear(batch)
		b.dlSpare = batch[:0]
	}
	clear(b.dlTargets)
	b.dlTargets = b.dlTargets[:0]
}

// landDeadLetter delivers dl to those of its targets still there.
func (b *Broker) landDeadLetter(dl deadLetterInFlight) {
	live := liveTargets(dl.targets)
	switch b.deadLetterFate(dl.src, live) {
	case fateHold:
		b.holdDeadLetter(dl, live)
		return
	case fateWait:
		b.waitForTargets(dl, live)
		return
	}
	// A quorum queue's at-least-once dead letter waits for its target's
	// confirm (rabbit_fifo_dlx_worker); every other goes without one.
	b.deliverTo(live, dl.m, &dl.from, dl.src.cfg.atLeastOnce, dl.src)
}

// liveTargets is targets without the queues deleted since, in place.
func liveTargets(targets []*queue) []*queue {
	live := targets[:0]
	for _, q := range targets {
		if !q.deleted {
			live = append(live, q)
		}
	}
	return live
}

// closesCycle reports whether dead-lettering into target would repeat a
// death of target's with no rejection since (rabbit_dead_letter:detect_cycles).
func closesCycle(deaths []death, target string) bool {
	for _, d := range deaths {
		if d.reason == "rejected" {
			return false
		}
		if d.queue == target {
			return true
		}
	}
	return false
}

// deathHeaders adds the x-death, x-first-death-* and x-last-death-* headers
// for a message the broker has dead-lettered.
func (b *Broker) deathHeaders(h amqp.Table, m *message) {
	xd := b.anySlice(len(m.deaths))
	for i, d := range m.deaths {
		keys := b.anySlice(1 + len(d.cc))
		keys[0] = d.keyV
		for j, k := range d.cc {
			keys[1+j] = b.box(k)
		}
		e := b.table(7)
		e["count"] = d.count
		e["reason"] = d.reasonV
		e["queue"] = d.queueV
		e["time"] = b.boxTime(d.time)
		e["exchange"] = b.box(d.exchange)
		e["routing-keys"] = keys
		if d.originalExpiration != "" {
			e["original-expiration"] = d.originalExpiration
		}
		xd[i] = e
	}
	h["x-death"] = xd
	h["x-first-death-reason"] = m.first.reasonV
	h["x-first-death-queue"] = m.first.queueV
	h["x-first-death-exchange"] = b.box(m.first.exchange)
	h["x-last-death-reason"] = m.last.reasonV
	h["x-last-death-queue"] = m.last.queueV
	h["x-last-death-exchange"] = b.box(m.last.exchange)
}

// boxReason boxes a dead-lettering reason: the known ones are constants,
// which go into an interface without allocating.
func boxReason(r string) any {
	switch r {
	case "expired":
		return "expired"
	case "rejected":
		return "rejected"
	case "maxlen":
		return "maxlen"
	case "delivery_limit":
		return "delivery_limit"
	}
	return r
}

// boxedName is q's name in an interface, made once.
func (q *queue) boxedName() any {
	if q.nameV == nil {
		q.nameV = q.name
	}
	return q.nameV
}

// maxBoxed bounds the cache of boxed header strings.
const maxBoxed = 4096

// box returns s in an interface, reusing one made before for the same
// string: death headers repeat a few queue names and reasons on every
// delivery of a dead-lettered message, and putting a string in an
// interface allocates. Strings are immutable, so sharing is invisible.
func (b *Broker) box(s string) any {
	if s == "" {
		return "" // the default exchange's name: a constant, no allocation
	}
	if v, ok := b.boxed[s]; ok {
		return v
	}
	var v any = s
	if len(b.boxed) < maxBoxed {
		if b.boxed == nil {
			b.boxed = make(map[string]any)
		}
		b.boxed[s] = v
	}
	return v
}

// boxTime is box for a death's time, which is whole seconds: consecutive
// deaths mostly share one.
func (b *Broker) boxTime(t time.Time) any {
	if b.lastTime.Equal(t) && b.lastTime.Location() == t.Location() && b.lastTimeV != nil {
		return b.lastTimeV
	}
	b.lastTime, b.lastTimeV = t, t
	return b.lastTimeV
}
