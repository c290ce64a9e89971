// Fault injection: crashes, dropped connections, refused hold queues,
// broker restarts and outages, and the reconnection loops that bring the
// producer and the workers back (internal/redial).

package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/redial"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

func (r *runner) fault(f Fault) {
	if f.Scheduler {
		r.schedFault(f)
		return
	}
	q := r.byName[f.Queue]
	switch f.Kind {
	case FaultCrash:
		w := q.workers[f.Worker]
		if w.up {
			w.restart = f.Restart.D()
			r.crash(w, "injected crash")
		}
	case FaultDrop:
		w := q.workers[f.Worker]
		if !w.up {
			return
		}
		r.emit(Event{Kind: EvDrop, Queue: q.spec.Name, Worker: w.idx})
		r.noteRequeues(w)
		r.broker.CloseConnection(w.conn, nil)
		// The backend learns of the drop on its publisher's goroutine;
		// until it has, a publish would still reach the broker (and bring
		// it up to the clock). Waiting for it keeps the run deterministic.
		<-w.rb.Done()
		w.up = false
		old := w.back
		r.followLoss(w, w.sub)
		r.followLoss(w, w.relaySub)
		w.sub, w.relaySub = nil, nil
		// The process lives on and reconnects after Restart; its handlers
		// still running finish and fail to settle. If one of them kills
		// the process first, the crash's own restart replaces this one.
		gen := w.gen
		r.clk.AfterFunc(f.Restart.D(), func() {
			_ = old.Close()
			if w.gen == gen {
				r.restart(w)
			}
		})
	case FaultRestart, FaultKill, FaultOutage:
		r.brokerDown(f)
	case FaultRefuseHold:
		ttl, _ := r.top.RetryTTL(f.TTL.D())
		// With the ladder no hold declares a queue: the squatter, under a
		// classic hold queue's name, is never asked for.
		r.refuseHold(q, r.top.HoldQueue(q.spec.Name, ttl), ttl, r.clk.Now().Add(f.For.D()))
	}
}

// crash kills a worker process: its handlers vanish with it and the broker
// requeues its unacknowledged deliveries when the connection drops.
func (r *runner) crash(w *worker, why string) {
	r.emit(Event{Kind: EvCrash, Queue: w.q.spec.Name, Worker: w.idx, Detail: why})
	w.gen++
	r.noteRequeues(w)
	r.broker.CloseConnection(w.conn, nil) // a no-op if a drop closed it already
	r.stopWorker(w)
	gen := w.gen
	r.clk.AfterFunc(w.restartAfter(), func() {
		if w.gen == gen { // not crashed again since: only the last crash restarts it
			r.restart(w)
		}
	})
}

// noteRequeues counts, for each job a dying connection holds, a return
// toward the quorum delivery limit and a possible duplicate.
func (r *runner) noteRequeues(w *worker) {
	if w.sub == nil {
		return
	}
	// Bring the broker up to now first: a hold expiring at this instant is
	// released, and may be delivered to this very worker, before the
	// connection closes. Deliveries the worker has not taken yet go back
	// with the connection too.
	r.broker.Queue(w.q.spec.Name)
	var d amqp.Delivery
	for w.sub.pending > 0 {
		if !receiveNow(&d, w.sub.in) {
			break
		}
		w.sub.pending--
		if j := r.job(jobNumber(d.MessageId)); j != nil {
			j.returns++
			j.explain++
			if !d.Redelivered && len(j.delivered) > 0 {
				// Checked against its expectation when the broker handed it
				// over; the worker will never decode it.
				j.delivered = popFront(j.delivered)
			}
		}
	}
	for _, n := range w.sub.held {
		if j := r.job(n); j != nil {
			j.returns++
			j.explain++
		}
	}
}

// restart has worker w's process connect again: its first attempt at
// once, then as the reconnection loop says while the broker is
// unreachable.
func (r *runner) restart(w *worker) {
	w.dials++
	w.dial = r.newLoop(uint64(w.q.idx)<<40 | uint64(w.idx)<<20 | w.dials)
	r.runWorkerLoop(w, w.dial, w.gen, w.dial.Start())
}

// connectWorker is one dial of worker w's reconnection loop.
func (r *runner) connectWorker(w *worker) error {
	if err := r.startWorker(w); err != nil {
		r.failf("restarting worker %d of %s: %v", w.idx, w.q.spec.Name, err)
		return nil
	}
	ev := Event{Kind: EvRestart, Queue: w.q.spec.Name, Worker: w.idx}
	if w.sub != nil && w.sub.gen > 1 {
		ev.Detail = fmt.Sprintf("resumed %s on channel %d", w.sub.tag, w.sub.gen)
	}
	r.emit(ev)
	r.checkConsuming(w)
	return nil
}

// checkConsuming is invariant 13, for a worker process that has just
// connected: the broker lists its consumer on its queue, and on the
// ladder's relay queue with a hold ladder. A process that reconnected
// resumes its subscriptions under their consumer tags (resume); one whose
// subscription did not resume would sit connected and idle while its
// queue fills.
func (r *runner) checkConsuming(w *worker) {
	check := func(queue string, s *consume.Sub) {
		if s == nil {
			r.violate(invConsuming, nil, fmt.Sprintf("worker %d of %s is connected with no subscription to %s", w.idx, w.q.spec.Name, queue))
			return
		}
		info, ok := r.broker.Queue(queue)
		if !ok || !slices.Contains(info.Consumers, s.Tag()) {
			r.violate(invConsuming, nil, fmt.Sprintf("worker %d of %s is connected, but the broker lists no consumer %s on %s: its subscription did not resume",
				w.idx, w.q.spec.Name, s.Tag(), queue))
		}
	}
	check(w.q.spec.Name, w.work)
	if w.relayWork != nil { // with a hold ladder
		check(r.relayName, w.relayWork)
	}
}

// brokerDown restarts the broker (FaultRestart), kills and starts it
// (FaultKill), or cuts it off (FaultOutage): every connection of queuey's
// goes, and dials fail until
// the broker is back. The producer and the workers then reconnect as a
// supervised backend does, after rabbitmq.Backoff's waits, drawn from the
// seed; each worker's core learns its connection is gone.
func (r *runner) brokerDown(f Fault) {
	span, what := f.For.D(), "outage"
	if f.Kind == FaultRestart || f.Kind == FaultKill {
		span, what = f.Restart.D(), f.Kind
	}
	if until := r.clk.Now().Add(span); until.After(r.unreachable) {
		r.unreachable = until
	}
	r.emit(Event{Kind: EvBrokerDown, Worker: -1, Detail: what + " for " + span.String()})
	var up []*worker
	for _, q := range r.queues {
		r.audit(q) // what was dead-lettered before: the audit channel may go
		for _, w := range q.workers {
			if w.up {
				r.noteRequeues(w)
				up = append(up, w)
			}
		}
	}
	r.schedBrokerDown(func() {
		if f.Kind == FaultRestart || f.Kind == FaultKill {
			r.restarting = true
			if f.Kind == FaultKill {
				r.broker.Crash()
			} else {
				r.broker.Restart()
			}
			r.restarting = false
			r.bootEnd = r.now() + r.bootSpan
			r.reconnectAdmin() // the harness's own connection, not queuey's: back at once
			return
		}
		// Closed one after another, a connection's returns may be handed
		// to a consumer whose connection closes next: bounces, as in a
		// restart.
		r.restarting = true
		for _, w := range up {
			r.broker.CloseConnection(w.conn, nil)
		}
		if !r.producerDown {
			r.broker.CloseConnection(r.producerConn, nil)
		}
		if r.per != nil {
			for _, p := range r.per.procs {
				if p.up {
					r.broker.CloseConnection(p.conn, nil)
				}
			}
		}
		r.restarting = false
	})
	for _, w := range up {
		r.connectionLost(w)
		if w.dial == nil { // up since the run began: its loop starts now
			w.dials++
			w.dial = r.newLoop(uint64(w.q.idx)<<40 | uint64(w.idx)<<20 | w.dials)
			w.dial.Start()
			w.dial.DialDone(nil, false)
		}
		r.runWorkerLoop(w, w.dial, w.gen, w.dial.Lost(errBrokerDown))
	}
	if !r.producerDown {
		// As for a dropped worker, wait for the backend to see it.
		<-r.producerBack.Done()
		_ = r.producerBack.Close()
		r.producerDown = true
		if r.producerDial == nil {
			r.producerGen++
			r.producerDial = r.newLoop(1<<62 | r.producerGen)
			r.producerDial.Start()
			r.producerDial.DialDone(nil, false)
		}
		r.runProducerLoop(r.producerDial, r.producerDial.Lost(errBrokerDown))
	}
	r.clk.AfterFunc(span, func() {
		if !r.clk.Now().Before(r.unreachable) {
			r.emit(Event{Kind: EvBrokerUp, Worker: -1})
		}
	})
}

// errBrokerDown is why connections go in a restart or an outage, and
// errUnreachable why dials fail until it is over.
var (
	errBrokerDown  = errors.New("sim: the broker restarts or is unreachable")
	errUnreachable = errors.New("sim: connection refused: the broker is unreachable")
)

// connectionLost is a worker process whose connection the broker closed:
// it waits to redial.
func (r *runner) connectionLost(w *worker) {
	<-w.rb.Done() // the backend learns of the close on its publisher's goroutine
	w.up = false
	r.followLoss(w, w.sub)
	r.followLoss(w, w.relaySub)
	w.sub, w.relaySub = nil, nil
	_ = w.back.Close()
}

// backoff is the reconnection loops' backoff: rabbitmq.Backoff's defaults.
var backoff = redial.Backoff{Initial: rabbitmq.DefaultBackoffInitial, Max: rabbitmq.DefaultBackoffMax}

// dialWatch is what invariant 9 knows of a process's reconnection: the
// wait its loop asked for last, and since when. A process that crashes
// and starts again gets a new loop, whose first dial needs no wait.
type dialWatch struct {
	loop    redial.Stepper
	waiting bool // loop asked for a wait and no dial has followed it
	from    time.Duration
	wait    time.Duration
}

// checkDial is invariant 9, for a process about to dial (ev is its loop's
// Connecting report): no dial storm. Every attempt but a process's first
// comes after a wait its loop asked for, exactly that wait after the
// request, and the wait is within the backoff's bound for the attempt.
// Full jitter allows any wait down to zero, so a single short wait proves
// nothing; a process that dials without waiting, or twice for one wait
// (two loops alive at once), or sooner than its wait, breaks it.
func (r *runner) checkDial(watch *dialWatch, loop redial.Stepper, ev redial.Event) {
	w := *watch
	*watch = dialWatch{loop: loop}
	switch {
	case w.loop != loop && ev.Attempt == 1 && ev.Delay == 0:
		// A new loop's first dial: at once.
	case w.loop != loop:
		r.violate(invReconnectBackoff, nil, fmt.Sprintf("a new loop's first dial is attempt %d after %s", ev.Attempt, ev.Delay))
	case !w.waiting:
		r.violate(invReconnectBackoff, nil, fmt.Sprintf("attempt %d dialled with no wait asked for before it", ev.Attempt))
	case ev.Delay != w.wait || r.now()-w.from != w.wait:
		r.violate(invReconnectBackoff, nil, fmt.Sprintf("attempt %d dialled %s after its loop asked for a wait of %s (reported %s)",
			ev.Attempt, r.now()-w.from, w.wait, ev.Delay))
	case ev.Delay < 0 || ev.Delay > backoff.Bound(ev.Attempt):
		r.violate(invReconnectBackoff, nil, fmt.Sprintf("attempt %d waited %s, outside the backoff's bound of %s", ev.Attempt, ev.Delay, backoff.Bound(ev.Attempt)))
	}
}

// newLoop is a reconnection loop with rabbitmq.Backoff's defaults, its
// jitter drawn from the seed under key (wrapped as a test asks,
// Options.wrapDial).
func (r *runner) newLoop(key uint64) redial.Stepper {
	var n uint64
	var loop redial.Stepper = redial.New(1, backoff,
		func() float64 { n++; return r.draw(key, n, streamBackoff) })
	if wrap := r.opts.wrapDial; wrap != nil {
		loop = wrap(loop)
	}
	return loop
}

// runLoop runs a reconnection loop through the loop rabbitmq's supervisor
// runs (redial.Drive), on the virtual clock: a Wait becomes a timer, a
// Dial fails while the broker is unreachable and otherwise calls connect.
// alive says whether the loop is still its process's (a crash replaces
// it); failed traces a failed attempt.
func (r *runner) runLoop(loop redial.Stepper, watch *dialWatch, acts []redial.Action, alive func() bool, connect func() error, failed func(attempt int)) {
	delay, wait, _ := redial.Drive(loop, acts, &loopShell{r: r, loop: loop, watch: watch, connect: connect, failed: failed})
	if !wait {
		return
	}
	*watch = dialWatch{loop: loop, waiting: true, from: r.now(), wait: delay}
	r.clk.AfterFunc(delay, func() {
		if alive() {
			r.runLoop(loop, watch, loop.TimerFired(), alive, connect, failed)
		}
	})
}

// loopShell is what a reconnection loop's dials and reports do in the
// simulation: invariant 9's check of every attempt, and the dial itself.
type loopShell struct {
	r       *runner
	loop    redial.Stepper
	watch   *dialWatch
	connect func() error
	failed  func(attempt int)
	attempt int
}

func (sh *loopShell) Report(ev redial.Event) {
	if ev.State == redial.Connecting {
		sh.attempt = ev.Attempt
		sh.r.checkDial(sh.watch, sh.loop, ev)
	}
}

func (sh *loopShell) Dial(int) (bool, error) {
	err := errUnreachable
	if !sh.r.clk.Now().Before(sh.r.unreachable) {
		err = sh.connect()
	}
	if err != nil {
		sh.failed(sh.attempt)
	}
	return false, err
}

// runWorkerLoop runs worker w's reconnection loop (its process of
// generation gen).
func (r *runner) runWorkerLoop(w *worker, loop redial.Stepper, gen int, acts []redial.Action) {
	r.runLoop(loop, &w.dialWatch, acts,
		func() bool { return w.gen == gen && w.dial == loop && !w.up },
		func() error { return r.connectWorker(w) },
		func(attempt int) {
			r.emit(Event{Kind: EvDialFailed, Queue: w.q.spec.Name, Worker: w.idx, Attempt: attempt})
		})
}

// runProducerLoop runs the producer's reconnection loop; once connected,
// the jobs that arrived meanwhile go out in order.
func (r *runner) runProducerLoop(loop redial.Stepper, acts []redial.Action) {
	r.runLoop(loop, &r.producerDialWatch, acts,
		func() bool { return r.producerDial == loop && r.producerDown },
		func() error {
			if err := r.connectProducer(); err != nil {
				r.failf("reconnecting the producer: %v", err)
				return nil
			}
			r.emit(Event{Kind: EvRestart, Worker: -1, Detail: "producer"})
			waiting := r.waiting
			r.waiting = nil
			for _, n := range waiting {
				if j := r.job(n); j != nil {
					r.enqueue(j.q, n)
				}
			}
			return nil
		},
		func(attempt int) { r.emit(Event{Kind: EvDialFailed, Worker: -1, Attempt: attempt}) })
}

// reconnectAdmin gives the harness a fresh admin channel after a restart,
// and audits the dead-letter queues on it again.
func (r *runner) reconnectAdmin() {
	conn, err := r.broker.Dial()
	if err == nil {
		r.adminConn = conn
		r.admin, err = conn.Channel()
	}
	if err != nil {
		r.failf("reconnecting the admin channel: %v", err)
		return
	}
	r.auditDue = true // what was dead-lettered while the admin channel was down
}

func (r *runner) refuseHold(q *simQueue, name string, ttl int64, until time.Time) {
	if !r.clk.Now().Before(until) {
		return
	}
	if _, exists := r.broker.Queue(name); exists {
		// In use: a real squatter would have to wait too. Try again soon.
		r.clk.AfterFunc(time.Second, func() { r.refuseHold(q, name, ttl, until) })
		return
	}
	r.squatted[name] = true // not one of queuey's hold queues: invariant 7 does not count it
	if _, err := r.admin.QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-message-ttl": ttl,
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q.spec.Name,
	}); err != nil {
		r.failf("squatting %s: %v", name, err)
		return
	}
	r.emit(Event{Kind: EvRefuse, Queue: name, Worker: -1, Detail: "on"})
	r.clk.AfterFunc(until.Sub(r.clk.Now()), func() {
		if _, err := r.admin.QueueDelete(name, false, true, false); err != nil {
			r.failf("removing the squatter %s: %v", name, err)
			return
		}
		delete(r.squatted, name)
		r.emit(Event{Kind: EvRefuse, Queue: name, Worker: -1, Detail: "off"})
	})
}

// settleFailure describes a failed broker call for the trace. Only what
// the broker decided synchronously goes in: a refusal's code and text. A
// call failing because its connection is gone says only that, since the
// backend's error text then depends on whether its publisher's watcher
// goroutine has seen the close yet.
func settleFailure(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		s := ae.Error()
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[:i]
		}
		return "refused: " + s
	}
	if errors.Is(err, consume.ErrSettled) {
		return "already settled"
	}
	if errors.Is(err, rabbitmq.ErrReturned) {
		return "returned: the queue does not exist"
	}
	return "the connection is gone"
}
