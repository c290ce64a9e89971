package sim

// The relay's shell: the workers' relay subscriptions step the product's
// relay core (internal/relay) on the virtual clock.

import (
	"fmt"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/relay"
)

// relayOne carries out, for a delivery from the relay queue, what the
// relay's core (internal/relay) asks, as rabbitmq's relaying consumer does:
// Backend.Relay publishes the job to its next rung or back to its work
// queue; the delivery is acknowledged once that publish is confirmed, or
// returned after a pause on the virtual clock. An acknowledgement the core
// asks for before its relay was confirmed breaks conservation (5): were
// the publish lost, the job would be in no queue.
func (r *runner) relayOne(sub *subscription, d *consume.Delivery) {
	w := sub.w
	if sub.dead || sub != w.relaySub {
		return // its process or connection is gone: the broker requeues it
	}
	n := jobNumber(d.D.MessageId)
	confirmed := false
	var buf [2]relay.Action
	acts := r.relay.Delivered(buf[:0], d.Stale())
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case relay.Relay:
			r.relaying, r.relayJob = true, r.job(n)
			err := w.rb.Relay(r.bg, w.q.spec.Name, d.D)
			r.relaying, r.relayJob = false, nil
			if err != nil {
				r.emit(Event{Kind: EvSettleFailed, Job: n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "relay: " + settleFailure(err)})
			}
			confirmed = err == nil
			acts = r.relay.Relayed(acts, err)
		case relay.Ack:
			r.relayAcked(sub, d, n, confirmed)
		case relay.Requeue:
			r.clk.Stoppable(a.Delay, func() bool { return !sub.dead && sub == w.relaySub }, func() { _ = d.Requeue() })
		}
	}
}

// relayAcked acknowledges a relayed delivery of job n.
func (r *runner) relayAcked(sub *subscription, d *consume.Delivery, n uint64, confirmed bool) {
	j := r.job(n)
	if !confirmed {
		r.violate(invConservation, j, fmt.Sprintf("job %d: its relay acknowledged its delivery from %s before the broker confirmed the job's next publish",
			n, r.top.RelayQueue(sub.w.q.spec.Name)))
	}
	if err := d.Ack(); err != nil {
		if j != nil {
			j.explain++ // requeued after its next step was published: a possible duplicate
		}
		return
	}
	if j != nil {
		j.copies--
		r.retire(j)
	}
}
