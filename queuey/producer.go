package queuey

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/internal/jobopts"
)

// ProducerConfig configures a Producer. The zero value is ready to use.
type ProducerConfig struct {
	// Logger receives the producer's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Clock stamps EnqueuedAt. Defaults to the real clock.
	Clock clock.Clock
	// NewID returns a fresh job ID. Defaults to 16 random bytes in hex.
	NewID func() string
	// Observer, if set, is told of every enqueue, for metrics and traces
	// (package queueyotel). Defaults to nil: nothing is observed.
	Observer Observer
	// MaxInFlight is the most jobs of one EnqueueMany awaiting the
	// broker's confirms at once. Zero or less means DefaultMaxInFlight
	// (128).
	MaxInFlight int
}

func (c ProducerConfig) withDefaults() ProducerConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.New()
	}
	if c.NewID == nil {
		c.NewID = randomID
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	return c
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Producer enqueues jobs. It is safe for concurrent use.
type Producer struct {
	backend Backend
	cfg     ProducerConfig
	mu      sync.Mutex
	queues  map[string]QueueConfig // declared through this producer's backend
}

// NewProducer validates the queues, declares them (with their dead-letter
// queues) through backend, and returns a producer for them.
func NewProducer(ctx context.Context, backend Backend, queues []QueueConfig, cfg ProducerConfig) (*Producer, error) {
	p := NewUndeclaredProducer(backend, cfg)
	_, declared, err := declare(ctx, backend, queues)
	if err != nil {
		return nil, err
	}
	p.queues = declared
	return p, nil
}

// NewUndeclaredProducer returns a producer that declares nothing, for a
// process that must not touch the topology. It can Enqueue; EnqueueAfter
// and Defer return ErrUnknownQueue, because a hold queue expiring into a
// queue this process never declared could lose the job silently.
func NewUndeclaredProducer(backend Backend, cfg ProducerConfig) *Producer {
	return &Producer{backend: backend, cfg: cfg.withDefaults(), queues: map[string]QueueConfig{}}
}

// declare validates queues and declares them with their defaults filled
// in, returning them so, in order and by name. The caller's slice is left
// as it was.
func declare(ctx context.Context, backend Backend, queues []QueueConfig) ([]QueueConfig, map[string]QueueConfig, error) {
	list := make([]QueueConfig, len(queues))
	byName := make(map[string]QueueConfig, len(queues))
	for i, q := range queues {
		if err := q.Validate(); err != nil {
			return nil, nil, err
		}
		if _, dup := byName[q.Name]; dup {
			return nil, nil, fmt.Errorf("queuey: queue %q is defined twice", q.Name)
		}
		q = q.WithDefaults()
		list[i] = q
		byName[q.Name] = q
	}
	if err := backend.Declare(ctx, list...); err != nil {
		return nil, nil, err
	}
	return list, byName, nil
}

// Enqueue publishes a job to run as soon as a worker takes it, at priority
// 0 unless WithPriority says otherwise, and returns its ID once the broker
// has confirmed it. opts are the job's own options (EnqueueOption); one
// the job or its queue cannot honour is refused with ErrInvalidOption.
//
// An error that wraps ErrMaybeEnqueued means the job was sent but its
// confirm never came (ctx ended while waiting, a nack, a closed channel or
// connection): it may run. The ID is returned with that error, so that a
// caller who enqueues it again can tell the two runs apart. Every other
// error returns "" and nothing was enqueued. The same holds for
// EnqueueAfter and Defer.
func (p *Producer) Enqueue(ctx context.Context, args JobArgs, opts ...EnqueueOption) (string, error) {
	return p.publish(ctx, args, 0, enqueueNow, opts)
}

// EnqueueAfter publishes a job to run after delay (rounded up, never down,
// to the backend's deferred granularity), joining the back of its queue at
// priority 0 (or WithPriority's). A delay of zero or less publishes it
// now, as Enqueue does; one longer than any hold can wait is refused with
// ErrDelayTooLong, before anything is sent. The queue must have been
// declared by NewProducer.
func (p *Producer) EnqueueAfter(ctx context.Context, args JobArgs, delay time.Duration, opts ...EnqueueOption) (string, error) {
	return p.publish(ctx, args, delay, enqueueAfter, opts)
}

// Defer publishes a job to run after delay, like EnqueueAfter, but at its
// queue's top priority, so it runs ahead of the backlog that piled up
// meanwhile. Its deferral count stays 0: the producer scheduled it, nothing
// deferred it. The queue must have been declared by NewProducer, and
// WithPriority is refused.
func (p *Producer) Defer(ctx context.Context, args JobArgs, delay time.Duration, opts ...EnqueueOption) (string, error) {
	return p.publish(ctx, args, delay, enqueueDeferred, opts)
}

// enqueueMode is which of the three producer calls is publishing.
type enqueueMode int

const (
	enqueueNow enqueueMode = iota
	enqueueAfter
	enqueueDeferred
)

func (p *Producer) publish(ctx context.Context, args JobArgs, delay time.Duration, mode enqueueMode, opts []EnqueueOption) (string, error) {
	args, o, err := applyOptions(args, opts)
	if err != nil {
		return "", err
	}
	if args == nil {
		return "", errors.New("queuey: enqueue of a nil job")
	}
	queue := args.Queue()
	if o.queue != "" {
		queue = o.queue
	}
	p.mu.Lock()
	q, declared := p.queues[queue]
	p.mu.Unlock()
	if mode != enqueueNow && !declared {
		return "", fmt.Errorf("%w: %q was not declared by this producer", ErrUnknownQueue, queue)
	}
	if !declared {
		q.Name = queue
	}
	if err := o.checkPriority(q, declared, mode); err != nil {
		return "", err
	}
	priority := o.priority
	if mode == enqueueDeferred {
		priority = q.TopPriority()
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return "", fmt.Errorf("queuey: encoding %s: %w", args.Kind(), err)
	}
	id := o.id
	if id == "" {
		id = p.cfg.NewID()
	}
	env := Envelope{
		Version: EnvelopeVersion, ID: id, Kind: args.Kind(), Queue: queue,
		Payload: payload, Attempt: 1, Priority: priority, EnqueuedAt: p.cfg.Clock.Now().UTC(),
	}
	env = jobopts.Write(env, o.envelopeOptions())
	var observed func(error)
	if p.cfg.Observer != nil {
		env, observed = observeEnqueue(ctx, p.cfg.Observer, env)
	}
	err = p.backend.Publish(ctx, env, delay, HoldDeferred)
	if observed != nil {
		observed(err)
	}
	if err != nil {
		if errors.Is(err, ErrMaybeEnqueued) {
			return env.ID, err
		}
		return "", err
	}
	if !p.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		return env.ID, nil // no attributes built for a log nobody reads
	}
	p.cfg.Logger.DebugContext(ctx, "queuey: enqueued", slog.String("job_id", env.ID), slog.String("kind", env.Kind),
		slog.String("queue", queue), slog.Duration("delay", delay), slog.Int("priority", int(priority)))
	return env.ID, nil
}

// observeEnqueue tells obs of env's enqueue, letting it add to env's Ext.
// It takes a copy of env: handing the Observer publish's own envelope by
// address moved that envelope to the heap on every Enqueue, Observer or
// not (one allocation of 144 bytes per job, which doubled the bytes
// BenchmarkSizingHour allocates: 110 MB against 58 MB per run).
func observeEnqueue(ctx context.Context, obs Observer, env Envelope) (Envelope, func(error)) {
	observed := obs.Enqueue(ctx, &env)
	return env, observed
}
