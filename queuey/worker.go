package queuey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// WorkerConfig configures a Worker. The zero value is ready to use.
type WorkerConfig struct {
	// Logger receives the worker's logs: deferrals at INFO, retries at
	// WARN, dead letters and failures to settle at ERROR. Defaults to
	// discarding them.
	Logger *slog.Logger
	// Clock times the wait before a job that could not be settled is
	// returned to its queue. Defaults to the real clock.
	Clock clock.Clock
	// StopTimeout bounds how long Run waits, once its context is done, for
	// running handlers to return and their jobs to be settled. When it runs
	// out, handlers' contexts are cancelled, and so is the settling of
	// their jobs: each goes back to its queue unacknowledged (requeued),
	// never lost. Defaults to 30 seconds.
	StopTimeout time.Duration
	// RequeueDelay is how long a job whose successor could not be published
	// (or which could not be dead-lettered) waits before it is returned to
	// its queue, so that a persistent failure is retried at a bounded rate,
	// never in a hot loop. Defaults to 1 second.
	RequeueDelay time.Duration
	// Rand draws the uniform numbers in [0, 1) for retry jitter. Defaults
	// to math/rand/v2's Float64.
	Rand func() float64
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.New()
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 30 * time.Second
	}
	if c.RequeueDelay == 0 {
		c.RequeueDelay = time.Second
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
	declared, err := declare(ctx, backend, queues)
	if err != nil {
		return nil, err
	}
	w := &Worker{backend: backend, cfg: cfg.withDefaults(), handlers: map[string]erasedHandler{}}
	for _, q := range queues {
		w.queues = append(w.queues, declared[q.Name])
	}
	return w, nil
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

// Run consumes the worker's queues until ctx is done or the broker ends a
// subscription. Up to each queue's prefetch handlers run at once. When ctx
// is done it stops consuming, waits up to StopTimeout for running handlers
// and settles their jobs, and returns nil. When a subscription ends under
// it (the connection dropped) it does the same and returns an error wrapping
// the broker's; nothing is acknowledged that was not settled.
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

	// readers forward deliveries to handlers; inflight counts the handlers.
	// A reader is the only one to add to inflight, so waiting for the
	// readers first makes waiting for inflight safe.
	var readers, inflight sync.WaitGroup
	ended := make(chan error, len(consumers))
	for i, c := range consumers {
		q := w.queues[i]
		readers.Add(1)
		go func() {
			defer readers.Done()
			// Handler goroutines live as long as the subscription and take
			// deliveries from work; a new one starts only when every one
			// is busy, up to q.Prefetch of them.
			work := make(chan Delivery)
			handlers := 0
			for d := range c.Deliveries() {
				if consumeCtx.Err() != nil {
					// Stopping: start no new handler; what arrives before
					// the cancel takes effect goes straight back.
					_ = d.Requeue()
					continue
				}
				select {
				case work <- d:
					continue
				default:
				}
				if handlers == q.Prefetch {
					work <- d
					continue
				}
				handlers++
				inflight.Go(func() {
					w.process(handlerCtx, consumeCtx.Done(), q, d)
					for d := range work {
						w.process(handlerCtx, consumeCtx.Done(), q, d)
					}
				})
			}
			close(work)
			ended <- c.Err()
		}()
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-ended:
		if err != nil {
			runErr = fmt.Errorf("queuey: consumer ended: %w", err)
		}
	}
	// Stop new deliveries; keep the channels open so that running handlers
	// can still settle their jobs.
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
	go func() { readers.Wait(); inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-w.cfg.Clock.After(w.cfg.StopTimeout):
		w.cfg.Logger.WarnContext(ctx, "queuey: stop timeout: cancelling running handlers",
			slog.Duration("stop_timeout", w.cfg.StopTimeout))
		cancelHandlers()
		<-done
	}
	return runErr
}

func (w *Worker) draw() float64 {
	w.randMu.Lock()
	defer w.randMu.Unlock()
	return w.cfg.Rand()
}

// process runs one delivery to completion: handler, decision, successor,
// and only then the acknowledgement. stopping is closed once the worker is
// stopping (its context ended or a subscription did).
func (w *Worker) process(ctx context.Context, stopping <-chan struct{}, q QueueConfig, d Delivery) {
	log := w.cfg.Logger
	env, err := DecodeEnvelope(d.Body())
	if err != nil {
		log.ErrorContext(ctx, "queuey: malformed envelope: dead-lettering it verbatim",
			slog.String("queue", q.Name), slog.String("error", err.Error()))
		if err := PublishMalformed(ctx, w.backend, q, d.Body()); err != nil {
			w.requeueLater(ctx, stopping, q, d, "", err)
			return
		}
		w.ack(ctx, q, d, "")
		return
	}

	w.mu.Lock()
	h, ok := w.handlers[env.Kind]
	w.mu.Unlock()
	var result error
	if !ok {
		result = &UnknownKindError{Kind: env.Kind}
	} else {
		result = w.runHandler(ctx, h, env, d.Priority())
	}

	dec := Decide(env, result, q, w.draw())
	if dec.Action == ActionAck {
		w.ack(ctx, q, d, env.ID)
		return
	}
	// Built only off the hot path: an acknowledged job logs nothing.
	attrs := []any{slog.String("job_id", env.ID), slog.String("queue", q.Name), slog.String("kind", env.Kind),
		slog.Int("attempt", env.Attempt), slog.Int("deferrals", env.Deferrals)}
	switch dec.Action {
	case ActionDefer:
		log.InfoContext(ctx, "queuey: job deferred", append(attrs, slog.Duration("delay", dec.Delay), slog.String("reason", dec.Reason))...)
	case ActionRetry:
		var panicErr *PanicError
		if errors.As(result, &panicErr) {
			attrs = append(attrs, slog.String("stack", string(panicErr.Stack)))
		}
		log.WarnContext(ctx, "queuey: job failed, retrying", append(attrs, slog.Duration("delay", dec.Delay), slog.String("error", result.Error()))...)
	case ActionDeadLetter:
		log.ErrorContext(ctx, "queuey: job dead-lettered", append(attrs, slog.String("reason", dec.Reason), slog.String("error", result.Error()))...)
	}
	err = PublishSuccessor(ctx, w.backend, q, dec)
	if err != nil {
		w.requeueLater(ctx, stopping, q, d, env.ID, err)
		return
	}
	w.ack(ctx, q, d, env.ID)
}

// runHandler calls the handler, turning a panic into a *PanicError.
func (w *Worker) runHandler(ctx context.Context, h erasedHandler, env Envelope, priority uint8) (result error) {
	defer func() {
		if v := recover(); v != nil {
			result = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.run(ctx, env.Payload, JobContext{
		ID: env.ID, Kind: env.Kind, Queue: env.Queue, Attempt: env.Attempt,
		Deferrals: env.Deferrals, Priority: priority, EnqueuedAt: env.EnqueuedAt,
	})
}

func (w *Worker) ack(ctx context.Context, q QueueConfig, d Delivery, id string) {
	if err := d.Ack(); err != nil {
		// The broker redelivers it: at least once, never lost.
		w.cfg.Logger.ErrorContext(ctx, "queuey: ack failed", slog.String("job_id", id),
			slog.String("queue", q.Name), slog.String("error", err.Error()))
	}
}

// requeueLater returns a job whose settlement failed to its queue after
// RequeueDelay (at once if the worker is stopping), unacknowledged until
// then: never lost, never in a hot loop.
func (w *Worker) requeueLater(ctx context.Context, stopping <-chan struct{}, q QueueConfig, d Delivery, id string, cause error) {
	w.cfg.Logger.ErrorContext(ctx, "queuey: could not settle job: returning it to its queue",
		slog.String("job_id", id), slog.String("queue", q.Name), slog.String("error", cause.Error()),
		slog.Duration("requeue_delay", w.cfg.RequeueDelay))
	select {
	case <-w.cfg.Clock.After(w.cfg.RequeueDelay):
	case <-stopping:
	case <-ctx.Done():
	}
	if err := d.Requeue(); err != nil {
		w.cfg.Logger.ErrorContext(ctx, "queuey: requeue failed; the broker redelivers it when the channel closes",
			slog.String("job_id", id), slog.String("queue", q.Name), slog.String("error", err.Error()))
	}
}
