// Package rabbitmq is queuey's backend on RabbitMQ, over
// github.com/rabbitmq/amqp091-go or anything with the same channel methods
// (membroker's in-memory model among them).
//
// # Topology
//
// For each logical queue q:
//
//   - q is the work queue. A classic q carries x-max-priority from the queue
//     definition (none when it is 0), so a deferred job can come back ahead
//     of the backlog. A quorum q carries x-queue-type quorum and dead-letters
//     to the dead queue, so a message that crashes workers past the delivery
//     limit lands there instead of vanishing.
//   - q + ".dead" (the suffix is configurable) holds dead-lettered jobs,
//     with headers x-death-reason, x-original-queue and x-attempts.
//   - q + ".deferred." + TTL in milliseconds are the hold queues. Every wait
//     goes through one: a retry's backoff, an enqueue-after delay and a
//     deferral alike. A hold queue's only job is to expire its messages back
//     onto q after its TTL; since every message in it has the same TTL it
//     drains in publish order, so a short wait is never stuck behind a long
//     one (RabbitMQ expires messages only at the head of a queue, which is
//     what breaks a shared wait queue with per-message expirations).
//
// A hold queue is declared immediately before every publish into it, never
// cached, with arguments that are a pure function of its name: an explicit
// classic type, x-message-ttl = TTL, x-expires = 2 × TTL, and dead-lettering
// to q on the default exchange. An idle hold queue therefore deletes itself,
// and two processes running different builds always agree on its arguments
// (a configurable x-expires would let them disagree and have every publish
// refused). Delays are rounded up, never down, to a granularity; the
// longest TTL is 2147483647 ms (about 24.8 days), and a longer delay is
// refused, never clamped.
package rabbitmq
