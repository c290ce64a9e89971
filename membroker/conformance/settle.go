package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A live broker does much of its work after it has answered: a quorum
// queue applies a command once its Raft log has it, a channel's unsettled
// messages go back to their queues once the channel's process has ended,
// a dead letter is republished by the queue's own process. The model has
// done all of it by the time a call returns. This file is how a live run
// waits for that work before it observes, without waiting on the clock
// alone: a fixed pause is too short on a loaded machine (CI on 2026-12-06
// read a quorum queue empty 200 ms after the channel holding its only
// message closed; the model had it back at once, and a later read on the
// live broker would have too).

// Expectations is what a run on the model saw that a live run of the same
// scenario waits for rather than times.
type Expectations struct {
	// Deliveries is how many deliveries each ReceiveAll took. Without it a
	// live ReceiveAll takes what has arrived; with it, it waits for that
	// many (see Run.ReceiveAll).
	Deliveries []int
	// Counts is, for each Wait, the run's queues' ready messages and
	// consumers after it (see Run.Wait).
	Counts []string
}

// Expectations returns what this run saw, for a live run to wait for.
func (r *Run) Expectations() Expectations {
	return Expectations{Deliveries: slices.Clone(r.counts), Counts: slices.Clone(r.settled)}
}

// Expect gives this run expectations recorded by another (the model's).
func (r *Run) Expect(e Expectations) {
	r.expect = slices.Clone(e.Deliveries)
	r.expectSet = slices.Clone(e.Counts)
}

// Wait lets d pass on the target and records it.
//
// On the model it records the counts of the run's queues afterwards. On a
// live run that has set no deadline yet, the wait is d from now, not from
// the schedule (nothing can depend on the schedule), and afterwards the
// run reads its queues' counts until they are the model's, for up to the
// target's Patience. If they never become the model's, the trace says so,
// which is a divergence. A run with a deadline keeps its schedule and
// waits on the clock alone: waiting for counts there would let a broker
// whose timers run late pass for one that keeps them, the imprecision the
// suite exists to find.
func (r *Run) Wait(d time.Duration) {
	live, isLive := r.target.(*Live)
	if isLive && !r.Timed() {
		live.reanchor()
	}
	r.target.Wait(d)
	r.Logf("wait %s", d)
	if isLive {
		r.awaitCounts(live)
	} else {
		r.settled = append(r.settled, r.queueCounts())
	}
}

// awaitCounts is Wait's reading of a live run's counts.
func (r *Run) awaitCounts(live *Live) {
	if r.expectSet == nil {
		return
	}
	if len(r.expectSet) == 0 {
		r.Logf("wait: the model waited fewer times")
		return
	}
	want := r.expectSet[0]
	r.expectSet = r.expectSet[1:]
	if r.Timed() {
		return
	}
	got, until := r.queueCounts(), time.Now().Add(live.Patience())
	for got != want && time.Now().Before(until) {
		time.Sleep(10 * time.Millisecond)
		got = r.queueCounts()
	}
	live.reanchor()
	if got != want {
		r.Logf("counts after the wait: %s (the model's: %s)", got, want)
	}
}

// counted reports whether Wait reads name's counts: not a queue declared
// with x-expires (a passive declare renews a classic queue's lease).
func (r *Run) counted(name string) bool { return !r.leased[name] }

// queueCounts renders the ready messages and consumers that a passive declare
// of each of the run's counted queues answers on the observer connection,
// leaving out the queues it refuses (gone, or another connection's
// exclusive queue). The model is read the way the live broker is.
func (r *Run) queueCounts() string {
	var b strings.Builder
	for _, name := range r.queues {
		if !r.counted(name) {
			continue
		}
		if q, ok := r.passive(name); ok {
			fmt.Fprintf(&b, "%s=%d/%d ", strings.TrimPrefix(name, r.prefix), q.Messages, q.Consumers)
		}
	}
	return b.String()
}

// passive answers a passive declare of name on the observer connection,
// on a channel of its own (a refusal closes it); ok is false if the queue
// was refused or the observer could not be reached, which drops it for
// the next read.
func (r *Run) passive(name string) (q amqp.Queue, ok bool) {
	c := r.observer()
	if c == nil {
		return q, false
	}
	ch, err := c.Channel()
	if err != nil {
		_ = c.Close()
		r.obs = nil
		return q, false
	}
	q, err = ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err != nil {
		return q, false
	}
	_ = ch.Close()
	return q, true
}

// observer is the run's own connection for reading queue counts (counts,
// settleStats), dialled on first use and again after it failed; nil if the
// target cannot be reached. One connection a run, not one a read: with the
// scenarios running at once, a dial per settlement kept both live brokers
// busy accepting connections, and their timers ran late.
func (r *Run) observer() Conn {
	if r.obs == nil {
		c, err := r.target.Dial()
		if err != nil {
			return nil
		}
		r.obs = c
	}
	return r.obs
}

// settleStats waits until a live quorum queue's counts are current. RabbitMQ
// answers a quorum queue's declare-ok, passive declare and delete counts
// with ra:local_query on the applied state (rabbit_fifo_client:stat), so an
// ack or return sent just before may not show yet. Reading the counts has no
// side effect on a quorum queue (it does not renew x-expires), so this reads
// them on the run's observer connection until two reads 20 ms apart agree. Classic
// queues answer in order and need nothing.
func (r *Run) settleStats(name string) {
	if _, ok := r.target.(*Live); !ok || !r.quorum[name] {
		return
	}
	prev, ok := r.passive(name)
	for i := 0; ok && i < 25; i++ {
		time.Sleep(20 * time.Millisecond)
		next, ok2 := r.passive(name)
		if !ok2 || next == prev {
			return
		}
		prev = next
	}
}

// Quiesce waits, on a live broker, until the work an operation set off
// inside it has finished: a dead letter republished by a queue process or
// a quorum queue's Ra effects, a requeue after a channel closed. It reads
// the counts of every queue of the run, on a separate connection, until two
// reads 10 ms apart agree. A passive declare renews a classic queue's
// x-expires lease, so Quiesce leaves queues declared with x-expires alone;
// on the model it does nothing.
func (r *Run) Quiesce() {
	if _, ok := r.target.(*Live); !ok {
		return
	}
	prev := r.queueCounts()
	for range 30 {
		time.Sleep(10 * time.Millisecond)
		next := r.queueCounts()
		if next == prev {
			return
		}
		prev = next
	}
}
