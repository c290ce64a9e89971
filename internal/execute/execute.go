// Package execute carries out a worker core's actions (internal/settle's
// Core): it runs what the core says, in order, feeds each outcome back,
// and keeps the timers the core asks for. queuey's Worker.Run, the
// simulator and the property tests all carry out actions through it; what
// differs between them is a Shell: how handlers are scheduled, how time
// passes, and what each records or logs around an action
// (docs/worker-core.md, "One executor").
//
// An Executor is safe for concurrent use: calls into the core are
// serialised under its lock, and actions are carried out outside it, on
// the calling goroutine.
package execute

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

// Msg is a delivery the executor settles: contract.Delivery's methods.
type Msg interface {
	Body() []byte
	Ack() error
	Requeue() error
}

// Action is one of a core's actions.
type Action[M Msg] = settle.Action[M]

// Core is the worker's core the executor drives: *settle.Core[M], the
// product's (internal/workercore with the settlement rules). A test that
// proves a check fires wraps one in its own code and rewrites the actions
// it answers; nothing in the core exists for that.
//
// On the frequent events the executor calls the product's core as the
// concrete type, with an action buffer on its stack: through the
// interface the buffer escapes to the heap, which cost 2 allocations and
// 1.8 kB a job, and 23 to 36 % more time per job on membroker
// (BenchmarkConsume, impl=queuey, five alternating rounds, 2026-12-06);
// called directly, 11 allocations a job as before the interface, and a
// geometric mean of paired ratios of 0.99 (six rounds). A wrapped core is
// called through the interface, with no buffer. A variable shared by the
// two ways makes the buffer escape too: each way has its own.
type Core[M Msg] interface {
	Decode(q int, body []byte) (envelope.Envelope, error)
	DeliverDecoded(acts []Action[M], q int, gen workercore.Gen, m M, job envelope.Envelope, err error) []Action[M]
	Decide(q int, job envelope.Envelope, result error, u float64) (settle.Decision, bool)
	HandlerDecided(acts []Action[M], id workercore.ID, dec settle.Decision, publish bool) []Action[M]
	HandlerAbandoned(acts []Action[M], id workercore.ID, dec settle.Decision, publish bool) []Action[M]
	Running(id workercore.ID) (Action[M], bool)
	Published(acts []Action[M], id workercore.ID, err error) []Action[M]
	TimerFired(acts []Action[M], id workercore.ID) []Action[M]
	ConnectionUp(gen workercore.Gen)
	ConnectionLost(acts []Action[M], gen workercore.Gen) []Action[M]
	Stop(acts []Action[M]) []Action[M]
}

var _ Core[contract.Delivery] = (*settle.Core[contract.Delivery])(nil)

// Shell is what differs between the executors' users.
type Shell[M Msg] interface {
	// RunHandler starts the handler of a's job, whose context ends after
	// a.Delay, its queue's timeout. Once it has returned, the shell calls
	// Executor.HandlerDone with a: at once, on the calling goroutine
	// (Worker.Run), or later on its clock (the simulator). One that has
	// not returned contract.AbandonGrace after its timeout is abandoned:
	// the executor settles its job as timed out, and HandlerDone answers
	// a Late action when it returns at last.
	RunHandler(a Action[M])
	// Jitter is a uniform draw in [0, 1) for the retry of a's job, whose
	// handler was abandoned.
	Jitter(a Action[M]) float64
	// Now is the time on the shell's clock.
	Now() time.Time
	// AfterFunc calls f after d on the shell's clock, on a goroutine of
	// the shell's choosing, unless the Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
	// Before is told of a Publish, Ack, Requeue, StartTimer, Drop, Abandon
	// or Late just before the executor carries it out (the last three are
	// only to be told: a shell logs them, and Worker.Run gives an
	// abandoned handler's pool another goroutine).
	Before(a Action[M])
	// After is told how a Publish, Ack or Requeue went: rerouted is the
	// dead-letter reason of a retry or deferral no hold could take
	// (settle.PublishSuccessor), err the broker's answer. For a Publish,
	// a positive again asks the executor to publish again after that long
	// instead of reporting err to the core: the simulator's backend cannot
	// block while its hold ladder warms up.
	After(a Action[M], rerouted string, err error) (again time.Duration)
}

// Timer is a call AfterFunc scheduled: Stop cancels it, and reports
// whether it did. *time.Timer and *clock.Timer are Timers; an interface,
// not a func, so that a shell hands its timer back without allocating a
// method value for every handler run.
type Timer interface{ Stop() bool }

// ErrStale is what the core hears of a publish that was to be tried again
// once its delivery had gone stale: the broker has requeued the job.
var ErrStale = errors.New("execute: the delivery's channel closed before its successor could be published")

// staler is a delivery that can tell when it can no longer be settled,
// as internal/consume's can.
type staler interface{ Stale() bool }

// Executor carries out the actions of one worker core.
type Executor[M Msg] struct {
	shell   Shell[M]
	backend contract.Backend
	queues  []contract.QueueConfig
	ctx     context.Context // publishes'

	mu       sync.Mutex
	core     Core[M]
	timers   map[workercore.ID]Timer    // RequeueDelay's
	watches  []watch                    // running handlers, by queue (deadline.go)
	finished map[workercore.ID]struct{} // returned, still behind the head of their watch
	// overdueIDs were taken off their watch to be abandoned, and have not
	// returned yet.
	overdueIDs map[workercore.ID]struct{}
	closed     bool
}

// New returns an executor of core's actions for the listed queues (by the
// core's queue index), publishing through backend with ctx.
func New[M Msg](ctx context.Context, core Core[M], shell Shell[M], backend contract.Backend, queues []contract.QueueConfig) *Executor[M] {
	return &Executor[M]{shell: shell, backend: backend, queues: queues, ctx: ctx, core: core,
		timers: map[workercore.ID]Timer{}, watches: make([]watch, len(queues)), finished: map[workercore.ID]struct{}{},
		overdueIDs: map[workercore.ID]struct{}{}}
}

// Step calls f with the core under the executor's lock and carries out
// the actions it returns: for the shells' rarer events (a lost
// connection, stopping). f appends to acts, which may be nil.
//
// The frequent events have methods of their own (Deliver, HandlerDecided
// and the executor's own Published and TimerFired), whose action buffer
// stays on the stack: through f it would escape, and allocating it cost
// the default queuey-sim run a third more CPU (docs/worker-core.md, "One
// executor").
func (x *Executor[M]) Step(f func(core Core[M], acts []Action[M]) []Action[M]) {
	x.mu.Lock()
	acts := f(x.core, nil)
	x.mu.Unlock()
	x.exec(acts)
}

// Decode decodes m's body as the core's rules do, for DeliverDecoded
// inside a Step: it needs no lock.
func (x *Executor[M]) Decode(q int, m M) (envelope.Envelope, error) {
	return x.core.Decode(q, m.Body())
}

// Deliver hands the core delivery m of queue q, which came on gen, and
// carries out what it says. The body is decoded outside the lock.
func (x *Executor[M]) Deliver(q int, gen workercore.Gen, m M) {
	job, err := x.Decode(q, m)
	x.DeliverDecoded(q, gen, m, job, err)
}

// DeliverDecoded is Deliver for a body the shell has decoded (Decode).
func (x *Executor[M]) DeliverDecoded(q int, gen workercore.Gen, m M, job envelope.Envelope, err error) {
	var buf [2]Action[M]
	x.mu.Lock()
	var acts []Action[M]
	if c, ok := x.core.(*settle.Core[M]); ok {
		acts = c.DeliverDecoded(buf[:0], q, gen, m, job, err)
	} else {
		acts = x.core.DeliverDecoded(nil, q, gen, m, job, err)
	}
	x.mu.Unlock()
	x.exec(acts)
}

// HandlerDone is the end of the handler a RunHandler action a started:
// result is what it returned, u a uniform draw in [0, 1) for a retry's
// jitter. It is Decide, then HandlerDecided.
func (x *Executor[M]) HandlerDone(a *Action[M], result error, u float64) {
	dec, publish := x.Decide(a, result, u)
	x.HandlerDecided(a, dec, publish)
}

// Decide is what result means for a's job (settle.Decide), the failure
// recorded in its successor at the shell's time (settle.Record): publish
// says whether it has a successor to publish. A shell that wants to see or
// stamp the decision (Worker.Run's observer) calls Decide and
// HandlerDecided itself.
func (x *Executor[M]) Decide(a *Action[M], result error, u float64) (dec settle.Decision, publish bool) {
	dec, publish = x.core.Decide(a.Queue, a.Job, result, u)
	return settle.Record(dec, a.Job.Attempt, x.shell.Now()), publish
}

// HandlerDecided settles a's job as dec says. A delivery whose channel has
// closed cannot be settled: the broker has requeued it, and a successor
// published now would run beside it, so its connection is reported lost
// first, whatever the shell has heard (Worker.Run's consumers tell of a
// lost channel on another goroutine, and the simulator's only when its
// process reconnects). An acknowledgement needs no such care: on a closed
// channel it fails, and the broker has the job.
func (x *Executor[M]) HandlerDecided(a *Action[M], dec settle.Decision, publish bool) {
	stale := false
	if publish {
		if s, ok := any(a.Msg).(staler); ok {
			stale = s.Stale()
		}
	}
	var buf [2]Action[M]
	x.mu.Lock()
	if a.Delay > 0 {
		x.finish(a.Queue, a.ID)
	}
	if c, ok := x.core.(*settle.Core[M]); ok {
		acts := buf[:0]
		if stale {
			acts = c.ConnectionLost(acts, a.Gen)
		}
		acts = c.HandlerDecided(acts, a.ID, dec, publish)
		x.mu.Unlock()
		x.exec(acts)
		return
	}
	var acts []Action[M] // a wrapped core: through the interface, no buffer
	if stale {
		acts = x.core.ConnectionLost(acts, a.Gen)
	}
	acts = x.core.HandlerDecided(acts, a.ID, dec, publish)
	x.mu.Unlock()
	x.exec(acts)
}

// exec carries out acts in order, on the calling goroutine. The shell is
// handed each action by value: a pointer into acts would make every
// buffer of actions escape to the heap.
func (x *Executor[M]) exec(acts []Action[M]) {
	for i := range acts {
		a := &acts[i]
		switch a.Kind {
		case workercore.RunHandler:
			if a.Delay > 0 {
				x.mu.Lock()
				x.start(a.Queue, a.ID, a.Delay)
				x.mu.Unlock()
			}
			x.shell.RunHandler(*a)
		case workercore.Publish:
			x.publish(a)
		case workercore.Ack:
			x.shell.Before(*a)
			x.shell.After(*a, "", a.Msg.Ack())
		case workercore.Requeue:
			x.shell.Before(*a)
			x.shell.After(*a, "", a.Msg.Requeue())
		case workercore.StartTimer:
			x.shell.Before(*a)
			id := a.ID
			x.mu.Lock()
			x.timers[id] = x.shell.AfterFunc(a.Delay, func() { x.timerFired(id) })
			x.mu.Unlock()
		case workercore.StopTimer:
			x.mu.Lock()
			if t := x.timers[a.ID]; t != nil {
				t.Stop()
				delete(x.timers, a.ID)
			}
			x.mu.Unlock()
		case workercore.Drop, workercore.Abandon, workercore.Late:
			x.shell.Before(*a)
		}
	}
}

// abandon settles the job of id, whose handler has overrun its timeout and
// its grace, as timed out, unless it has returned meanwhile.
func (x *Executor[M]) abandon(id workercore.ID) {
	x.mu.Lock()
	a, ok := x.core.Running(id)
	x.mu.Unlock()
	if !ok {
		return
	}
	dec, publish := x.core.Decide(a.Queue, a.Job, &contract.TimeoutError{Timeout: a.Delay}, x.shell.Jitter(a))
	dec = settle.Record(dec, a.Job.Attempt, x.shell.Now())
	// As in HandlerDecided: a successor for a delivery whose channel has
	// closed would run beside the copy the broker requeued.
	stale := false
	if publish {
		if s, ok := any(a.Msg).(staler); ok {
			stale = s.Stale()
		}
	}
	var buf [2]Action[M]
	x.mu.Lock()
	if c, ok := x.core.(*settle.Core[M]); ok {
		acts := buf[:0]
		if stale {
			acts = c.ConnectionLost(acts, a.Gen)
		}
		acts = c.HandlerAbandoned(acts, id, dec, publish)
		x.mu.Unlock()
		x.exec(acts)
		return
	}
	var acts []Action[M] // a wrapped core: through the interface, no buffer
	if stale {
		acts = x.core.ConnectionLost(acts, a.Gen)
	}
	acts = x.core.HandlerAbandoned(acts, id, dec, publish)
	x.mu.Unlock()
	x.exec(acts)
}

// timerFired is the end of id's RequeueDelay.
func (x *Executor[M]) timerFired(id workercore.ID) {
	var buf [2]Action[M]
	x.mu.Lock()
	delete(x.timers, id)
	var acts []Action[M]
	if c, ok := x.core.(*settle.Core[M]); ok {
		acts = c.TimerFired(buf[:0], id)
	} else {
		acts = x.core.TimerFired(nil, id)
	}
	x.mu.Unlock()
	x.exec(acts)
}

// publish publishes a's successor (or its malformed body) and reports the
// broker's answer to the core, or publishes again when the shell asks.
func (x *Executor[M]) publish(a *Action[M]) {
	x.shell.Before(*a)
	q := x.queues[a.Queue]
	var rerouted string
	var err error
	if a.Malformed {
		err = settle.PublishMalformed(x.ctx, x.backend, q, a.Msg.Body())
	} else {
		rerouted, err = settle.PublishSuccessor(x.ctx, x.backend, q, a.Decision, a.Msg.Body())
	}
	if again := x.shell.After(*a, rerouted, err); again > 0 {
		act := *a
		x.shell.AfterFunc(again, func() {
			if s, ok := any(act.Msg).(staler); ok && s.Stale() {
				x.published(act.ID, ErrStale)
				return
			}
			x.publish(&act)
		})
		return
	}
	x.published(a.ID, err)
}

func (x *Executor[M]) published(id workercore.ID, err error) {
	var buf [2]Action[M]
	x.mu.Lock()
	var acts []Action[M]
	if c, ok := x.core.(*settle.Core[M]); ok {
		acts = c.Published(buf[:0], id, err)
	} else {
		acts = x.core.Published(nil, id, err)
	}
	x.mu.Unlock()
	x.exec(acts)
}
