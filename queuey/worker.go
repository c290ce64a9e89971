package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/internal/execute"
	"github.com/queuey/queuey/internal/jobopts"
	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
)

// WorkerConfig configures a Worker. The zero value is ready to use.
type WorkerConfig struct {
	// Logger receives the worker's logs: deferrals at INFO; retries, and
	// failures to settle a job (which a dropped connection causes, and
	// which lose nothing: the job runs again), at WARN; dead letters at
	// ERROR, since a person must look at them. Defaults to discarding
	// them.
	Logger *slog.Logger
	// Clock times the wait before a job that could not be settled is
	// returned to its queue. Defaults to the real clock.
	Clock clock.Clock
	// StopTimeout bounds how long Run waits, once its context is done, for
	// running handlers to return and their jobs to be settled. When it runs
	// out, handlers' contexts are cancelled, and so is the settling of
	// their jobs: each goes back to its queue unacknowledged (requeued),
	// never lost. Run still waits for the handlers to return: one that
	// ignores its context holds Run up. Defaults to DefaultStopTimeout, 30
	// seconds; NewWorker refuses a negative one.
	StopTimeout time.Duration
	// RequeueDelay is how long a job whose successor could not be published
	// (or which could not be dead-lettered) waits before it is returned to
	// its queue, so that a persistent failure is retried at a bounded rate,
	// never in a hot loop. Defaults to DefaultRequeueDelay, 1 second;
	// NewWorker refuses a negative one.
	RequeueDelay time.Duration
	// Rand draws the uniform numbers in [0, 1) for retry jitter, one for
	// each handler run that returned an error (it is called from several
	// goroutines, one at a time). Defaults to math/rand/v2's Float64.
	Rand func() float64
	// Observer, if set, is told of every handler run and its outcome, and
	// of malformed bodies, for metrics and traces (package queueyotel); the
	// worker then stamps each retry and deferral with when it is due
	// (ExtDueAt). Defaults to nil: nothing is observed or stamped.
	Observer Observer
	// Middleware wraps every handler run, the first the outermost: for
	// logging, metrics, timeouts, or changing what a result means. See
	// Middleware. None by default.
	Middleware []Middleware
}

// Middleware wraps the run of a job's handler. It is called with the job's
// context and description, and next, which runs the rest: the middleware
// after it, then the handler. It returns the job's result, which the
// worker turns into an acknowledgement, a retry, a deferral or a dead letter, as
// for a handler's. It may call next at most once, with a context derived
// from ctx, or not at all.
//
// The payload is decoded inside next, so a payload that does not decode
// reaches the middleware as the Fatal error next returns. A job of a kind
// with no handler runs no middleware. A panic in the handler passes up
// through the middleware (a deferred recover sees it) and becomes a
// *PanicError once it has passed the outermost, unless a middleware
// recovers it.
type Middleware func(ctx context.Context, job JobContext, next func(context.Context, JobContext) error) error

// The defaults of WorkerConfig.
const (
	DefaultStopTimeout  = 30 * time.Second
	DefaultRequeueDelay = time.Second
)

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.New()
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.RequeueDelay == 0 {
		c.RequeueDelay = DefaultRequeueDelay
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// Worker consumes queues and runs their jobs' handlers.
type Worker struct {
	backend  Backend
	cfg      WorkerConfig
	queues   []QueueConfig
	mu       sync.Mutex
	handlers map[string]erasedHandler
	running  bool
	randMu   sync.Mutex
}

// NewWorker validates the queues, declares them through backend and
// returns a worker for them. Register handlers before calling Run.
func NewWorker(ctx context.Context, backend Backend, queues []QueueConfig, cfg WorkerConfig) (*Worker, error) {
	for i, mw := range cfg.Middleware {
		if mw == nil {
			return nil, fmt.Errorf("queuey: WorkerConfig.Middleware[%d] is nil", i)
		}
	}
	switch {
	case cfg.StopTimeout < 0:
		return nil, fmt.Errorf("queuey: WorkerConfig.StopTimeout is negative: %v", cfg.StopTimeout)
	case cfg.RequeueDelay < 0:
		return nil, fmt.Errorf("queuey: WorkerConfig.RequeueDelay is negative: %v", cfg.RequeueDelay)
	}
	cfg.Middleware = slices.Clone(cfg.Middleware) // the caller's slice may change
	declared, _, err := declare(ctx, backend, queues)
	if err != nil {
		return nil, err
	}
	return &Worker{backend: backend, cfg: cfg.withDefaults(), handlers: map[string]erasedHandler{}, queues: declared}, nil
}

// Register adds the handler for jobs of T's kind. It fails for a kind
// already registered, for a job whose queue the worker does not consume,
// and once Run has started.
func Register[T JobArgs](w *Worker, h Handler[T]) error {
	var zero T
	kind := zero.Kind()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.running:
		return fmt.Errorf("queuey: registering %q: the worker is already running", kind)
	case w.handlers[kind].run != nil:
		return fmt.Errorf("queuey: a handler for %q is already registered", kind)
	}
	e := erase(h)
	known := false
	for _, q := range w.queues {
		known = known || q.Name == e.queue
	}
	if !known {
		return fmt.Errorf("%w: %q, the queue of %q, is not one this worker consumes", ErrUnknownQueue, e.queue, kind)
	}
	w.handlers[kind] = e
	return nil
}

// Run consumes the worker's queues until ctx is done or a subscription
// ends for good. Up to each queue's prefetch handlers run at once. When ctx
// is done it stops consuming, waits up to StopTimeout for running handlers
// and settles their jobs, and returns nil.
//
// What a dropped connection does depends on the backend. One that
// reconnects (rabbitmq.Connect) keeps the subscriptions open across it:
// Run goes on, and returns an error only once the backend stops trying
// (wrapping rabbitmq.ErrConnectionFailed). One that does not
// (rabbitmq.New) ends them: Run then stops as for ctx and returns an error
// wrapping the broker's. Either way, a job whose delivery was lost with its
// channel is never settled on another: the broker has requeued it already,
// so its handler's outcome is logged and dropped, and the job runs again.
//
// Everything between a delivery and its settlement is decided by the
// worker's core (internal/workercore, docs/worker-core.md) and carried out
// by one executor (internal/execute), the same code the simulator and the
// property tests drive; Run is the shell that runs its handlers and
// publishes on goroutines.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("queuey: Run called twice")
	}
	w.running = true
	w.mu.Unlock()

	consumeCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	// Handlers outlive ctx so that a graceful stop lets them finish; they
	// are cancelled when StopTimeout runs out.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	var consumers []Consumer
	for _, q := range w.queues {
		c, err := w.backend.Consume(consumeCtx, q.Name, q.Prefetch)
		if err != nil {
			stopConsuming()
			for _, c := range consumers {
				_ = c.Close()
			}
			return fmt.Errorf("queuey: consuming %q: %w", q.Name, err)
		}
		consumers = append(consumers, c)
	}

	s := &shell{w: w, ctx: handlerCtx, handlers: w.handlers, timeouts: make([]deadline, len(w.queues))}
	core := settle.New[Delivery](w.queues, workercore.Config{RequeueDelay: w.cfg.RequeueDelay})
	s.x = execute.New[Delivery](handlerCtx, core, s, w.backend, w.queues)
	// Each subscription's channels are generations of their own in the
	// core (subGen): one is lost on its own when the broker ends it.
	for i := range consumers {
		core.ConnectionUp(subGen(i, 1))
	}

	// Each subscription has a pool of handler goroutines, which take its
	// deliveries straight from the consumer, and a watcher, which follows
	// the channels it loses and says when it has ended. inflight counts
	// the handler goroutines. Only a watcher starts a pool's first
	// handler, and only a running handler starts another, so waiting for
	// the watchers first makes waiting for inflight safe.
	var watchers, inflight sync.WaitGroup
	type end struct {
		gen workercore.Gen
		err error
	}
	ended := make(chan end, len(consumers))
	for i, c := range consumers {
		p := &pool{s: s, queue: i, deliveries: c.Deliveries(),
			drained: make(chan struct{}), wg: &inflight}
		p.max.Store(int32(w.queues[i].Prefetch))
		p.gen.Store(1)
		s.pools = append(s.pools, p)
		// A consumer that resumes after its connection drops (a supervised
		// rabbitmq backend's) says which channel it lost.
		var lost <-chan uint64
		if r, ok := c.(resumer); ok {
			lost = r.Lost()
		}
		watchers.Go(func() {
			p.spawn()
			for {
				select {
				case g := <-lost:
					s.x.Step(func(c execute.Core[Delivery], acts []coreAction) []coreAction {
						return s.resume(c, acts, p, g+1)
					})
				case <-p.drained:
					ended <- end{subGen(i, p.gen.Load()), c.Err()}
					return
				}
			}
		})
	}

	var runErr error
	select {
	case <-ctx.Done():
	case e := <-ended:
		if e.err != nil {
			runErr = fmt.Errorf("queuey: consumer ended: %w", e.err)
			s.x.Step(func(c execute.Core[Delivery], acts []coreAction) []coreAction {
				return c.ConnectionLost(acts, e.gen)
			})
		}
	}
	// Stop: no new handler starts, and a job waiting to be requeued is
	// requeued now. Keep the channels open so that running handlers can
	// still settle their jobs.
	s.x.Step(execute.Core[Delivery].Stop)
	stopConsuming()
	for _, c := range consumers {
		_ = c.Cancel()
	}
	defer func() {
		for _, c := range consumers {
			_ = c.Close()
		}
	}()
	done := make(chan struct{})
	go func() { watchers.Wait(); inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-w.cfg.Clock.After(w.cfg.StopTimeout):
		w.cfg.Logger.WarnContext(ctx, "queuey: stop timeout: cancelling running handlers",
			slog.Duration("stop_timeout", w.cfg.StopTimeout))
		cancelHandlers()
		<-done
	}
	s.x.Close() // no deadline or requeue timer outlives Run
	return runErr
}

func (w *Worker) draw() float64 {
	w.randMu.Lock()
	defer w.randMu.Unlock()
	return w.cfg.Rand()
}

type coreAction = settle.Action[Delivery]

// resumer is a Consumer that survives its connection dropping, as the
// consumers of a supervised rabbitmq backend do: Lost yields the number of
// each channel it lost, before any delivery of the next. Run does not rely
// on that order: a delivery of a newer channel says as much (resume).
type resumer interface {
	Lost() <-chan uint64
}

// generational is a Delivery that says which of its consumer's channels
// it came on (1 for a Consumer that never resumes).
type generational interface {
	Generation() uint64
}

// subGen is the core's generation for channel g of subscription i.
func subGen(i int, g uint64) workercore.Gen {
	return workercore.Gen(uint64(i+1)<<32 | g&(1<<32-1))
}

// shell is Run's side of the executor (internal/execute) that carries
// out the core's actions: it runs handlers on the goroutine that asks, times
// RequeueDelay on the worker's clock, and logs.
type shell struct {
	w   *Worker
	ctx context.Context // handlers' and publishes': cancelled when StopTimeout runs out
	// handlers are the worker's, read without its lock: Register fails
	// once Run has started, so the map no longer changes.
	handlers map[string]erasedHandler
	x        *execute.Executor[Delivery]
	pools    []*pool    // by queue index
	timeouts []deadline // by queue index
}

// deadline is a context its queue's handlers share: those that start
// within one slice of a 128th of the timeout all end at its end, so a
// handler's deadline is at most a 128th of its timeout late. A context
// with a timer of its own for every run cost BenchmarkConsume on membroker
// 18 % of its throughput and 4 allocations per job (ten paired rounds each,
// against the build without timeouts, 2026-12-03: +25 % with such
// contexts, +7 % with none at all); shared, +6.9 % with no row significant
// (p ≥ 0.085) and 11 allocs/op, as without timeouts.
type deadline struct {
	mu  sync.Mutex
	ctx context.Context
	at  time.Time
	end context.CancelFunc // never called: the deadline or Run's end cancels it
}

// deadline returns the context of a handler of queue q starting now,
// which ends timeout later, rounded up to a 128th of it, on the worker's
// clock (so that a mock clock times it too).
func (s *shell) deadline(q int, timeout time.Duration) context.Context {
	g := max(timeout/128, time.Nanosecond)
	at := s.w.cfg.Clock.Now().Add(timeout + g - 1).Truncate(g)
	d := &s.timeouts[q]
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil || !d.at.Equal(at) {
		d.ctx, d.end = s.w.cfg.Clock.WithDeadline(s.ctx, at)
		d.at = at
	}
	return d.ctx
}

// pool is a subscription's handler goroutines. Each takes deliveries
// straight from the consumer's channel, decodes its delivery outside the
// shell's lock, hands it to the core, and carries out what the core says on
// its own goroutine. They live as long as the subscription; a new one
// starts only when every one is busy, up to max of them.
//
// No goroutine stands between the consumer and the handlers: a reader
// goroutine that handed each delivery on to the pool cost about 7 % of the
// throughput (BenchmarkConsume on membroker at prefetch 1, 10 and 100,
// paired at GOMAXPROCS=1 as docs/performance.md says: 16 rounds, 95 %
// interval 3 to 11 %), and decoding on such a reader, under the lock, a
// fifth of it on two cores.
type pool struct {
	s          *shell
	queue      int
	deliveries <-chan Delivery
	// max is the prefetch, plus one for each abandoned handler still
	// running (its goroutine is lost to the pool until it returns).
	max     atomic.Int32
	started atomic.Int32 // handler goroutines started
	idle    atomic.Int32 // of those, how many wait for a delivery
	// gen is the consumer's live channel: written only by resume, inside
	// the executor's Step; read outside it too, to see a resume is due.
	gen       atomic.Uint64
	drained   chan struct{}
	drainOnce sync.Once
	wg        *sync.WaitGroup
}

// spawn starts a handler goroutine, unless max are running already.
func (p *pool) spawn() {
	for {
		n := p.started.Load()
		if n >= p.max.Load() {
			return
		}
		if p.started.CompareAndSwap(n, n+1) {
			break
		}
	}
	p.idle.Add(1)
	p.wg.Go(func() {
		for d := range p.deliveries {
			if p.idle.Add(-1) == 0 {
				p.spawn() // every one is busy now
			}
			p.deliver(d)
			if p.shrink() {
				return // an abandoned handler's goroutine, returned at last
			}
			p.idle.Add(1)
		}
		p.drainOnce.Do(func() { close(p.drained) })
	})
}

// shrink ends the calling goroutine's service if more are started than
// max allows, which happens once an abandoned handler has returned.
func (p *pool) shrink() bool {
	for {
		n := p.started.Load()
		if n <= p.max.Load() {
			return false
		}
		if p.started.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// deliver hands d to the core and carries out what it says.
func (p *pool) deliver(d Delivery) {
	s := p.s
	g := uint64(1)
	if gd, ok := d.(generational); ok {
		g = gd.Generation()
	}
	job, err := s.x.Decode(p.queue, d)
	if g > p.gen.Load() {
		// The consumer lost its channel and resumed; this delivery may
		// have come before the watcher took the news from Lost.
		s.x.Step(func(c execute.Core[Delivery], acts []coreAction) []coreAction {
			return s.resume(c, acts, p, g)
		})
	}
	s.x.DeliverDecoded(p.queue, subGen(p.queue, g), d, job, err)
}

// resume says that p's consumer now delivers on its channel gen: every
// one before it is lost, and the broker has requeued what it delivered.
// Both the watcher (from Lost) and a handler (a delivery of a newer
// channel) call it, inside the executor's Step; whichever comes second
// does nothing.
func (s *shell) resume(core execute.Core[Delivery], acts []coreAction, p *pool, gen uint64) []coreAction {
	lost := p.gen.Load()
	if gen <= lost {
		return acts
	}
	acts = core.ConnectionLost(acts, subGen(p.queue, lost))
	core.ConnectionUp(subGen(p.queue, gen))
	p.gen.Store(gen)
	s.w.cfg.Logger.Warn("queuey: a subscription lost its channel; jobs in hand are not settled, the broker redelivers them",
		slog.String("queue", s.w.queues[p.queue].Name), slog.Uint64("gen", lost))
	return acts
}

var _ execute.Shell[Delivery] = (*shell)(nil)

// Jitter draws the retry jitter of an abandoned handler's job.
func (s *shell) Jitter(coreAction) float64 { return s.w.draw() }

// Now reads the worker's clock.
func (s *shell) Now() time.Time { return s.w.cfg.Clock.Now() }

// AfterFunc times on the worker's clock.
func (s *shell) AfterFunc(d time.Duration, f func()) execute.Timer {
	return s.w.cfg.Clock.AfterFunc(d, f)
}

// RunHandler runs a job's handler (a *UnknownKindError when its kind has
// none) on the calling goroutine and settles the job as its result says.
func (s *shell) RunHandler(a coreAction) {
	env := a.Job
	h, ok := s.handlers[env.Kind]
	obs := s.w.cfg.Observer
	// The parent has no deadline of its own (StopTimeout cancels it), so
	// DeadlineExceeded is the timeout's.
	ctx := s.deadline(a.Queue, a.Delay)
	var observed func(RunOutcome)
	var started time.Time
	if obs != nil {
		started = s.w.cfg.Clock.Now()
		ctx, observed = obs.Run(ctx, RunInfo{Job: jobContext(env, a.Msg.Priority(), s.w.queues[a.Queue]), Ext: env.Ext,
			Redelivered: a.Msg.Redelivered(), Started: started, DueAt: dueAt(env.Ext)})
	}
	var result error
	if !ok {
		result = &UnknownKindError{Kind: env.Kind}
	} else {
		result = s.w.runHandler(ctx, h, env, a.Msg.Priority(), s.w.queues[a.Queue])
	}
	if result != nil && ctx.Err() == context.DeadlineExceeded {
		result = &TimeoutError{Timeout: a.Delay, Err: result}
	}
	var u float64 // the jitter of a retry: only a failed run needs it
	if result != nil {
		u = s.w.draw()
	}
	dec, publish := s.x.Decide(&a, result, u)
	if obs != nil {
		now := s.w.cfg.Clock.Now()
		if dec.Action == ActionRetry || dec.Action == ActionDefer {
			dec.Successor = settle.StampDue(dec.Successor, now.Add(dec.Delay))
		}
		observed(RunOutcome{Result: result, Action: dec.Action, Reason: dec.Reason, Delay: dec.Delay, Duration: now.Sub(started)})
	}
	s.x.HandlerDecided(&a, dec, publish)
}

// Before logs what the executor is about to do, where it is worth a line.
func (s *shell) Before(a coreAction) {
	log, q := s.w.cfg.Logger, s.w.queues[a.Queue]
	switch a.Kind {
	case workercore.Publish:
		if !a.Malformed {
			s.w.logDecision(s.ctx, q, a.Job, a.Decision)
			return
		}
		log.ErrorContext(s.ctx, "queuey: malformed envelope: dead-lettering it verbatim",
			slog.String("queue", q.Name), slog.String("error", a.Err.Error()))
		if obs := s.w.cfg.Observer; obs != nil {
			obs.Malformed(s.ctx, q.Name)
		}
	case workercore.StartTimer:
		log.WarnContext(s.ctx, "queuey: could not settle job: returning it to its queue",
			slog.String("job_id", a.Job.ID), slog.String("queue", q.Name),
			slog.String("error", a.Err.Error()), slog.Duration("requeue_delay", a.Delay))
	case workercore.Drop:
		log.WarnContext(s.ctx, "queuey: the job's subscription ended before it was settled; the broker redelivers it",
			slog.String("job_id", a.Job.ID), slog.String("queue", q.Name))
	case workercore.Abandon:
		// Its goroutine is lost to the pool until it returns: another
		// takes its place, so the subscription keeps its prefetch.
		log.ErrorContext(s.ctx, "queuey: handler ignored its context past its timeout: its job is settled as timed out, and the handler abandoned",
			append(jobLogAttrs(q, a.Job), slog.Duration("timeout", a.Delay), slog.Duration("grace", AbandonGrace))...)
		p := s.pools[a.Queue]
		p.max.Add(1)
		p.spawn()
	case workercore.Late:
		log.WarnContext(s.ctx, "queuey: an abandoned handler returned at last; what it returned is dropped", jobLogAttrs(q, a.Job)...)
		s.pools[a.Queue].max.Add(-1)
	}
}

// After logs a job rerouted to the dead-letter queue, and a settlement
// that failed (the broker redelivers the job: at least once, never lost).
func (s *shell) After(a coreAction, rerouted string, err error) time.Duration {
	log, q := s.w.cfg.Logger, s.w.queues[a.Queue]
	switch {
	case rerouted != "":
		log.ErrorContext(s.ctx, "queuey: job dead-lettered: no hold can take its "+a.Decision.Action.String(),
			append(jobLogAttrs(q, a.Job), slog.Duration("delay", a.Decision.Delay), slog.String("reason", rerouted))...)
	case err == nil:
	case a.Kind == workercore.Ack:
		log.WarnContext(s.ctx, "queuey: ack failed; the broker redelivers the job", slog.String("job_id", a.Job.ID),
			slog.String("queue", q.Name), slog.String("error", err.Error()))
	case a.Kind == workercore.Requeue:
		log.WarnContext(s.ctx, "queuey: requeue failed; the broker redelivers the job when the channel closes",
			slog.String("job_id", a.Job.ID), slog.String("queue", q.Name), slog.String("error", err.Error()))
	}
	return 0
}

// logDecision logs a job that was not simply acknowledged. Built only off
// the hot path: an acknowledged job logs nothing.
func (w *Worker) logDecision(ctx context.Context, q QueueConfig, env Envelope, dec settle.Decision) {
	log := w.cfg.Logger
	attrs := jobLogAttrs(q, env)
	switch dec.Action {
	case ActionDefer:
		log.InfoContext(ctx, "queuey: job deferred", append(attrs, slog.Duration("delay", dec.Delay), slog.String("reason", dec.Reason))...)
	case ActionRetry:
		var panicErr *PanicError
		if errors.As(dec.Err, &panicErr) {
			attrs = append(attrs, slog.String("stack", string(panicErr.Stack)))
		}
		log.WarnContext(ctx, "queuey: job failed, retrying", append(attrs, slog.Duration("delay", dec.Delay), slog.String("error", dec.Err.Error()))...)
	case ActionDeadLetter:
		log.ErrorContext(ctx, "queuey: job dead-lettered", append(attrs, slog.String("reason", dec.Reason), slog.String("error", dec.Err.Error()))...)
	}
}

// jobLogAttrs are the attributes that name a job of queue q in the
// worker's logs.
func jobLogAttrs(q QueueConfig, env Envelope) []any {
	return []any{slog.String("job_id", env.ID), slog.String("queue", q.Name), slog.String("kind", env.Kind),
		slog.Int("attempt", env.Attempt), slog.Int("deferrals", env.Deferrals)}
}

// runHandler calls the handler, turning a panic into a *PanicError.
func (w *Worker) runHandler(ctx context.Context, h erasedHandler, env Envelope, priority uint8, q QueueConfig) (result error) {
	defer func() {
		if v := recover(); v != nil {
			result = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	jc := jobContext(env, priority, q)
	if len(w.cfg.Middleware) == 0 {
		return h.run(ctx, env.Payload, jc)
	}
	return w.runWrapped(ctx, h, env.Payload, jc)
}

// jobContext is what a handler run knows of its job, a job of queue q.
func jobContext(env Envelope, priority uint8, q QueueConfig) JobContext {
	opts, _ := jobopts.Read(env)  // the decoder refused options of the wrong shape
	errs, _ := AttemptErrors(env) // a history that does not parse is none
	return JobContext{
		ID: env.ID, Kind: env.Kind, Queue: env.Queue, Attempt: env.Attempt,
		MaxAttempts: opts.Policy(q).MaxAttempts,
		Deferrals:   env.Deferrals, Priority: priority, EnqueuedAt: env.EnqueuedAt,
		Errors: errs,
	}
}

// runWrapped runs h inside the middleware. It is apart from runHandler
// because the closure it builds would move runHandler's envelope to the
// heap on every job, middleware or not: one allocation of 144 bytes per
// job in BenchmarkConsume (membroker, allocs/op 12 against 11).
func (w *Worker) runWrapped(ctx context.Context, h erasedHandler, payload json.RawMessage, jc JobContext) error {
	return w.chain(0, func(ctx context.Context, jc JobContext) error { return h.run(ctx, payload, jc) })(ctx, jc)
}

// chain is the handling from middleware i on, ending in handle.
func (w *Worker) chain(i int, handle func(context.Context, JobContext) error) func(context.Context, JobContext) error {
	if i == len(w.cfg.Middleware) {
		return handle
	}
	mw, next := w.cfg.Middleware[i], w.chain(i+1, handle)
	return func(ctx context.Context, jc JobContext) error { return mw(ctx, jc, next) }
}
