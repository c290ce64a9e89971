package queuey

import (
	"time"

	"github.com/queuey/queuey/queuey/contract"
)

// The names below are package contract's (queuey/contract), given here
// under the same names: what the core, the backends and the handlers agree
// on. Each doc comment below says what a user needs; package contract has
// every detail.

// Queues and retry policies.
type (
	// QueueConfig defines a work queue (contract.QueueConfig). Its fields,
	// each with its default when left zero:
	//
	//   - Name: the queue's name. Required.
	//   - Type: Classic (the default) or Quorum.
	//   - Prefetch: how many jobs a worker holds at once on this queue,
	//     which is also how many of its handlers run at once. 10.
	//   - MaxPriority: a classic queue's x-max-priority; deferred jobs come
	//     back at it, ahead of the backlog. 10; new(uint8(0)) for a plain
	//     queue (deferred jobs then come back in order).
	//   - Retry: the RetryPolicy of failed jobs: the default backs off 1 s,
	//     2 s, 4 s … up to 5 minutes, fully jittered, and dead-letters a job
	//     after 10 attempts.
	//   - Timeout: how long a handler may run; its context ends then, and
	//     the attempt fails with a *TimeoutError. DefaultTimeout, 10 minutes.
	QueueConfig = contract.QueueConfig
	// QueueType is a queue's RabbitMQ type: Classic or Quorum
	// (contract.QueueType).
	QueueType = contract.QueueType
	// RetryPolicy says how long a failed job waits before its next attempt,
	// and when it gives up (contract.RetryPolicy). The wait before attempt
	// n is min(Cap, Base × 2^(n-2)) with Jitter applied. Its fields, each
	// with its default when left zero:
	//
	//   - Base: the backoff before the second attempt. 1 second.
	//   - Cap: the longest wait, jitter included. 5 minutes.
	//   - MaxAttempts: attempts in all, the first included, before the job
	//     is dead-lettered (ReasonAttemptsExhausted); -1 retries forever. 10.
	//   - Jitter: FullJitter (the default), EqualJitter or NoJitter.
	RetryPolicy = contract.RetryPolicy
	// Jitter randomises a retry's backoff: FullJitter, EqualJitter or
	// NoJitter (contract.Jitter).
	Jitter = contract.Jitter
)

// Queue types, jitters and the default top priority.
const (
	Classic            = contract.Classic
	Quorum             = contract.Quorum
	FullJitter         = contract.FullJitter
	EqualJitter        = contract.EqualJitter
	NoJitter           = contract.NoJitter
	DefaultMaxPriority = contract.DefaultMaxPriority
	// DefaultTimeout is QueueConfig.Timeout's default, 10 minutes.
	DefaultTimeout = contract.DefaultTimeout
	// AbandonGrace is how long a handler that ignores its context may
	// overrun its timeout before its job is settled without it.
	AbandonGrace = contract.AbandonGrace
)

// What a handler returns, and what a job comes to.
type (
	// DeferError is what Defer returns: see contract.DeferError.
	DeferError = contract.DeferError
	// FatalError is what Fatal returns: see contract.FatalError.
	FatalError = contract.FatalError
	// PanicError is a handler's recovered panic: see contract.PanicError.
	PanicError = contract.PanicError
	// TimeoutError is a handler run that overran its queue's Timeout: see
	// contract.TimeoutError.
	TimeoutError = contract.TimeoutError
	// UnknownKindError is the result for a job of a kind without a
	// handler: see contract.UnknownKindError.
	UnknownKindError = contract.UnknownKindError
	// Action is what happens to a job once its handler returned: see
	// contract.Action.
	Action = contract.Action
)

// Defer asks for the job to run again after delay, for reason, without
// spending an attempt, ahead of the queue's backlog: what a 429 Too Many
// Requests with a Retry-After calls for. A delay of zero or less waits the
// shortest hold. A delay longer than any hold can wait (about 24.8 days on
// RabbitMQ) dead-letters the job with ReasonDelayTooLong. See
// contract.Defer.
func Defer(delay time.Duration, reason string) error { return contract.Defer(delay, reason) }

// Fatal marks err as permanent: the job is dead-lettered at once, without
// retrying, with err as the reason. See contract.Fatal.
func Fatal(err error) error { return contract.Fatal(err) }

// Actions and dead-letter reasons.
const (
	ActionAck               = contract.ActionAck
	ActionRetry             = contract.ActionRetry
	ActionDefer             = contract.ActionDefer
	ActionDeadLetter        = contract.ActionDeadLetter
	ReasonAttemptsExhausted = contract.ReasonAttemptsExhausted
	ReasonUnknownKind       = contract.ReasonUnknownKind
	ReasonMalformed         = contract.ReasonMalformed
	ReasonDelayTooLong      = contract.ReasonDelayTooLong
	ReasonJobTooLarge       = contract.ReasonJobTooLarge
	ReasonTimedOut          = contract.ReasonTimedOut
)

// Errors of producers and backends, matched with errors.Is (package
// contract has each one's contract).
var (
	// ErrUnknownQueue: a job for a queue the producer or worker was not
	// built with (the backend declared no such queue in this process).
	ErrUnknownQueue = contract.ErrUnknownQueue
	// ErrDelayTooLong: a delay longer than any hold can wait.
	ErrDelayTooLong = contract.ErrDelayTooLong
	// ErrMaybeEnqueued: the publish failed after it was sent, so the job
	// may or may not be in its queue; enqueueing it again may run it twice.
	ErrMaybeEnqueued = contract.ErrMaybeEnqueued
	// ErrJobTooLarge: the job's body is over the backend's message size.
	ErrJobTooLarge = contract.ErrJobTooLarge
)

// The backend seam.
type (
	// Backend is what queuey needs of a broker: see contract.Backend.
	Backend = contract.Backend
	// Consumer is one subscription to a queue: see contract.Consumer.
	Consumer = contract.Consumer
	// Delivery is one message handed to a consumer: see contract.Delivery.
	Delivery = contract.Delivery
	// HoldKind says which granularity a hold is rounded to: see
	// contract.HoldKind.
	HoldKind = contract.HoldKind
)

// Hold kinds.
const (
	HoldRetry    = contract.HoldRetry
	HoldDeferred = contract.HoldDeferred
)

// ExtDueAt is the extension field in which a worker with an Observer
// stamps when a retried or deferred job is due: see contract.ExtDueAt.
const ExtDueAt = contract.ExtDueAt

// The extension fields of a job's own options (WithMaxAttempts,
// WithPriority), for a producer in another language: see
// contract.ExtMaxAttempts and contract.ExtPriority.
const (
	ExtMaxAttempts = contract.ExtMaxAttempts
	ExtPriority    = contract.ExtPriority
)

// A job's failed attempts, which travel with it to its dead letter.
type (
	// AttemptError is one failed attempt of a job: which attempt, when its
	// handler ended, and the error's text, cut to MaxErrorText
	// (contract.AttemptError).
	AttemptError = contract.AttemptError
)

// The extension field of a job's failed attempts (its latest
// MaxAttemptErrors, oldest first), and its bounds: see contract.ExtErrors.
const (
	ExtErrors        = contract.ExtErrors
	MaxAttemptErrors = contract.MaxAttemptErrors
	MaxErrorText     = contract.MaxErrorText
)

// AttemptErrors returns the failed attempts a job carries, oldest first:
// what its worker recorded each time its handler failed (an error, a
// panic, a timeout, a Fatal), nil if none. A deferral records nothing.
// See contract.AttemptErrors.
func AttemptErrors(env Envelope) ([]AttemptError, error) { return contract.AttemptErrors(env) }
