package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/queuey/queuey/internal/redact"
	"github.com/queuey/queuey/internal/redial"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Backoff is the wait before each attempt to reconnect: exponential with
// full jitter, a uniform draw in [0, min(Max, Initial × 2^(n−1))) before
// attempt n. Full jitter spreads the reconnections of many processes that
// lost the same broker at once.
type Backoff struct {
	// Initial bounds the wait before the first attempt. Defaults to
	// DefaultBackoffInitial, 100 ms.
	Initial time.Duration
	// Max caps every wait. Defaults to DefaultBackoffMax, 5 s.
	Max time.Duration
}

// The defaults of Backoff. Max bounds how long after a broker's return a
// process waits to dial it again, since every wait is drawn below it; at
// 30 s, live RabbitMQ 4.3.6 saw one process come back 18.5 s after a
// restart that had kept it down 12 s (TestLiveFaultDefaultBackoffRecovery);
// at 5 s, 21 runs on 4.0.5 and 4.3.6 came back within 3.4 s.
// During a long outage each process then dials on average every Max/2:
// a hundred processes, 40 dials a second, which a broker shrugs off.
const (
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
)

// WithDefaults fills in the zero fields.
func (b Backoff) WithDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	return b
}

// Delay is the wait before attempt n (from 1), given u, a uniform draw in
// [0, 1).
func (b Backoff) Delay(n int, u float64) time.Duration {
	return b.core().Delay(n, u)
}

// core is b, defaults filled in, as the reconnection loop takes it.
func (b Backoff) core() redial.Backoff {
	b = b.WithDefaults()
	return redial.Backoff{Initial: b.Initial, Max: b.Max}
}

// ConnState is a supervised connection's state.
type ConnState int

const (
	// StateConnecting: an attempt to dial URL is starting.
	StateConnecting ConnState = iota + 1
	// StateConnected: connection Gen is up, the queues declared before are
	// declared again on it, and publishing and consuming resume.
	StateConnected
	// StateDisconnected: connection Gen is gone; Err says why. Publishes
	// wait for the next connection, within their context.
	StateDisconnected
	// StateFailed: the broker refused something that retrying cannot fix
	// (Err): access refused, or a queue declared again finds another
	// declaration. The backend stops: publishes fail and consumers end
	// with the error.
	StateFailed
	// StateClosed: Close was called.
	StateClosed
)

func (s ConnState) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateDisconnected:
		return "disconnected"
	case StateFailed:
		return "failed"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("ConnState(%d)", int(s))
}

// ConnEvent is one change of a supervised connection's state.
type ConnEvent struct {
	State ConnState
	// URL is the node dialled (Connecting, Connected), its password
	// redacted.
	URL string
	// Gen numbers the connections, from 1 (Connected, Disconnected).
	Gen uint64
	// Attempt counts the dial attempts since the last connection went
	// (Connecting), from 1.
	Attempt int
	// Delay is the backoff waited before this attempt (Connecting).
	Delay time.Duration
	// Err says why (Disconnected, Failed, and Connecting after a failed
	// attempt: the previous attempt's error). Its text names no password.
	Err error
}

// ConnectOptions configure Connect.
type ConnectOptions struct {
	// URLs are the nodes to dial, tried in turn, one per attempt: the nodes
	// of a cluster, or one broker. At least one is required.
	URLs []string
	// Dial opens a connection. Defaults to DialAMQP(amqp.Config{}).
	Dial Dialer
	// Backoff times the attempts to reconnect. Its fields document their
	// defaults.
	Backoff Backoff
	// OnState, if set, is called with every change of state, in order, on
	// the supervisor's goroutine: it must return promptly. A change takes
	// effect before it is reported: operations waiting for the connection
	// may already have resumed (connected) or failed (failed) when OnState
	// is called. The changes are logged too (Options.Logger): connected at
	// INFO, disconnected and failed attempts at WARN, failed at ERROR.
	OnState func(ConnEvent)
	// Rand draws the uniform numbers in [0, 1) for the backoff's jitter.
	// Defaults to math/rand/v2's Float64.
	Rand func() float64
	// FirstConnectTimeout bounds how long Connect dials before it has its
	// first connection; then its error wraps context.DeadlineExceeded and
	// the last attempt's error. Defaults to DefaultFirstConnectTimeout, 20 s: a
	// wrong host or port fails a process's start, rather than leaving it
	// retrying with nothing but WARN lines to show. Negative: no bound but
	// ctx's, for a process that may start before its broker. Once
	// connected, the backend reconnects without bound.
	FirstConnectTimeout time.Duration
}

// DefaultFirstConnectTimeout is ConnectOptions.FirstConnectTimeout's
// default: long enough for a broker that is restarting (a single node of
// RabbitMQ 4.0.5 or 4.3.6 took 3 to 8 s to accept connections again in
// the live fault runs, docs/reconnection.md), short enough to be a start
// failure a person notices.
const DefaultFirstConnectTimeout = 20 * time.Second

// ErrDisconnected is wrapped by the error of an operation that needed the
// connection while it was down and could not wait for it.
var ErrDisconnected = errors.New("rabbitmq: the connection is down, reconnecting")

// ErrConnectionFailed is wrapped by the errors of a supervised backend that
// has stopped reconnecting (StateFailed), with the broker's refusal.
var ErrConnectionFailed = errors.New("rabbitmq: the connection failed for good")

// Connect returns a Backend that owns its connection and keeps it up: it
// dials copts.URLs in turn until one answers, within ctx and
// copts.FirstConnectTimeout (20 s by default), and whenever the
// connection drops, dials again with copts.Backoff, declares again the
// queues declared before, reopens the publishing channel, and resumes every
// consumer on a fresh channel. Its state changes are logged and reported to
// copts.OnState.
//
// While the connection is down, Publish, DeadLetter and Declare wait for it
// within their context. A publish that was on the wire when it dropped is
// not republished: its error wraps queuey.ErrMaybeEnqueued. A consumer's
// Deliveries stays open across a reconnection, and deliveries made on the
// lost connection can no longer be settled: queuey.Worker drops their
// outcomes (the broker has requeued them).
//
// Refusals that retrying cannot fix end the supervision (StateFailed):
// access refused or a virtual host that does not exist when dialling, and a
// queue that, declared again, exists with other arguments. Ready tells a
// readiness probe whether the connection is up. Close closes the
// connection.
func Connect(ctx context.Context, copts ConnectOptions, opts Options) (*Backend, error) {
	if len(copts.URLs) == 0 {
		return nil, errors.New("rabbitmq: Connect: no URLs")
	}
	if copts.Dial == nil {
		for i, u := range copts.URLs {
			if _, err := amqp.ParseURI(u); err != nil {
				return nil, fmt.Errorf("rabbitmq: Connect: URL %d (%s): %w", i+1, Redact(u), redact.Err(err, u))
			}
		}
		copts.Dial = DialAMQP(amqp.Config{})
	}
	if copts.Rand == nil {
		copts.Rand = rand.Float64
	}
	copts.Backoff = copts.Backoff.WithDefaults()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &supervisor{opts: copts, logger: logger, up: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		loop: redial.New(len(copts.URLs), copts.Backoff.core(), copts.Rand)}
	if err := s.dialFirst(ctx, copts.FirstConnectTimeout); err != nil {
		return nil, err
	}
	b, err := newBackend(s.open, opts, s)
	if err != nil {
		s.close()
		return nil, err
	}
	s.mu.Lock()
	s.redeclare = b.redeclare
	s.watch = b.watchBlockedOf
	s.running = true
	conn := s.conn
	s.mu.Unlock()
	s.watchBlocked(conn)
	go s.run()
	return b, nil
}

// supervisor keeps a Backend's connection up.
type supervisor struct {
	opts      ConnectOptions
	logger    *slog.Logger
	redeclare func(Conn) error // set before run starts
	// watch, set with redeclare, follows connection.blocked on each new
	// connection that reports it (see Options.Blocked).
	watch func(<-chan amqp.Blocking)
	// loop decides whom to dial and when (internal/redial, the code the
	// simulator runs too). Connect's goroutine drives it, then run's.
	loop *redial.Core

	mu      sync.Mutex
	conn    Conn          // nil while down
	gen     uint64        // of conn, or of the last one
	url     string        // conn's, redacted
	version string        // conn's broker release, or the last one's; "" if unknown
	up      chan struct{} // closed while conn is up; replaced when it goes
	down    chan struct{} // closed when conn goes; replaced when one is up
	closes  chan *amqp.Error
	failed  error // StateFailed's error; the supervision is over
	running bool  // run has started

	stop     chan struct{} // closed by close
	stopOnce sync.Once
	done     chan struct{} // closed when run has returned
}

// open opens a channel on the connection, without waiting for it.
func (s *supervisor) open() (Channel, error) {
	conn, _, err := s.current()
	if err != nil {
		return nil, err
	}
	return conn.Channel()
}

// await waits until a connection other than notGen is up (0: any), and
// returns its generation; an error if ctx ends first or the supervision is
// over. A caller whose channel would not open on connection g awaits g:
// run has yet to notice that it is gone.
func (s *supervisor) await(ctx context.Context, notGen uint64) (uint64, error) {
	for {
		s.mu.Lock()
		up, down, cur, failed := s.up, s.down, s.gen, s.failed
		live := s.conn != nil
		s.mu.Unlock()
		switch {
		case failed != nil:
			return 0, failed
		case live && cur != notGen:
			return cur, nil
		}
		wait := up
		if live {
			wait = down
		}
		select {
		case <-wait:
		case <-s.stop:
			return 0, ErrBackendClosed
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %w", ErrDisconnected, ctx.Err())
		}
	}
}

// current returns the connection and its generation, without waiting.
func (s *supervisor) current() (Conn, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.failed != nil:
		return nil, 0, s.failed
	case s.conn == nil:
		return nil, 0, ErrDisconnected
	}
	return s.conn, s.gen, nil
}

// errFirstConnectTimeout is the cause of dialFirst's context when
// ConnectOptions.FirstConnectTimeout ends it.
var errFirstConnectTimeout = errors.New("no broker answered within ConnectOptions.FirstConnectTimeout")

// dialFirst dials until a connection is up, within ctx and timeout
// (ConnectOptions.FirstConnectTimeout: 0 is the default, negative none).
func (s *supervisor) dialFirst(ctx context.Context, timeout time.Duration) error {
	if timeout == 0 {
		timeout = DefaultFirstConnectTimeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w, %v: %w", errFirstConnectTimeout, timeout, context.DeadlineExceeded))
		defer cancel()
	}
	conn, ev, err := s.drive(ctx, s.loop.Start())
	if err != nil {
		return err
	}
	s.setUp(conn, ev)
	return nil
}

// drive runs the loop (redial.Drive: dial, report) from acts until a
// connection is up, which it returns with its Connected event, not yet
// reported; or the loop fails, or ctx ends, or the supervision is closed.
// It waits what the loop asks for on a timer of its goroutine.
func (s *supervisor) drive(ctx context.Context, acts []redial.Action) (Conn, redial.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	sh := &dialShell{s: s, ctx: ctx}
	for {
		delay, wait, end := redial.Drive(s.loop, acts, sh)
		switch {
		case !wait && end.State == redial.Connected:
			return sh.conn, end, nil
		case !wait && end.State == redial.Failed:
			s.fail(end.Err)
			return nil, end, end.Err
		case !wait:
			return nil, redial.Event{}, errors.New("rabbitmq: the reconnection loop stopped") // never: it ends in a connection or a failure
		case ctx.Err() != nil:
			return nil, redial.Event{}, s.giveUp(ctx, sh.last)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, redial.Event{}, s.giveUp(ctx, sh.last)
		}
		acts = s.loop.TimerFired()
	}
}

// dialShell is what the reconnection loop's dials and reports do under
// supervision: a dial with the configured Dialer, the backend's
// declarations made again on the new connection, errors classified and
// redacted, and every change of state reported to OnState.
type dialShell struct {
	s    *supervisor
	ctx  context.Context
	conn Conn  // the connection the last dial made
	last error // the last failed attempt's error
}

func (d *dialShell) Report(ev redial.Event) { d.s.report(d.s.event(ev)) }

func (d *dialShell) Dial(url int) (bool, error) {
	s := d.s
	raw := s.opts.URLs[url]
	shown := Redact(raw)
	c, err := s.opts.Dial(d.ctx, raw)
	s.mu.Lock()
	redeclare := s.redeclare
	s.mu.Unlock()
	if err == nil && redeclare != nil {
		if err = redeclare(c); err != nil {
			_ = c.Close()
		}
	}
	if err != nil {
		d.conn = nil
		err = redact.Err(err, raw)
		if fatal(err) {
			d.last = fmt.Errorf("%w: %s: %w", ErrConnectionFailed, shown, err)
			return true, d.last
		}
		s.logger.Warn("rabbitmq: could not connect", "url", shown, "error", err.Error())
		d.last = fmt.Errorf("%s: %w", shown, err)
		return false, d.last
	}
	d.conn = c
	s.mu.Lock()
	s.url = shown
	s.mu.Unlock()
	return false, nil
}

// event is the loop's event as OnState reports it, the URL redacted.
func (s *supervisor) event(e redial.Event) ConnEvent {
	ev := ConnEvent{Gen: e.Gen, Attempt: e.Attempt, Delay: e.Delay, Err: e.Err}
	switch e.State {
	case redial.Connecting:
		ev.State, ev.URL = StateConnecting, Redact(s.opts.URLs[e.URL])
	case redial.Connected:
		ev.State, ev.URL = StateConnected, Redact(s.opts.URLs[e.URL])
	case redial.Disconnected:
		ev.State = StateDisconnected
	case redial.Failed:
		ev.State = StateFailed
	case redial.Closed:
		ev.State = StateClosed
	}
	return ev
}

func (s *supervisor) giveUp(ctx context.Context, last error) error {
	select {
	case <-s.stop:
		return ErrBackendClosed
	default:
	}
	why := ctx.Err()
	if cause := context.Cause(ctx); errors.Is(cause, errFirstConnectTimeout) {
		why = cause
	}
	if last == nil {
		return fmt.Errorf("rabbitmq: connecting: %w", why)
	}
	return fmt.Errorf("rabbitmq: connecting: %w (last attempt: %w)", why, last)
}

// fatal reports whether a dial or declaration error is one retrying cannot
// fix: access refused, a virtual host that does not exist, or a queue
// declared with other arguments.
//
// RabbitMQ refuses a connection over a connection limit with 530
// NOT_ALLOWED too, as it does a missing virtual host, but a limit clears as
// other connections close (after a partition, the broker may still count
// the old ones): those are retried. Their reasons all say "limit" (RabbitMQ
// 4.0.5, deps/rabbit/src/rabbit_reader.erl: is_over_node_connection_limit,
// is_over_vhost_connection_limit, is_over_user_connection_limit).
func fatal(err error) bool {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.NotAllowed:
			return !strings.Contains(ae.Reason, "limit")
		case amqp.AccessRefused, amqp.PreconditionFailed:
			return true
		}
	}
	return false
}

// serverVersion is the current connection's broker release, or the last
// one's while down; "" if unknown.
func (s *supervisor) serverVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// setUp makes conn the current connection, and reports it.
func (s *supervisor) setUp(conn Conn, ev redial.Event) {
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	s.mu.Lock()
	s.conn, s.closes = conn, closes
	s.version = serverVersionOf(conn)
	s.gen = ev.Gen
	shown := s.url
	close(s.up)
	s.down = make(chan struct{})
	s.mu.Unlock()
	s.logger.Info("rabbitmq: connected", "url", shown, "gen", ev.Gen)
	s.watchBlocked(conn)
	s.report(s.event(ev))
}

// watchBlocked has the backend follow connection.blocked on conn, if conn
// reports it and the backend is running.
func (s *supervisor) watchBlocked(conn Conn) {
	s.mu.Lock()
	watch := s.watch
	s.mu.Unlock()
	b, ok := conn.(blocker)
	if watch == nil || !ok {
		return
	}
	if notes := b.NotifyBlocked(make(chan amqp.Blocking, 1)); notes != nil {
		watch(notes)
	}
}

// run waits for the connection to drop, and reconnects, until close or a
// failure.
func (s *supervisor) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		closes, conn, gen := s.closes, s.conn, s.gen
		s.mu.Unlock()
		var cause error = amqp.ErrClosed
		select {
		case e, ok := <-closes:
			if ok && e != nil {
				cause = e
			}
		case <-s.stop:
			_ = conn.Close()
			s.closed()
			return
		}
		s.mu.Lock()
		s.conn = nil
		s.up = make(chan struct{})
		close(s.down)
		s.mu.Unlock()
		s.logger.Warn("rabbitmq: connection lost: reconnecting", "gen", gen, "error", cause.Error())
		next, ev, err := s.drive(context.Background(), s.loop.Lost(cause))
		if err != nil {
			if errors.Is(err, ErrBackendClosed) {
				s.closed()
			}
			return
		}
		s.setUp(next, ev)
	}
}

// closed reports StateClosed, once.
func (s *supervisor) closed() {
	for _, a := range s.loop.Close() {
		s.report(s.event(a.Event))
	}
}

// fail ends the supervision with err.
func (s *supervisor) fail(err error) {
	s.mu.Lock()
	s.failed = err
	close(s.up) // wakes every await, which sees failed
	s.mu.Unlock()
	s.logger.Error("rabbitmq: connection failed for good", "error", err.Error())
	s.report(ConnEvent{State: StateFailed, Err: err})
	s.loop.Close() // nothing more to report: failed is the end
}

func (s *supervisor) report(e ConnEvent) {
	if s.opts.OnState != nil {
		s.opts.OnState(e)
	}
}

// close stops the supervision and closes the connection.
func (s *supervisor) close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.mu.Lock()
	conn := s.conn
	running := s.running
	s.mu.Unlock()
	if running {
		<-s.done
		return
	}
	if conn != nil { // Connect failed after the first dial
		_ = conn.Close()
	}
}

// Redact returns rawURL with its password, if any, replaced by "xxxxx". A
// URL that does not parse is replaced whole, since it may hold a password
// where the parser cannot find it; so is one with an "@" the parser did not
// take for the end of a user and password ("amqp://user:123/pw@host/"
// parses as host "user", port 123).
func Redact(rawURL string) string { return redact.URL(rawURL) }
