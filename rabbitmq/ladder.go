package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"

	"github.com/queuey/queuey/internal/relay"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The hold ladder (the default; docs/hold-ladder.md). A virtual host has
// one ladder, shared by every work queue of the topology: rungs, quorum
// queues L.ladder.T (L being Topology.Ladder), one for each T = base·2^k
// milliseconds up to MaxHoldTTL, where base is the finer of the two
// granularities, and the relay queue L.relay they all release into. A
// hold of TTL milliseconds is a walk down the binary digits of TTL: the
// job waits in the longest rung that fits what remains, the rung releases
// it into the relay queue, and a worker of any work queue publishes it
// into the next rung or, once nothing remains, into its own work queue
// (named in a header) at the job's priority. Every rung holds jobs of one
// TTL, so none ever waits behind a longer one, and the number of queues
// is bounded whatever the delays and whatever the number of work queues.
// The sum of the rungs' TTLs is the hold's TTL, and a quorum queue never
// releases a message before its TTL, so a job is never released early;
// what remains travels in a header, never as a time of day, so no two
// clocks need agree.

// WarmQueue is the name of queue's warm marker, q + DeferredSuffix +
// ".warm": an empty quorum queue, never published to, that a process
// declares once it has seen queue (and the ladder: LadderWarmQueue)
// HoldWarmup old. A process that finds both markers holds at once; one
// that does not waits for its own warm-up (Topology.HoldWarmup). Its own
// age does not matter: only its existence is read. Delete it with the
// work queue, never alone.
func (t Topology) WarmQueue(queue string) string {
	return queue + t.WithDefaults().DeferredSuffix + ".warm"
}

// LadderWarmQueue is the name of the ladder's warm marker, Ladder +
// ".warm": as WarmQueue, for the shared ladder's rungs and relay queue.
// Delete it with the ladder, never alone: a ladder declared afresh beside
// an old marker would hold jobs before it is safe to.
func (t Topology) LadderWarmQueue() string { return t.WithDefaults().Ladder + ".warm" }

// HeaderRemaining is the header a job on the ladder carries: the
// milliseconds it still waits after the rung it is in, as an int64.
const HeaderRemaining = "x-queuey-remaining"

// HeaderPriority is the header a job on the ladder carries: the priority
// it is published to its work queue with, as an int64. On the ladder it
// has priority 0, so that a rung keeps its jobs in order of arrival.
const HeaderPriority = "x-queuey-priority"

// HeaderQueue is the header a job on the ladder carries: the work queue
// it returns to once its wait is over, as a string. The ladder is shared
// by the work queues of a virtual host, so the rung a job waits in does
// not say.
const HeaderQueue = "x-queuey-queue"

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

// LadderQueues lists the queues of the shared hold ladder: its relay
// queue, its warm marker and its rungs (Rungs). Every work queue of the
// topology uses them; delete them only when no work queue in the virtual
// host holds jobs any more. Quorum queues are never deleted by the broker.
func (t Topology) LadderQueues() []string {
	names := []string{t.RelayQueue(), t.LadderWarmQueue()}
	for _, ttl := range t.Rungs() {
		names = append(names, t.LadderQueue(ttl))
	}
	return names
}

// legacyLadderQueues lists the ladder of queue's own that releases before
// the shared ladder declared: q.deferred.relay, and a rung
// q.deferred.ladder.T for each of Rungs. A worker still relays what their
// rungs release (Consume), and DeleteTopology deletes them.
func (t Topology) legacyLadderQueues(queue string) []string {
	names := []string{t.legacyRelayQueue(queue)}
	for _, ttl := range t.Rungs() {
		names = append(names, queue+t.WithDefaults().DeferredSuffix+".ladder."+strconv.FormatInt(ttl, 10))
	}
	return names
}

// legacyRelayQueue is the relay queue of queue's own ladder, as releases
// before the shared ladder declared it: q + DeferredSuffix + ".relay".
func (t Topology) legacyRelayQueue(queue string) string {
	return queue + t.WithDefaults().DeferredSuffix + ".relay"
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

// ladderPublishing is msg as it waits on the ladder for queue: at
// priority 0, with its work queue, the job's priority and what remains
// after its rung in headers. msg's own headers are dropped: a job's
// publishing has none, and the x-death a rung adds on each release would
// grow with every hop.
func ladderPublishing(msg amqp.Publishing, queue string, priority uint8, after int64) amqp.Publishing {
	msg.Priority = 0
	msg.Headers = amqp.Table{HeaderQueue: queue, HeaderRemaining: after, HeaderPriority: int64(priority)}
	return msg
}

// relayNext is where a delivery from a relay queue goes next, and as
// what: its next rung, or its work queue at the job's priority once
// nothing remains. The work queue is the one HeaderQueue names, or
// fallback for a delivery without it (from a per-queue relay queue of an
// earlier release, or published into the relay queue by hand); final
// says that the publish goes to the work queue.
func (t Topology) relayNext(fallback string, d amqp.Delivery) (target string, msg amqp.Publishing, final bool) {
	queue := fallback
	if q, ok := d.Headers[HeaderQueue].(string); ok && q != "" {
		queue = q
	}
	remaining, _ := d.Headers[HeaderRemaining].(int64)
	priority := d.Priority
	if p, ok := d.Headers[HeaderPriority].(int64); ok && p >= 0 && p <= 255 {
		priority = uint8(p)
	}
	msg = amqp.Publishing{
		ContentType:  d.ContentType,
		DeliveryMode: amqp.Persistent,
		Priority:     priority,
		MessageId:    d.MessageId,
		Type:         d.Type,
		Timestamp:    d.Timestamp,
		Body:         d.Body,
	}
	if remaining <= 0 {
		return queue, msg, true
	}
	ttl, after := t.rung(remaining)
	return t.LadderQueue(ttl), ladderPublishing(msg, queue, priority, after), false
}

// Relay takes one delivery d from the relay queue (RelayQueue) one step
// on: it publishes the job into its next rung, or into its work queue at
// its priority once its wait is over, and returns once the broker has
// confirmed that publish. The work queue is the one the job's HeaderQueue
// names, or queue if it names none (a job from the per-queue relay queue
// of an earlier release); a job that names none, relayed with queue "",
// has nowhere to go (ErrWorkQueueGone). The caller then acknowledges d; if Relay fails,
// it returns d with basic.reject and requeue, except when the error
// wraps ErrWorkQueueGone: the job's work queue no longer exists, and the
// job goes with it, as it would have had it waited in the work queue. A
// consumer made by Consume relays on its own; Relay is for a process that
// consumes the relay queue itself.
func (b *Backend) Relay(ctx context.Context, queue string, d amqp.Delivery) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	target, msg, final := b.top.relayNext(queue, d)
	if target == "" {
		return fmt.Errorf("rabbitmq: relay job %q: %w: it names no work queue (%s)", d.MessageId, ErrWorkQueueGone, HeaderQueue)
	}
	err := b.publish(ctx, target, msg)
	switch {
	case err == nil:
		return nil
	case final && errors.Is(err, ErrReturned):
		return fmt.Errorf("rabbitmq: relay job %q: %w: %q: %w", d.MessageId, ErrWorkQueueGone, target, err)
	}
	return fmt.Errorf("rabbitmq: relay job %q to %q: %w", d.MessageId, target, err)
}

// ErrWorkQueueGone is the error of a Relay whose job's wait is over and
// whose work queue no longer exists (the broker returned the publish): it
// was deleted while the job waited on the ladder. A relaying consumer
// acknowledges such a job and logs it at WARN: deleting a work queue
// deletes its jobs, wherever they wait.
var ErrWorkQueueGone = relay.ErrGone
