package membroker

import "time"

// EventKind says what an Event reports.
type EventKind int

const (
	// EventQueueCreated: Queue was created by a queue.declare.
	EventQueueCreated EventKind = iota + 1
	// EventQueueDeleted: Queue is gone, with Messages ready messages in it
	// (dropped, never dead-lettered). Reason is "expired" (its x-expires
	// lease ran out), "deleted" (queue.delete), "auto_delete" (its last
	// consumer went), "exclusive" (its owner's connection closed) or
	// "restart" (a non-durable queue at Broker.Restart).
	EventQueueDeleted
	// EventEnqueued: a message with message-id MessageID entered Queue at
	// priority Priority. DeadLetteredFrom and Reason are set when it arrived
	// by dead-lettering: the queue it left and why ("expired", "rejected",
	// "delivery_limit"); empty for a publish.
	EventEnqueued
	// EventDelivered: a message of Queue was handed to ConsumerTag (empty
	// for basic.get). Redelivered as the client sees it.
	EventDelivered
	// EventDeadLettered: a message left Queue by dead-lettering for Reason.
	// Dropped is true when the queue has no dead-letter exchange (or one
	// membroker does not model), so the message is gone; otherwise an
	// EventEnqueued follows for each queue it reaches, possibly none.
	EventDeadLettered
	// EventLost: a message with message-id MessageID that was in Queue when
	// the broker crashed (Broker.Crash) is not there after it. Reason is
	// "unwritten" (a classic queue had not written its arrival to disk) or
	// "unregistered" (a quorum queue too young to be recorded on disk
	// restarts empty). Broker.Restart reports one too, with Reason "target
	// stopped", for a classic queue's message that would have expired into
	// a queue already stopped (Timing.StopSpan).
	EventLost
	// EventDeadLetterHeld: a quorum queue's at-least-once dead letter of
	// the message MessageID, on its way out of Queue, was refused by a
	// target that had not started again after Broker.Restart or
	// Broker.Crash, or follows one that was; Queue holds it until it
	// sends it again, Timing.DeadLetterResend later (dead_letter.go).
	// EventEnqueued follows when it lands.
	EventDeadLetterHeld
)

// Event is one thing that happened inside the broker, for a simulation or a
// test to observe through Config.Observer.
type Event struct {
	Kind             EventKind
	Queue            string
	MessageID        string
	Priority         uint8
	ConsumerTag      string
	Redelivered      bool
	DeadLetteredFrom string
	Reason           string
	Dropped          bool
	Messages         int
	// At is the broker's time of the event: the instant it was due (a
	// message's expiry, say), even when the broker caught up with it
	// later than that, as it does when its clock's timers run late.
	At time.Time
}

// observe reports ev to the observer, if there is one. It runs under the
// broker's lock.
func (b *Broker) observe(ev Event) {
	if b.observer != nil {
		ev.At = b.now
		b.observer(ev)
	}
}

// Unacked reports how many deliveries on the channel are unacknowledged:
// handed to its consumers or fetched with basic.get, and not yet settled.
// Every one of them has already been written to its consumer's Go channel
// or is queued for it on the connection, in order.
func (ch *Channel) Unacked() int {
	b := ch.b
	b.lock()
	defer b.unlock()
	return len(ch.unacked)
}
