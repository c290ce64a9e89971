// The system under test: worker processes (a connection, the rabbitmq
// backend and its subscription, stepped) and each one's worker core, whose
// actions the product's executor carries out with the process as its
// shell (proc): handlers on the virtual clock, and every step traced and
// checked.

package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/execute"
	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// startWorker connects a worker and subscribes it to its queue.
func (r *runner) startWorker(w *worker) error {
	conn, err := r.broker.Dial()
	if err != nil {
		return err
	}
	w.conn = conn
	open := r.channels(conn)
	w.rb, err = rabbitmq.New(open, r.backendOptions(conn))
	if err != nil {
		return fmt.Errorf("sim: worker backend: %w", err)
	}
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
	if w.core == nil {
		r.newExecutor(w)
	}
	// The connections it lost: its core drops what it cannot settle any
	// more, and a handler still running reports to no one.
	lost := w.lost
	w.lost = w.lost[:0]
	w.x.Step(func(c execute.Core[*simDelivery], acts []simAction) []simAction {
		for _, g := range lost {
			acts = c.ConnectionLost(acts, g)
		}
		return acts
	})
	if w.work == nil && w.relayWork == nil {
		if err := r.subscribe(w, open); err != nil {
			return err
		}
	} else if err := r.resume(w, open); err != nil {
		return err
	}
	w.up = true
	return nil
}

// backendOptions are the options of a simulated process's backend on
// conn: the scenario's topology, and the virtual clock.
func (r *runner) backendOptions(conn *membroker.Connection) rabbitmq.Options {
	return rabbitmq.Options{Topology: r.top, ServerVersion: conn.ServerVersion(), Clock: r.clk}
}

// virtualDeadline is the context of every call the simulation makes into
// the product: never cancelled, with a deadline that is always the
// virtual now. The simulation runs on one goroutine and cannot wait, so
// it asks the product not to: a publish that would wait for its queue's
// hold ladder to warm up (rabbitmq.Topology.HoldWarmup) fails at once with
// a *rabbitmq.WarmupError saying until when, as it does for any caller
// whose deadline comes first, and the simulation publishes again then, on
// its clock.
type virtualDeadline struct {
	context.Context
	clk *Clock
}

func (c virtualDeadline) Deadline() (time.Time, bool) { return c.clk.Now(), true }

// warmingUp reports how long the backend that returned err would have
// waited for a hold ladder to warm up, if that is why it failed.
func (r *runner) warmingUp(err error) (time.Duration, bool) {
	if we, ok := errors.AsType[*rabbitmq.WarmupError](err); ok {
		return max(we.Ready.Sub(r.clk.Now()), 0), true
	}
	return 0, false
}

// stopWorker releases a worker's backend; its connection is already gone.
func (r *runner) stopWorker(w *worker) {
	w.up = false
	w.core, w.x, w.lost = nil, nil, nil // the process, and its core, died
	w.work, w.relayWork, w.reopenWork, w.reopenRelay = nil, nil, false, false
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
// wrapped as a test asks (sabotage.Set.Channel).
func (r *runner) channels(conn *membroker.Connection) func() (rabbitmq.Channel, error) {
	open := rabbitmq.Channels(conn.Channel)
	wrap := r.opts.Sabotage.Channel
	if wrap == nil {
		return open
	}
	return func() (rabbitmq.Channel, error) {
		ch, err := open()
		if err != nil {
			return nil, err
		}
		return wrap(ch), nil
	}
}

// simAction is one of a worker core's actions.
type simAction = settle.Action[*simDelivery]

// begin hands a delivery to its worker's executor: the product's own
// settlement logic (internal/workercore) decides everything from here, and
// the product's executor (internal/execute) carries out what it says, with
// the process as its shell (proc).
func (r *runner) begin(w *worker, sub *subscription, d *simDelivery) {
	d.r, d.w, d.sub, d.gen = r, w, sub, w.gen
	w.x.Deliver(0, sub.gen, d)
}

// proc is a worker process as the executor's shell: a handler runs for
// its drawn duration on the virtual clock, publishes go to the process's
// current backend (with the deliberate bug a test asks for), and every
// step is traced and checked.
type proc struct {
	r *runner
	w *worker
}

var _ execute.Shell[*simDelivery] = proc{}

// newExecutor starts w's process: its worker core and the executor that
// carries out the core's actions.
func (r *runner) newExecutor(w *worker) {
	w.core = settle.New[*simDelivery]([]queuey.QueueConfig{w.q.cfg}, workercore.Config{RequeueDelay: queuey.DefaultRequeueDelay})
	if wrap := r.opts.wrapCore; wrap != nil {
		w.core = wrap(w.core)
	}
	var back queuey.Backend = procBackend{r, w}
	if wrap := r.opts.Sabotage.Backend; wrap != nil {
		back = wrap(back)
	}
	w.x = execute.New[*simDelivery](r.bg, w.core, proc{r, w}, back, []queuey.QueueConfig{w.q.cfg})
}

// Now is the virtual time.
func (p proc) Now() time.Time { return p.r.clk.Now() }

// AfterFunc waits on the virtual clock; a process that died took its
// timers with it.
func (p proc) AfterFunc(d time.Duration, f func()) execute.Timer {
	w, gen := p.w, p.w.gen
	return p.r.clk.Stoppable(d, func() bool { return w.gen == gen }, f)
}

// Jitter draws an abandoned handler's retry jitter, as complete does.
func (p proc) Jitter(a simAction) float64 {
	d := a.Msg
	return p.r.draw(d.n, uint64(d.run+1), streamJitter)
}

// RunHandler starts a job's handler: its outcome is drawn, and it
// completes after its drawn duration.
func (p proc) RunHandler(a simAction) {
	r, w := p.r, p.w
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
	d.j, d.n, d.env, d.id, d.qgen, d.timeout = j, n, env, a.ID, a.Gen, a.Delay
	r.checkRun(j, env)
	d.out = r.outcomeOf(j, d.run)
	if to := a.Delay; to > 0 && d.out.duration > to {
		timedOut := outcome{result: &queuey.TimeoutError{Timeout: to, Err: context.DeadlineExceeded}, label: "timeout", duration: to}
		// A poison handler ignores its context: it crashes the process
		// when it ends, however long it takes.
		ignores := d.out.crash || r.draw(n, uint64(d.run), streamIgnore) < j.q.spec.Outcome.IgnoreContext
		switch {
		case !ignores:
			// The handler heeds its context: it returns at its queue's
			// timeout, and the run counts as timed out.
			d.out = timedOut
			r.res.TimedOut++
		case d.out.duration <= to+queuey.AbandonGrace:
			// It ignores its context but ends before it is abandoned: an
			// error after the deadline is a *TimeoutError, as in
			// Worker.Run. An ordinary failure is then a timed-out
			// attempt; a deferral or a Fatal inside keeps its meaning.
			if d.out.result != nil {
				d.out.result = &queuey.TimeoutError{Timeout: to, Err: d.out.result}
				if d.out.label == "retry" {
					d.out.label = "timeout"
					r.res.TimedOut++
				}
			}
		default:
			// It runs on: the executor abandons it AbandonGrace after the
			// timeout and settles the attempt as timed out; what it
			// returns at last reaches the core, which drops it, or it
			// crashes the process then.
			r.clk.afterFire(d.out.duration, &lateReturn{r: r, w: w, gen: w.gen, n: n, crash: d.out.crash,
				a: simAction{Kind: workercore.RunHandler, ID: a.ID, Gen: a.Gen, Msg: new(simDelivery), Job: env, Delay: to, Queue: a.Queue}})
			d.out = timedOut
			r.res.TimedOut++
			r.res.Abandoned++
			return
		}
	}
	r.clk.afterFire(d.out.duration, d)
}

// lateReturn is the return, at last, of a handler the worker abandoned.
// Its delivery has been settled (and perhaps recycled) since, so it
// carries a placeholder of its own.
type lateReturn struct {
	r     *runner
	w     *worker
	gen   int
	a     simAction
	n     uint64
	crash bool // a poison handler: it ends by crashing the process
}

func (l *lateReturn) fire() {
	if l.w.gen != l.gen {
		return // the process died with its handlers
	}
	if l.crash {
		l.r.emit(Event{Kind: EvOutcome, Job: l.n, Queue: l.w.q.spec.Name, Worker: l.w.idx, Attempt: l.a.Job.Attempt,
			Deferrals: l.a.Job.Deferrals, Detail: "crash (poison) after it was abandoned"})
		l.r.crash(l.w, "poison job "+strconv.FormatUint(l.n, 10))
		return
	}
	l.r.emit(Event{Kind: EvOutcome, Job: l.n, Queue: l.w.q.spec.Name, Worker: l.w.idx, Attempt: l.a.Job.Attempt,
		Deferrals: l.a.Job.Deferrals, Detail: "returned after it was abandoned"})
	l.w.x.HandlerDone(&l.a, nil, 0)
}

// fire is the end of a delivery's handler run.
func (d *simDelivery) fire() { d.r.complete(d) }

// complete reports a handler's result to its worker's executor, unless
// the process died meanwhile (its core with it) or the handler crashes it.
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
	if r.job(d.n) != d.j && d.sub == w.sub && !d.sub.ch.IsClosed() {
		// The job ended while this run went on, its delivery still held:
		// the broker took it back and another run settled it (invariant
		// 11 has flagged the repeat). Its record may be another job's now.
		r.violate(invAttemptsBounded, nil, fmt.Sprintf("job %d: a run ended after the job had ended elsewhere", d.n))
		return
	}
	a := simAction{Kind: workercore.RunHandler, ID: d.id, Gen: d.qgen, Msg: d, Job: d.env, Delay: d.timeout}
	w.x.HandlerDone(&a, d.out.result, r.draw(d.n, uint64(d.run+1), streamJitter))
}

// Before records what the invariants need ahead of a step.
func (p proc) Before(a simAction) {
	r, w, d := p.r, p.w, a.Msg
	switch a.Kind {
	case workercore.Publish:
		if a.Malformed {
			return
		}
		if !d.publishing {
			d.publishing, d.issued = true, r.now()
		}
		r.beforePublish(w, &a, d.issued)
	case workercore.Ack:
		if d.acked {
			return // a second acknowledgement: only a broken core asks for one
		}
		if d.sub != w.sub || r.job(d.n) != d.j {
			// Its connection went before the core heard (it hears as the
			// process reconnects), or the broker closed its channel: the
			// ack fails, and the job, requeued by the broker, may have
			// ended since and its record been reused.
			d.gone = true
			return
		}
		if !a.Malformed && a.Decision.Action == queuey.ActionAck {
			r.checkDecision(d.j, d.env, d.out, a.Decision)
		}
	case workercore.Requeue:
		if d.sub != w.sub {
			d.gone = true // as for an ack
			return
		}
		// basic.reject with requeue counts toward a quorum queue's
		// delivery limit on both profiles (as a return on 4.0, as a failed
		// delivery on 4.3; a nack would not on 4.3). Counted before the
		// call, in which the broker may dead-letter it.
		if d.j != nil {
			d.j.returns++
		}
	case workercore.Drop:
		// Not recycled: rare, and a broken core (settleStale) may still
		// settle it.
		r.emit(Event{Kind: EvSettleFailed, Job: d.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "its connection is gone: outcome dropped"})
	}
}

// After records how a step went.
func (p proc) After(a simAction, rerouted string, err error) time.Duration {
	r, w := p.r, p.w
	switch a.Kind {
	case workercore.Publish:
		if a.Malformed {
			return r.afterMalformed(w, &a, err)
		}
		return r.afterPublish(w, &a, rerouted, err)
	case workercore.Ack:
		r.acked(w, &a, err)
		r.checkChannel(w, a.Msg.sub)
	case workercore.Requeue:
		r.requeued(&a, err)
		r.checkChannel(w, a.Msg.sub)
	}
	return 0
}

// checkChannel checks that a settlement on sub did not make the broker
// close its channel, while its process and connection live (10).
func (r *runner) checkChannel(w *worker, sub *subscription) {
	if sub == w.sub && !sub.dead && !sub.closedByBroker && sub.ch.IsClosed() {
		sub.closedByBroker = true
		r.violate(invChannelKept, nil, fmt.Sprintf("worker %d: the broker closed its consumer's channel after a settlement", w.idx))
	}
}

// beforePublish checks the successor the core decided and notes what the
// broker's events during the publish must match: a settlement the core
// issued at issued, earlier than now when the hold waited for the
// ladder's warm-up, which then counts in the added wait.
func (r *runner) beforePublish(w *worker, a *simAction, issued time.Duration) {
	d, env, dec := a.Msg, a.Job, a.Decision
	if d.sub != w.sub {
		// The core must drop the outcome of a delivery whose connection
		// went: the broker has requeued it, so a successor would be a
		// second copy of the job.
		r.violate(invConservation, r.job(d.n), fmt.Sprintf("job %d: its worker published a successor for a delivery of a connection that is gone", d.n))
		// Refused, so that the run goes on: the job may have ended, and
		// its record been reused, since.
		d.gone, r.refuse = true, true
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
	if dec.Action == queuey.ActionRetry || dec.Action == queuey.ActionDefer {
		// Expected before the publish: a successor with no delay goes
		// straight to the work queue and may be delivered during the call.
		j.expect = append(j.expect, expectation{
			attempt: dec.Successor.Attempt, deferrals: dec.Successor.Deferrals, priority: dec.Successor.Priority,
			notBefore: cur.issued + dec.Delay, deferred: dec.Action == queuey.ActionDefer,
		})
	}
	r.cur, r.curSet = cur, true
}

// afterPublish records the broker's answer to a successor's publish. A
// backend that would have waited for its ladder to warm up asks for the
// publish again once the wait is over on the virtual clock.
func (r *runner) afterPublish(w *worker, a *simAction, rerouted string, err error) time.Duration {
	d, dec := a.Msg, a.Decision
	j := d.j
	r.cur, r.curSet, r.refuse = settling{}, false, false
	if d.gone {
		return 0
	}

	held := dec.Action == queuey.ActionRetry || dec.Action == queuey.ActionDefer
	if wait, ok := r.warmingUp(err); ok {
		if held {
			j.expect = j.expect[:len(j.expect)-1]
		}
		return wait
	}
	d.publishing = false
	switch {
	case err != nil:
		if held {
			j.expect = j.expect[:len(j.expect)-1]
		}
		r.emit(Event{Kind: EvSettleFailed, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: settleFailure(err)})
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
	return 0
}

// afterMalformed records the dead-lettering of a body that is not an
// envelope; the dead-letter queue may be too young yet (warmingUp).
func (r *runner) afterMalformed(w *worker, a *simAction, err error) time.Duration {
	if wait, ok := r.warmingUp(err); ok {
		return wait
	}
	if err != nil {
		r.emit(Event{Kind: EvSettleFailed, Queue: w.q.spec.Name, Worker: w.idx, Detail: "malformed: " + settleFailure(err)})
	}
	return 0
}

// acked records an acknowledgement; the consumer must keep consuming
// after a malformed body.
func (r *runner) acked(w *worker, a *simAction, err error) {
	d := a.Msg
	sub := d.sub
	if d.acked {
		// The consumer's core must refuse it: on the broker, an unknown
		// delivery tag closes the channel, and requeues every job on it.
		r.emit(Event{Kind: EvSettleFailed, Job: d.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "second ack: " + settleFailure(err)})
		return
	}
	if err == nil {
		d.acked = true
	}
	if d.gone {
		if err == nil {
			r.violate(invConservation, nil, fmt.Sprintf("job %d: acknowledged on a connection that is gone", d.n))
		}
		r.emit(Event{Kind: EvSettleFailed, Job: d.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "its connection is gone: ack failed"})
		return
	}
	if a.Malformed {
		if err == nil && !r.opts.keepsDeliveries() {
			r.recycle(d)
		}
		if w.sub != sub || sub.ch.IsClosed() {
			r.violate(invDeadLetterReason, nil, "the consumer stopped after a malformed body")
		}
		return
	}
	j := d.j

	if err != nil {
		r.emit(Event{Kind: EvSettleFailed, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "ack: " + settleFailure(err)})
		return
	}
	sub.release(j.n)
	if !r.opts.keepsDeliveries() { // under those, the core may settle it again
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

// requeued records the return of a delivery whose settlement failed.
func (r *runner) requeued(a *simAction, err error) {
	d := a.Msg
	j := d.j // nil for a malformed body
	if d.gone {
		return
	}
	if err != nil {
		if j != nil {
			j.returns--
		}
		return // the channel is gone: the broker requeued it already
	}
	if j != nil {
		d.sub.release(j.n)
		j.requeues++
		r.emit(Event{Kind: EvRequeue, Job: j.n, Queue: d.w.q.spec.Name, Worker: d.w.idx})
	}
	r.recycle(d)
}

// procBackend is what a process's executor publishes through: the
// process's current backend (it is made afresh on each reconnection),
// wrapped as a test asks (sabotage.Set.Backend).
type procBackend struct {
	r *runner
	w *worker
}

func (b procBackend) Declare(ctx context.Context, queues ...queuey.QueueConfig) error {
	return b.w.back.Declare(ctx, queues...)
}

// errRefused is the answer to a publish the invariants already flagged.
var errRefused = errors.New("sim: refused: a successor of a delivery whose connection is gone")

func (b procBackend) Publish(ctx context.Context, env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) error {
	if b.r.refuse {
		return errRefused
	}
	return b.w.back.Publish(ctx, env, hold, kind)
}

func (b procBackend) DeadLetter(ctx context.Context, queue string, body []byte, reason string, attempts int) error {
	if b.r.refuse {
		return errRefused
	}
	return b.w.back.DeadLetter(ctx, queue, body, reason, attempts)
}

func (b procBackend) Consume(ctx context.Context, queue string, prefetch int) (queuey.Consumer, error) {
	return b.w.back.Consume(ctx, queue, prefetch)
}

func (b procBackend) Close() error { return nil } // the process's backend is closed with its connection

// simDelivery is a delivery in a worker's hands: it settles as the
// backend's consumer does, and carries its handler run's state.
type simDelivery struct {
	cd   consume.Delivery // the backend's consumer core's delivery
	r    *runner
	w    *worker
	sub  *subscription
	j    *job
	n    uint64
	env  queuey.Envelope
	out  outcome
	gen  int            // the worker process's generation it was delivered in
	id   workercore.ID  // its name in the worker's core
	qgen workercore.Gen // the connection it came on, in the core's numbering
	// timeout is its queue's handler timeout, its RunHandler's Delay
	timeout time.Duration
	run     int // the handler run it is, from 0
	// publishing is set while its successor's publish is under way, which
	// the core issued at issued (it may wait for the ladder's warm-up).
	publishing bool
	issued     time.Duration
	// gone: the core settled it after its connection went, which only a
	// broken core does; the invariants have flagged it.
	gone bool
	// acked: acknowledged, which a broken core may ask for again.
	acked bool
}

func (d *simDelivery) Body() []byte { return d.cd.D.Body }

func (d *simDelivery) Priority() uint8 { return d.cd.D.Priority }

func (d *simDelivery) Redelivered() bool { return d.cd.D.Redelivered }

func (d *simDelivery) Ack() error { return d.r.settler.Ack(&d.cd) }

func (d *simDelivery) Requeue() error { return d.r.settler.Requeue(&d.cd) }

func (d *simDelivery) Stale() bool { return d.r.settler.Stale(&d.cd) }

// coreSettler settles a delivery through the consumer's core, as
// rabbitmq's consumer does.
type coreSettler struct{}

func (coreSettler) Ack(d *consume.Delivery) error     { return d.Ack() }
func (coreSettler) Requeue(d *consume.Delivery) error { return d.Requeue() }
func (coreSettler) Stale(d *consume.Delivery) bool    { return d.Stale() }

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
