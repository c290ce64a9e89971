// Package queuey runs background jobs on RabbitMQ: typed jobs, retries that
// are never released early, rate-limit deferrals that spend no attempt and
// come back ahead of the backlog, and dead-letter queues that say why.
//
// This package is the broker-independent core: jobs (JobArgs, Job,
// Handler), the Producer and the Worker, the envelope a job travels in
// (Envelope), the retry policy (RetryPolicy), the errors a handler returns
// to say what should happen to its job (Defer, Fatal; any other error
// retries), and Observer, through which metrics and traces see what
// happens to jobs (package queueyotel). Backend is the seam to a broker: package
// github.com/queuey/queuey/rabbitmq implements it on RabbitMQ (or on
// membroker, the in-memory model), and documents the topology; package
// queueytest runs jobs in tests, in virtual time.
package queuey
