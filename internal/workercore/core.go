// Package workercore is the worker's core: everything between a delivery
// and its settlement, as a state machine with no goroutines, channels or
// clock of its own. It takes events (a delivery arrived, a handler returned,
// a publish was confirmed or failed, a timer fired, the connection was lost
// or came back, stop) and answers each with the actions to carry out, in
// order. This is the pattern of etcd raft's RawNode.
//
// Three shells drive the same Core:
//   - queuey.Worker.Run, which runs handlers and publishes on goroutines and
//     times RequeueDelay with its clock;
//   - package sim, which runs simulated handlers under a virtual clock, on
//     one goroutine;
//   - the properties' state machine, which runs one event at a time.
//
// The core's contracts (docs/worker-core.md):
//   - A job's successor (retry, deferral or dead letter) is published and
//     confirmed before the delivery is acknowledged: Ack is emitted only
//     after Published(id, nil).
//   - A delivery whose settlement failed is returned to its queue after
//     RequeueDelay, unacknowledged until then; at once when stopping.
//   - A delivery whose connection is gone is never settled: the broker has
//     requeued it already. Its handler's outcome is dropped (Drop), and
//     nothing is published for it.
//   - Once stopping, no handler starts: a delivery arriving then is requeued.
//
// The core is not safe for concurrent use; a shell that calls it from
// several goroutines serialises the calls.
package workercore

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ID names one delivery in the core, from Deliver until it is settled or
// dropped. IDs are assigned in delivery order from 1, so a run is
// deterministic.
type ID uint64

// Gen names what a delivery came on: a connection, or a subscription's
// channel. The shell numbers each one, says when it is up and when it is
// lost, and passes the number with every delivery. Several can be live at
// once (a worker's consumers, one channel each).
type Gen uint64

// Message is what the core needs of a delivery: its body, to decode.
type Message interface {
	Body() []byte
}

// Rules are the pure functions that give a job its meaning: how a body
// decodes, and what a handler's result means for the job. Package queuey
// supplies them (DecodeEnvelope and Decide).
type Rules[J, D any] interface {
	// Decode reads a delivery's body from queue q. An error means it is
	// malformed: it is dead-lettered verbatim.
	Decode(q int, body []byte) (J, error)
	// Decide is what result means for job, run from queue q, with u a
	// uniform draw in [0, 1) for jitter. publish says whether dec has a
	// successor to publish before the delivery is acknowledged.
	Decide(q int, job J, result error, u float64) (dec D, publish bool)
	// Timeout is how long a handler of queue q may run: the Delay of its
	// RunHandler.
	Timeout(q int) time.Duration
}

// Kind is what an action asks the shell to do.
type Kind int

const (
	// RunHandler: run Job's handler, with Delay as its timeout, then report
	// HandlerDone(ID, …). A handler that has not returned some grace after
	// its timeout may be reported HandlerAbandoned instead.
	RunHandler Kind = iota + 1
	// Publish: publish Decision (or, when Malformed, Msg's body verbatim to
	// the dead-letter queue) and wait for the broker's confirm, then
	// report Published(ID, err).
	Publish
	// Ack: acknowledge Msg. The delivery is settled.
	Ack
	// Requeue: return Msg to its queue (basic.reject with requeue). Err
	// says why its settlement failed, if it did.
	Requeue
	// StartTimer: after Delay, report TimerFired(ID).
	StartTimer
	// StopTimer: the timer of ID is no longer needed.
	StopTimer
	// Drop: ID's connection is gone, so the broker has requeued it; the
	// core forgets it and nothing is to be settled. Err says why.
	Drop
	// Done: the core is stopping and nothing is in flight.
	Done
	// Abandon: ID's handler overran its timeout and has not returned; its
	// job is settled without it (the Publish or Ack that follows).
	Abandon
	// Late: the handler of an abandoned job (Abandon) returned at last;
	// what it returned is dropped.
	Late
)

func (k Kind) String() string {
	switch k {
	case RunHandler:
		return "run-handler"
	case Publish:
		return "publish"
	case Ack:
		return "ack"
	case Requeue:
		return "requeue"
	case StartTimer:
		return "start-timer"
	case StopTimer:
		return "stop-timer"
	case Drop:
		return "drop"
	case Done:
		return "done"
	case Abandon:
		return "abandon"
	case Late:
		return "late"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Action is one thing for the shell to do.
type Action[M Message, J, D any] struct {
	Kind     Kind
	ID       ID
	Queue    int  // the queue index the delivery came from
	Gen      Gen  // the connection it came on
	Msg      M    // the delivery
	Job      J    // the decoded job (zero when Malformed)
	Decision D    // Publish, and Ack after a publish: the decision
	Decided  bool // Decision is set: the handler has returned
	// Malformed: the body did not decode. Publish then dead-letters it
	// verbatim.
	Malformed bool
	Delay     time.Duration // StartTimer: the wait; RunHandler: the handler's timeout
	Err       error         // Publish when Malformed: the decode error; Requeue, Drop: why
}

// ErrConnectionLost is the Err of a Drop: the delivery's connection went
// before it was settled.
var ErrConnectionLost = errors.New("workercore: the delivery's connection is gone; the broker has requeued it")

// Config configures a Core.
type Config struct {
	// RequeueDelay is how long a delivery whose settlement failed waits
	// before it is returned to its queue. Required: the shell applies its
	// own default.
	RequeueDelay time.Duration
}

type phase int

const (
	phRunning    phase = iota // the handler runs
	phPublishing              // the successor (or malformed body) is being published
	phWaiting                 // the settlement failed: waiting RequeueDelay
)

type entry[M Message, J, D any] struct {
	id        ID
	queue     int
	gen       Gen
	msg       M
	job       J
	dec       D
	decided   bool
	malformed bool
	phase     phase
	lost      bool // its connection went
}

type abandonedRun[J any] struct {
	queue int
	job   J
}

// Core is the worker's state machine. Make one with New.
type Core[M Message, J, D any] struct {
	rules    Rules[J, D]
	cfg      Config
	live     map[Gen]bool // connections whose deliveries can be settled
	next     ID
	inflight map[ID]*entry[M, J, D]
	// abandoned are the handlers still running whose jobs were settled
	// without them (HandlerAbandoned), with their queue and job.
	abandoned map[ID]abandonedRun[J]
	stopping  bool
	done      bool // Done has been emitted
	free      []*entry[M, J, D]
}

// New returns a core with no live connection: call ConnectionUp before
// the first delivery.
func New[M Message, J, D any](rules Rules[J, D], cfg Config) *Core[M, J, D] {
	if cfg.RequeueDelay <= 0 {
		panic("workercore: RequeueDelay must be positive")
	}
	return &Core[M, J, D]{rules: rules, cfg: cfg, live: map[Gen]bool{}, inflight: map[ID]*entry[M, J, D]{},
		abandoned: map[ID]abandonedRun[J]{}}
}

// Inflight is how many deliveries the core holds: handlers running,
// publishes awaited and requeues waiting.
func (c *Core[M, J, D]) Inflight() int { return len(c.inflight) }

// Stopping reports whether Stop has been called.
func (c *Core[M, J, D]) Stopping() bool { return c.stopping }

// ConnectionUp says that deliveries made on gen can be settled. A
// generation lost once never comes back: the shell numbers a new
// connection afresh.
func (c *Core[M, J, D]) ConnectionUp(gen Gen) {
	c.live[gen] = true
}

// ConnectionLost says that gen's connection is gone: the broker has
// requeued every delivery made on it. Those waiting to be requeued are
// dropped at once; those whose handler or publish is still running are
// dropped when it reports.
func (c *Core[M, J, D]) ConnectionLost(acts []Action[M, J, D], gen Gen) []Action[M, J, D] {
	delete(c.live, gen)
	// In ID order, so the actions are the same on every run.
	for _, id := range c.sortedIDs() {
		e := c.inflight[id]
		if e.gen != gen || e.lost {
			continue
		}
		e.lost = true
		if e.phase == phWaiting {
			acts, _ = c.emit(acts, StopTimer, e)
			acts = c.drop(acts, e)
		}
	}
	return c.maybeDone(acts)
}

// Decode is the rules' Decode: pure, and safe to call from any goroutine
// at any time. A shell that serialises its calls into the core decodes
// with it outside its lock, then calls DeliverDecoded.
func (c *Core[M, J, D]) Decode(q int, body []byte) (J, error) { return c.rules.Decode(q, body) }

// Deliver takes a delivery from queue q on connection gen. It answers
// RunHandler, Publish (a malformed body), Requeue (stopping), or Drop (gen
// is lost).
func (c *Core[M, J, D]) Deliver(acts []Action[M, J, D], q int, gen Gen, m M) []Action[M, J, D] {
	job, err := c.Decode(q, m.Body())
	return c.DeliverDecoded(acts, q, gen, m, job, err)
}

// DeliverDecoded is Deliver with m's body already decoded by Decode: job,
// or the error that makes it malformed.
func (c *Core[M, J, D]) DeliverDecoded(acts []Action[M, J, D], q int, gen Gen, m M, job J, err error) []Action[M, J, D] {
	c.next++
	e := c.newEntry()
	e.id, e.queue, e.gen, e.msg = c.next, q, gen, m
	switch {
	case !c.live[gen]:
		// Its connection went before it was even taken.
		e.lost = true
		acts, a := c.emit(acts, Drop, e)
		a.Err = ErrConnectionLost
		c.recycle(e)
		return acts
	case c.stopping:
		acts, _ = c.emit(acts, Requeue, e)
		c.recycle(e)
		return acts
	}
	c.inflight[e.id] = e
	if err != nil {
		e.malformed, e.phase = true, phPublishing
		acts, a := c.emit(acts, Publish, e)
		a.Err = err
		return acts
	}
	e.job = job
	acts, a := c.emit(acts, RunHandler, e)
	a.Delay = c.rules.Timeout(q)
	return acts
}

// HandlerDone reports that id's handler returned result; u is a uniform
// draw in [0, 1) for the retry jitter. It answers Ack, Publish (the
// successor), or Drop (the connection went meanwhile).
func (c *Core[M, J, D]) HandlerDone(acts []Action[M, J, D], id ID, result error, u float64) []Action[M, J, D] {
	if run, ok := c.abandoned[id]; ok {
		return c.late(acts, id, run)
	}
	e := c.running(id)
	if e.lost {
		return c.maybeDone(c.drop(acts, e))
	}
	dec, publish := c.Decide(e.queue, e.job, result, u)
	return c.decided(acts, e, dec, publish)
}

// Decide is the rules' Decide: pure, and safe to call from any goroutine
// at any time. A shell that serialises its calls into the core decides
// with it outside its lock (the job and queue are its RunHandler action's),
// then calls HandlerDecided.
func (c *Core[M, J, D]) Decide(q int, job J, result error, u float64) (D, bool) {
	return c.rules.Decide(q, job, result, u)
}

// HandlerDecided is HandlerDone with the decision already made by Decide.
func (c *Core[M, J, D]) HandlerDecided(acts []Action[M, J, D], id ID, dec D, publish bool) []Action[M, J, D] {
	if run, ok := c.abandoned[id]; ok {
		return c.late(acts, id, run)
	}
	e := c.running(id)
	if e.lost {
		return c.maybeDone(c.drop(acts, e))
	}
	return c.decided(acts, e, dec, publish)
}

// HandlerAbandoned reports that id's handler has overrun its timeout and
// its grace without returning: its job is settled as dec says (the rules'
// decision for a timed-out run), without waiting for it. It answers
// Abandon, then what HandlerDecided would; or nothing if the handler has
// returned meanwhile. When the handler does return, HandlerDone answers
// Late and nothing else.
func (c *Core[M, J, D]) HandlerAbandoned(acts []Action[M, J, D], id ID, dec D, publish bool) []Action[M, J, D] {
	e := c.inflight[id]
	if e == nil || e.phase != phRunning {
		return acts
	}
	c.abandoned[id] = abandonedRun[J]{queue: e.queue, job: e.job}
	acts, a := c.emit(acts, Abandon, e)
	a.Delay = c.rules.Timeout(e.queue)
	if e.lost {
		return c.maybeDone(c.drop(acts, e))
	}
	return c.decided(acts, e, dec, publish)
}

// Running returns id's RunHandler action again, if its handler is still
// running.
func (c *Core[M, J, D]) Running(id ID) (Action[M, J, D], bool) {
	e := c.inflight[id]
	if e == nil || e.phase != phRunning {
		return Action[M, J, D]{}, false
	}
	return Action[M, J, D]{Kind: RunHandler, ID: id, Queue: e.queue, Gen: e.gen, Msg: e.msg, Job: e.job,
		Delay: c.rules.Timeout(e.queue)}, true
}

// late answers the return of an abandoned handler.
func (c *Core[M, J, D]) late(acts []Action[M, J, D], id ID, run abandonedRun[J]) []Action[M, J, D] {
	delete(c.abandoned, id)
	return append(acts, Action[M, J, D]{Kind: Late, ID: id, Queue: run.queue, Job: run.job})
}

func (c *Core[M, J, D]) running(id ID) *entry[M, J, D] {
	e := c.inflight[id]
	if e == nil || e.phase != phRunning {
		panic(fmt.Sprintf("workercore: HandlerDone(%d) for a delivery whose handler is not running", id))
	}
	return e
}

func (c *Core[M, J, D]) decided(acts []Action[M, J, D], e *entry[M, J, D], dec D, publish bool) []Action[M, J, D] {
	if !publish {
		// Settled at once: the decision goes straight into the action,
		// with no copy kept in e.
		acts, a := c.emit(acts, Ack, e)
		a.Decision, a.Decided = dec, true
		c.settled(e)
		return c.maybeDone(acts)
	}
	e.dec, e.decided = dec, true
	e.phase = phPublishing
	acts, _ = c.emit(acts, Publish, e)
	return acts
}

// Published reports the broker's answer to id's publish: nil once it is
// confirmed. It answers Ack; or, on an error, StartTimer (RequeueDelay)
// or Requeue (stopping); or Drop (the connection went meanwhile: the
// successor may exist beside the broker's requeued original, a duplicate
// the drop explains).
func (c *Core[M, J, D]) Published(acts []Action[M, J, D], id ID, err error) []Action[M, J, D] {
	e := c.inflight[id]
	if e == nil || e.phase != phPublishing {
		panic(fmt.Sprintf("workercore: Published(%d) for a delivery with no publish in flight", id))
	}
	switch {
	case e.lost:
		return c.maybeDone(c.drop(acts, e))
	case err == nil:
		acts, _ = c.emit(acts, Ack, e)
		c.settled(e)
		return c.maybeDone(acts)
	case c.stopping:
		acts, a := c.emit(acts, Requeue, e)
		a.Err = err
		c.settled(e)
		return c.maybeDone(acts)
	}
	e.phase = phWaiting
	acts, a := c.emit(acts, StartTimer, e)
	a.Delay, a.Err = c.cfg.RequeueDelay, err
	return acts
}

// TimerFired reports that id's RequeueDelay has passed. It answers
// Requeue, or nothing if id was settled or dropped meanwhile.
func (c *Core[M, J, D]) TimerFired(acts []Action[M, J, D], id ID) []Action[M, J, D] {
	e := c.inflight[id]
	if e == nil || e.phase != phWaiting {
		return acts // requeued at Stop, or dropped with its connection
	}
	acts, _ = c.emit(acts, Requeue, e)
	c.settled(e)
	return c.maybeDone(acts)
}

// Stop starts a graceful stop: no handler starts from now on, requeues
// waiting for their delay happen at once, and Done follows once nothing is
// in flight.
func (c *Core[M, J, D]) Stop(acts []Action[M, J, D]) []Action[M, J, D] {
	c.stopping = true
	for _, id := range c.sortedIDs() {
		e := c.inflight[id]
		if e.phase != phWaiting {
			continue
		}
		acts, _ = c.emit(acts, StopTimer, e)
		acts, _ = c.emit(acts, Requeue, e)
		c.settled(e)
	}
	return c.maybeDone(acts)
}

func (c *Core[M, J, D]) drop(acts []Action[M, J, D], e *entry[M, J, D]) []Action[M, J, D] {
	acts, a := c.emit(acts, Drop, e)
	a.Err = ErrConnectionLost
	c.settled(e)
	return acts
}

func (c *Core[M, J, D]) maybeDone(acts []Action[M, J, D]) []Action[M, J, D] {
	if c.stopping && !c.done && len(c.inflight) == 0 {
		c.done = true
		acts = append(acts, Action[M, J, D]{Kind: Done})
	}
	return acts
}

// emit appends the action k of e to acts and returns it, to be completed
// in place: filling the slice's element rather than copying a built
// Action into it saves a copy of the job and the decision per action (the
// figure is BenchmarkCoreSettleSuccess's, in package queuey).
func (c *Core[M, J, D]) emit(acts []Action[M, J, D], k Kind, e *entry[M, J, D]) ([]Action[M, J, D], *Action[M, J, D]) {
	acts = append(acts, Action[M, J, D]{})
	a := &acts[len(acts)-1]
	a.Kind, a.ID, a.Queue, a.Gen, a.Msg = k, e.id, e.queue, e.gen, e.msg
	a.Job, a.Decided, a.Malformed = e.job, e.decided, e.malformed
	if e.decided {
		a.Decision = e.dec
	}
	return acts, a
}

// settled forgets e.
func (c *Core[M, J, D]) settled(e *entry[M, J, D]) {
	delete(c.inflight, e.id)
	c.recycle(e)
}

func (c *Core[M, J, D]) newEntry() *entry[M, J, D] {
	if n := len(c.free); n > 0 {
		e := c.free[n-1]
		c.free = c.free[:n-1]
		return e
	}
	return new(entry[M, J, D])
}

func (c *Core[M, J, D]) recycle(e *entry[M, J, D]) {
	*e = entry[M, J, D]{}
	if len(c.free) < 256 {
		c.free = append(c.free, e)
	}
}

// sortedIDs is the in-flight IDs in ascending order.
func (c *Core[M, J, D]) sortedIDs() []ID {
	ids := make([]ID, 0, len(c.inflight))
	for id := range c.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
