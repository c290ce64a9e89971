package queuey

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuey/queuey/internal/settlement"
)

// Action is what happens to a delivered job once its handler has returned
// (RunOutcome.Action). Every action but ActionAck publishes the job's
// successor, and waits for the broker's confirm, before the delivery is
// acknowledged, so a failure in between leaves the job on its queue, never
// lost.
type Action int

const (
	// ActionAck acknowledges the job: it is done.
	ActionAck Action = iota
	// ActionRetry sends the job, its attempt counted, to wait out its
	// backoff in a hold queue (rounded up to the retry granularity) and
	// come back at priority 0.
	ActionRetry
	// ActionDefer sends the job, its deferral counted and no attempt
	// spent, to wait out the handler's delay in a hold queue (rounded up to
	// the deferred granularity) and come back at the queue's top priority.
	ActionDefer
	// ActionDeadLetter sends the job to the queue's dead-letter queue with
	// its reason.
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

// decision says what to do with a delivered job: see
// internal/settlement. It is not exported: only the worker, the simulator
// and the property tests settle jobs.
type decision = settlement.Decision[Envelope, Action]

// hold is how long the successor waits before it reaches the work queue,
// before the backend rounds it up to a granularity: Delay, except that a
// deferral always waits in a hold queue, so one of zero or less asks for
// the shortest hold (one deferred granule, once rounded). Published
// straight onto the queue at its top priority, a job whose handler defers
// it every time would run in a hot loop, ahead of everything else there.
func hold(d decision) time.Duration {
	if d.Action == ActionDefer {
		return max(d.Delay, time.Nanosecond)
	}
	return d.Delay
}

// The simulator and the property tests settle jobs with these very
// functions (internal/workerrules).
func init() {
	settlement.Register(settlement.Funcs[Envelope, Action, QueueConfig, Backend]{
		Decide: decide, Hold: hold, PublishSuccessor: publishSuccessor, PublishMalformed: publishMalformed,
	})
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
	// ReasonDelayTooLong is a retry or deferral whose delay no hold can
	// take (the backend refused it with ErrDelayTooLong): a Defer with a
	// Retry-After of weeks, say.
	ReasonDelayTooLong = "delay too long"
	// ReasonJobTooLarge is a retry or deferral whose successor the backend
	// refused as too large (ErrJobTooLarge): a job just under the broker's
	// limit whose counters gained a digit.
	ReasonJobTooLarge = "job too large"
)

// decide is what a handler's result means for the job that ran, as a pure
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
func decide(env Envelope, result error, q QueueConfig, u float64) decision {
	q = q.WithDefaults()
	if result == nil {
		return decision{Action: ActionAck}
	}
	next := env
	// errors.AsType, unlike errors.As, does not make its target escape: no
	// allocation per settled job.
	if deferErr, ok := errors.AsType[*DeferError](result); ok {
		next.Deferrals++
		next.Priority = q.TopPriority()
		return decision{Action: ActionDefer, Successor: next, Delay: max(deferErr.Delay, 0), Reason: deferErr.Reason, Err: result}
	}
	if fatalErr, ok := errors.AsType[*FatalError](result); ok {
		next.Priority = 0
		return decision{Action: ActionDeadLetter, Successor: next, Reason: "fatal: " + fatalErr.text(), Err: result}
	}
	switch {
	case isUnknownKind(result):
		next.Priority = 0
		return decision{Action: ActionDeadLetter, Successor: next, Reason: ReasonUnknownKind, Err: result}
	case q.Retry.Exhausted(env.Attempt):
		next.Priority = 0
		return decision{Action: ActionDeadLetter, Successor: next, Reason: ReasonAttemptsExhausted, Err: result}
	}
	next.Attempt++
	next.Priority = 0 // a deferral's priority lasts one round
	return decision{Action: ActionRetry, Successor: next, Delay: q.Retry.Delay(next.Attempt, u), Err: result}
}

func isUnknownKind(err error) bool {
	_, ok := errors.AsType[*UnknownKindError](err)
	return ok
}

// publishSuccessor carries out dec on backend for a job of queue q, the
// first half of settling a delivery: a retry goes to a hold queue for
// dec.Delay rounded to the retry granularity, a deferral for dec.Delay
// rounded to the deferred granularity, and a dead letter to q's
// dead-letter queue with dec.Reason and the attempts made. It returns once
// the broker has confirmed the successor; ActionAck publishes nothing. The
// hold is hold(dec): a deferral always goes through a hold queue.
//
// A retry or deferral that no publish could ever take is dead-lettered
// instead, as the job ran: one whose delay the backend refuses as too long
// (ErrDelayTooLong) with ReasonDelayTooLong, and one whose successor it
// refuses as too large (ErrJobTooLarge) with ReasonJobTooLarge. delivered
// is the body of the delivery dec settles: see deadLetter. rerouted is
// the reason when it dead-lettered a retry or deferral, empty otherwise.
//
// Only after it returns a nil error may the delivery be acknowledged. On
// an error the delivery must stay unacknowledged and go back to its queue,
// so the job is never lost (at worst it runs again). The worker and the
// simulator both settle through it.
func publishSuccessor(ctx context.Context, backend Backend, q QueueConfig, dec decision, delivered []byte) (rerouted string, err error) {
	switch dec.Action {
	case ActionAck:
		return "", nil
	case ActionDefer, ActionRetry:
		kind := HoldRetry
		if dec.Action == ActionDefer {
			kind = HoldDeferred
		}
		err := backend.Publish(ctx, dec.Successor, hold(dec), kind)
		var reason string
		switch {
		case errors.Is(err, ErrDelayTooLong):
			reason = ReasonDelayTooLong
		case errors.Is(err, ErrJobTooLarge):
			reason = ReasonJobTooLarge
		default:
			return "", err
		}
		// Returned to its queue, the job would run and fail the same way
		// again and again, a RequeueDelay apart. It is dead-lettered with
		// its attempts and deferrals as they were when it ran, at priority
		// 0 and without the due stamp of the hold it did not get.
		env := withoutDueStamp(dec.Successor)
		env.Priority = 0
		if dec.Action == ActionDefer {
			env.Deferrals--
		} else {
			env.Attempt--
		}
		if err := deadLetter(ctx, backend, q, env, reason, delivered); err != nil {
			return "", err
		}
		return reason, nil
	case ActionDeadLetter:
		return "", deadLetter(ctx, backend, q, dec.Successor, dec.Reason, delivered)
	}
	return "", fmt.Errorf("queuey: unknown action %v", dec.Action)
}

// deadLetter publishes env to q's dead-letter queue with reason. Should
// the backend refuse it as too large (ErrJobTooLarge), the delivered body
// goes verbatim instead, which the broker has taken once: Encode writes
// every field and nine fractional digits of enqueued_at, so a job another
// producer wrote more tersely, just under the limit, can grow past it.
// Without the fallback such a job would go back to its queue and run again
// every RequeueDelay.
func deadLetter(ctx context.Context, backend Backend, q QueueConfig, env Envelope, reason string, delivered []byte) error {
	body, err := env.Encode()
	if err != nil {
		return err
	}
	err = backend.DeadLetter(ctx, q.Name, body, reason, env.Attempt)
	if errors.Is(err, ErrJobTooLarge) && delivered != nil {
		return backend.DeadLetter(ctx, q.Name, delivered, reason, env.Attempt)
	}
	return err
}

// publishMalformed dead-letters body, a delivery of queue q that is not a
// valid envelope, verbatim with the reason ReasonMalformed and zero
// attempts, and returns once the broker has confirmed it. As with
// publishSuccessor, acknowledge the delivery only after it returns nil.
func publishMalformed(ctx context.Context, backend Backend, q QueueConfig, body []byte) error {
	return backend.DeadLetter(ctx, q.Name, body, ReasonMalformed, 0)
}
