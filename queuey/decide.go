package queuey

import (
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
	var deferErr *DeferError
	var fatalErr *FatalError
	var unknownErr *UnknownKindError
	switch {
	case errors.As(result, &deferErr):
		next.Deferrals++
		next.Priority = q.TopPriority()
		return Decision{Action: ActionDefer, Successor: next, Delay: max(deferErr.Delay, 0), Reason: deferErr.Reason, Err: result}
	case errors.As(result, &fatalErr):
		next.Priority = 0
		return Decision{Action: ActionDeadLetter, Successor: next, Reason: "fatal: " + fatalErr.Err.Error(), Err: result}
	case errors.As(result, &unknownErr):
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
