package rabbitmq

import (
	"context"
	"fmt"
	"math/bits"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The hold ladder (the default; docs/hold-ladder.md). Each work queue q
// has rungs: quorum queues q.deferred.ladder.T, one for each T = base·2^k
// milliseconds up to MaxHoldTTL, where base is the finer of the two
// granularities. A hold of TTL milliseconds is a walk down the binary
// digits of TTL: the job waits in the longest rung that fits what remains,
// the rung releases it into q.deferred.relay, and a worker consuming q
// publishes it into the next rung or, once nothing remains, into q at the
// job's priority. Every rung holds jobs of one TTL, so none ever waits
// behind a longer one, and the number of queues is bounded whatever the
// delays. The sum of the rungs' TTLs is the hold's TTL, and a quorum queue
// never releases a message before its TTL, so a job is never released
// early; what remains travels in a header, never as a time of day, so no
// two clocks need agree.

// WarmQueue is the name of queue's warm marker, q + DeferredSuffix +
// ".warm": an empty quorum queue, never published to, that a process
// declares once it has seen queue's ladder HoldWarmup old. A process that
// finds it holds at once; one that does not waits for its own warm-up
// (Topology.HoldWarmup). Its own age does not matter: only its existence
// is read. Delete it with the ladder, never alone: a ladder declared
// afresh beside an old marker would hold jobs before it is safe to.
func (t Topology) WarmQueue(queue string) string {
	return queue + t.WithDefaults().DeferredSuffix + ".warm"
}

// HeaderRemaining is the header a job on the ladder carries: the
// milliseconds it still waits after the rung it is in, as an int64.
const HeaderRemaining = "x-queuey-remaining"

// HeaderPriority is the header a job on the ladder carries: the priority
// it is published to its work queue with, as an int64. On the ladder it
// has priority 0, so that a rung keeps its jobs in order of arrival.
const HeaderPriority = "x-queuey-priority"

// ladderBase is the shortest rung's TTL in milliseconds: the finer of the
// two granularities, at least 1 ms.
func (t Topology) ladderBase() int64 {
	t = t.WithDefaults()
	g := min(t.RetryGranularity, t.DeferredGranularity)
	return max(int64((g+999_999)/1_000_000), 1)
}

// Rungs returns the TTLs of the ladder's rungs in milliseconds, shortest
// first: base, 2·base, 4·base and so on up to MaxHoldTTL. With the default
// granularities that is 22 rungs, from 1 s to about 24.3 days.
func (t Topology) Rungs() []int64 {
	base := t.ladderBase()
	var rungs []int64
	for ttl := base; ttl <= MaxHoldTTL; ttl *= 2 {
		rungs = append(rungs, ttl)
	}
	return rungs
}

// LadderQueues lists the queues the hold ladder adds for queue: its relay
// queue, its warm marker and its rungs (Rungs). Deleting a work queue for
// good means deleting these too, and its dead-letter queue: quorum
// queues are never deleted by the broker.
func (t Topology) LadderQueues(queue string) []string {
	names := []string{t.RelayQueue(queue), t.WarmQueue(queue)}
	for _, ttl := range t.Rungs() {
		names = append(names, t.LadderQueue(queue, ttl))
	}
	return names
}

// rung picks the rung for a job that still waits remaining ms (> 0): the
// longest rung no longer than that, or the shortest if it is shorter
// than the shortest (rounding up: never early). after is what remains
// once the job leaves the rung.
func (t Topology) rung(remaining int64) (ttl, after int64) {
	base := t.ladderBase()
	if remaining <= base {
		return base, 0
	}
	k := bits.Len64(uint64(remaining/base)) - 1 // base<<k ≤ remaining < base<<(k+1)
	ttl = base << k
	for ttl > MaxHoldTTL {
		ttl /= 2
	}
	return ttl, remaining - ttl
}

// ladderPublishing is msg as it waits on the ladder: at priority 0, with
// the job's priority and what remains after its rung in headers. msg's own
// headers are dropped: a job's publishing has none, and the x-death a rung
// adds on each release would grow with every hop.
func ladderPublishing(msg amqp.Publishing, priority uint8, after int64) amqp.Publishing {
	msg.Priority = 0
	msg.Headers = amqp.Table{HeaderRemaining: after, HeaderPriority: int64(priority)}
	return msg
}

// relayNext is where a delivery from queue's relay queue goes next, and
// as what: its next rung, or queue itself at the job's priority once
// nothing remains. A message without the ladder's headers (published into
// the relay queue by hand) goes to queue as it is.
func (t Topology) relayNext(queue string, d amqp.Delivery) (string, amqp.Publishing) {
	remaining, _ := d.Headers[HeaderRemaining].(int64)
	priority := d.Priority
	if p, ok := d.Headers[HeaderPriority].(int64); ok && p >= 0 && p <= 255 {
		priority = uint8(p)
	}
	msg := amqp.Publishing{
		ContentType:  d.ContentType,
		DeliveryMode: amqp.Persistent,
		Priority:     priority,
		MessageId:    d.MessageId,
		Type:         d.Type,
		Timestamp:    d.Timestamp,
		Body:         d.Body,
	}
	if remaining <= 0 {
		return queue, msg
	}
	ttl, after := t.rung(remaining)
	return t.LadderQueue(queue, ttl), ladderPublishing(msg, priority, after)
}

// Relay takes one delivery d from queue's relay queue (RelayQueue) one step
// on: it publishes the job into its next rung, or into queue at its
// priority once its wait is over, and returns once the broker has
// confirmed that publish. The caller then acknowledges d; if Relay fails,
// it returns d with basic.reject and requeue. A consumer of queue made by
// Consume relays on its own; Relay is for a process that consumes the
// relay queue itself.
func (b *Backend) Relay(ctx context.Context, queue string, d amqp.Delivery) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	target, msg := b.top.relayNext(queue, d)
	if err := b.publish(ctx, target, msg); err != nil {
		return fmt.Errorf("rabbitmq: relay job %q of queue %q to %q: %w", d.MessageId, queue, target, err)
	}
	return nil
}
