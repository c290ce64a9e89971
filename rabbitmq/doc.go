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
//     with headers x-death-reason, x-original-queue and x-attempts. It is a
//     quorum queue with the hold ladder, a classic one with
//     Topology.ClassicHolds.
//   - q + ".deferred.warm", with the hold ladder, is q's warm marker: an
//     empty quorum queue (below).
//
// Every wait goes through one hold ladder per virtual host, shared by all
// its work queues. With L its name (Topology.Ladder, "queuey" by default),
// its queues are the rungs L + ".ladder." + TTL in milliseconds, for
// TTL = base·2^k up to 2147483647 ms, base being the finer granularity
// (22 rungs at 1 s), the relay queue L + ".relay" they release into, and
// L + ".warm", the ladder's warm marker: 24 quorum queues with the
// default granularities, whatever the delays and however many work
// queues. A retry's backoff, an enqueue-after delay and a deferral alike
// wait there. A wait of TTL ms waits in the longest rung that fits what
// remains, which releases it into the relay queue; a consumer made by
// Consume, of any work queue, publishes it into the next rung, or once
// nothing remains onto the work queue its header x-queuey-queue names, at
// its priority (Backend.Relay). So a work queue with no worker still gets
// its held jobs back while some worker of the virtual host runs. Every
// rung is a quorum queue of one TTL, dead-lettering at least once
// (x-dead-letter-strategy at-least-once, x-overflow reject-publish): a
// short wait is never stuck behind a long one (RabbitMQ expires messages
// only at the head of a queue, which is what breaks a shared wait queue
// with per-message expirations), nothing is released early (the rungs add
// up to the wait), and a held job survives a broker restart and a kill -9.
// Backend.Declare declares the ladder before the work queues. Delays are
// rounded up, never down, to a granularity; the longest is 2147483647 ms
// (about 24.8 days), and a longer delay is refused, never clamped. A job
// whose work queue no longer exists when its wait is over is dropped and
// logged at WARN (ErrWorkQueueGone): deleting a work queue deletes its
// jobs, held ones too. No work queue may be named like one of the
// ladder's queues (Topology.CheckQueueName). Topology.HoldWarmup and
// docs/hold-ladder.md say why a process's first holds on a new ladder or
// a new queue wait 5 s.
//
// Earlier releases gave each work queue a ladder of its own,
// q + ".deferred.ladder." + TTL and q + ".deferred.relay". A consumer of q
// made while that relay queue exists relays what it receives too, into
// the shared ladder and back to q; Inspector.DeleteTopology deletes those
// queues with q, and never the shared ladder.
//
// With Topology.ClassicHolds, hold queues are instead classic queues named
// q + ".deferred." + TTL, one per TTL, releasing straight onto q at most
// once: cheaper, but a broker restart or a kill -9 can lose held jobs
// (docs/rabbitmq-semantics.md §13). Such a hold queue is declared
// immediately before every publish into it, never cached, with arguments
// that are a pure function of its name: an explicit classic type,
// x-message-ttl = TTL, x-expires = TTL + max(TTL, 60 s), and
// dead-lettering to q on the default exchange. An idle hold queue
// therefore deletes itself, and two processes running the same rule
// always agree on its arguments (a configurable x-expires would let them
// disagree and have every publish refused).
//
// # The publish ID header
//
// Every message the backend publishes carries the header
// x-queuey-publish-id, a number unique per publishing channel, by which it
// matches a message the broker returns to the publish that sent it;
// consumers can ignore it.
//
// # Hold-queue expiry (classic holds)
//
// RabbitMQ deletes a queue nobody has declared, consumed from or fetched
// from for its x-expires, and the messages still inside go with it, never
// dead-lettered; publishing does not count as use. A hold queue's lease
// runs from the declaration before a publish, while its message's TTL runs
// from when the message lands and ends when the queue's timer gets to it.
// So x-expires − TTL must cover the broker's latency and timer slack. The
// original design's 2 × TTL left one TTL of margin, and at a 1 ms TTL a
// live RabbitMQ 4.0.5 under load lost 15 to 41% of confirmed jobs. queuey now
// leaves at least a minute; from a TTL of a minute up
// the rule is 2 × TTL as before. An idle hold queue now lives up to TTL +
// 60 s after its last declaration.
//
// Processes of an older queuey declare hold queues under a minute with
// x-expires = 2 × TTL. While both kinds run, whichever declares such a
// queue second is refused with 406 PRECONDITION_FAILED; the error names the
// queue and says to upgrade every process (the old hold queue expires on
// its own once idle) or to delete it while it is empty (deleting drops what
// is inside). docs/hold-queue-expiry.md in the repository has the
// mechanism in RabbitMQ's source and the measurements.
package rabbitmq
