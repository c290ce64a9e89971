// Package relay is the hold ladder's relay of one delivery as a core with
// no goroutines and no clock: a delivery from the ladder's relay queue
// in, what to do with it out. A rung releases a held job into the relay
// queue; the relay publishes it on (rabbitmq.Backend.Relay: into its next
// rung, or back into its work queue), and only once the broker has
// confirmed that publish does it acknowledge the delivery, so a job is
// never in no queue at all (docs/hold-ladder.md). A relay that failed
// returns the delivery to the relay queue after a pause, so that a rung an
// operator deleted does not spin the relay.
//
// rabbitmq's relaying consumer carries out the actions on its goroutines
// with real time; package sim carries out the same actions on its one
// goroutine and virtual clock, and checks them: the simulator runs this
// code, not a copy of it.
package relay

import (
	"errors"
	"time"
)

// Prefetch is how many deliveries of the ladder's relay queue a work
// queue's consumer relays at once: its relay subscription's Qos.
const Prefetch = 64

// Kind is what an action asks the shell to do.
type Kind int

const (
	// Relay: publish the job on (rabbitmq.Backend.Relay) and report the
	// outcome with Relayed.
	Relay Kind = iota + 1
	// Ack: acknowledge the delivery.
	Ack
	// Requeue: after Delay, return the delivery to the relay queue
	// (basic.reject with requeue).
	Requeue
	// Drop: acknowledge the delivery of a job that has nowhere to go (its
	// work queue is gone: ErrGone), and say so in the log.
	Drop
)

// ErrGone is the error of a relay whose job's wait is over and whose work
// queue no longer exists: the broker returned the publish into it.
// rabbitmq exports it as ErrWorkQueueGone.
var ErrGone = errors.New("rabbitmq: the job's work queue no longer exists")

func (k Kind) String() string {
	switch k {
	case Relay:
		return "relay"
	case Ack:
		return "ack"
	case Requeue:
		return "requeue"
	case Drop:
		return "drop"
	}
	return "unknown"
}

// Action is one thing to do with the delivery.
type Action struct {
	Kind  Kind
	Delay time.Duration // Requeue only
	Err   error         // Requeue and Drop: why the relay failed
}

// Stepper is what a shell drives. *Core is the product's; a test may wrap
// one to break it on purpose.
type Stepper interface {
	// Delivered: a delivery arrived from the relay queue; stale says its
	// channel is gone, so the broker has requeued it already. It appends
	// to acts what to do, and returns them.
	Delivered(acts []Action, stale bool) []Action
	// Relayed: the Relay action ended, err being its error (nil once the
	// broker confirmed the publish). It appends what to do next.
	Relayed(acts []Action, err error) []Action
}

// DefaultPause is how long a failed relay waits before its delivery goes
// back to the relay queue.
const DefaultPause = time.Second

// Core is the relay's rules. The zero value pauses DefaultPause.
type Core struct {
	// Pause is how long a failed relay waits before its delivery goes
	// back to the relay queue. Zero means DefaultPause.
	Pause time.Duration
}

var _ Stepper = Core{}

// Delivered asks for the relay, or for nothing if the delivery is stale:
// the broker took it back with its channel, and settling it would fail.
func (c Core) Delivered(acts []Action, stale bool) []Action {
	if stale {
		return acts
	}
	return append(acts, Action{Kind: Relay})
}

// Relayed acknowledges the delivery once its publish is confirmed, drops
// it if its work queue is gone (ErrGone: deleting a work queue deletes its
// jobs, held ones too), and otherwise returns it after the pause. An
// acknowledgement that fails (its channel went after the publish) leaves
// the job running twice, never lost: the broker requeues the delivery, and
// it is relayed again.
func (c Core) Relayed(acts []Action, err error) []Action {
	switch {
	case err == nil:
		return append(acts, Action{Kind: Ack})
	case errors.Is(err, ErrGone):
		return append(acts, Action{Kind: Drop, Err: err})
	}
	pause := c.Pause
	if pause == 0 {
		pause = DefaultPause
	}
	return append(acts, Action{Kind: Requeue, Delay: pause, Err: err})
}

// Shell is what carrying out a relay does, in the process that relays:
// rabbitmq's relaying consumer with its goroutines and real time, or the
// simulator on its virtual clock.
type Shell interface {
	// Publish publishes the delivery's job on (rabbitmq.Backend.Relay)
	// and returns once the broker has confirmed it, or why it did not.
	Publish() error
	// Ack acknowledges the delivery.
	Ack()
	// Requeue returns the delivery to the relay queue after delay, err
	// being why the relay failed.
	Requeue(delay time.Duration, err error)
	// Drop acknowledges the delivery of a job whose work queue is gone,
	// err saying so, and logs it.
	Drop(err error)
}

// Run carries out, for one delivery from a relay queue (stale if its
// channel is gone), what s decides, through sh: the one loop both
// shells run, so that only what they do differs, never the order.
func Run(s Stepper, stale bool, sh Shell) {
	var buf [2]Action
	acts := s.Delivered(buf[:0], stale)
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case Relay:
			acts = s.Relayed(acts, sh.Publish())
		case Ack:
			sh.Ack()
		case Requeue:
			sh.Requeue(a.Delay, a.Err)
		case Drop:
			sh.Drop(a.Err)
		}
	}
}
