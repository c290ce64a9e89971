package membroker

// A quorum queue's at-least-once dead letters after a restart or a kill:
// the queues start again one by one (Timing.BootSpan), and a dead letter
// sent to a quorum queue that has not started is refused; the source's
// dead-letter worker sends it again only Timing.DeadLetterResend later,
// and with at most 32 in flight, nothing of that queue's dead-lettering
// moves meanwhile. RabbitMQ 4.0.5 and 4.3.6, rabbit_fifo_dlx_worker:
// a refused delivery (rejected, or an error from a target whose Ra server
// is not up) stays pending until the settle_timeout timer re-sends what
// is older than dead_letter_worker_publisher_confirm_timeout; what a
// worker had checked out when its node stopped is returned by the next
// worker's checkout and sent at once (docs/rabbitmq-semantics.md §13.7).

import (
	"slices"
	"time"
)

// mustHold reports whether src's at-least-once dead letter to targets
// waits: src already holds dead letters (they leave in order), or a
// quorum target has not started yet and refuses it.
func (b *Broker) mustHold(src *queue, targets []*queue) bool {
	if !src.isQuorum() || !src.cfg.atLeastOnce || b.timing.DeadLetterResend <= 0 {
		return false
	}
	return len(src.dlxHeld) > 0 || b.refuses(targets)
}

// refuses reports whether a quorum queue among targets has not started
// again since the last Restart or Crash.
func (b *Broker) refuses(targets []*queue) bool {
	for _, t := range targets {
		if t.isQuorum() && b.now.Before(t.bootAt) {
			return true
		}
	}
	return false
}

// holdDeadLetter keeps dl, bound for targets, in its source until the
// source sends its held dead letters again.
func (b *Broker) holdDeadLetter(dl deadLetterInFlight, targets []*queue) {
	src := dl.src
	dl.targets = slices.Clone(targets) // the in-flight arena is reused
	src.dlxHeld = append(src.dlxHeld, dl)
	b.observe(Event{Kind: EventDeadLetterHeld, Queue: src.name, MessageID: dl.m.pub.MessageId, Priority: dl.m.pub.Priority, Reason: dl.from.reason})
	if src.dlxResendAt.IsZero() {
		b.armResend(src, b.now.Add(b.timing.DeadLetterResend))
	}
}

// armResend schedules src's resend of its held dead letters at at.
func (b *Broker) armResend(src *queue, at time.Time) {
	src.dlxResendAt = at
	b.schedule(at, evDeadLetterResend, src)
}

// resendDeadLetters sends src's held dead letters again, in order: to
// those of their targets still there, unless one of them still refuses,
// when they all wait another DeadLetterResend.
func (b *Broker) resendDeadLetters(src *queue) {
	src.dlxResendAt = time.Time{}
	held := src.dlxHeld
	src.dlxHeld = nil
	for i, dl := range held {
		live := dl.targets[:0]
		for _, t := range dl.targets {
			if !t.deleted {
				live = append(live, t)
			}
		}
		if b.refuses(live) {
			src.dlxHeld = append(src.dlxHeld, held[i:]...)
			b.armResend(src, b.now.Add(b.timing.DeadLetterResend))
			return
		}
		b.deliverTo(live, dl.m, &dl.from, true, src)
	}
}

// rebootQueue is a Restart's or Crash's start of quorum queue q again,
// at a time drawn from Timing.BootSpan. A dead-letter worker's state
// lives in memory: the next one sends what q held at once, when q starts.
func (b *Broker) rebootQueue(q *queue) {
	q.bootAt = b.now.Add(b.timing.upTo(b.timing.BootSpan))
	q.dlxResendAt = time.Time{}
	if len(q.dlxHeld) > 0 {
		b.armResend(q, q.bootAt)
	}
}

// Started ends, now, the start of every quorum queue that a Restart or
// Crash began (Timing.BootSpan): as if the broker had been up a while
// since. It is for a driver that restarts the broker before what it
// measures begins, such as a deployment played before a simulation.
func (b *Broker) Started() {
	b.lock()
	defer b.unlock()
	for _, name := range b.queueNames() {
		q := b.queues[name]
		if !q.bootAt.After(b.now) {
			continue
		}
		q.bootAt = b.now
		if len(q.dlxHeld) > 0 {
			b.armResend(q, b.now)
		}
		b.run(q)
	}
}
