package membroker

// A quorum queue's at-least-once dead letters after a restart or a kill:
// the queues start again one by one (Timing.BootSpan), and a dead letter
// sent to a quorum queue that has not started is refused; the source's
// dead-letter worker sends it again only Timing.DeadLetterResend later.
// Its worker sends 32 at once at most; what becomes of the later ones is
// deadLetterFate's. RabbitMQ 4.0.5 and 4.3.5, rabbit_fifo_dlx_worker: a
// refused delivery (rejected, or an error from a target whose Ra server is
// not up) stays pending until the settle_timeout timer re-sends what is
// older than dead_letter_worker_publisher_confirm_timeout; what a worker
// had checked out when its node stopped is returned by the next worker's
// checkout and sent at once (docs/rabbitmq-semantics.md §13.7).

import (
	"slices"
	"time"
)

// deadLetterPrefetch is how many dead letters a quorum queue's
// dead-letter worker has out at once, sent and not yet confirmed:
// RabbitMQ's dead_letter_worker_consumer_prefetch, 32 by default.
const deadLetterPrefetch = 32

// Fates of an at-least-once dead letter (deadLetterFate).
const (
	fateDeliver = iota // to its targets now
	fateHold           // refused: held for the resend
	fateWait           // behind a full worker: sent once its targets have started
)

// deadLetterFate says what becomes of src's at-least-once dead letter to
// targets. A quorum target that has not started refuses it, and src holds
// it for the resend. Its worker sends at most deadLetterPrefetch at once,
// and what then becomes of the later ones is measured, not derived
// (docs/hold-ladder.md, "Holds a fault makes late", 4.0.5): after a kill,
// a stalled rung's later releases waited for the resend too (182 to 536
// deferrals late), and the model holds them all; after a restart mostly
// only the first ones did (47 to 228 late, once all 1,000), and the model
// lets the later ones wait only for the targets to start.
func (b *Broker) deadLetterFate(src *queue, targets []*queue) int {
	if !src.isQuorum() || !src.cfg.atLeastOnce || b.timing.DeadLetterResend <= 0 {
		return fateDeliver
	}
	full := len(src.dlxHeld) >= deadLetterPrefetch
	switch {
	case full && src.dlxStallAll:
		return fateHold
	case len(src.dlxWaiting) > 0:
		return fateWait // in order, behind those already waiting
	case !b.refuses(targets):
		return fateDeliver
	case !full:
		return fateHold
	}
	return fateWait
}

// waitForTargets keeps dl, bound for targets, in its source until they
// have all started.
func (b *Broker) waitForTargets(dl deadLetterInFlight, targets []*queue) {
	src := dl.src
	dl.targets = slices.Clone(targets)
	src.dlxWaiting = append(src.dlxWaiting, dl)
	if !src.dlxWaitAt.IsZero() {
		return
	}
	at := b.now
	for _, t := range targets {
		if t.bootAt.After(at) {
			at = t.bootAt
		}
	}
	src.dlxWaitAt = at
	b.schedule(at, evDeadLetterWait, src)
}

// sendWaiting sends src's dead letters that waited for their targets to
// start, in order.
func (b *Broker) sendWaiting(src *queue) {
	src.dlxWaitAt = time.Time{}
	waiting := src.dlxWaiting
	src.dlxWaiting = nil
	for _, dl := range waiting {
		live := liveTargets(dl.targets)
		if b.refuses(live) { // a target started again since: wait anew
			b.waitForTargets(dl, live)
			continue
		}
		b.deliverTo(live, dl.m, &dl.from, true, src)
	}
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
	src.dlxStallAll = false // a worker that got its confirms has room again
	held := src.dlxHeld
	src.dlxHeld = nil
	for i, dl := range held {
		live := liveTargets(dl.targets)
		if b.refuses(live) {
			src.dlxHeld = append(src.dlxHeld, held[i:]...)
			b.armResend(src, b.now.Add(b.timing.DeadLetterResend))
			return
		}
		b.deliverTo(live, dl.m, &dl.from, true, src)
	}
}

// rebootQueue is a Restart's or Crash's (crash) start of quorum queue q again,
// at a time drawn from Timing.BootSpan. A dead-letter worker's state
// lives in memory: the next one sends what q held at once, when q starts.
func (b *Broker) rebootQueue(q *queue, crash bool) {
	q.bootAt = b.now.Add(b.timing.upTo(b.timing.BootSpan))
	q.dlxStallAll = crash
	q.dlxResendAt, q.dlxWaitAt = time.Time{}, time.Time{}
	q.dlxHeld = append(q.dlxHeld, q.dlxWaiting...) // all the new worker's to send
	q.dlxWaiting = nil
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
		if len(q.dlxWaiting) > 0 {
			q.dlxWaitAt = b.now
			b.schedule(b.now, evDeadLetterWait, q)
		}
		b.run(q)
	}
}
