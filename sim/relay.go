package sim

// The relay's shell: the workers' relay subscriptions run the product's
// relay (internal/relay: its core, and the loop that carries it out) on
// the virtual clock.

import (
	"fmt"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/relay"
)

// relayOne carries out, for a delivery from the relay queue, what the
// relay's core decides, through the loop rabbitmq's relaying consumer runs
// (relay.Run): Backend.Relay publishes the job to its next rung or back to
// its work queue; the delivery is acknowledged once that publish is
// confirmed, or returned after a pause on the virtual clock. An
// acknowledgement the core asks for before its relay was confirmed breaks
// conservation (5): were the publish lost, the job would be in no queue.
func (r *runner) relayOne(sub *subscription, d *consume.Delivery) {
	w := sub.w
	if sub.dead || sub != w.relaySub {
		return // its process or connection is gone: the broker requeues it
	}
	sh := &r.relayShell // one relay at a time: no allocation per relay
	*sh = simRelay{r: r, sub: sub, d: d, n: jobNumber(d.D.MessageId)}
	relay.Run(r.relay, d.Stale(), sh)
	*sh = simRelay{}
}

// simRelay is what relaying one delivery does in the simulation.
type simRelay struct {
	r         *runner
	sub       *subscription
	d         *consume.Delivery
	n         uint64 // the job's number
	confirmed bool   // the broker confirmed the relay's publish
}

func (s *simRelay) Publish() error {
	r, w := s.r, s.sub.w
	r.relaying, r.relayJob = true, r.job(s.n)
	err := w.rb.Relay(r.bg, "", s.d.D) // every job on the shared ladder names its queue
	r.relaying, r.relayJob = false, nil
	if err != nil {
		r.emit(Event{Kind: EvSettleFailed, Job: s.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "relay: " + settleFailure(err)})
	}
	s.confirmed = err == nil
	return err
}

func (s *simRelay) Ack() { s.r.relayAcked(s.sub, s.d, s.n, s.confirmed) }

// Drop is the relay of a job whose work queue is gone. The simulation
// never deletes a work queue, so the relay has dropped a job it should
// have delivered.
func (s *simRelay) Drop(err error) {
	s.r.violate(invConservation, s.r.job(s.n), fmt.Sprintf("job %d: its relay dropped it: %v", s.n, err))
	s.Ack()
}

func (s *simRelay) Requeue(delay time.Duration, _ error) {
	sub, w, d := s.sub, s.sub.w, s.d
	s.r.clk.Stoppable(delay, func() bool { return !sub.dead && sub == w.relaySub }, func() { _ = d.Requeue() })
}

// relayAcked acknowledges a relayed delivery of job n.
func (r *runner) relayAcked(sub *subscription, d *consume.Delivery, n uint64, confirmed bool) {
	j := r.job(n)
	if !confirmed {
		r.violate(invConservation, j, fmt.Sprintf("job %d: its relay acknowledged its delivery from %s before the broker confirmed the job's next publish",
			n, r.relayName))
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
