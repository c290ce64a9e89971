// Package queuey runs background jobs on RabbitMQ: typed jobs, retries that
// are never released early, rate-limit deferrals that spend no attempt and
// come back ahead of the backlog, and dead-letter queues that say why.
//
// This package is the broker-independent core: the envelope a job travels
// in (Envelope), the retry policy (RetryPolicy), and the errors a handler
// returns to say what should happen to its job (Defer, Fatal; any other
// error retries). The RabbitMQ backend is package
// github.com/queuey/queuey/rabbitmq; its topology (hold queues, dead-letter
// queues) is documented there.
//
// The producer, the worker and the Backend contract that joins them are
// being built on these pieces; see the project README for the status.
package queuey
