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

	"github.com/queuey/queuey/internal/schedshell"
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
	running  atomic.Bool
	shell    atomic.Pointer[schedshell.Shell] // Run's, while it runs
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
	queue := schedshell.Queue(opts.Group)
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
func (s *Scheduler) Leading() bool {
	sh := s.shell.Load()
	return sh != nil && sh.Leading()
}

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
	if err := s.declare(ctx); err != nil {
		return err
	}
	defer s.b.forgetDeclared(s.queue)
	cons, err := s.b.Consume(ctx, s.queue, schedshell.Prefetch)
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
	sh := schedshell.New(s.shellJobs(), s.id, s.opts.Refresh, schedshell.Env{
		Now:  s.b.clock.Now,
		Wake: func(at time.Time) { timer.Reset(max(at.Sub(s.b.clock.Now()), 0)) },
		PublishToken: func(ctx context.Context, body []byte) error {
			return s.b.publish(ctx, s.queue, amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body})
		},
		Producer: s.producer,
		Lost:     lost,
		Log:      s.log,
	}, nil)
	s.shell.Store(sh)
	defer s.shell.Store(nil)
	sh.Start(ctx)
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
			sh.Token(ctx, gen, d)
		case gen := <-lost:
			sh.Lost(ctx, gen)
		case <-timer.C:
			sh.Time(ctx)
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
	args := schedshell.QueueArgs()
	if _, err := ch.QueueDeclare(s.queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("rabbitmq: scheduler: declaring its election queue %q: %w", s.queue, err)
	}
	// Declared again after every reconnection of a backend from Connect,
	// until Run returns.
	s.b.keepDeclared(s.queue, args)
	return nil
}

// shellJobs are the jobs as the shell takes them.
func (s *Scheduler) shellJobs() []schedshell.Job {
	jobs := make([]schedshell.Job, len(s.jobs))
	for i, j := range s.jobs {
		jobs[i] = schedshell.Job{Name: j.Name, Every: j.Every, Offset: j.Offset, Args: j.Args, Options: j.Options}
	}
	return jobs
}
