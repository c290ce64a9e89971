// Package schedshell carries out what the periodic scheduler's core
// (internal/schedcore) asks, one action at a time, on one goroutine: the
// tokens it holds, the ticks it enqueues, the tokens it publishes and
// acknowledges, and the lost channels it tells the core of
// (docs/periodic.md). It starts no goroutine and reads no clock of its
// own: Env says how time passes, how a token is published and where ticks
// are enqueued. rabbitmq.Scheduler.Run drives a Shell from its goroutine,
// on its backend; the simulator drives the same Shell on its one
// goroutine and virtual clock.
package schedshell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/queuey/queuey/internal/schedcore"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Prefetch is how many tokens a leader may hold before it acknowledges
// the surplus: a group's processes offer about one a Refresh each. A
// process subscribes to its group's election queue with it.
const Prefetch = 100

// ActionTimeout bounds one publish or enqueue: a confirm that never comes
// must not stop the schedule for good.
const ActionTimeout = 30 * time.Second

// RetryDelay is how long a scheduler waits before it tries a failed
// action again.
const RetryDelay = time.Second

// Queue is the election queue of group.
func Queue(group string) string { return "queuey.scheduler." + group }

// QueueArgs are the election queue's declaration arguments: durable
// quorum, single active consumer, and no delivery limit, so that a token
// returned by every leader that died holding it is not dropped after its
// 21st return (docs/rabbitmq-semantics.md §5.1).
func QueueArgs() amqp.Table {
	return amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true, "x-delivery-limit": -1}
}

// Job is a schedule and how to make its ticks' jobs: rabbitmq.PeriodicJob.
type Job struct {
	Name          string
	Every, Offset time.Duration
	Args          func(tick time.Time) queuey.JobArgs
	Options       []queuey.EnqueueOption
}

// Env is what the shell's actions need of the process it runs in.
type Env struct {
	// Now is the process's clock.
	Now func() time.Time
	// Wake asks for a Time event at at, replacing any earlier request.
	Wake func(at time.Time)
	// PublishToken publishes a token into the election queue, persistent,
	// and returns once the broker has confirmed it.
	PublishToken func(ctx context.Context, body []byte) error
	// Producer enqueues the ticks.
	Producer *queuey.Producer
	// Lost, if not nil, yields the generation of each channel the
	// subscription to the election queue loses (a supervised consumer's).
	Lost <-chan uint64
	// Log receives INFO when the process starts or stops leading, and
	// WARN when an action fails.
	Log *slog.Logger
}

// Shell carries out one scheduler process's core. It is not safe for
// concurrent use, except Leading.
type Shell struct {
	env     Env
	jobs    []Job
	core    schedcore.Stepper
	tokens  map[schedcore.TokenRef]queuey.Delivery
	ids     uint64 // tokens delivered so far, which name them
	leading atomic.Bool
}

// New returns the shell of a process named id in the tokens it publishes,
// holding no token. refresh is schedcore.Config.Refresh. wrap, if not nil,
// wraps the core: a test breaking it on purpose.
func New(jobs []Job, id string, refresh time.Duration, env Env, wrap func(schedcore.Stepper) schedcore.Stepper) *Shell {
	schedules := make([]schedcore.Schedule, len(jobs))
	for i, j := range jobs {
		schedules[i] = schedcore.Schedule{Name: j.Name, Every: j.Every, Offset: j.Offset}
	}
	var core schedcore.Stepper = schedcore.New(schedules, schedcore.Config{ID: id, Refresh: refresh, RetryDelay: RetryDelay})
	if wrap != nil {
		core = wrap(core)
	}
	return &Shell{env: env, jobs: jobs, core: core, tokens: map[schedcore.TokenRef]queuey.Delivery{}}
}

// Rebind carries the process on with env, its new connection's producer
// and publisher: the core, and what it knows, stay.
func (sh *Shell) Rebind(env Env) { sh.env = env }

// Leading reports whether the process leads its group. It is safe to call
// from any goroutine.
func (sh *Shell) Leading() bool { return sh.leading.Load() }

// Start is the core's first event, after the subscription.
func (sh *Shell) Start(ctx context.Context) { sh.do(ctx, sh.core.Start(sh.env.Now())) }

// Token hands the core a token delivered on the channel of generation gen.
func (sh *Shell) Token(ctx context.Context, gen uint64, d queuey.Delivery) {
	sh.ids++
	ref := schedcore.TokenRef{Gen: gen, ID: sh.ids}
	sh.tokens[ref] = d
	sh.do(ctx, sh.core.Token(ref, d.Body(), sh.env.Now()))
}

// Lost tells the core that the channel of generation gen, and those
// before it, are gone.
func (sh *Shell) Lost(ctx context.Context, gen uint64) { sh.do(ctx, sh.lose(gen)) }

// Time is a wake-up the core asked for.
func (sh *Shell) Time(ctx context.Context) { sh.do(ctx, sh.core.Time(sh.env.Now())) }

// errLeadLost is the result of an enqueue not attempted: the channel that
// made this process the leader is gone.
var errLeadLost = errors.New("queuey: scheduler: its election channel is gone")

// do carries out acts, and what the core answers to each, in order. Before
// an enqueue it checks that the process still leads: a lost channel it has
// not told the core of yet makes the enqueue fail (the core then hears of
// the loss), so that a process whose token the broker has already handed
// on never enqueues beside the next leader.
func (sh *Shell) do(ctx context.Context, acts []schedcore.Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		if a.Kind == schedcore.Wake {
			sh.env.Wake(a.At)
			continue
		}
		if a.Kind == schedcore.Enqueue {
			if gen, ok := sh.lostNow(); ok {
				acts = append(acts, sh.core.Done(errLeadLost, sh.env.Now())...)
				acts = append(acts, sh.lose(gen)...)
				continue
			}
		}
		err := sh.act(ctx, a)
		acts = append(acts, sh.core.Done(err, sh.env.Now())...)
	}
	leads := sh.core.Leading()
	if was := sh.leading.Swap(leads); was != leads {
		if was {
			sh.env.Log.InfoContext(ctx, "queuey: scheduler no longer leads its group")
		} else {
			sh.env.Log.InfoContext(ctx, "queuey: scheduler leads its group")
		}
	}
}

// lostNow reports a lost channel the shell has not told the core of: one
// the supervised consumer reported, or the channel of a token it holds
// that has closed.
func (sh *Shell) lostNow() (uint64, bool) {
	select {
	case gen := <-sh.env.Lost:
		return gen, true
	default:
	}
	for ref, d := range sh.tokens {
		if st, ok := d.(interface{ Stale() bool }); ok && st.Stale() {
			return ref.Gen, true
		}
	}
	return 0, false
}

// lose tells the core that the channel of generation gen, and those
// before it, are gone with their tokens.
func (sh *Shell) lose(gen uint64) []schedcore.Action {
	for ref := range sh.tokens {
		if ref.Gen <= gen {
			delete(sh.tokens, ref)
		}
	}
	return sh.core.Lost(gen, sh.env.Now())
}

// act carries out one effectful action.
func (sh *Shell) act(ctx context.Context, a schedcore.Action) error {
	ctx, cancel := context.WithTimeout(ctx, ActionTimeout)
	defer cancel()
	switch a.Kind {
	case schedcore.Enqueue:
		j := sh.jobs[a.Schedule]
		id := schedcore.TickID(j.Name, a.Tick)
		err := sh.enqueue(ctx, j, a.Tick, id)
		if err != nil {
			if ctx.Err() == nil {
				sh.env.Log.WarnContext(ctx, "queuey: scheduler: enqueueing a tick failed; trying again", slog.String("job_id", id), slog.String("error", err.Error()))
			}
			return err
		}
		sh.env.Log.DebugContext(ctx, "queuey: scheduler: enqueued a tick", slog.String("job_id", id))
		return nil
	case schedcore.PublishToken:
		err := sh.env.PublishToken(ctx, a.Body)
		if err != nil && ctx.Err() == nil {
			sh.env.Log.WarnContext(ctx, "queuey: scheduler: publishing a token failed; trying again", slog.String("error", err.Error()))
		}
		return err
	case schedcore.Ack:
		d, ok := sh.tokens[a.Token]
		if !ok {
			return errors.New("queuey: scheduler: token gone with its channel")
		}
		delete(sh.tokens, a.Token)
		return d.Ack()
	}
	return fmt.Errorf("queuey: scheduler: unknown action %d", a.Kind)
}

// enqueue enqueues job j's tick with ID id. A panic in j.Args is an error,
// so that one schedule's bug neither kills the process nor, since the
// core tries the failed schedule again later, stops the others.
func (sh *Shell) enqueue(ctx context.Context, j Job, tick time.Time, id string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("queuey: scheduler: %s's Args panicked: %v", j.Name, v)
		}
	}()
	_, err = sh.env.Producer.Enqueue(ctx, queuey.WithOptions(j.Args(tick), j.Options...), queuey.WithID(id))
	return err
}
