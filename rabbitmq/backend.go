package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"github.com/benbjohnson/clock"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

var _ queuey.Backend = (*Backend)(nil)

// ErrBackendClosed is wrapped by the error of every call made on a Backend
// after its Close.
var ErrBackendClosed = errors.New("rabbitmq: backend closed")

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

	// ServerVersion is the broker's release as it reports it when a
	// connection opens: conn.Properties["version"] of an amqp091
	// connection, conn.ServerVersion() of a membroker one. The backend
	// needs it on RabbitMQ 4.0, where only a queue argument can raise the
	// broker's consumer timeout above a job's Timeout
	// (docs/consumer-timeout.md). A backend made by Connect reads it from
	// each connection and ignores this field. Defaults to "": unknown, and
	// queues are declared without that argument.
	ServerVersion string

	// Clock times the hold ladder's warm-up (Topology.HoldWarmup) and a
	// Scheduler's ticks, and stamps dead letters, as queuey's WorkerConfig
	// and ProducerConfig Clock do theirs: a test may pass a clock.Mock.
	// Defaults to the real clock.
	Clock clock.Clock

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

	// serverVersion is the broker's release ("" if unknown): Options'
	// for New, the current connection's for Connect.
	serverVersion func() string

	// blocked is the broker's reason while it blocks publishing (see
	// Options.Blocked), "" otherwise; stopWatch ends watchBlocked.
	blocked   atomic.Pointer[string]
	stopWatch chan struct{}

	clock clock.Clock // Options.Clock

	mu       sync.Mutex
	closed   bool
	declared map[string]queuey.QueueConfig // WithDefaults applied
	// kept are the other queues the library declared through the
	// backend (a Scheduler's election queue), for redeclare.
	kept map[string]*keptQueue
	// ripe is when each declared work queue's ladder is old enough to hold
	// jobs: HoldWarmup after this process first declared it.
	ripe map[string]time.Time
	warm map[string]bool // the ladder's warm marker is known to exist
	// waitLogged are the queues whose warm-up wait has been logged.
	waitLogged map[string]bool
	consumers  map[*consumer]struct{}

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
	if opts.Clock == nil {
		opts.Clock = clock.New()
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
		waitLogged:  make(map[string]bool),
		consumers:   make(map[*consumer]struct{}),
		clock:       opts.Clock,
		stopWatch:   make(chan struct{}),
	}
	b.serverVersion = func() string { return opts.ServerVersion }
	if sup != nil {
		b.serverVersion = sup.serverVersion
	}
	go b.supervise(pub)
	if opts.Blocked != nil {
		go b.watchBlocked(opts.Blocked)
	}
	return b, nil
}

// Topology returns the topology the backend runs with, defaults filled in.
func (b *Backend) Topology() Topology { return b.top }

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
