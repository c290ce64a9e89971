package queuey

import (
	"time"

	"github.com/queuey/queuey/queuey/contract"
)

// The names below are package contract's, given here under the same names:
// what the core, the backends and the handlers agree on. Their
// documentation is in package contract.

// Queues and retry policies.
type (
	// QueueConfig defines a queue: see contract.QueueConfig.
	QueueConfig = contract.QueueConfig
	// QueueType is a queue's RabbitMQ type: see contract.QueueType.
	QueueType = contract.QueueType
	// RetryPolicy says how long a failed job waits: see contract.RetryPolicy.
	RetryPolicy = contract.RetryPolicy
	// Jitter randomises a retry's backoff: see contract.Jitter.
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

// Defer asks for the job to run again after delay, without spending an
// attempt, ahead of the queue's backlog: see contract.Defer.
func Defer(delay time.Duration, reason string) error { return contract.Defer(delay, reason) }

// Fatal marks err as permanent: the job is dead-lettered without retrying.
// See contract.Fatal.
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

// Errors of producers and backends: see package contract.
var (
	ErrUnknownQueue  = contract.ErrUnknownQueue
	ErrDelayTooLong  = contract.ErrDelayTooLong
	ErrMaybeEnqueued = contract.ErrMaybeEnqueued
	ErrJobTooLarge   = contract.ErrJobTooLarge
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
