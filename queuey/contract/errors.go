package contract

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrUnknownQueue is returned when a job is retried, delayed or deferred
// onto a queue the backend did not declare in this process: without the
// declaration the hold queue's target and durability would be guesses, and
// a hold queue expiring into a queue that does not exist loses the job
// silently. Errors that wrap it name the queue.
var ErrUnknownQueue = errors.New("queuey: unknown queue")

// ErrDelayTooLong is returned for a delay that, rounded up to its
// granularity, exceeds the longest wait a hold queue can express. queuey
// refuses such a delay rather than clamping it: releasing a job early is the
// one thing a hold promises not to do. Errors that wrap it give the delay
// and the limit.
var ErrDelayTooLong = errors.New("queuey: delay too long")

// ErrMaybeEnqueued is wrapped by the error of a publish (an Enqueue, or a
// successor a worker publishes) that was sent to the broker but whose
// confirm never came: its ctx ended while it waited, the broker nacked it,
// or the channel or connection closed under it. The broker may have the
// job, and may deliver it; publishing it again may run it twice (with the
// same job ID, which a handler can use to tell). The error also wraps the
// cause: context.DeadlineExceeded, the broker's *amqp091.Error, and so on.
var ErrMaybeEnqueued = errors.New("queuey: the job may have been enqueued")

// ErrJobTooLarge is returned for a job whose encoded message is larger than
// the broker accepts. The backend refuses it before sending anything:
// RabbitMQ would close the publishing channel over it. Errors that wrap it
// give the size and the limit. A retry or deferral whose successor it
// refuses (a job just under the limit whose counters gained a digit, or
// which an Observer stamped) is dead-lettered with ReasonJobTooLarge.
var ErrJobTooLarge = errors.New("queuey: job too large for the broker")

// DeferError is what Defer returns. A handler that returns it (possibly
// wrapped) asks for its job to run again after Delay: no attempt is spent,
// the retry policy is not consulted, and the job comes back at its queue's
// top priority, ahead of the backlog. Match it with errors.As.
type DeferError struct {
	Delay  time.Duration // how long to wait; rounded up, never down, by the backend
	Reason string        // why, for logs and metrics ("rate limited")
}

// Defer returns a *DeferError: run this job again after delay, for reason.
// It is what a 429 Too Many Requests with a Retry-After calls for. A delay
// of zero or less waits the shortest hold, one deferred granule (see
// the worker's hold), so a handler that defers every time cannot spin. There is
// no built-in cap on how often a job defers; a handler that needs one checks
// the job's deferral count itself. A delay longer than any hold can wait
// (the backend refuses it with ErrDelayTooLong; about 24.8 days on
// RabbitMQ) dead-letters the job with ReasonDelayTooLong.
func Defer(delay time.Duration, reason string) error {
	return &DeferError{Delay: delay, Reason: reason}
}

func (e *DeferError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("queuey: deferred for %s", e.Delay)
	}
	return fmt.Sprintf("queuey: deferred for %s: %s", e.Delay, e.Reason)
}

// FatalError is what Fatal returns: the job failed in a way retrying cannot
// fix, and goes to the dead-letter queue now, with Err's text as the reason.
// Match it with errors.As; it unwraps to Err.
type FatalError struct {
	Err error
}

// Fatal marks err as permanent: the job is dead-lettered without retrying.
// A nil err is treated as an error whose text is "fatal".
func Fatal(err error) error {
	if err == nil {
		err = errors.New("fatal")
	}
	return &FatalError{Err: err}
}

func (e *FatalError) Error() string { return "queuey: fatal: " + e.Text() }

// Text is Err's text, the dead-letter reason after "fatal: "; "fatal" for a
// FatalError built by hand with no Err (Fatal never builds one).
func (e *FatalError) Text() string {
	if e.Err == nil {
		return "fatal"
	}
	return e.Err.Error()
}
func (e *FatalError) Unwrap() error { return e.Err }

// TimeoutError is the result of a handler run that overran its queue's
// Timeout: Err is what the handler returned after its context was
// cancelled, or nil when it was abandoned without returning. It is
// retryable; a job whose last attempt timed out is dead-lettered with
// ReasonTimedOut. errors.Is(err, context.DeadlineExceeded) holds for it.
type TimeoutError struct {
	Timeout time.Duration
	Err     error
}

func (e *TimeoutError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("queuey: handler abandoned: it ignored its context past its timeout of %s", e.Timeout)
	}
	return fmt.Sprintf("queuey: handler timed out after %s: %v", e.Timeout, e.Err)
}

// Unwrap returns what the handler returned, and context.DeadlineExceeded.
func (e *TimeoutError) Unwrap() []error {
	if e.Err == nil {
		return []error{context.DeadlineExceeded}
	}
	return []error{e.Err, context.DeadlineExceeded}
}

// PanicError is the error a handler's recovered panic becomes. It is
// retryable, like any error other than a DeferError or FatalError: a panic
// is usually a bug that a deploy fixes, and the retry policy's attempt limit
// still dead-letters a job that panics every time.
type PanicError struct {
	Value any    // what the handler panicked with
	Stack []byte // the goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("queuey: handler panicked: %v", e.Value) }
