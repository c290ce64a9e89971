package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/internal/backendhook"
	"github.com/queuey/queuey/internal/schedcore"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// PeriodicJob is a job a Scheduler enqueues at every tick of its interval.
type PeriodicJob struct {
	// Name names the schedule: each tick's job has the ID Name + "@" +
	// the tick in RFC 3339, UTC, to the second (e.g.
	// "daily-report@2026-12-04T00:00:00Z"), so that a tick enqueued twice
	// across a failover is recognisable. 1 to 200 bytes of UTF-8, unique
	// within a Scheduler.
	Name string
	// Every is the interval: a whole number of seconds, at least one. The
	// ticks are its multiples since the Unix epoch, plus Offset (Every 24h
	// ticks at midnight UTC), the same in every process.
	Every time.Duration
	// Offset shifts the ticks past each multiple of Every: Every 24h with
	// Offset 2h ticks at 02:00 UTC. A whole number of seconds, at least 0
	// and less than Every. Defaults to 0. Ticks follow UTC: a local time
	// moves against them with daylight saving.
	Offset time.Duration
	// Args returns the job of the tick. Required.
	Args func(tick time.Time) queuey.JobArgs
	// Options are the job's own options (queuey.EnqueueOption); the
	// Scheduler adds WithID with the tick's ID.
	Options []queuey.EnqueueOption
}

// SchedulerOptions configure a Scheduler. The zero value is ready to use.
type SchedulerOptions struct {
	// Group names the election: of the schedulers of one Group on a
	// broker, one leads at a time. Its queue is
	// "queuey.scheduler." + Group. Defaults to "default".
	Group string
	// Refresh is how often the leader renews its token, and a process
	// that does not lead offers one. It must stay well under the broker's
	// consumer timeout (30 minutes by default). Defaults to one minute.
	Refresh time.Duration
	// Logger receives the scheduler's logs: INFO when it starts or stops
	// leading, WARN when an enqueue fails (it is tried again every
	// second). Defaults to the backend's.
	Logger *slog.Logger
}

// DefaultSchedulerRefresh is SchedulerOptions.Refresh's default.
const DefaultSchedulerRefresh = time.Minute

// maxSchedulerRefresh is the longest SchedulerOptions.Refresh: a third of
// RabbitMQ's default consumer timeout, 30 minutes.
const maxSchedulerRefresh = 10 * time.Minute

// schedulerActionTimeout bounds one publish or enqueue of a scheduler: a
// confirm that never comes must not stop the schedule for good.
const schedulerActionTimeout = 30 * time.Second

// schedulerRetryDelay is how long a scheduler waits before it tries a
// failed action again.
const schedulerRetryDelay = time.Second

// tokenPrefetch is how many tokens a leader may hold before it
// acknowledges the surplus: a group's processes offer about one a Refresh
// each.
const tokenPrefetch = 100

// Scheduler enqueues periodic jobs, one process of a group at a time. Its
// processes elect a leader with RabbitMQ's single active consumer on a
// quorum queue, and the leader passes on, in the tokens it holds, the last
// tick it enqueued of each job; docs/periodic.md describes the design and
// what happens to ticks missed while no process led (the latest is
// enqueued once, the older are skipped).
type Scheduler struct {
	b        *Backend
	producer *queuey.Producer
	jobs     []PeriodicJob
	opts     SchedulerOptions
	queue    string
	log      *slog.Logger
	id       string // the process's name in its tokens
	leading  atomic.Bool
	running  atomic.Bool
}

// NewScheduler checks jobs and returns a scheduler that enqueues them
// through producer, electing its leader on backend's broker. It declares
// nothing until Run.
func NewScheduler(backend *Backend, producer *queuey.Producer, jobs []PeriodicJob, opts SchedulerOptions) (*Scheduler, error) {
	if backend == nil || producer == nil {
		return nil, errors.New("rabbitmq: NewScheduler: backend and producer are required")
	}
	if opts.Group == "" {
		opts.Group = "default"
	}
	if opts.Refresh == 0 {
		opts.Refresh = DefaultSchedulerRefresh
	}
	if opts.Refresh < time.Second || opts.Refresh > maxSchedulerRefresh {
		return nil, fmt.Errorf("rabbitmq: NewScheduler: Refresh %v is outside 1s..%v: a token held longer risks the broker's consumer timeout", opts.Refresh, maxSchedulerRefresh)
	}
	queue := "queuey.scheduler." + opts.Group
	if err := backend.top.CheckQueueName(queue); err != nil {
		return nil, fmt.Errorf("rabbitmq: NewScheduler: Group %q: %w", opts.Group, err)
	}
	seen := map[string]bool{}
	for i, j := range jobs {
		var why string
		switch {
		case j.Name == "" || len(j.Name) > 200:
			why = fmt.Sprintf("Name must be 1 to 200 bytes, is %d", len(j.Name))
		case !utf8.ValidString(j.Name):
			why = "Name is not valid UTF-8"
		case seen[j.Name]:
			why = "Name is used twice"
		case j.Every < time.Second || j.Every%time.Second != 0:
			why = fmt.Sprintf("Every %v is not a whole number of seconds, at least one", j.Every)
		case j.Offset < 0 || j.Offset >= j.Every || j.Offset%time.Second != 0:
			why = fmt.Sprintf("Offset %v is not a whole number of seconds from 0 to less than Every", j.Offset)
		case j.Args == nil:
			why = "Args is nil"
		}
		if why != "" {
			return nil, fmt.Errorf("rabbitmq: NewScheduler: job %d (%q): %s", i, j.Name, why)
		}
		seen[j.Name] = true
	}
	if len(jobs) == 0 {
		return nil, errors.New("rabbitmq: NewScheduler: no jobs")
	}
	log := opts.Logger
	if log == nil {
		log = backend.logger
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Scheduler{b: backend, producer: producer, jobs: slices.Clone(jobs), opts: opts, queue: queue, id: hex.EncodeToString(id[:]),
		log: log.With(slog.String("scheduler_group", opts.Group))}, nil
}

// Leading reports whether this process leads its group now.
func (s *Scheduler) Leading() bool { return s.leading.Load() }

// Run declares the group's election queue (a quorum queue with single
// active consumer), joins the election, and enqueues the jobs' ticks
// while this process leads, until ctx ends (then it returns nil, and its
// tokens go to the next process) or its subscription ends for good. On a
// backend from Connect it survives dropped connections, leading again
// only if the broker hands it a token again.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("rabbitmq: Scheduler.Run is running already")
	}
	defer s.running.Store(false)
	defer s.leading.Store(false)
	if err := s.declare(ctx); err != nil {
		return err
	}
	defer s.b.forgetDeclared(s.queue)
	cons, err := s.b.Consume(ctx, s.queue, tokenPrefetch)
	if err != nil {
		return fmt.Errorf("rabbitmq: scheduler: %w", err)
	}
	defer func() { _ = cons.Close() }() // a closed channel returns the tokens
	var lost <-chan uint64
	if l, ok := cons.(interface{ Lost() <-chan uint64 }); ok {
		lost = l.Lost()
	}
	timer := s.b.clock.Timer(time.Hour)
	defer timer.Stop()
	sh := s.newShell(func(at time.Time) { timer.Reset(max(at.Sub(s.b.clock.Now()), 0)) }, nil)
	sh.lost = lost
	sh.start(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-cons.Deliveries():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("rabbitmq: scheduler: its subscription ended: %w", cons.Err())
			}
			var gen uint64 = 1
			if g, ok := d.(interface{ Generation() uint64 }); ok {
				gen = g.Generation()
			}
			sh.token(ctx, gen, d)
		case gen := <-lost:
			sh.lostGen(ctx, gen)
		case <-timer.C:
			sh.time(ctx)
		}
	}
}

// declare declares the election queue, durable and quorum, with single
// active consumer.
func (s *Scheduler) declare(ctx context.Context) error {
	ch, err := s.b.openChannel(ctx, "declaring "+s.queue)
	if err != nil {
		return fmt.Errorf("rabbitmq: scheduler: %w", err)
	}
	defer func() { _ = ch.Close() }()
	// No delivery limit: a token returned by every leader that died
	// holding it must not be dropped after its 21st return
	// (docs/rabbitmq-semantics.md §5.1).
	args := amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true, "x-delivery-limit": -1}
	if _, err := ch.QueueDeclare(s.queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("rabbitmq: scheduler: declaring its election queue %q: %w", s.queue, err)
	}
	// Declared again after every reconnection of a backend from Connect,
	// until Run returns.
	s.b.keepDeclared(s.queue, args)
	return nil
}

// schedShell carries out what the scheduler's core asks, one action at a
// time, on one goroutine: Run's, or the simulator's, which steps it
// through internal/backendhook.StepScheduler on its virtual clock.
type schedShell struct {
	s      *Scheduler
	core   schedcore.Stepper
	tokens map[schedcore.TokenRef]queuey.Delivery
	ids    uint64             // tokens delivered so far, which name them
	wake   func(at time.Time) // asks for a Time event at at
	lost   <-chan uint64      // the supervised consumer's lost channels; nil without
}

// newShell returns a shell for s's core, holding no token; wrap, if not
// nil, wraps the core (a simulator's test breaking it on purpose).
func (s *Scheduler) newShell(wake func(at time.Time), wrap func(schedcore.Stepper) schedcore.Stepper) *schedShell {
	schedules := make([]schedcore.Schedule, len(s.jobs))
	for i, j := range s.jobs {
		schedules[i] = schedcore.Schedule{Name: j.Name, Every: j.Every, Offset: j.Offset}
	}
	var core schedcore.Stepper = schedcore.New(schedules, schedcore.Config{ID: s.id, Refresh: s.opts.Refresh, RetryDelay: schedulerRetryDelay})
	if wrap != nil {
		core = wrap(core)
	}
	return &schedShell{s: s, core: core, tokens: map[schedcore.TokenRef]queuey.Delivery{}, wake: wake}
}

// now is the scheduler's clock: its backend's.
func (sh *schedShell) now() time.Time { return sh.s.b.clock.Now() }

// start is the core's first event.
func (sh *schedShell) start(ctx context.Context) { sh.do(ctx, sh.core.Start(sh.now())) }

// token hands the core a token delivered on the channel of generation gen.
func (sh *schedShell) token(ctx context.Context, gen uint64, d queuey.Delivery) {
	sh.ids++
	ref := schedcore.TokenRef{Gen: gen, ID: sh.ids}
	sh.tokens[ref] = d
	sh.do(ctx, sh.core.Token(ref, d.Body(), sh.now()))
}

// lostGen tells the core that the channel of generation gen, and those
// before it, are gone.
func (sh *schedShell) lostGen(ctx context.Context, gen uint64) { sh.do(ctx, sh.lose(gen)) }

// time is a wake-up the core asked for.
func (sh *schedShell) time(ctx context.Context) { sh.do(ctx, sh.core.Time(sh.now())) }

// stepped is the shell as the simulator steps it (internal/backendhook).
type stepped struct{ sh *schedShell }

func (p stepped) Declare(ctx context.Context) error { return p.sh.s.declare(ctx) }
func (p stepped) Queue() string                     { return p.sh.s.queue }
func (p stepped) Prefetch() int                     { return tokenPrefetch }
func (p stepped) Start(ctx context.Context)         { p.sh.start(ctx) }
func (p stepped) Token(ctx context.Context, gen uint64, d queuey.Delivery) {
	p.sh.token(ctx, gen, d)
}
func (p stepped) Lost(ctx context.Context, gen uint64) { p.sh.lostGen(ctx, gen) }
func (p stepped) Time(ctx context.Context)             { p.sh.time(ctx) }
func (p stepped) Leading() bool                        { return p.sh.core.Leading() }
func (p stepped) Rebind(scheduler any) {
	s := scheduler.(*Scheduler)
	s.id = p.sh.s.id
	p.sh.s = s
}

func init() {
	backendhook.StepScheduler = func(scheduler any, id string, wake func(at time.Time), wrap func(schedcore.Stepper) schedcore.Stepper) backendhook.Scheduler {
		s := scheduler.(*Scheduler)
		s.id = id
		return stepped{s.newShell(wake, wrap)}
	}
}

// errLeadLost is the result of an enqueue not attempted: the channel that
// made this process the leader is gone.
var errLeadLost = errors.New("rabbitmq: scheduler: its election channel is gone")

func (sh *schedShell) do(ctx context.Context, acts []schedcore.Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		if a.Kind == schedcore.Wake {
			sh.wake(a.At)
			continue
		}
		if a.Kind == schedcore.Enqueue {
			// Another process leads as soon as the broker has closed this
			// one's channel: look before every enqueue, not only between
			// events, since an enqueue may take a while.
			if gen, ok := sh.lostNow(); ok {
				acts = append(acts, sh.core.Done(errLeadLost, sh.now())...)
				acts = append(acts, sh.lose(gen)...)
				continue
			}
		}
		err := sh.act(ctx, a)
		acts = append(acts, sh.core.Done(err, sh.now())...)
	}
	if was := sh.s.leading.Swap(sh.core.Leading()); was != sh.core.Leading() {
		if was {
			sh.s.log.InfoContext(ctx, "queuey: scheduler no longer leads its group")
		} else {
			sh.s.log.InfoContext(ctx, "queuey: scheduler leads its group")
		}
	}
}

// lostNow reports a lost channel the shell has not told the core of: one
// the supervised consumer reported, or the channel of a token it holds
// that has closed.
func (sh *schedShell) lostNow() (uint64, bool) {
	select {
	case gen := <-sh.lost:
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
func (sh *schedShell) lose(gen uint64) []schedcore.Action {
	for ref := range sh.tokens {
		if ref.Gen <= gen {
			delete(sh.tokens, ref)
		}
	}
	return sh.core.Lost(gen, sh.now())
}

// act carries out one effectful action.
func (sh *schedShell) act(ctx context.Context, a schedcore.Action) error {
	ctx, cancel := context.WithTimeout(ctx, schedulerActionTimeout)
	defer cancel()
	switch a.Kind {
	case schedcore.Enqueue:
		j := sh.s.jobs[a.Schedule]
		id := schedcore.TickID(j.Name, a.Tick)
		err := sh.enqueue(ctx, j, a.Tick, id)
		if err != nil {
			if ctx.Err() == nil {
				sh.s.log.WarnContext(ctx, "queuey: scheduler: enqueueing a tick failed; trying again", slog.String("job_id", id), slog.String("error", err.Error()))
			}
			return err
		}
		sh.s.log.DebugContext(ctx, "queuey: scheduler: enqueued a tick", slog.String("job_id", id))
		return nil
	case schedcore.PublishToken:
		err := sh.s.b.publish(ctx, sh.s.queue, amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: a.Body})
		if err != nil && ctx.Err() == nil {
			sh.s.log.WarnContext(ctx, "queuey: scheduler: publishing a token failed; trying again", slog.String("error", err.Error()))
		}
		return err
	case schedcore.Ack:
		d, ok := sh.tokens[a.Token]
		if !ok {
			return errors.New("rabbitmq: scheduler: token gone with its channel")
		}
		delete(sh.tokens, a.Token)
		return d.Ack()
	}
	return fmt.Errorf("rabbitmq: scheduler: unknown action %d", a.Kind)
}

// enqueue enqueues job j's tick with ID id. A panic in j.Args is an error,
// so that one schedule's bug neither kills the process nor, since the
// core tries the failed schedule again later, stops the others.
func (sh *schedShell) enqueue(ctx context.Context, j PeriodicJob, tick time.Time, id string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("rabbitmq: scheduler: %s's Args panicked: %v", j.Name, v)
		}
	}()
	_, err = sh.s.producer.Enqueue(ctx, queuey.WithOptions(j.Args(tick), j.Options...), queuey.WithID(id))
	return err
}
