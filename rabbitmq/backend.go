package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

var _ queuey.Backend = (*Backend)(nil)

// ErrBackendClosed is wrapped by the error of every call made on a Backend
// after its Close.
var ErrBackendClosed = errors.New("rabbitmq: backend closed")

// The headers DeadLetter sets on every message it publishes.
const (
	// HeaderDeathReason is the dead-letter header carrying why the job was
	// dead-lettered (an AMQP long string), cut to MaxReason bytes.
	HeaderDeathReason = "x-death-reason"
	// HeaderOriginalQueue is the dead-letter header carrying the work queue
	// the job was dead-lettered from (an AMQP long string).
	HeaderOriginalQueue = "x-original-queue"
	// HeaderAttempts is the dead-letter header carrying how many attempts
	// were made: an AMQP signed 64-bit integer ('l'), an int64 in amqp091,
	// the type RabbitMQ itself uses for x-delivery-count.
	HeaderAttempts = "x-attempts"
)

// Options configure a Backend. The zero value is ready to use: every field
// documents its default.
type Options struct {
	// Topology names the dead-letter and hold queues and sets the hold
	// granularities. Each of its fields documents its default (".dead",
	// ".deferred", 1 second and 1 second).
	Topology

	// SkipDeadLetterQueues makes Declare leave each queue's dead-letter
	// queue (q + DeadSuffix) alone, for deployments that create it
	// themselves. DeadLetter still publishes there and fails with
	// ErrReturned while it does not exist; a quorum work queue still
	// dead-letters there, and the broker drops silently what reaches its
	// delivery limit while it does not exist. Defaults to false: Declare
	// declares the dead-letter queue, durable and without arguments.
	SkipDeadLetterQueues bool

	// MaxMessageSize is the largest message body, in bytes, the backend
	// publishes. A larger one is refused before it is sent, with an error
	// wrapping queuey.ErrJobTooLarge: RabbitMQ refuses a body over its
	// max_message_size by closing the publishing channel. Set it to the
	// broker's max_message_size if that is not the default. Defaults to
	// 16 MiB (16,777,216 bytes), RabbitMQ 4's default.
	MaxMessageSize int

	// Blocked, if set, tells the backend when the broker blocks and
	// unblocks the connection's publishing (connection.blocked: RabbitMQ
	// stops reading from publishing connections during a memory or disk
	// alarm): pass conn.NotifyBlocked(make(chan amqp.Blocking, 1)) of the
	// connection the channels come from. While the broker blocks, the
	// backend logs it at WARN, and a publish whose wait for its confirm ends
	// says so: its error wraps ErrPublishingBlocked, with the broker's
	// reason, besides queuey.ErrMaybeEnqueued. The backend stops reading it
	// at Close. Defaults to nil: the backend does not know. A backend made
	// by Connect needs none: it follows connection.blocked on each
	// connection it makes, when the connection reports it (amqp091's do).
	Blocked <-chan amqp.Blocking

	// Logger receives declarations at DEBUG and refused declarations, a
	// reopened publishing channel and consumers ended by the broker at WARN,
	// with snake_case attributes (queue, dead_queue, hold_queue, ttl_ms,
	// consumer_tag, error). Defaults to discarding everything.
	Logger *slog.Logger
}

// DefaultMaxMessageSize is RabbitMQ 4's default max_message_size, the
// default of Options.MaxMessageSize.
const DefaultMaxMessageSize = 16 << 20

// ErrPublishingBlocked is wrapped, with the broker's reason, by the error of
// a publish whose wait for its confirm ended while the broker was blocking
// the connection's publishing (a memory or disk alarm): the job may have
// been enqueued, and will be once the alarm clears if it was. The backend
// knows only with Options.Blocked.
var ErrPublishingBlocked = errors.New("rabbitmq: the broker is blocking publishers")

// Backend is queuey's backend on RabbitMQ. It implements queuey.Backend on
// channels of one connection, which the caller owns: a
// *amqp091.Connection, or a *membroker.Connection in tests.
//
// It keeps its channels apart, so that what the broker refuses on one cannot
// take the others down:
//
//   - one publishing channel in confirm mode (a publisher), on which nothing
//     is ever declared: every publish is mandatory and waits for its confirm,
//     and concurrent publishes pipeline. When the broker closes it over one
//     message (a channel exception, such as a body over the broker's
//     max_message_size), the publishes in flight on it fail and a fresh
//     channel replaces it: later publishes go through;
//   - one channel for hold-queue declarations, opened on the first hold. A
//     refused declaration closes it; the next hold opens a fresh one, so
//     one refusal does not disable every later hold;
//   - a fresh channel per Consume, with Qos(prefetch, 0, false);
//   - a throwaway channel per queue Declare declares, closed afterwards.
//
// A Backend made by New does not reconnect: once the connection is gone,
// its calls fail with errors that wrap amqp091's amqp.ErrClosed and, when
// the broker said why, its *amqp.Error. One made by Connect owns its
// connection and keeps it up (see Connect).
//
// A Backend is safe for concurrent use. Close releases its channels.
type Backend struct {
	open func() (Channel, error)
	sup  *supervisor // nil unless made by Connect: the caller owns the connection
	// closeCtx ends when Close begins: waits for a reconnection, and for
	// the connection to open a channel, end with it.
	closeCtx    context.Context
	cancelClose context.CancelFunc
	top         Topology
	skipDead    bool
	logger      *slog.Logger
	maxSize     int

	// pubMu guards pub and swapped. supervise replaces pub when the broker
	// closes its channel over one message, and closes done when the
	// backend can publish no more.
	pubMu   sync.Mutex
	pub     *publisher
	swapped chan struct{} // closed when pub is replaced, or done
	closing bool          // Close has begun: supervise replaces nothing
	done    chan struct{}

	// holdLock serialises the hold channel's reopening and declarations, so
	// that a refused declaration closes the channel under nobody else's
	// declaration. amqp091 serialises a channel's RPCs anyway. It is a
	// channel so that waiting for it honours ctx.
	holdLock chan struct{}
	hold     Channel // guarded by holdLock; nil until the first hold or after a refusal
	// holdArgs caches each hold queue's name and declaration arguments,
	// pure functions of its queue and TTL; guarded by holdLock, and
	// emptied when it reaches maxHoldDecls (fine delays with a long cap
	// have many TTLs). The tables are never modified: the client library
	// only encodes them.
	holdArgs map[holdKey]holdDecl

	tags atomic.Uint64 // consumer tag counter

	// blocked is the broker's reason while it blocks publishing (see
	// Options.Blocked), "" otherwise; stopWatch ends watchBlocked.
	blocked   atomic.Pointer[string]
	stopWatch chan struct{}

	// now and sleep are the backend's clock, for the hold warm-up: the
	// real one, or the simulator's (internal/backendclock).
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu       sync.Mutex
	closed   bool
	declared map[string]queuey.QueueConfig // WithDefaults applied
	// ripe is when each declared work queue's ladder is old enough to hold
	// jobs: HoldWarmup after this process first declared it.
	ripe      map[string]time.Time
	warm      map[string]bool // the ladder's warm marker is known to exist
	consumers map[*consumer]struct{}

	closeOnce sync.Once
	closeErr  error
}

// Channels adapts a connection's Channel method to what New takes, whatever
// concrete channel type it returns:
//
//	backend, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{})
//
// works with conn a *amqp091.Connection and with a *membroker.Connection.
func Channels[C Channel](open func() (C, error)) func() (Channel, error) {
	return func() (Channel, error) {
		ch, err := open()
		if err != nil {
			return nil, err // never a typed nil in the interface
		}
		return ch, nil
	}
}

// New returns a Backend whose channels open calls return, typically
// Channels(conn.Channel). It validates opts and opens the publishing
// channel; the hold channel opens on the first hold. The caller keeps
// ownership of the connection: Close closes the backend's channels only.
func New(open func() (Channel, error), opts Options) (*Backend, error) {
	if open == nil {
		return nil, errors.New("rabbitmq: New: open is nil")
	}
	return newBackend(open, opts, nil)
}

// newBackend is New, supervised by sup if it is not nil.
func newBackend(open func() (Channel, error), opts Options, sup *supervisor) (*Backend, error) {
	if err := opts.Topology.Validate(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ch, err := open()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: opening the publishing channel: %w", err)
	}
	pub, err := newPublisher(ch, logger)
	if err != nil {
		_ = ch.Close()
		return nil, err
	}
	maxSize := opts.MaxMessageSize
	if maxSize <= 0 {
		maxSize = DefaultMaxMessageSize
	}
	closeCtx, cancelClose := context.WithCancel(context.Background())
	b := &Backend{
		open:        open,
		sup:         sup,
		closeCtx:    closeCtx,
		cancelClose: cancelClose,
		top:         opts.Topology.WithDefaults(),
		skipDead:    opts.SkipDeadLetterQueues,
		logger:      logger,
		maxSize:     maxSize,
		pub:         pub,
		swapped:     make(chan struct{}),
		done:        make(chan struct{}),
		holdLock:    make(chan struct{}, 1),
		holdArgs:    make(map[holdKey]holdDecl),
		declared:    make(map[string]queuey.QueueConfig),
		ripe:        make(map[string]time.Time),
		warm:        make(map[string]bool),
		consumers:   make(map[*consumer]struct{}),
		now:         time.Now,
		sleep:       sleepCtx,
		stopWatch:   make(chan struct{}),
	}
	go b.supervise(pub)
	if opts.Blocked != nil {
		go b.watchBlocked(opts.Blocked)
	}
	return b, nil
}

// watchBlockedOf follows notes, a new connection's connection.blocked, on
// a goroutine of its own; a connection that goes unblocks what it blocked.
func (b *Backend) watchBlockedOf(notes <-chan amqp.Blocking) {
	go func() {
		b.watchBlocked(notes)
		b.blocked.Store(nil)
	}()
}

// watchBlocked follows the broker blocking and unblocking publishing until
// the notifications end (the connection closed) or the backend closes.
func (b *Backend) watchBlocked(notes <-chan amqp.Blocking) {
	for {
		select {
		case n, ok := <-notes:
			if !ok {
				return
			}
			if n.Active {
				reason := n.Reason
				if reason == "" {
					reason = "no reason given"
				}
				b.blocked.Store(&reason)
				b.logger.Warn("rabbitmq: the broker is blocking publishers: publishes wait until it unblocks", "reason", reason)
			} else {
				b.blocked.Store(nil)
				b.logger.Info("rabbitmq: the broker unblocked publishers")
			}
		case <-b.stopWatch:
			return
		}
	}
}

// whileBlocked adds to err that the broker is blocking publishers, if it
// is.
func (b *Backend) whileBlocked(err error) error {
	if reason := b.blocked.Load(); reason != nil {
		return fmt.Errorf("%w; %w: %s", err, ErrPublishingBlocked, *reason)
	}
	return err
}

// supervise watches the publishing channel: when the broker closes it over
// one message (a channel exception; the connection is still there), it
// opens a fresh one and watches that. Under a supervisor, when the
// connection has gone (or no fresh channel opens on it), it waits for the
// next connection. When Close was called, the supervision failed, or,
// unsupervised, the connection has gone or no fresh channel opens, it
// closes done.
func (b *Backend) supervise(p *publisher) {
	for {
		<-p.Done()
		cause := p.Err()
		b.pubMu.Lock()
		closing := b.closing
		b.pubMu.Unlock()
		var next *publisher
		switch {
		case closing: // Close closed it: open no other
		case channelException(cause):
			next = b.reopen(cause)
			if next == nil && b.sup != nil {
				// No fresh channel opens: the connection went too. The
				// supervisor brings another.
				next = b.reconnected(cause)
			}
		case b.sup != nil:
			next = b.reconnected(cause)
		}
		b.pubMu.Lock()
		if next != nil && b.closing {
			b.pubMu.Unlock()
			_ = next.Close()
			next = nil
			b.pubMu.Lock()
		}
		close(b.swapped)
		b.swapped = make(chan struct{})
		if next == nil {
			close(b.done)
			b.pubMu.Unlock()
			return
		}
		b.pub = next
		b.pubMu.Unlock()
		p = next
	}
}

// reconnected waits for the supervisor's next connection and opens the
// publishing channel on it; nil once the backend is closing or the
// supervision has failed.
func (b *Backend) reconnected(cause error) *publisher {
	var gen uint64
	for {
		var err error
		if gen, err = b.sup.await(b.closeCtx, gen); err != nil {
			return nil
		}
		ch, err := b.open()
		if err != nil {
			continue // gone again: await the next one
		}
		p, err := newPublisher(ch, b.logger)
		if err != nil {
			_ = ch.Close()
			continue
		}
		b.logger.Info("rabbitmq: publishing resumed on the new connection", "gen", gen, "cause", cause)
		return p
	}
}

// redeclare declares every queue declared through the backend on conn, a
// new connection, before it is in use: a queue that vanished with the
// broker's restart (a transient one, or all of them after a node was
// reset) is back before anything is published or consumed. A refusal ends
// the supervision: another declaration of the queue exists.
func (b *Backend) redeclare(conn Conn) error {
	b.mu.Lock()
	queues := make([]queuey.QueueConfig, 0, len(b.declared))
	for _, q := range b.declared {
		queues = append(queues, q)
	}
	b.mu.Unlock()
	slices.SortFunc(queues, func(x, y queuey.QueueConfig) int { return strings.Compare(x.Name, y.Name) })
	for _, q := range queues {
		if _, err := b.declareOn(conn.Channel, q); err != nil {
			return err
		}
	}
	return nil
}

// channelException reports whether err is the broker closing one channel
// (a soft error: 404, 406 and the like), not the whole connection.
func channelException(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Server && ae.Recover
}

// reopen opens a fresh publishing channel after the broker closed the last
// one with cause; nil if it cannot.
func (b *Backend) reopen(cause error) *publisher {
	ch, err := b.open()
	if err != nil {
		b.logger.Warn("rabbitmq: the broker closed the publishing channel, and no fresh one opens", "cause", cause, "error", err)
		return nil
	}
	p, err := newPublisher(ch, b.logger)
	if err != nil {
		_ = ch.Close()
		b.logger.Warn("rabbitmq: the broker closed the publishing channel, and no fresh one opens", "cause", cause, "error", err)
		return nil
	}
	b.logger.Warn("rabbitmq: the broker closed the publishing channel; publishing goes on on a fresh one", "cause", cause)
	return p
}

// checkSize refuses a message body of n bytes over MaxMessageSize.
func (b *Backend) checkSize(n int) error {
	if n > b.maxSize {
		return fmt.Errorf("%w: the message is %d bytes, over the %d of MaxMessageSize", queuey.ErrJobTooLarge, n, b.maxSize)
	}
	return nil
}

// publisher returns the publishing channel's publisher and a channel closed
// when it is replaced (or the backend can publish no more).
func (b *Backend) publisher() (*publisher, <-chan struct{}) {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	return b.pub, b.swapped
}

// publish publishes msg to queue and waits for its confirm, refusing a body
// over MaxMessageSize before anything is sent. A publish that found the
// publishing channel already closed by the broker over another message, and
// so was never sent, waits for the fresh channel and goes out on it.
func (b *Backend) publish(ctx context.Context, queue string, msg amqp.Publishing) error {
	if err := b.checkSize(len(msg.Body)); err != nil {
		return fmt.Errorf("rabbitmq: publish to queue %q: %w", queue, err)
	}
	for {
		p, swapped := b.publisher()
		err := p.Publish(ctx, queue, msg)
		if errors.Is(err, queuey.ErrMaybeEnqueued) || (err != nil && ctx.Err() != nil) {
			return b.whileBlocked(err)
		}
		// A publish that found the channel closed was never sent: it waits
		// for the fresh channel, after a channel exception or, supervised,
		// a reconnection.
		if err == nil || !errors.Is(err, ErrPublisherClosed) || !(channelException(err) || b.sup != nil) {
			return err
		}
		select {
		case <-swapped:
		case <-b.done:
		case <-ctx.Done():
			if b.sup != nil {
				return fmt.Errorf("rabbitmq: publish to queue %q: %w; it was not sent: %w", queue, ErrDisconnected, ctx.Err())
			}
			return err
		}
		select {
		case <-b.done:
			return b.endedErr(err)
		default:
		}
	}
}

// endedErr is the error of a publish that found the backend unable to
// publish for good: err, or the supervised connection's failure.
func (b *Backend) endedErr(err error) error {
	if b.sup != nil {
		if _, _, supErr := b.sup.current(); supErr != nil && !errors.Is(supErr, ErrDisconnected) {
			return fmt.Errorf("%w (%w)", supErr, err)
		}
	}
	return err
}

// Topology returns the topology the backend runs with, defaults filled in.
func (b *Backend) Topology() Topology { return b.top }

// Declare declares each queue (its defaults filled in by WithDefaults) and
// remembers it for Publish with a hold and for DeadLetter.
//
// Every config is checked first (QueueConfig.Validate, and
// Topology.CheckQueueName, so that a name too long for its hold or
// dead-letter queues never reaches the client library): if any is invalid,
// nothing is declared. Then each queue is declared on a throwaway channel
// of its own: the work queue q, durable, with WorkQueueArgs; and its
// dead-letter queue, durable and without arguments, unless
// SkipDeadLetterQueues. A queue the broker refuses (an existing queue with
// other arguments: PRECONDITION_FAILED) is logged at WARN and reported in
// the returned error, which names it and wraps the *amqp.Error; the
// remaining queues are still declared, and the backend's other operations
// keep working. Declare stops at the first channel it cannot open (the
// connection is gone). Declaring a queue again replaces what is remembered
// about it once the broker has accepted the new declaration.
//
// ctx is checked between declarations; a declaration itself cannot be
// interrupted.
func (b *Backend) Declare(ctx context.Context, queues ...queuey.QueueConfig) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	configs := make([]queuey.QueueConfig, len(queues))
	for i, q := range queues {
		q = q.WithDefaults()
		if err := q.Validate(); err != nil {
			return err
		}
		if err := b.top.CheckQueueName(q.Name); err != nil {
			return err
		}
		if _, err := b.top.RetryTTL(q.Retry.Cap); err != nil {
			// Every retry that reached the cap would be refused.
			return fmt.Errorf("rabbitmq: queue %q: retry cap: %w", q.Name, err)
		}
		configs[i] = q
	}
	var errs []error
	for _, q := range configs {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		refused, err := b.declare(ctx, q)
		if err != nil && !refused {
			return errors.Join(append(errs, err)...)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.mu.Lock()
		b.declared[q.Name] = q
		_, known := b.ripe[q.Name]
		b.mu.Unlock()
		if !known && !b.top.ClassicHolds {
			b.startWarmup(ctx, q.Name)
		}
	}
	return errors.Join(errs...)
}

// sleepCtx waits for d or ctx's end.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startWarmup sets when queue's ladder, just declared by this process for
// the first time, is old enough to hold jobs: now, if its warm marker
// exists (some process saw the ladder HoldWarmup old before), or after
// HoldWarmup.
func (b *Backend) startWarmup(ctx context.Context, queue string) {
	ripe, warm := b.now().Add(max(b.top.HoldWarmup, 0)), false
	if b.top.HoldWarmup > 0 {
		if ch, err := b.openChannel(ctx, "looking for the warm marker of queue "+strconv.Quote(queue)); err == nil {
			// A missing queue closes the channel (404): it is throwaway.
			if _, err := ch.QueueDeclarePassive(b.top.WarmQueue(queue), true, false, false, false, nil); err == nil {
				ripe, warm = b.now(), true
			}
			_ = ch.Close()
		}
	}
	b.mu.Lock()
	if _, ok := b.ripe[queue]; !ok {
		b.ripe[queue], b.warm[queue] = ripe, warm
	}
	b.mu.Unlock()
}

// youngQuorum reports whether queue is a quorum work queue this process
// declared, with the ladder, and may still be in its warm-up: a quorum
// queue forgets what it holds on a kill -9 as young as a rung does.
func (b *Backend) youngQuorum(queue string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cfg, ok := b.declared[queue]
	return ok && cfg.Type == queuey.Quorum && !b.warm[queue] && !b.top.ClassicHolds
}

// awaitRipe waits until queue's ladder is HoldWarmup old
// (Topology.HoldWarmup); then, the first time, it declares the ladder's
// warm marker, so that later processes need not wait.
func (b *Backend) awaitRipe(ctx context.Context, queue string) error {
	b.mu.Lock()
	ripe, warm := b.ripe[queue], b.warm[queue]
	b.mu.Unlock()
	if wait := ripe.Sub(b.now()); wait > 0 {
		if err := b.sleep(ctx, wait); err != nil {
			return fmt.Errorf("rabbitmq: hold for queue %q: waiting %s for its hold ladder to be old enough to survive a crash: %w", queue, wait, err)
		}
	}
	if warm || b.top.HoldWarmup <= 0 {
		return nil
	}
	marker := b.top.WarmQueue(queue)
	ch, err := b.openChannel(ctx, "declaring the warm marker of queue "+strconv.Quote(queue))
	if err == nil {
		_, err = ch.QueueDeclare(marker, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		_ = ch.Close()
	}
	if err != nil {
		// The hold goes on; the next one tries again.
		b.logger.Warn("rabbitmq: declaring the hold ladder's warm marker failed", "queue", queue, "hold_queue", marker, "error", err)
		return nil
	}
	b.mu.Lock()
	b.warm[queue] = true
	b.mu.Unlock()
	return nil
}

// declare declares one queue and its dead-letter queue on a throwaway
// channel. refused reports whether the broker refused a declaration (as
// opposed to the channel not opening).
func (b *Backend) declare(ctx context.Context, q queuey.QueueConfig) (refused bool, err error) {
	return b.declareOn(func() (Channel, error) {
		return b.openChannel(ctx, "declaring queue "+strconv.Quote(q.Name))
	}, q)
}

// declareOn is declare on a throwaway channel open returns.
func (b *Backend) declareOn(open func() (Channel, error), q queuey.QueueConfig) (refused bool, err error) {
	ch, err := open()
	if err != nil {
		return false, err
	}
	defer func() { _ = ch.Close() }()

	dead := b.top.DeadQueue(q.Name)
	args := WorkQueueArgs(q.Type == queuey.Quorum, *q.MaxPriority, dead)
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, args); err != nil {
		b.logger.Warn("rabbitmq: queue declaration refused", "queue", q.Name, "type", q.Type.String(), "error", err)
		return true, fmt.Errorf("rabbitmq: declare queue %q (%s): %w", q.Name, q.Type, err)
	}
	b.logger.Debug("rabbitmq: declared queue", "queue", q.Name, "type", q.Type.String(), "max_priority", int(*q.MaxPriority))
	if !b.top.ClassicHolds {
		if refused, err := b.declareLadder(ch, q.Name); err != nil {
			return refused, err
		}
	}
	if b.skipDead {
		return false, nil
	}
	if _, err := ch.QueueDeclare(dead, true, false, false, false, b.top.deadQueueArgs()); err != nil {
		if otherType(err) {
			// Declared with the other hold queues by another process (or
			// before a switch): use it as it is. The refusal closed the
			// channel, so look on a fresh one.
			kept := b.keepDeadQueue(open, q.Name, dead, err)
			if kept == nil {
				return false, nil
			}
			err = errors.Join(err, fmt.Errorf("declaring it as the other hold queues would: %w", kept))
		}
		b.logger.Warn("rabbitmq: dead-letter queue declaration refused", "queue", q.Name, "dead_queue", dead, "error", err)
		return true, fmt.Errorf("rabbitmq: declare dead-letter queue %q of queue %q: %w", dead, q.Name, err)
	}
	b.logger.Debug("rabbitmq: declared dead-letter queue", "queue", q.Name, "dead_queue", dead)
	return false, nil
}

// declareLadder declares queue's relay queue and ladder rungs on ch, the
// relay queue first: a rung dead-letters into it.
func (b *Backend) declareLadder(ch Channel, queue string) (refused bool, err error) {
	relay := b.top.RelayQueue(queue)
	if _, err := ch.QueueDeclare(relay, true, false, false, false, relayQueueArgs()); err != nil {
		b.logger.Warn("rabbitmq: relay queue declaration refused", "queue", queue, "hold_queue", relay, "error", err)
		return true, fmt.Errorf("rabbitmq: declare relay queue %q of queue %q: %w", relay, queue, err)
	}
	for _, ttl := range b.top.Rungs() {
		name := b.top.LadderQueue(queue, ttl)
		if _, err := ch.QueueDeclare(name, true, false, false, false, ladderQueueArgs(queue, ttl, b.top)); err != nil {
			b.logger.Warn("rabbitmq: ladder queue declaration refused", "queue", queue, "hold_queue", name, "ttl_ms", ttl, "error", err)
			return true, fmt.Errorf("rabbitmq: declare ladder queue %q of queue %q: %w", name, queue, err)
		}
	}
	b.logger.Debug("rabbitmq: declared hold ladder", "queue", queue, "hold_queue", relay)
	return false, nil
}

// otherType reports whether err is RabbitMQ refusing a declaration because
// the queue exists with another x-queue-type.
func otherType(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed && strings.Contains(ae.Reason, "inequivalent arg 'x-queue-type'")
}

// keepDeadQueue declares dead again on a fresh channel, as the other
// HoldType would, after its declaration was refused (refusal) because it
// has the other type, and logs that it is used as it is. It returns nil if
// the broker accepted that.
func (b *Backend) keepDeadQueue(open func() (Channel, error), queue, dead string, refusal error) error {
	ch, err := open()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	other := b.top
	other.ClassicHolds = !b.top.ClassicHolds
	if _, err := ch.QueueDeclare(dead, true, false, false, false, other.deadQueueArgs()); err != nil {
		return err
	}
	b.logger.Warn("rabbitmq: the dead-letter queue exists with another queue type than this process's hold queues give it; using it as it is",
		"queue", queue, "dead_queue", dead, "classic_holds", b.top.ClassicHolds, "refusal", refusal.Error())
	return nil
}

// Publish publishes env to the work queue env.Queue, or with hold > 0
// through one of its hold queues, and returns once the broker has
// confirmed the publish.
//
// The message carries env.Encode() as its body, content type
// application/json, delivery mode persistent, priority env.Priority,
// message id env.ID, type env.Kind and timestamp env.EnqueuedAt, and never a
// per-message expiration: the hold queue's x-message-ttl alone decides
// when it returns.
//
// hold is rounded up to the retry granularity (queuey.HoldRetry) or the
// deferred granularity (queuey.HoldDeferred); see Topology.RetryTTL. A
// rounded hold of zero publishes straight to env.Queue, which need not have
// been declared through this backend but must exist (ErrReturned
// otherwise). A positive one needs env.Queue declared through this backend
// (queuey.ErrUnknownQueue otherwise) and at most MaxHoldTTL milliseconds
// (queuey.ErrDelayTooLong otherwise). With the hold ladder (the default) it
// goes to the first rung of its walk (docs/hold-ladder.md), at priority 0
// with its own priority and what remains in headers; a consumer of
// env.Queue relays it on. With ClassicHolds its hold queue is declared on
// the hold channel immediately before every publish into it, never cached,
// so an idle hold queue that expired comes back; a refused hold-queue
// declaration (one that exists with other arguments) is logged at WARN and
// returned, wrapping the *amqp.Error.
//
// With the ladder, a hold, and a publish into a quorum work queue, first
// waits out what remains of Topology.HoldWarmup after this process first
// declared env.Queue, unless the ladder's warm marker existed then; ctx
// bounds that wait.
//
// A deferral is published at the queue's top priority (see
// queuey.QueueConfig.TopPriority), which it comes back to its queue with
// (the relay restores it; a classic hold queue keeps it). On a classic queue with x-max-priority that puts it
// ahead of everything still on the queue. On a quorum queue it is a
// priority in the high tier: RabbitMQ 4.0 to 4.2 serve two tiers 2:1 (high
// first, but one normal message for every two high ones when both wait),
// 4.3 serves its levels strictly. Either way "ahead of the backlog" means
// ahead of what is still on the queue, not of what consumers already hold.
func (b *Backend) Publish(ctx context.Context, env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	// The body is encoded into a pooled buffer: the client library has
	// written it out (membroker has copied it) by the time Publish returns.
	buf := bodyBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledBody {
			bodyBufs.Put(buf)
		}
	}()
	body, err := env.AppendEncoded((*buf)[:0])
	if err != nil {
		return fmt.Errorf("rabbitmq: publish job %q: %w", env.ID, err)
	}
	*buf = body
	var ttl int64
	switch kind {
	case queuey.HoldRetry:
		ttl, err = b.top.RetryTTL(hold)
	case queuey.HoldDeferred:
		ttl, err = b.top.DeferredTTL(hold)
	default:
		return fmt.Errorf("rabbitmq: publish job %q: unknown HoldKind %d", env.ID, int(kind))
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: publish job %q to queue %q: %w", env.ID, env.Queue, err)
	}
	msg := jobPublishing(env, body)
	if ttl == 0 {
		if err := checkShortName(env.Queue); err != nil {
			return err
		}
		if b.youngQuorum(env.Queue) {
			if err := b.awaitRipe(ctx, env.Queue); err != nil {
				return err
			}
		}
		return b.publish(ctx, env.Queue, msg)
	}
	if !b.isDeclared(env.Queue) {
		return fmt.Errorf("rabbitmq: hold job %q for queue %q: %w (a hold needs the queue declared through this backend)",
			env.ID, env.Queue, queuey.ErrUnknownQueue)
	}
	select {
	case <-b.done:
		p, _ := b.publisher()
		return p.Err() // no use declaring a hold queue nothing can be published to
	default:
	}
	if err := b.checkSize(len(body)); err != nil { // before declaring a hold queue for nothing
		return fmt.Errorf("rabbitmq: hold job %q for queue %q: %w", env.ID, env.Queue, err)
	}
	if !b.top.ClassicHolds {
		if err := b.awaitRipe(ctx, env.Queue); err != nil {
			return err
		}
		rung, after := b.top.rung(ttl)
		return b.publish(ctx, b.top.LadderQueue(env.Queue, rung), ladderPublishing(msg, env.Priority, after))
	}
	holdQueue, err := b.declareHold(ctx, env.Queue, ttl)
	if err != nil {
		return err
	}
	return b.publish(ctx, holdQueue, msg)
}

// jobPublishing is the message that carries env, encoded as body: a job's
// properties are copies of its envelope's, for operators' tools.
func jobPublishing(env queuey.Envelope, body []byte) amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Priority:     env.Priority,
		MessageId:    env.ID,
		Type:         env.Kind,
		Timestamp:    env.EnqueuedAt,
		Body:         body,
	}
}

// bodyBufs pools the buffers Publish encodes envelopes into.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledBody is the largest buffer bodyBufs keeps.
const maxPooledBody = 64 << 10

// holdKey names a classic hold queue: its work queue and TTL in milliseconds.
type holdKey struct {
	queue string
	ttl   int64
}

// maxHoldDecls bounds Backend.holdArgs.
const maxHoldDecls = 4096

// holdDecl is a hold queue's name and declaration arguments, both pure
// functions of its holdKey, cached so a hold builds neither again.
type holdDecl struct {
	name string
	args amqp.Table
}

// declareHold declares queue's hold queue for ttl milliseconds on the hold
// channel, opening a fresh one if there is none or it closed, and returns
// its name.
func (b *Backend) declareHold(ctx context.Context, queue string, ttl int64) (string, error) {
	select {
	case b.holdLock <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-b.holdLock }()
	if err := b.checkOpen(); err != nil {
		return "", err
	}
	key := holdKey{queue, ttl}
	decl, ok := b.holdArgs[key]
	if !ok {
		if len(b.holdArgs) >= maxHoldDecls {
			clear(b.holdArgs)
		}
		decl.name, decl.args = b.top.HoldQueue(queue, ttl), holdQueueArgs(queue, ttl)
		b.holdArgs[key] = decl
	}
	name, args := decl.name, decl.args
	if b.hold == nil || b.hold.IsClosed() {
		ch, err := b.openChannel(ctx, "hold queue declarations")
		if err != nil {
			return "", fmt.Errorf("rabbitmq: hold queue %q: %w", name, err)
		}
		b.hold = ch
	}
	if _, err := b.hold.QueueDeclare(name, true, false, false, false, args); err != nil {
		// A refusal has closed the channel; a failure of the connection
		// has too. Either way the next hold starts on a fresh one.
		_ = b.hold.Close()
		b.hold = nil
		if !connectionGone(err) { // else the caller's failure to settle says it
			b.logger.Warn("rabbitmq: hold queue declaration refused",
				"queue", queue, "hold_queue", name, "ttl_ms", ttl, "error", err)
		}
		if declaredByOlderBuild(err, ttl) {
			return "", fmt.Errorf("rabbitmq: declare hold queue %q of queue %q: it exists with x-expires %d ms (2 × TTL), "+
				"declared by a process running an older queuey, whose rule loses jobs at small TTLs; this build declares %d ms. "+
				"Upgrade every process that holds jobs for %q (the old hold queue then expires on its own once idle) or delete %q while it is empty "+
				"(see \"Hold-queue expiry\" in the rabbitmq package documentation): %w",
				name, queue, 2*ttl, holdExpires(ttl), queue, name, err)
		}
		return "", fmt.Errorf("rabbitmq: declare hold queue %q of queue %q: %w", name, queue, err)
	}
	if b.logger.Enabled(ctx, slog.LevelDebug) { // on every hold: build no attributes in vain
		b.logger.DebugContext(ctx, "rabbitmq: declared hold queue", "queue", queue, "hold_queue", name, "ttl_ms", ttl)
	}
	return name, nil
}

// declaredByOlderBuild reports whether err is RabbitMQ refusing the
// declaration of a hold queue for ttl ms because it exists with the x-expires
// older queuey builds gave it, 2 × TTL (holdExpires differs from that only
// under a minute).
func declaredByOlderBuild(err error, ttl int64) bool {
	old := strconv.FormatInt(2*ttl, 10)
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed &&
		strings.Contains(ae.Reason, "inequivalent arg 'x-expires'") &&
		(strings.HasSuffix(ae.Reason, "current is '"+old+"'") || // same type (rabbit_misc:equivalence_fail/4, val/1, v4.0.5)
			strings.Contains(ae.Reason, "current is the value '"+old+"'")) // another type
}

// MaxReason is the most bytes of a dead-letter reason DeadLetter sends: a
// longer one (a fatal error quoting a whole response body, say) is cut,
// ending in "…". Headers travel in one frame, and RabbitMQ closes the
// connection over a frame larger than frame_max (128 KiB by default).
const MaxReason = 4096

// DeadLetter publishes body, byte for byte, to queue's dead-letter queue
// with the headers x-death-reason (reason, cut to MaxReason bytes),
// x-original-queue (queue) and x-attempts (attempts, as an int64), the
// timestamp property set to now, persistent, and returns once the broker
// has confirmed it. queue must
// have been declared through this backend (queuey.ErrUnknownQueue
// otherwise). A dead-letter queue that does not exist (see
// SkipDeadLetterQueues) is an error wrapping ErrReturned.
func (b *Backend) DeadLetter(ctx context.Context, queue string, body []byte, reason string, attempts int) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if !b.isDeclared(queue) {
		return fmt.Errorf("rabbitmq: dead-letter to queue %q: %w (dead-lettering needs the queue declared through this backend)",
			queue, queuey.ErrUnknownQueue)
	}
	if !b.top.ClassicHolds && !b.skipDead { // a quorum dead-letter queue this process declared
		if err := b.awaitRipe(ctx, queue); err != nil {
			return err
		}
	}
	return b.publish(ctx, b.top.DeadQueue(queue), amqp.Publishing{
		Headers: amqp.Table{
			HeaderDeathReason:   cutReason(reason),
			HeaderOriginalQueue: queue,
			HeaderAttempts:      int64(attempts),
		},
		DeliveryMode: amqp.Persistent,
		Timestamp:    b.now(), // when it was dead-lettered: queuey dead show prints it
		Body:         body,
	})
}

// cutReason cuts reason to MaxReason bytes, at a character's start, ending
// in "…".
func cutReason(reason string) string {
	if len(reason) <= MaxReason {
		return reason
	}
	const ellipsis = "…"
	cut := MaxReason - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut] + ellipsis
}

// Consume opens a fresh channel, sets Qos(prefetch, 0, false) on it and
// consumes queue with manual acknowledgements under a generated consumer
// tag ("queuey-" and a per-backend counter). prefetch must be between 1 and
// 65535. The queue need not have been declared through this backend, but
// must exist. ctx bounds starting the subscription, not its life.
//
// The Consumer's Deliveries channel is unbuffered and yields each message
// once; settle each with Ack or Requeue (basic.reject with requeue, never
// basic.nack) exactly once: a second settlement is an error that never
// reaches the broker (where an unknown delivery tag would close the
// channel). The subscription ends:
//
//   - on Consumer.Cancel, the graceful stop: basic.cancel, then Deliveries
//     closes once what the broker had already sent has been read, and
//     deliveries received can still be settled until Close; Err is nil;
//   - on Consumer.Close or Backend.Close: the channel closes, so the broker
//     requeues every delivery not yet settled (a failed delivery, on a
//     quorum queue) and settling one afterwards fails; Err is nil;
//   - when the broker closes the channel or the connection (Err wraps the
//     *amqp.Error), or cancels the consumer because its queue was deleted
//     (Err says so). The channel stays open until Close, so deliveries
//     received before a broker cancel can still be settled.
//
// One goroutine per consumer forwards deliveries; it exits when Deliveries
// closes. Call Close in every case to release the channel.
func (b *Backend) Consume(ctx context.Context, queue string, prefetch int) (queuey.Consumer, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	if err := checkShortName(queue); err != nil {
		return nil, err
	}
	if prefetch < 1 || prefetch > 65535 {
		return nil, fmt.Errorf("rabbitmq: consume queue %q: prefetch %d is outside 1..65535", queue, prefetch)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch, err := b.openChannel(ctx, "consuming queue "+strconv.Quote(queue))
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: consume queue %q: qos %d: %w", queue, prefetch, err)
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	tag := "queuey-" + strconv.FormatUint(b.tags.Add(1), 10)
	in, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: consume queue %q: %w", queue, err)
	}
	c := &consumer{
		b:        b,
		ch:       ch,
		queue:    queue,
		tag:      tag,
		prefetch: prefetch,
		gen:      1,
		in:       in,
		closes:   closes,
		out:      make(chan queuey.Delivery),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.ctx, c.cancelCtx = context.WithCancel(context.Background())
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: consume queue %q: %w", queue, ErrBackendClosed)
	}
	b.consumers[c] = struct{}{}
	_, ladder := b.declared[queue]
	ladder = ladder && !b.top.ClassicHolds
	b.mu.Unlock()
	b.logger.Debug("rabbitmq: consuming", "queue", queue, "consumer_tag", tag, "prefetch", prefetch)
	go c.forward()
	if !ladder {
		return c, nil
	}
	relay, err := b.Consume(ctx, b.top.RelayQueue(queue), relayPrefetch)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("rabbitmq: consume queue %q: its relay queue: %w", queue, err)
	}
	rc := &relayingConsumer{consumer: c, relay: relay.(*consumer)}
	rc.ctx, rc.stop = context.WithCancel(context.Background())
	rc.wg.Add(1)
	go rc.run()
	return rc, nil
}

// relayGrace bounds how long Close waits for relays in flight.
const relayGrace = 5 * time.Second

// relayPrefetch is how many relay deliveries a consumer relays at once.
const relayPrefetch = 64

// relayingConsumer is a consumer of a work queue with a hold ladder: it
// also consumes the queue's relay queue and relays what arrives there
// (Backend.Relay), each delivery on a goroutine of its own, as many at
// once as relayPrefetch lets the broker send.
type relayingConsumer struct {
	*consumer
	relay *consumer
	ctx   context.Context // ends at Close: relays in flight give up
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// run relays until the relay subscription ends.
func (c *relayingConsumer) run() {
	defer c.wg.Done()
	for d := range c.relay.Deliveries() {
		d := d.(*delivery)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.relayOne(d)
		}()
	}
}

// relayOne relays d, then acknowledges it; a relay that failed returns it
// to the relay queue after a pause, so that a rung an operator deleted
// does not spin the relay.
func (c *relayingConsumer) relayOne(d *delivery) {
	b := c.consumer.b
	if d.Stale() {
		return // its channel went: the broker has requeued it
	}
	if err := b.Relay(c.ctx, c.consumer.queue, d.d); err != nil {
		b.logger.Warn("rabbitmq: relaying a held job failed; it stays in the relay queue", "queue", c.consumer.queue, "error", err)
		_ = sleepCtx(c.ctx, time.Second)
		_ = d.Requeue()
		return
	}
	if err := d.Ack(); err != nil {
		// Its channel went after the publish: the broker requeues it, and
		// the job goes on twice (at least once, never lost).
		b.logger.Debug("rabbitmq: relayed job's acknowledgement failed", "queue", c.consumer.queue, "error", err)
	}
}

// Cancel cancels both subscriptions; relays in flight finish.
func (c *relayingConsumer) Cancel() error {
	return errors.Join(c.consumer.Cancel(), c.relay.Cancel())
}

// Close cancels the relay subscription, lets the relays in flight finish
// for up to relayGrace (less if the backend is closing: a relay that gives
// up leaves its job in the relay queue, or, if its publish was sent, runs
// it twice), then closes both.
func (c *relayingConsumer) Close() error {
	_ = c.relay.Cancel()
	err := c.consumer.Close()
	stop := context.AfterFunc(c.consumer.b.closeCtx, c.stop)
	defer stop()
	grace := time.AfterFunc(relayGrace, c.stop)
	defer grace.Stop()
	c.wg.Wait()
	c.stop()
	return errors.Join(err, c.relay.Close())
}

// Done is closed once the backend can publish no more: its publishing
// channel has closed, because the connection dropped or Close was called
// (or the broker closed the channel and no fresh one would open), and every
// publish that was waiting for a confirm has failed; from then on Publish
// and DeadLetter fail at once, without calling the broker. A channel the
// broker closed over one message does not close it: a fresh one replaces
// it. A backend made by New closes it when its connection drops; one made
// by Connect only on Close or when its supervision fails (StateFailed).
func (b *Backend) Done() <-chan struct{} { return b.done }

// Close closes every consumer's channel (the broker requeues their
// unsettled deliveries), then the hold channel and the publishing channel;
// publishes still waiting for their confirm fail. A backend made by Connect
// then closes its connection, which it owns; one made by New leaves the
// connection to its caller. Later calls to the backend fail with
// ErrBackendClosed. Close returns the error of closing the channels the
// first time, nil afterwards.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		consumers := make([]*consumer, 0, len(b.consumers))
		for c := range b.consumers {
			consumers = append(consumers, c)
		}
		b.mu.Unlock()
		// Waits for the connection end now, a hold declaration's among
		// them, which holds holdLock while it waits.
		b.cancelClose()
		var errs []error
		for _, c := range consumers {
			errs = append(errs, c.Close())
		}
		b.holdLock <- struct{}{}
		if b.hold != nil {
			errs = append(errs, b.hold.Close())
			b.hold = nil
		}
		<-b.holdLock
		close(b.stopWatch)
		b.pubMu.Lock()
		b.closing = true
		p := b.pub
		b.pubMu.Unlock()
		errs = append(errs, p.Close())
		<-b.done // supervise has seen it, and opens no other
		if b.sup != nil {
			b.sup.close() // and the connection, which the backend owns
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// Ready reports whether the backend can reach the broker now, for a
// readiness probe: nil while it has a connection up; an error wrapping
// ErrDisconnected while a backend made by Connect is reconnecting;
// ErrConnectionFailed once it has stopped trying (Connect's StateFailed);
// ErrBackendClosed after Close; and, for a backend made by New, one
// wrapping ErrPublisherClosed once its connection has dropped, for good.
// It never waits, and never calls the broker.
func (b *Backend) Ready() error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if b.sup != nil {
		_, _, err := b.sup.current()
		return err
	}
	select {
	case <-b.done:
		p, _ := b.publisher()
		return p.Err()
	default:
		return nil
	}
}

func (b *Backend) checkOpen() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrBackendClosed
	}
	return nil
}

func (b *Backend) isDeclared(queue string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.declared[queue]
	return ok
}

// openChannel opens a channel for purpose. When the connection is gone,
// the error wraps the client library's (amqp.ErrClosed) and, if the
// publishing channel learned why before, the broker's *amqp.Error.
func (b *Backend) openChannel(ctx context.Context, purpose string) (Channel, error) {
	if b.sup != nil {
		// The wait ends with Close too: a caller waiting with no deadline
		// (a hold declaration holds holdLock meanwhile) must not hold Close
		// up until the broker is back.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(b.closeCtx, cancel)()
		var gen uint64
		for {
			var err error
			if gen, err = b.sup.await(ctx, gen); err != nil {
				if b.closeCtx.Err() != nil {
					err = ErrBackendClosed
				}
				return nil, fmt.Errorf("rabbitmq: opening a channel for %s: %w", purpose, err)
			}
			if ch, err := b.open(); err == nil {
				return ch, nil
			}
		}
	}
	ch, err := b.open()
	if err == nil {
		return ch, nil
	}
	err = fmt.Errorf("rabbitmq: opening a channel for %s: %w", purpose, err)
	var cause *amqp.Error
	p, _ := b.publisher()
	if pubErr := p.Err(); errors.As(pubErr, &cause) {
		err = fmt.Errorf("%w (the broker closed the publishing channel before: %w)", err, cause)
	}
	return nil, err
}

// checkShortName refuses a queue name that an AMQP short string cannot
// carry, before it reaches the client library: amqp091 refuses it too, but
// leaves the whole connection unusable.
func checkShortName(queue string) error {
	switch {
	case queue == "":
		return errors.New("rabbitmq: queue name is empty")
	case len(queue) > maxNameLen:
		return fmt.Errorf("rabbitmq: queue %.40q…: name is %d bytes, over the %d AMQP allows", queue, len(queue), maxNameLen)
	}
	return nil
}

// consumer is one subscription: a channel of its own, and the goroutine
// forwarding its deliveries.
type consumer struct {
	b        *Backend
	queue    string
	tag      string
	prefetch int
	// in and closes are the current channel's; only forward touches them.
	in     <-chan amqp.Delivery
	closes chan *amqp.Error
	out    chan queuey.Delivery
	// ctx ends at Cancel or Close: a resubscription waiting for the
	// connection gives up.
	ctx       context.Context
	cancelCtx context.CancelFunc

	cancelled atomic.Bool   // Cancel or Close was called: the end is ours
	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
	done      chan struct{} // closed when forward has returned (after out)

	mu   sync.Mutex
	ch   Channel     // the current channel: replaced when a supervised consumer resumes
	gen  uint64      // ch's number, from 1
	lost chan uint64 // made by Lost; receives gen when ch is lost
	err  error       // why out was closed; set before it is
}

// channel returns the consumer's current channel.
func (c *consumer) channel() Channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}

// Lost yields the generation of each channel the subscription loses
// before it resumes on a fresh one, which only a supervised backend's
// consumers do (see Connect): every delivery made on a lost channel can no
// longer be settled, since the broker has requeued it. The generation is
// sent before any delivery of the next one, and the subscription waits
// for it to be received. Without a call to Lost, nothing is sent.
func (c *consumer) Lost() <-chan uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost == nil {
		c.lost = make(chan uint64)
	}
	return c.lost
}

var _ queuey.Consumer = (*consumer)(nil)

// Deliveries yields the queue's messages; it is closed when the
// subscription ends.
func (c *consumer) Deliveries() <-chan queuey.Delivery { return c.out }

// Err reports why Deliveries was closed: nil after Cancel or Close (or
// Backend.Close); otherwise an error saying why, wrapping the broker's
// *amqp.Error when it closed the channel or the connection. It is nil
// while the subscription runs.
func (c *consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Cancel stops new deliveries (basic.cancel) and returns once the broker
// has confirmed it. Deliveries closes once what the broker had already
// sent has been read; deliveries received can still be settled until
// Close. Cancelling a consumer whose subscription has already ended is not
// an error.
func (c *consumer) Cancel() error {
	c.cancelled.Store(true)
	c.cancelCtx() // a resubscription waiting for the connection gives up: the end is ours
	select {
	case <-c.done:
		return nil
	default:
	}
	ch := c.channel()
	if err := ch.Cancel(c.tag, false); err != nil {
		if ch.IsClosed() {
			return nil // ended anyway; Err says why
		}
		return fmt.Errorf("rabbitmq: cancel consumer %s on queue %q: %w", c.tag, c.queue, err)
	}
	return nil
}

// Close closes the consumer's channel and returns once Deliveries is
// closed: the broker requeues every delivery not yet settled, and settling
// one afterwards fails. It is safe to call more than once and concurrently
// with receiving; later calls return nil.
func (c *consumer) Close() error {
	c.closeOnce.Do(func() {
		c.cancelled.Store(true)
		close(c.closing)
		c.cancelCtx()
		ch := c.channel()
		c.closeErr = ch.Close()
		<-c.done
		if fresh := c.channel(); fresh != ch {
			// A resubscription installed a fresh channel meanwhile: it
			// was cancelled, not closed.
			_ = fresh.Close()
		}
		c.b.mu.Lock()
		delete(c.b.consumers, c)
		c.b.mu.Unlock()
		c.b.logger.Debug("rabbitmq: consumer closed", "queue", c.queue, "consumer_tag", c.tag)
		if c.closeErr != nil {
			c.closeErr = fmt.Errorf("rabbitmq: close consumer %s on queue %q: %w", c.tag, c.queue, c.closeErr)
		}
	})
	return c.closeErr
}

// forward hands deliveries to out until the subscription ends, then
// records why and closes out.
func (c *consumer) forward() {
	var err error
	for {
		err = c.pump()
		if err != nil && c.cancelled.Load() {
			err = nil // our own Cancel or Close raced the broker's end
		}
		if err == nil || c.b.sup == nil || !c.channel().IsClosed() {
			break // ours, unsupervised, or the broker cancelled the consumer
		}
		c.b.logger.Warn("rabbitmq: consumer lost its channel: resuming on a fresh one",
			"queue", c.queue, "consumer_tag", c.tag, "gen", c.gen, "error", err.Error())
		if !c.notifyLost() {
			err = nil // closed meanwhile
			break
		}
		if err = c.resubscribe(); err != nil || c.cancelled.Load() {
			break
		}
	}
	if err != nil {
		c.b.logger.Warn("rabbitmq: consumer ended by the broker", "queue", c.queue, "consumer_tag", c.tag, "error", err)
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.out)
	close(c.done)
}

// notifyLost tells Lost's receiver that the current channel is lost; false
// if the consumer was closed first.
func (c *consumer) notifyLost() bool {
	c.mu.Lock()
	lost, gen := c.lost, c.gen
	c.mu.Unlock()
	if lost == nil {
		return true
	}
	select {
	case lost <- gen:
		return true
	case <-c.closing:
		return false
	}
}

// resubscribe consumes the queue again on a fresh channel, once the
// supervisor has a connection: nil once it does (or the consumer was
// cancelled or closed meanwhile); an error for a refusal retrying cannot
// fix (the queue is gone, access refused) or the supervision's end.
func (c *consumer) resubscribe() error {
	for {
		if c.cancelled.Load() {
			return nil
		}
		ch, err := c.b.openChannel(c.ctx, "consuming queue "+strconv.Quote(c.queue))
		if err != nil {
			if c.cancelled.Load() {
				return nil
			}
			return fmt.Errorf("rabbitmq: consumer %s on queue %q: resuming: %w", c.tag, c.queue, err)
		}
		in, closes, err := c.subscribe(ch)
		if err != nil {
			_ = ch.Close()
			if channelException(err) {
				// A refusal of this subscription (404: the queue is gone;
				// 403, 405), which the next connection would repeat.
				return fmt.Errorf("rabbitmq: consumer %s on queue %q: resuming: %w", c.tag, c.queue, err)
			}
			continue // the connection went again (320 CONNECTION_FORCED and the like)
		}
		c.mu.Lock()
		c.ch, c.in, c.closes = ch, in, closes
		c.gen++
		gen := c.gen
		c.mu.Unlock()
		if c.cancelled.Load() { // Cancel or Close came while it was down
			_ = ch.Cancel(c.tag, false)
		}
		c.b.logger.Info("rabbitmq: consumer resumed", "queue", c.queue, "consumer_tag", c.tag, "gen", gen)
		return nil
	}
}

// subscribe sets ch up as Consume does.
func (c *consumer) subscribe(ch Channel) (<-chan amqp.Delivery, chan *amqp.Error, error) {
	if err := ch.Qos(c.prefetch, 0, false); err != nil {
		return nil, nil, err
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	in, err := ch.Consume(c.queue, c.tag, false, false, false, false, nil)
	if err != nil {
		return nil, nil, err
	}
	return in, closes, nil
}

// pump forwards deliveries and returns why it stopped: nil for our own
// Cancel or Close.
func (c *consumer) pump() error {
	for {
		select {
		case <-c.closing:
			return nil
		case e, ok := <-c.closes:
			return c.closedErr(e, ok)
		case d, ok := <-c.in:
			if !ok {
				return c.inClosed()
			}
			select {
			case c.out <- &delivery{d: d, c: c, gen: c.gen}:
			case <-c.closing:
				return nil // not handed out: requeued as the channel closes
			case e, ok := <-c.closes:
				return c.closedErr(e, ok)
			}
		}
	}
}

// inClosed tells why the delivery channel closed: our Cancel or Close; the
// channel or connection closed (amqp091 and membroker both mark the channel
// closed before they close its consumers, and hand the NotifyClose
// listener the broker's reason, if any, no later); or the broker cancelled
// the consumer.
func (c *consumer) inClosed() error {
	switch {
	case c.channel().IsClosed():
		e, ok := <-c.closes
		return c.closedErr(e, ok)
	case c.cancelled.Load():
		return nil
	}
	return fmt.Errorf("rabbitmq: consumer %s on queue %q cancelled by the broker (was the queue deleted?)", c.tag, c.queue)
}

// closedErr is the error for the channel's closing, e being what its
// NotifyClose listener received: the broker's reason, or nothing for a
// clean close.
func (c *consumer) closedErr(e *amqp.Error, ok bool) error {
	if ok && e != nil {
		return fmt.Errorf("rabbitmq: consumer %s on queue %q: channel closed by the broker: %w", c.tag, c.queue, e)
	}
	if c.cancelled.Load() {
		return nil
	}
	return fmt.Errorf("rabbitmq: consumer %s on queue %q: channel closed: %w", c.tag, c.queue, amqp.ErrClosed)
}

// delivery is one message handed to a consumer.
type delivery struct {
	d    amqp.Delivery
	c    *consumer
	gen  uint64      // the consumer's channel it came on
	done atomic.Bool // settled
}

// Generation is the number of the consumer's channel the delivery came on:
// 1, then one more each time a supervised consumer resumes (see Lost).
func (d *delivery) Generation() uint64 { return d.gen }

// Stale reports whether the delivery can no longer be settled: the
// channel it came on has closed, so the broker has requeued it. The worker
// asks before it publishes a job's successor, since a successor published
// then would run beside the requeued job.
func (d *delivery) Stale() bool {
	c := d.c
	c.mu.Lock()
	ch, gen := c.ch, c.gen
	c.mu.Unlock()
	return gen != d.gen || ch.IsClosed()
}

var _ queuey.Delivery = (*delivery)(nil)

func (d *delivery) Body() []byte      { return d.d.Body }
func (d *delivery) Priority() uint8   { return d.d.Priority }
func (d *delivery) Redelivered() bool { return d.d.Redelivered }

// Ack acknowledges the message (basic.ack, one delivery).
func (d *delivery) Ack() error {
	return d.settle("ack", func() error { return d.d.Ack(false) })
}

// Requeue returns the message to its queue with basic.reject and requeue,
// never basic.nack: on RabbitMQ 4.3 only a reject counts toward a quorum
// queue's delivery limit.
func (d *delivery) Requeue() error {
	return d.settle("requeue", func() error { return d.d.Reject(true) })
}

func (d *delivery) settle(op string, f func() error) error {
	if !d.done.CompareAndSwap(false, true) {
		// A second settlement would close the channel with 406
		// PRECONDITION_FAILED (unknown delivery tag): refuse it here.
		return fmt.Errorf("rabbitmq: %s delivery %d on queue %q: already settled", op, d.d.DeliveryTag, d.c.queue)
	}
	if err := f(); err != nil {
		return fmt.Errorf("rabbitmq: %s delivery %d on queue %q: %w", op, d.d.DeliveryTag, d.c.queue, err)
	}
	return nil
}
