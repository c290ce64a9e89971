package membroker

import "slices"

// Single active consumer (x-single-active-consumer true): of a queue's
// consumers one receives messages and the others wait, each told nothing
// (docs/rabbitmq-semantics.md §15). membroker refuses consumer priorities
// (x-priority), so every consumer here has priority 0, and a quorum
// queue's priority takeover (a higher-priority consumer joining, the
// active one quiescing) never arises.
//
//   - The first consumer is active (classic: rabbit_amqqueue_process
//     basic_consume with no holder; quorum: rabbit_fifo update_consumer then
//     activate_next_consumer).
//   - The others wait, in registration order on a classic queue
//     (rabbit_queue_consumers' priority queue, all at one priority), and on
//     a quorum queue by credit, the highest first, then registration
//     (rabbit_fifo sort_waiting: priority, credit, key).
//   - When the active consumer is cancelled, or its channel goes, the
//     first waiting consumer becomes active at once
//     (new_single_active_consumer_after_basic_cancel / _after_channel_down;
//     rabbit_fifo active_consumer ignores a cancelled consumer). A cancelled
//     quorum consumer keeps its unacknowledged deliveries (lingering), as
//     without SAC. What a closed channel held returns to the queue (classic:
//     its place; quorum: the returns, served first) and goes to the new
//     active consumer.
//   - A classic queue counts waiting consumers in queue.declare-ok; a quorum
//     queue does not (rabbit_fifo query_stat: maps:size(Consumers)).
//   - basic.get works on a classic queue and is refused on a quorum queue,
//     405 RESOURCE_LOCKED.

// sacJoin registers c on q: active when q has none, else waiting.
func (q *queue) sacJoin(c *consumer) {
	if q.active == nil {
		q.active = c
		q.consumers = append(q.consumers, c)
		return
	}
	i := len(q.waiting)
	if q.isQuorum() {
		// After every waiting consumer with as much credit or more.
		i = slices.IndexFunc(q.waiting, func(w *consumer) bool { return w.limit < c.limit })
		if i < 0 {
			i = len(q.waiting)
		}
	}
	q.waiting = slices.Insert(q.waiting, i, c)
}

// sacLeave takes c out of q's single-active bookkeeping as it stops
// consuming, and makes the first waiting consumer active when c was. It
// dispatches nothing: the caller runs the queue once what c held is back.
func (q *queue) sacLeave(c *consumer) {
	if !q.cfg.singleActive {
		return
	}
	if q.active != c {
		q.waiting = deleteFirst(q.waiting, c)
		return
	}
	q.active = nil
	if len(q.waiting) > 0 {
		q.active = q.waiting[0]
		q.waiting = dropFront(q.waiting)
		q.consumers = append(q.consumers, q.active)
	}
}
