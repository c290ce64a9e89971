// Package queuey runs background jobs on RabbitMQ: typed jobs, retries that
// are never released early, rate-limit deferrals that spend no attempt and
// come back ahead of the backlog, and dead-letter queues that say why.
//
// This package is the broker-independent core. Backend is the seam to a
// broker: package github.com/queuey/queuey/rabbitmq implements it on
// RabbitMQ (or on membroker, the in-memory model) and documents the
// topology; package queueytest runs jobs in tests, in virtual time.
//
// # Jobs
//
// A job's arguments are a type that implements JobArgs: its Kind selects
// the handler and its Queue the work queue. A Producer enqueues jobs
// (Enqueue now, EnqueueAfter a delay at the back of the queue, Defer a
// delay ahead of the backlog) and returns once the broker has confirmed
// each. EnqueueMany enqueues a batch with pipelined confirms. A job
// travels in an Envelope, whose wire format is documented on the type.
//
// Each job may take its own options at enqueue time (EnqueueOption): its
// queue, its ID, its attempts and its priority. Attempts and priority
// travel in the envelope's Ext (ExtMaxAttempts, ExtPriority), so retries,
// deferrals, dead letters and redrives keep them; JobContext.MaxAttempts
// tells a handler how many its job has.
//
// # Handlers and what their results mean
//
// A Worker runs the handlers registered with Register, at most the queue's
// prefetch of them at once per queue. The handler's error says what
// happens to the job:
//
//   - nil: it is done;
//   - Defer(d, reason): it comes back after d at the queue's top priority,
//     its deferral counted and no attempt spent;
//   - Fatal(err), or a kind with no handler: it goes to the dead-letter
//     queue at once, with the reason;
//   - any other error, or a panic: it is retried after the RetryPolicy's
//     backoff, and dead-lettered when its attempts run out.
//
// Every successor (retry, deferral, dead letter) is confirmed by the broker
// before the delivery is acknowledged, so a job is never lost between the
// two; at worst it runs again.
//
// # Stopping, outages and errors
//
// Run stops when its context ends, giving running handlers StopTimeout to
// finish. On a supervised rabbitmq backend it survives dropped connections.
// Errors are matched with errors.Is: ErrMaybeEnqueued (sent, never
// confirmed), ErrJobTooLarge, ErrDelayTooLong, ErrUnknownQueue,
// ErrInvalidOption, ErrMalformedEnvelope.
//
// # Observing
//
// WorkerConfig.Middleware wraps every handler run. An Observer
// (ProducerConfig.Observer, WorkerConfig.Observer) sees every enqueue, run
// and outcome; package queueyotel implements it with OpenTelemetry.
package queuey
