package contract

import "fmt"

// Action is what happens to a delivered job once its handler has returned
// (queuey.RunOutcome.Action). Every action but ActionAck publishes the job's
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
	// ReasonTimedOut is a job whose last attempt overran the queue's
	// Timeout (QueueConfig.Timeout).
	ReasonTimedOut = "timed out"
)

// ExtDueAt is the extension field in which a queuey.Worker with an Observer
// stamps when a retried or deferred job is due: an RFC 3339 timestamp.
// queuey.RunInfo.DueAt reads it.
const ExtDueAt = "queuey_due_at"

// The extension fields in which a producer records a job's own options
// (queuey.WithMaxAttempts, queuey.WithPriority). Each is absent unless the
// producer set it, and travels with the job through holds, retries, dead
// letters and redrives. A worker refuses an envelope whose value is not
// as described here: it is dead-lettered with ReasonMalformed.
const (
	// ExtMaxAttempts overrides the queue's RetryPolicy.MaxAttempts for
	// this job: an integer, at least 1, or -1 to retry for ever.
	ExtMaxAttempts = "queuey_max_attempts"
	// ExtPriority is the job's own priority, an integer 0..255: what it
	// is published at when enqueued, retried and redriven. A deferral
	// still comes back at the queue's top priority, for one round.
	ExtPriority = "queuey_priority"
)
