package queuey

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Action is what happens to a delivered job once its handler has returned.
type Action int

const (
	// ActionAck acknowledges the job: it is done.
	ActionAck Action = iota
	// ActionRetry publishes the Successor to wait Delay in a hold queue (rounded to
	// the retry granularity) and come back at priority 0, then acknowledges
	// the original.
	ActionRetry
	// ActionDefer publishes the Successor to wait Delay in a hold queue (rounded to
	// the deferred granularity) and come back at the queue's top priority,
	// then acknowledges the original. No attempt is spent.
	ActionDefer
	// ActionDeadLetter publishes the Successor to the dead-letter queue with
	// Reason, then acknowledges the original.
	ActionDeadLetter
)

func (a Action) String() string {
	switch a {
	case ActionAck:
		return "ack"
	case ActionRetry:
		return "retry"
	case ActionDefer:
		return "defer"
	case ActionDeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision says what to do with a delivered job. For every action but
// ActionAck,
// the Successor is published (and confirmed) before the original is
// acknowledged, so a failure in between leaves the job on its queue, never
// lost.
type Decision struct {
	Action    Action
	Successor Envelope      // what to publish: the job with its next attempt, deferral count and priority
	Delay     time.Duration // Retry and Defer: the wait asked for, before rounding
	Reason    string        // Defer: the handler's reason; DeadLetter: the x-death-reason header
	Err       error         // the handler's error, for logs
}

// Hold is how long the successor waits before it reaches the work queue,
// before the backend rounds it up to a granularity: Delay, except that a
// deferral always waits in a hold queue, so one of zero or less asks for
// the shortest hold (one deferred granule, once rounded). Published
// straight onto the queue at its top priority, a job whose handler defers
// it every time would run in a hot loop, ahead of everything else there.
func (d Decision) Hold() time.Duration {
	if d.Action == ActionDefer {
		return max(d.Delay, time.Nanosecond)
	}
	return d.Delay
}

// UnknownKindError is the result for a job whose kind has no registered
// handler: it is dead-lettered at once, never retried, since retrying
// cannot register a handler.
type UnknownKindError struct{ Kind string }

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("queuey: no handler for job kind %q", e.Kind)
}

// Dead-letter reasons (the x-death-reason header), besides "fatal: …".
const (
	ReasonAttemptsExhausted = "attempts exhausted"
	ReasonUnknownKind       = "unknown job kind"
	ReasonMalformed         = "malformed envelope"
)

// Decide is what a handler's result means for the job that ran, as a pure
// function of the delivered envelope, the result, the queue's definition
// and u, a uniform random number in [0, 1) for the retry jitter. The worker
// and the simulator both call it, so the same inputs always settle a job
// the same way.
//
//   - nil: ActionAck.
//   - a *DeferError: ActionDefer after its delay, at the queue's top priority, the
//     deferral counted, the attempt and the retry policy untouched.
//   - a *FatalError or *UnknownKindError: ActionDeadLetter now.
//   - anything else, a *PanicError included: Retry after the policy's
//     backoff at priority 0 with the attempt counted, or ActionDeadLetter
//     ("attempts exhausted") when that was the last attempt.
func Decide(env Envelope, result error, q QueueConfig, u float64) Decision {
	q = q.WithDefaults()
	if result == nil {
		return Decision{Action: ActionAck}
	}
	next := env
	// errors.AsType, unlike errors.As, does not make its target escape: no
	// allocation per settled job.
	if deferErr, ok := errors.AsType[*DeferError](result); ok {
		next.Deferrals++
		next.Priority = q.TopPriority()
		return Decision{Action: ActionDefer, Successor: next, Delay: max(deferErr.Delay, 0), Reason: deferErr.Reason, Err: result}
	}
	if fatalErr, ok := errors.AsType[*FatalError](result); ok {
		next.Priority = 0
		return Decision{Action: ActionDeadLetter, Successor: next, Reason: "fatal: " + fatalErr.Err.Error(), Err: result}
	}
	switch {
	case isUnknownKind(result):
		next.Priority = 0
		return Decision{Action: ActionDeadLetter, Successor: next, Reason: ReasonUnknownKind, Err: result}
	case q.Retry.Exhausted(env.Attempt):
		next.Priority = 0
		return Decision{Action: ActionDeadLetter, Successor: next, Reason: ReasonAttemptsExhausted, Err: result}
	}
	next.Attempt++
	next.Priority = 0 // a deferral's priority lasts one round
	return Decision{Action: ActionRetry, Successor: next, Delay: q.Retry.Delay(next.Attempt, u), Err: result}
}

func isUnknownKind(err error) bool {
	_, ok := errors.AsType[*UnknownKindError](err)
	return ok
}

// PublishSuccessor carries out dec on backend for a job of queue q, the
// first half of settling a delivery: a retry goes to a hold queue for
// dec.Delay rounded to the retry granularity, a deferral for dec.Delay
// rounded to the deferred granularity, and a dead letter to q's
// dead-letter queue with dec.Reason and the attempts made. It returns once
// the broker has confirmed the successor; ActionAck publishes nothing. The
// hold is dec.Hold(): a deferral always goes through a hold queue.
//
// Only after it returns nil may the delivery be acknowledged. On an error
// the delivery must stay unacknowledged and go back to its queue, so the
// job is never lost (at worst it runs again). The worker and the simulator
// both settle through it.
func PublishSuccessor(ctx context.Context, backend Backend, q QueueConfig, dec Decision) error {
	switch dec.Action {
	case ActionAck:
		return nil
	case ActionDefer:
		return backend.Publish(ctx, dec.Successor, dec.Hold(), HoldDeferred)
	case ActionRetry:
		return backend.Publish(ctx, dec.Successor, dec.Delay, HoldRetry)
	case ActionDeadLetter:
		body, err := dec.Successor.Encode()
		if err != nil {
			return err
		}
		return backend.DeadLetter(ctx, q.Name, body, dec.Reason, dec.Successor.Attempt)
	}
	return fmt.Errorf("queuey: unknown action %v", dec.Action)
}

// PublishMalformed dead-letters body, a delivery of queue q that is not a
// valid envelope, verbatim with the reason ReasonMalformed and zero
// attempts, and returns once the broker has confirmed it. As with
// PublishSuccessor, acknowledge the delivery only after it returns nil.
func PublishMalformed(ctx context.Context, backend Backend, q QueueConfig, body []byte) error {
	return backend.DeadLetter(ctx, q.Name, body, ReasonMalformed, 0)
}
