// The system under test: worker processes (a connection, the rabbitmq
// backend, a subscription) and the shell around each one's worker core,
// which carries out the core's actions on the virtual clock and traces
// them.

package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/queuey/queuey/internal/backendhook"
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// startWorker connects a worker and subscribes it to its queue.
func (r *runner) startWorker(w *worker) error {
	conn, err := r.broker.Dial()
	if err != nil {
		return err
	}
	w.conn = conn
	open := r.channels(conn)
	w.rb, err = rabbitmq.New(open, rabbitmq.Options{Topology: r.top})
	if err != nil {
		return fmt.Errorf("sim: worker backend: %w", err)
	}
	backendhook.SetClock(w.rb, r.clk.Now, notRipeYet)
	// The worker's backend has declared nothing; it learns the queue as a
	// worker process does, by declaring it (an equivalent redeclaration).
	if err := w.rb.Declare(r.bg, w.q.cfg); err != nil {
		return fmt.Errorf("sim: worker declare: %w", err)
	}
	w.back = w.rb
	if r.s.Legacy {
		lb, err := newLegacyBackend(w.rb, open, w.q.wait, r.top)
		if err != nil {
			return err
		}
		w.back = lb
	}
	// The subscription is rabbitmq.Backend.Consume's (a channel of its
	// own, Qos(prefetch), manual acknowledgements, settled through its
	// core, internal/consume), stepped here without the backend's
	// forwarding goroutine: membroker hands deliveries over before its
	// calls return, so the simulation takes them straight off the
	// channel, on its one goroutine, without a thread handoff per message.
	w.tags++
	tag := fmt.Sprintf("%s-w%d-%d", w.q.spec.Name, w.idx, w.tags)
	if w.core == nil {
		w.core = settle.New[*simDelivery]([]queuey.QueueConfig{w.q.cfg},
			workercore.Config{RequeueDelay: queuey.DefaultRequeueDelay, Mutate: r.opts.mutate.coreMutation()})
	}
	w.connGen++
	w.core.ConnectionUp(w.connGen)
	sub := &subscription{w: w, tag: tag, back: w.back, gen: w.connGen}
	r.subs[tag] = sub // before subscribing, which may deliver at once
	// With a hold ladder the backend subscribes to the relay queue too,
	// whose deliveries relayOne relays as Backend.Consume's consumer does.
	rsub := &subscription{w: w, tag: tag + "-relay", back: w.back, gen: w.connGen, relay: true}
	r.subs[rsub.tag] = rsub
	work, relay, err := backendhook.Subscribe(w.rb, r.bg, w.q.spec.Name, tag, w.q.cfg.Prefetch)
	if err != nil {
		return fmt.Errorf("sim: worker consume: %w", err)
	}
	sub.attach(work, r.opts.mutate.consumeMutation())
	w.sub = sub
	if relay != nil {
		rsub.attach(relay, consume.MutNone)
		w.relaySub = rsub
	} else {
		delete(r.subs, rsub.tag)
	}
	w.up = true
	return nil
}

// notRipe is what a worker's backend's wait returns in the simulation,
// which cannot block: the backend would have waited d for its hold ladder
// to warm up (rabbitmq.Topology.HoldWarmup). The shell waits on the
// virtual clock and publishes again.
type notRipe struct{ d time.Duration }

func (e *notRipe) Error() string { return "sim: the hold ladder warms up for " + e.d.String() }

func notRipeYet(_ context.Context, d time.Duration) error { return &notRipe{d} }

// errDisconnected is the outcome of a hold that waited for the warm-up
// while its delivery's connection went.
var errDisconnected = errors.New("sim: the connection went while the hold waited for the warm-up")

// relayOne carries out what a backend's relay consumer does with a
// delivery from the relay queue: Backend.Relay publishes the job to its
// next rung or back to its work queue, then the delivery is acknowledged.
func (r *runner) relayOne(sub *subscription, d *consume.Delivery) {
	w := sub.w
	if sub.dead || sub != w.relaySub || d.Stale() {
		return // its process or connection is gone: the broker requeues it
	}
	j := r.job(jobNumber(d.D.MessageId))
	r.relaying, r.relayJob = true, j
	err := w.rb.Relay(r.bg, w.q.spec.Name, d.D)
	r.relaying, r.relayJob = false, nil
	if err != nil {
		r.emit(Event{Kind: EvSettleFailed, Job: jobNumber(d.D.MessageId), Queue: w.q.spec.Name, Worker: w.idx, Detail: "relay: " + settleFailure(err)})
		_ = d.Requeue()
		return
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

// stopWorker releases a worker's backend; its connection is already gone.
func (r *runner) stopWorker(w *worker) {
	w.up = false
	w.core, w.connGen = nil, 0 // the process, and its core, died
	if w.sub != nil {
		w.sub.dead = true
		w.sub = nil
	}
	if w.relaySub != nil {
		w.relaySub.dead = true
		w.relaySub = nil
	}
	_ = w.back.Close()
}

// channels opens the channels of a backend on conn: membroker's own, or
// under mutHoldExpires2TTL, ones that declare hold queues with 2 × TTL.
func (r *runner) channels(conn *membroker.Connection) func() (rabbitmq.Channel, error) {
	open := rabbitmq.Channels(conn.Channel)
	if r.opts.mutate != mutHoldExpires2TTL {
		return open
	}
	return func() (rabbitmq.Channel, error) {
		ch, err := open()
		return oldExpiresChannel{ch}, err
	}
}

// oldExpiresChannel declares hold queues with seed 000's x-expires, twice
// the TTL, whatever the backend asks: the rule issue 11 replaced.
type oldExpiresChannel struct{ rabbitmq.Channel }

func (c oldExpiresChannel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	if ttl, ok := args["x-message-ttl"].(int64); ok && args["x-expires"] != nil {
		args = maps.Clone(args)
		args["x-expires"] = 2 * ttl
	}
	return c.Channel.QueueDeclare(name, durable, autoDelete, exclusive, noWait, args)
}

// simAction is one of a worker core's actions.
type simAction = settle.Action[*simDelivery]

// begin hands a delivery to its worker's core: the product's own
// settlement logic (internal/workercore) decides everything from here, and
// exec carries out what it says.
func (r *runner) begin(w *worker, sub *subscription, d *simDelivery) {
	d.r, d.w, d.sub, d.gen = r, w, sub, w.gen
	var buf [2]simAction
	r.exec(w, w.core.Deliver(buf[:0], 0, sub.gen, d))
}

// exec carries out a worker core's actions, the simulation's shell: a
// handler runs for its drawn duration on the virtual clock, publishes and
// acknowledgements go to the broker at once, and every step is traced and
// checked.
func (r *runner) exec(w *worker, acts []simAction) {
	for i := range acts {
		a := &acts[i]
		switch a.Kind {
		case workercore.RunHandler:
			r.runHandler(w, a)
		case workercore.Publish:
			if a.Malformed {
				r.publishMalformed(w, a)
			} else {
				r.publish(w, a)
			}
		case workercore.Ack:
			r.ack(w, a)
		case workercore.Requeue:
			r.requeue(w, a)
		case workercore.StartTimer:
			// The core ignores a timer whose delivery it has forgotten;
			// a process that died took its core with it.
			gen, id := w.gen, a.ID
			r.clk.AfterFunc(a.Delay, func() {
				if w.gen == gen {
					var buf [2]simAction
					r.exec(w, w.core.TimerFired(buf[:0], id))
				}
			})
		case workercore.Drop:
			d := a.Msg
			r.emit(Event{Kind: EvSettleFailed, Job: d.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "its connection is gone: outcome dropped"})
			r.recycle(d)
		}
	}
}

// runHandler starts a job's handler: its outcome is drawn, and it
// completes after its drawn duration.
func (r *runner) runHandler(w *worker, a *simAction) {
	d, env := a.Msg, a.Job
	n := jobNumber(env.ID)
	j := r.job(n)
	if j == nil {
		r.failf("delivered job %q is not live", env.ID)
		return
	}
	r.emit(Event{Kind: EvDeliver, Job: n, Queue: w.q.spec.Name, Worker: w.idx, Attempt: env.Attempt, Deferrals: env.Deferrals, Priority: d.Priority()})
	r.checkDelivered(j, env, d)
	d.sub.held = append(d.sub.held, n)
	d.run = j.runs
	j.runs++
	d.j, d.n, d.env, d.id = j, n, env, a.ID
	d.out = r.outcomeOf(j, d.run)
	r.clk.afterFire(d.out.duration, d)
}

// fire is the end of a delivery's handler run.
func (d *simDelivery) fire() { d.r.complete(d) }

// complete reports a handler's result to its worker's core, unless the
// process died meanwhile (its core with it) or the handler crashes it.
func (r *runner) complete(d *simDelivery) {
	w := d.w
	if w.gen != d.gen {
		return // the process died with its handlers
	}
	r.emit(Event{Kind: EvOutcome, Job: d.n, Queue: w.q.spec.Name, Worker: w.idx, Attempt: d.env.Attempt, Deferrals: d.env.Deferrals, Detail: d.out.label})
	if d.out.crash {
		r.crash(w, "poison job "+strconv.FormatUint(d.n, 10))
		return
	}
	var buf [2]simAction
	r.exec(w, w.core.HandlerDone(buf[:0], d.id, d.out.result, r.draw(d.n, uint64(d.run+1), streamJitter)))
}

// publish publishes the successor the core decided, with the bookkeeping
// the invariants need around the call, and reports the broker's answer to
// the core.
func (r *runner) publish(w *worker, a *simAction) { r.publishIssued(w, a, r.now()) }

// publishIssued is publish for a settlement the core issued at issued:
// earlier than now when the hold waited for the ladder's warm-up, which
// then counts in the added wait.
func (r *runner) publishIssued(w *worker, a *simAction, issued time.Duration) {
	d, env, dec := a.Msg, a.Job, a.Decision
	q := w.q
	if d.sub != w.sub {
		// The core must drop the outcome of a delivery whose connection
		// went: the broker has requeued it, so a successor would be a
		// second copy of the job.
		r.violate(invConservation, r.job(d.n), fmt.Sprintf("job %d: its worker published a successor for a delivery of a connection that is gone", d.n))
		return
	}
	j := d.j
	r.checkDecision(j, env, d.out, dec)
	cur := settling{j: j, dec: dec, issued: issued}
	switch dec.Action {
	case queuey.ActionRetry:
		ttl, _ := r.top.RetryTTL(dec.Delay)
		cur.ttl = time.Duration(ttl) * time.Millisecond
	case queuey.ActionDefer:
		ttl, _ := r.top.DeferredTTL(settle.Hold(dec))
		cur.ttl = time.Duration(ttl) * time.Millisecond
	}
	if cur.ttl > 0 && !r.s.Legacy && r.top.ClassicHolds {
		r.res.HoldDeclarations++ // the backend declares the hold queue before every hold
	}
	held := dec.Action == queuey.ActionRetry || dec.Action == queuey.ActionDefer
	if held {
		// Expected before the publish: a successor with no delay goes
		// straight to the work queue and may be delivered during the call.
		j.expect = append(j.expect, expectation{
			attempt: dec.Successor.Attempt, deferrals: dec.Successor.Deferrals, priority: dec.Successor.Priority,
			notBefore: cur.issued + dec.Delay, deferred: dec.Action == queuey.ActionDefer,
		})
	}
	r.cur, r.curSet = cur, true
	rerouted, err := r.publishSuccessor(d.sub, q, dec, d.Body())
	r.cur, r.curSet = settling{}, false
	if nr := (*notRipe)(nil); errors.As(err, &nr) {
		// The backend would wait for its ladder to warm up: wait on the
		// virtual clock, then publish again, unless the process died or
		// its connection went meanwhile.
		if held {
			j.expect = j.expect[:len(j.expect)-1]
		}
		act, gen, sub := *a, w.gen, d.sub
		r.clk.AfterFunc(nr.d, func() {
			switch {
			case w.gen != gen:
			case w.sub != sub:
				var buf [2]simAction
				r.exec(w, w.core.Published(buf[:0], act.ID, errDisconnected))
			default:
				r.publishIssued(w, &act, issued)
			}
		})
		return
	}
	switch {
	case err != nil:
		if held {
			j.expect = j.expect[:len(j.expect)-1]
		}
		r.emit(Event{Kind: EvSettleFailed, Job: j.n, Queue: q.spec.Name, Worker: w.idx, Detail: settleFailure(err)})
	case rerouted != "":
		// No hold could take it: the job was dead-lettered as it ran.
		j.expect = j.expect[:len(j.expect)-1]
		j.deadWant = append(j.deadWant, deadWant{reason: rerouted, attempts: d.env.Attempt})
		r.end1(j, "dead-lettered", rerouted)
	default:
		switch dec.Action {
		case queuey.ActionRetry:
			j.failures++
		case queuey.ActionDefer:
			r.res.Deferrals++
		case queuey.ActionDeadLetter:
			j.deadWant = append(j.deadWant, deadWant{reason: dec.Reason, attempts: dec.Successor.Attempt})
			r.end1(j, "dead-lettered", dec.Reason)
		}
	}
	var buf [2]simAction
	r.exec(w, w.core.Published(buf[:0], a.ID, err))
}

// publishSuccessor is settle.PublishSuccessor, with the deliberate bug
// Options.mutate asks for in tests.
func (r *runner) publishSuccessor(sub *subscription, q *simQueue, dec settle.Decision, delivered []byte) (rerouted string, err error) {
	switch m := r.opts.mutate; {
	case m == mutEarly && dec.Delay > 0:
		dec.Delay /= 4
	case m == mutSpendAttempt && dec.Action == queuey.ActionDefer:
		dec.Successor.Attempt++
	case m == mutDeferPriority0 && dec.Action == queuey.ActionDefer:
		dec.Successor.Priority = 0
	case m == mutLoseRetry && dec.Action == queuey.ActionRetry:
		return "", nil
	case m == mutWrongReason && dec.Action == queuey.ActionDeadLetter:
		dec.Reason = "a reason nobody decided"
	}
	return settle.PublishSuccessor(r.bg, sub.back, q.cfg, dec, delivered)
}

// publishMalformed dead-letters a body that is not an envelope, verbatim.
func (r *runner) publishMalformed(w *worker, a *simAction) {
	d := a.Msg
	err := settle.PublishMalformed(r.bg, d.sub.back, w.q.cfg, d.Body())
	if nr := (*notRipe)(nil); errors.As(err, &nr) {
		// The dead-letter queue is young: dead-letter it once it is warm.
		act, gen := *a, w.gen
		r.clk.AfterFunc(nr.d, func() {
			if w.gen == gen {
				r.publishMalformed(w, &act)
			}
		})
		return
	}
	if err != nil {
		r.emit(Event{Kind: EvSettleFailed, Queue: w.q.spec.Name, Worker: w.idx, Detail: "malformed: " + settleFailure(err)})
	}
	var buf [2]simAction
	r.exec(w, w.core.Published(buf[:0], a.ID, err))
}

// ack acknowledges a settled delivery; the consumer must keep consuming
// after a malformed body.
func (r *runner) ack(w *worker, a *simAction) {
	d := a.Msg
	sub := d.sub
	if a.Malformed {
		if err := d.Ack(); err == nil {
			r.recycle(d)
		}
		if w.sub != sub || sub.ch.IsClosed() {
			r.violate(invDeadLetterReason, nil, "the consumer stopped after a malformed body")
		}
		return
	}
	j := d.j
	if a.Decision.Action == queuey.ActionAck {
		r.checkDecision(j, d.env, d.out, a.Decision)
	}
	if err := d.Ack(); err != nil {
		r.emit(Event{Kind: EvSettleFailed, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "ack: " + settleFailure(err)})
		return
	}
	sub.release(j.n)
	if r.opts.mutate != mutAckFirst { // there, the core publishes the successor after the ack
		r.recycle(d)
	}
	j.copies--
	j.returns = 0 // a successor is a new message, whose delivery count starts at 0
	r.emit(Event{Kind: EvAck, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx})
	if a.Decision.Action == queuey.ActionAck {
		r.end1(j, "succeeded", "")
	}
	r.retire(j)
}

// requeue returns a delivery whose settlement failed to its queue.
func (r *runner) requeue(w *worker, a *simAction) {
	d := a.Msg
	j := d.j // nil for a malformed body
	// basic.reject with requeue counts toward a quorum queue's delivery
	// limit on both profiles (as a return on 4.0, as a failed delivery on
	// 4.3; a nack would not on 4.3). Counted before the call, in which the
	// broker may dead-letter it.
	if j != nil {
		j.returns++
	}
	if err := d.Requeue(); err != nil {
		if j != nil {
			j.returns--
		}
		return // the channel is gone: the broker requeued it already
	}
	if j != nil {
		d.sub.release(j.n)
		r.emit(Event{Kind: EvRequeue, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx})
	}
	r.recycle(d)
}

// simDelivery is a delivery in a worker's hands: it settles as the
// backend's consumer does, and carries its handler run's state.
type simDelivery struct {
	cd  consume.Delivery // the backend's consumer core's delivery
	r   *runner
	w   *worker
	sub *subscription
	j   *job
	n   uint64
	env queuey.Envelope
	out outcome
	gen int           // the worker process's generation it was delivered in
	id  workercore.ID // its name in the worker's core
	run int           // the handler run it is, from 0
}

func (d *simDelivery) Body() []byte { return d.cd.D.Body }

func (d *simDelivery) Priority() uint8 { return d.cd.D.Priority }

func (d *simDelivery) Redelivered() bool { return d.cd.D.Redelivered }

func (d *simDelivery) Ack() error { return d.cd.Ack() }

func (d *simDelivery) Requeue() error { return d.cd.Requeue() }

func (d *simDelivery) Stale() bool { return d.cd.Stale() }

func (r *runner) newDelivery() *simDelivery {
	if n := len(r.freeDels); n > 0 {
		d := r.freeDels[n-1]
		r.freeDels = r.freeDels[:n-1]
		return d
	}
	return new(simDelivery)
}

// recycle takes back a delivery that has been settled and is referred to
// by nothing any more.
func (r *runner) recycle(d queuey.Delivery) {
	if sd, ok := d.(*simDelivery); ok && len(r.freeDels) < 1024 {
		r.broker.Reuse(&sd.cd.D) // its header table and body, for a later delivery
		*sd = simDelivery{}
		r.freeDels = append(r.freeDels, sd)
	}
}
