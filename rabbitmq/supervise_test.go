package rabbitmq

// The supervised connection (Connect), on membroker inside testing/synctest
// bubbles: the broker, the supervisor and its backoff all run on the
// bubble's clock, so reconnection timings are exact and nothing polls.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// secretURL is the URL the tests dial: its password must never show.
const secretURL = "amqp://queuey:s3cr3t-pw@node-a:5672/"

// memNet is membroker behind a Dialer that can be taken down: while down,
// every dial fails as a refused TCP connection would.
type memNet struct {
	broker *membroker.Broker
	mu     sync.Mutex
	down   bool
	dials  []time.Time // when each dial was attempted
	urls   []string    // what each dial was given
	conns  []*membroker.Connection
	refuse error // if set, every dial fails with it
	// chans are the channels opened on the connections dialled; while
	// failOpen is set, opening one fails.
	chans    []*membroker.Channel
	failOpen bool
	// consumeErrs are what the next basic.consume calls fail with, one
	// each.
	consumeErrs []*amqp.Error
	// inConsume, if set, is called with the channel as each basic.consume
	// on it starts.
	inConsume func(*membroker.Channel)
	// resetting, if set, is a connection whose every publish fails as a
	// write over a reset TCP connection does, sending nothing.
	resetting *membroker.Connection
}

// memChan is a channel of memConn's.
type memChan struct {
	Channel
	n    *memNet
	conn *membroker.Connection
}

func (c memChan) PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error {
	c.n.mu.Lock()
	reset := c.n.resetting == c.conn
	c.n.mu.Unlock()
	if reset {
		return &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Channel.PublishWithContext(ctx, exchange, key, mandatory, immediate, msg)
}

func (c memChan) Consume(queue, tag string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error) {
	c.n.mu.Lock()
	var err *amqp.Error
	if len(c.n.consumeErrs) > 0 {
		err, c.n.consumeErrs = c.n.consumeErrs[0], c.n.consumeErrs[1:]
	}
	hook := c.n.inConsume
	c.n.mu.Unlock()
	if hook != nil {
		hook(c.Channel.(*membroker.Channel))
	}
	if err != nil {
		return nil, err
	}
	return c.Channel.Consume(queue, tag, autoAck, exclusive, noLocal, noWait, args)
}

// memConn is a connection of memNet's: it records the channels it opens,
// and refuses to open one while its net says so.
type memConn struct {
	Conn
	n    *memNet
	conn *membroker.Connection
}

func (c memConn) Channel() (Channel, error) {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	if c.n.failOpen {
		return nil, errors.New("channel.open refused by the test")
	}
	ch, err := c.Conn.Channel()
	if err != nil {
		return nil, err
	}
	c.n.chans = append(c.n.chans, ch.(*membroker.Channel))
	return memChan{ch, c.n, c.conn}, nil
}

func (n *memNet) dial(ctx context.Context, url string) (Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dials = append(n.dials, time.Now())
	n.urls = append(n.urls, url)
	switch {
	case n.refuse != nil:
		return nil, n.refuse
	case n.down:
		return nil, fmt.Errorf("dial tcp %s: connect: connection refused", url) // as net does: with the URL's host
	}
	c, err := n.broker.Dial()
	if err != nil {
		return nil, err
	}
	n.conns = append(n.conns, c)
	return memConn{AdaptConn[*membroker.Channel](c), n, c}, nil
}

// set changes n under its lock.
func (n *memNet) set(f func(n *memNet)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

func (n *memNet) setDown(down bool) {
	n.mu.Lock()
	n.down = down
	n.mu.Unlock()
}

// drop closes the current connection from the broker's side.
func (n *memNet) drop() {
	n.mu.Lock()
	c := n.conns[len(n.conns)-1]
	n.mu.Unlock()
	n.broker.CloseConnection(c, &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - closed via management plugin", Server: true})
}

// states records OnState's events.
type states struct {
	mu sync.Mutex
	ev []ConnEvent
}

func (s *states) add(e ConnEvent) {
	s.mu.Lock()
	s.ev = append(s.ev, e)
	s.mu.Unlock()
}

func (s *states) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, e := range s.ev {
		p := e.State.String()
		switch e.State {
		case StateConnecting:
			p += fmt.Sprintf("(%d %s after %s)", e.Attempt, e.URL, e.Delay)
		case StateConnected, StateDisconnected:
			p += fmt.Sprintf("(%d)", e.Gen)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// supervised is a supervised backend on membroker, with the queue "jobs"
// declared, its states and its logs.
type supervised struct {
	net    *memNet
	b      *Backend
	states *states
	logs   *backendLogBuffer
	admin  *membroker.Channel
}

func newSupervised(t *testing.T, backoff Backoff, urls ...string) *supervised {
	t.Helper()
	if len(urls) == 0 {
		urls = []string{secretURL}
	}
	s := &supervised{net: &memNet{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40})}, states: &states{}, logs: &backendLogBuffer{}}
	b, err := Connect(t.Context(), ConnectOptions{
		URLs: urls, Dial: s.net.dial, Backoff: backoff, OnState: s.states.add,
		Rand: func() float64 { return 0.5 },
	}, Options{Topology: Topology{ClassicHolds: true}, // ladder_test.go has the ladder's reconnection
		Logger: slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	s.b = b
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	conn, err := s.net.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	if s.admin, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	return s
}

// consume subscribes to "jobs".
func (s *supervised) consume(t *testing.T, prefetch int) *consumer {
	t.Helper()
	c, err := s.b.Consume(t.Context(), "jobs", prefetch)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*consumer)
}

func job(id string) queuey.Envelope {
	return queuey.Envelope{ID: id, Kind: "k", Queue: "jobs", Payload: []byte(`{}`), Attempt: 1, EnqueuedAt: time.Unix(1, 0)}
}

func (s *supervised) ready(t *testing.T) int {
	t.Helper()
	q, ok := s.net.broker.Queue("jobs")
	if !ok {
		t.Fatal("jobs is gone")
	}
	return q.Ready
}

func TestConnectReconnectsAndPublishingResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		if err := s.b.Publish(t.Context(), job("j1"), 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		s.net.drop()
		// Sent after the drop: it waits for the next connection.
		if err := s.b.Publish(t.Context(), job("j2"), 0, queuey.HoldRetry); err != nil {
			t.Fatalf("publish after the drop: %v", err)
		}
		if err := s.b.Publish(t.Context(), job("j3"), 2*time.Second, queuey.HoldRetry); err != nil {
			t.Fatalf("hold after the drop: %v", err)
		}
		synctest.Wait()
		if n := s.ready(t); n != 2 {
			t.Fatalf("%d jobs ready on jobs, want 2", n)
		}
		want := "connecting(1 amqp://queuey:xxxxx@node-a:5672/ after 0s) connected(1) disconnected(1) " +
			"connecting(1 amqp://queuey:xxxxx@node-a:5672/ after 50ms) connected(2)"
		if got := s.states.String(); got != want {
			t.Fatalf("states:\n got %s\nwant %s", got, want)
		}
		if strings.Contains(s.logs.String(), "s3cr3t") {
			t.Fatalf("the logs show the password:\n%s", s.logs)
		}
	})
}

// A kill -9 of the broker resets the connection under the publisher: the
// first publish to fail may have been sent whole (another channel's flush
// of the shared writer) and says so; the next wrote nothing, so it waits
// for the next connection and goes out on it, within its context, instead
// of being a false "maybe".
func TestPublishAfterAWriteFailedIsSentOnTheNextConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		s.net.set(func(n *memNet) { n.resetting = n.conns[len(n.conns)-1] })
		if err := s.b.Publish(t.Context(), job("j1"), 0, queuey.HoldRetry); !errors.Is(err, queuey.ErrMaybeEnqueued) {
			t.Fatalf("the first publish over the reset connection: %v, want queuey.ErrMaybeEnqueued", err)
		}
		done := make(chan error, 1)
		go func() { done <- s.b.Publish(t.Context(), job("j2"), 0, queuey.HoldRetry) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the second publish returned %v before the connection went, want it to wait", err)
		default:
		}
		s.net.drop() // as the client library takes the dead connection down
		synctest.Wait()
		if err := <-done; err != nil {
			t.Fatalf("the second publish: %v, want it sent on the next connection", err)
		}
		if n := s.ready(t); n != 1 {
			t.Fatalf("%d jobs ready on jobs, want 1 (j2)", n)
		}
	})
}

// During an outage a publish waits for the connection within its context,
// and says that it was not sent; the dials keep to the backoff, which caps;
// and publishing resumes once the broker is back.
func TestOutageWaitsWithinCtxAndDialsKeepToTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		backoff := Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
		s := newSupervised(t, backoff)
		s.net.setDown(true)
		s.net.drop()
		lost := time.Now()

		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		err := s.b.Publish(ctx, job("j1"), 0, queuey.HoldRetry)
		cancel()
		if !errors.Is(err, ErrDisconnected) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, queuey.ErrMaybeEnqueued) {
			t.Fatalf("publish during the outage: %v; want ErrDisconnected and the deadline, not ErrMaybeEnqueued", err)
		}

		time.Sleep(10 * time.Second) // the outage goes on
		s.net.setDown(false)
		if err := s.b.Publish(t.Context(), job("j2"), 0, queuey.HoldRetry); err != nil {
			t.Fatalf("publish after the outage: %v", err)
		}
		synctest.Wait()

		s.net.mu.Lock()
		dials := s.net.dials[1:] // the first was Connect's
		s.net.mu.Unlock()
		prev := lost
		for i, at := range dials {
			want := backoff.Delay(i+1, 0.5)
			if gap := at.Sub(prev); gap != want {
				t.Fatalf("dial %d came %s after the one before, want %s (all: %v)", i+1, gap, want, dials)
			}
			prev = at
		}
		if len(dials) < 8 {
			t.Fatalf("%d dials in a 13 s outage with a 1 s cap on the wait", len(dials))
		}
		if last := backoff.Delay(len(dials), 0.5); last != time.Second {
			t.Fatalf("the last wait was %s, want the cap (2 s) × 0.5", last)
		}
		if n := s.ready(t); n != 1 {
			t.Fatalf("%d jobs ready, want 1 (the one published after the outage)", n)
		}
		if logs := s.logs.String(); strings.Contains(logs, "s3cr3t") || !strings.Contains(logs, "connection refused") {
			t.Fatalf("the logs show the password, or not the failed dials:\n%s", logs)
		}
	})
}

// Close during an outage returns at once, even while a publish with no
// deadline waits for the connection to declare its hold queue (holding
// the hold-declaration lock Close takes).
func TestCloseDuringAnOutageDoesNotWaitForTheBroker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		s.net.setDown(true)
		s.net.drop()
		published := make(chan error, 1)
		go func() { published <- s.b.Publish(context.Background(), job("j1"), 5*time.Second, queuey.HoldRetry) }()
		synctest.Wait() // the publish waits for the connection
		closed := make(chan error, 1)
		go func() { closed <- s.b.Close() }()
		synctest.Wait()
		select {
		case <-closed:
		default:
			s.net.setDown(false) // so that Close, and the test, can end
			<-closed
			t.Fatal("Close waited for the broker to come back")
		}
		if err := <-published; !errors.Is(err, ErrBackendClosed) {
			t.Fatalf("the publish waiting during the outage: %v, want ErrBackendClosed", err)
		}
	})
}

// The broker closes the publishing channel (a channel exception) just as
// the connection goes, so no fresh channel opens on it: publishing resumes
// on the supervisor's next connection, rather than ending for good.
func TestPublishingSurvivesAChannelExceptionWhenNoChannelOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		if err := s.b.Publish(t.Context(), job("j1"), 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		var chans []*membroker.Channel
		s.net.set(func(n *memNet) { n.failOpen, chans = true, slices.Clone(n.chans) })
		for _, ch := range chans { // the publishing channel among them
			if !ch.IsClosed() {
				s.net.broker.CloseChannel(ch, &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - test", Server: true, Recover: true})
			}
		}
		synctest.Wait() // no fresh channel opens
		s.net.set(func(n *memNet) { n.failOpen = false })
		s.net.drop()
		synctest.Wait() // reconnected
		if err := s.b.Publish(t.Context(), job("j2"), 0, queuey.HoldRetry); err != nil {
			t.Fatalf("publish after the reconnection: %v", err)
		}
		if n := s.ready(t); n != 2 {
			t.Fatalf("%d jobs ready, want 2", n)
		}
	})
}

func TestURLsAreTriedInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &memNet{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40})}
		st := &states{}
		dial := func(ctx context.Context, url string) (Conn, error) {
			if strings.Contains(url, "node-a") {
				n.mu.Lock()
				n.dials = append(n.dials, time.Now())
				n.mu.Unlock()
				return nil, errors.New("dial tcp node-a:5672: connect: connection refused")
			}
			return n.dial(ctx, url)
		}
		b, err := Connect(t.Context(), ConnectOptions{
			URLs: []string{secretURL, "amqp://queuey:s3cr3t-pw@node-b:5672/"}, Dial: dial, OnState: st.add,
			Rand: func() float64 { return 0.5 },
		}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		want := "connecting(1 amqp://queuey:xxxxx@node-a:5672/ after 0s) connecting(2 amqp://queuey:xxxxx@node-b:5672/ after 100ms) connected(1)"
		if got := st.String(); got != want {
			t.Fatalf("states:\n got %s\nwant %s", got, want)
		}
	})
}

// Refusals that retrying cannot fix end the supervision with a clear error,
// without a storm of dials.
func TestAccessRefusedIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &memNet{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40}),
			refuse: &amqp.Error{Code: amqp.AccessRefused, Reason: "username or password not allowed", Server: true}}
		_, err := Connect(t.Context(), ConnectOptions{URLs: []string{secretURL}, Dial: n.dial}, Options{})
		if !errors.Is(err, ErrConnectionFailed) || len(n.dials) != 1 || strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("Connect: %v after %d dials; want ErrConnectionFailed after one, and no password", err, len(n.dials))
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
			t.Fatalf("the error %v does not wrap the broker's refusal", err)
		}
	})
}

// A connection limit (530 NOT_ALLOWED, like a missing virtual host) clears
// once other connections close: it is retried. A missing virtual host is
// not.
func TestConnectionLimitIsRetriedAndAMissingVhostIsNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &memNet{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40}),
			refuse: &amqp.Error{Code: amqp.NotAllowed, Server: true,
				Reason: "NOT_ALLOWED - access to vhost '/' refused for user 'queuey': connection limit (1) is reached"}}
		go func() {
			time.Sleep(5 * time.Second)
			n.mu.Lock()
			n.refuse = nil // the old connections have gone
			n.mu.Unlock()
		}()
		b, err := Connect(t.Context(), ConnectOptions{URLs: []string{secretURL}, Dial: n.dial}, Options{})
		if err != nil {
			t.Fatalf("Connect over a connection limit that clears: %v", err)
		}
		_ = b.Close()
		if len(n.dials) < 2 {
			t.Fatalf("%d dials, want the refused ones retried", len(n.dials))
		}

		n = &memNet{broker: n.broker, refuse: &amqp.Error{Code: amqp.NotAllowed, Server: true, Reason: "NOT_ALLOWED - vhost nope not found"}}
		_, err = Connect(t.Context(), ConnectOptions{URLs: []string{secretURL}, Dial: n.dial}, Options{})
		if !errors.Is(err, ErrConnectionFailed) || len(n.dials) != 1 {
			t.Fatalf("Connect to a missing virtual host: %v after %d dials; want ErrConnectionFailed after one", err, len(n.dials))
		}
	})
}

func TestConnectGivesUpWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &memNet{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40}), down: true}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := Connect(ctx, ConnectOptions{URLs: []string{secretURL}, Dial: n.dial}, Options{})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("Connect: %v", err)
		}
	})
}

func TestConnectGivesUpAfterFirstConnectTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &memNet{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40}), down: true}
		start := time.Now()
		_, err := Connect(t.Context(), ConnectOptions{URLs: []string{secretURL}, Dial: n.dial}, Options{})
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "FirstConnectTimeout") ||
			!strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("Connect: %v", err)
		}
		if took != DefaultFirstConnectTimeout {
			t.Errorf("Connect gave up after %v, want the default bound %v", took, DefaultFirstConnectTimeout)
		}
		if len(n.dials) < 3 {
			t.Errorf("%d dials within the bound, want several", len(n.dials))
		}
	})
}

func TestConnectWithoutABoundWaitsForALateBroker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &memNet{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40}), down: true}
		time.AfterFunc(time.Minute, func() {
			n.mu.Lock()
			n.down = false
			n.mu.Unlock()
		})
		start := time.Now()
		b, err := Connect(t.Context(), ConnectOptions{URLs: []string{secretURL}, Dial: n.dial, FirstConnectTimeout: -1}, Options{})
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		defer b.Close()
		if took := time.Since(start); took < time.Minute || took > time.Minute+DefaultBackoffMax {
			t.Errorf("connected after %v; the broker came up after 1m, and a wait is at most %v", took, DefaultBackoffMax)
		}
	})
}

// TestConnectToAClosedPortFails dials a real TCP port that nothing listens
// on, as a new user with a wrong port does, with a short bound.
func TestConnectToAClosedPortFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	start := time.Now()
	_, err = Connect(t.Context(), ConnectOptions{URLs: []string{"amqp://guest:guest@" + addr + "/"}, FirstConnectTimeout: 300 * time.Millisecond}, Options{})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Connect to the closed port %s: %v", addr, err)
	}
	// The bound, plus at most one dial to a closed local port.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Connect took %v with a bound of 300ms", took)
	}
}

func TestConnectRefusesABadURLBeforeDialling(t *testing.T) {
	for _, u := range []string{
		"http://queuey:s3cr3t-pw@node-a/",
		"amqp://queuey:s3cr3t^pw@node-a/",  // an unescaped ^: the parser's error quotes the URL
		"amqp://queuey:s3cr3t%zz@node-a/",  // a bad escape
		"amqp://queuey:s3cr3t\"pw@node-a/", // quoted by the parser's error with an escape
	} {
		_, err := Connect(t.Context(), ConnectOptions{URLs: []string{u}}, Options{})
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Connect(%q): %v", u, err)
		}
	}
	if _, err := Connect(t.Context(), ConnectOptions{}, Options{}); err == nil {
		t.Fatal("Connect with no URLs succeeded")
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/": "amqp://guest:xxxxx@127.0.0.1:5672/",
		"amqp://127.0.0.1:5672/vhost":        "amqp://127.0.0.1:5672/vhost",
		"amqp://user@host/":                  "amqp://user@host/",
		"amqp://us er:pw@ho st/%zz":          "<unparsable URL>",
		"amqp://user:se^cret@host/":          "<unparsable URL>",
		"amqp://user:123/secret@host/":       "<unparsable URL>", // parses, as host "user" and port 123
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// A queue declared again on the new connection that finds another
// declaration ends the supervision: publishing and consuming fail with
// the refusal, rather than retrying for ever.
func TestRedeclarationRefusedFailsTheBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		c, err := s.b.Consume(t.Context(), "jobs", 1)
		if err != nil {
			t.Fatal(err)
		}
		s.net.setDown(true)
		s.net.drop()
		// While it is down, someone declares "jobs" as a quorum queue.
		if _, err := s.admin.QueueDelete("jobs", false, false, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.admin.QueueDeclare("jobs", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}
		s.net.setDown(false)
		synctest.Wait()
		for range c.Deliveries() {
		}
		if err := c.Err(); !errors.Is(err, ErrConnectionFailed) || !strings.Contains(err.Error(), "PRECONDITION_FAILED") {
			t.Fatalf("the consumer ended with %v", err)
		}
		err = s.b.Publish(t.Context(), job("j1"), 0, queuey.HoldRetry)
		if !errors.Is(err, ErrConnectionFailed) {
			t.Fatalf("publish after the failure: %v", err)
		}
		// The waiters wake before OnState hears of the failure (see
		// Options.OnState): let the supervisor's goroutine finish.
		synctest.Wait()
		if !strings.Contains(s.states.String(), "failed") {
			t.Fatalf("states: %s", s.states)
		}
		select {
		case <-s.b.Done():
		default:
			t.Fatal("Done is open after the supervision failed")
		}
	})
}

// A consumer resumes on a fresh channel: its Deliveries stays open, Lost
// says which channel went, and each delivery says which channel it came on.
func TestConsumerResumesAfterTheConnectionDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		qc, err := s.b.Consume(t.Context(), "jobs", 2)
		if err != nil {
			t.Fatal(err)
		}
		c := qc.(*consumer)
		lost := c.Lost()
		if err := s.b.Publish(t.Context(), job("j1"), 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		d := (<-c.Deliveries()).(*consume.Delivery)
		if d.Generation() != 1 {
			t.Fatalf("first delivery of generation %d", d.Generation())
		}
		s.net.drop()
		if g := <-lost; g != 1 {
			t.Fatalf("Lost said %d, want 1", g)
		}
		if err := d.Ack(); err == nil {
			t.Fatal("acked a delivery of the lost channel")
		}
		again := (<-c.Deliveries()).(*consume.Delivery) // the broker requeued j1
		if again.Generation() != 2 || again.D.MessageId != "j1" || !again.Redelivered() {
			t.Fatalf("after resuming: %q of generation %d, redelivered %t", again.D.MessageId, again.Generation(), again.Redelivered())
		}
		if err := again.Ack(); err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(); err != nil {
			t.Fatal(err)
		}
		for range c.Deliveries() {
		}
		if err := c.Err(); err != nil {
			t.Fatalf("Err after Cancel: %v", err)
		}
		_ = c.Close()
	})
}

// A connection forced closed again while a consumer resubscribes (a
// rolling restart, or two close_all_connections in a row) is a failure of
// the connection, not a refusal: the consumer resumes on the next one.
func TestConsumerResumesWhenTheConnectionFailsAgainWhileItResubscribes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		c := s.consume(t, 1)
		s.net.set(func(n *memNet) {
			n.consumeErrs = []*amqp.Error{{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure", Server: true}}
		})
		s.net.drop()
		synctest.Wait()
		if err := s.b.Publish(t.Context(), job("j1"), 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		select {
		case d, ok := <-c.Deliveries():
			if !ok {
				t.Fatalf("the consumer ended: %v", c.Err())
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("no delivery a minute after the reconnection")
		}
		_ = c.Close()
	})
}

// A refusal of the subscription itself when it resumes (404: the queue
// was deleted) is one the next connection would repeat: the consumer ends
// with it.
func TestConsumerEndsWhenItsResubscriptionIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		qc := s.consume(t, 1)
		s.net.set(func(n *memNet) {
			n.consumeErrs = []*amqp.Error{{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue 'jobs' in vhost '/'", Server: true, Recover: true}}
		})
		s.net.drop()
		for range qc.Deliveries() {
		}
		var ae *amqp.Error
		if err := qc.Err(); !errors.As(err, &ae) || ae.Code != amqp.NotFound {
			t.Fatalf("the consumer ended with %v, want the 404", err)
		}
		_ = qc.Close()
	})
}

// Close while the consumer resubscribes on a fresh channel closes that
// channel too, not only the lost one: otherwise it stays open, with what
// the broker delivered on it unacknowledged, until the connection goes.
func TestConsumerCloseDuringAResubscriptionClosesTheFreshChannel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		qc := s.consume(t, 1)
		entered, proceed := make(chan *membroker.Channel, 1), make(chan struct{})
		s.net.set(func(n *memNet) { n.inConsume = func(ch *membroker.Channel) { entered <- ch; <-proceed } })
		s.net.drop()
		fresh := <-entered // resubscribing: basic.consume on the fresh channel
		s.net.set(func(n *memNet) { n.inConsume = nil })
		closed := make(chan error, 1)
		go func() { closed <- qc.Close() }()
		synctest.Wait() // Close has closed the lost channel and waits
		close(proceed)
		<-closed
		if !fresh.IsClosed() {
			t.Fatal("the channel the consumer resubscribed on is still open after Close")
		}
	})
}

type slowJob struct{ N int }

func (slowJob) Kind() string  { return "slow" }
func (slowJob) Queue() string { return "jobs" }

// The worker keeps running across a dropped connection. A handler still
// running when it dropped has its outcome dropped: nothing is published for
// it (its retry would duplicate the job the broker requeued), and the job
// runs again from the requeued copy.
func TestWorkerRunSurvivesADroppedConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 1}}
		producer, err := queuey.NewProducer(t.Context(), s.b, queues, queuey.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		worker, err := queuey.NewWorker(t.Context(), s.b, queues, queuey.WorkerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs := map[int]int{}
		release := make(chan struct{})
		err = queuey.Register(worker, queuey.HandlerFunc[slowJob](func(ctx context.Context, j *queuey.Job[slowJob]) error {
			mu.Lock()
			runs[j.Args.N]++
			first := runs[j.Args.N] == 1
			mu.Unlock()
			if j.Args.N == 1 && first {
				<-release // running when the connection drops
				return errors.New("failed after the drop")
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- worker.Run(ctx) }()
		if _, err := producer.Enqueue(t.Context(), slowJob{N: 1}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // job 1's handler is running
		s.net.drop()
		synctest.Wait() // reconnected, consuming again
		close(release)
		for n := 2; n <= 5; n++ {
			if _, err := producer.Enqueue(t.Context(), slowJob{N: n}); err != nil {
				t.Fatalf("enqueue %d after the drop: %v", n, err)
			}
		}
		synctest.Wait()
		mu.Lock()
		got := fmt.Sprint(runs)
		mu.Unlock()
		if got != "map[1:2 2:1 3:1 4:1 5:1]" {
			t.Fatalf("handler runs by job: %s; want job 1 twice (its first outcome dropped), the others once", got)
		}
		if holds := s.net.broker.Queues(); len(holds) != 2 {
			t.Fatalf("queues %v: a hold queue was declared for the dropped outcome's retry", holds)
		}
		if n := s.ready(t); n != 0 {
			t.Fatalf("%d jobs left on jobs", n)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

// A connection that drops while a stopping worker waits for its handlers:
// the worker has cancelled its consumer, which no longer reports a loss.
// A handler that fails after the drop must still not publish its retry on
// the new connection, beside the job the broker requeued.
func TestWorkerRunDropsAnOutcomeWhoseConnectionWentDuringStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 1}}
		producer, err := queuey.NewProducer(t.Context(), s.b, queues, queuey.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		worker, err := queuey.NewWorker(t.Context(), s.b, queues, queuey.WorkerConfig{StopTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		err = queuey.Register(worker, queuey.HandlerFunc[slowJob](func(ctx context.Context, j *queuey.Job[slowJob]) error {
			<-release
			return errors.New("failed after the drop")
		}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- worker.Run(ctx) }()
		if _, err := producer.Enqueue(t.Context(), slowJob{N: 1}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the handler runs
		stop()
		synctest.Wait() // the consumer is cancelled; Run waits for the handler
		s.net.drop()
		synctest.Wait() // reconnected
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if qs := s.net.broker.Queues(); len(qs) != 2 {
			t.Fatalf("queues %v: a hold queue was declared for the retry of a job the broker requeued", qs)
		}
		if n := s.ready(t); n != 1 {
			t.Fatalf("%d jobs ready on jobs, want the requeued one", n)
		}
	})
}

// A worker stopped while the broker is unreachable returns: its
// subscriptions waiting to resume give up, rather than holding Run until
// the broker is back.
func TestWorkerRunStopsDuringAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 1}}
		worker, err := queuey.NewWorker(t.Context(), s.b, queues, queuey.WorkerConfig{StopTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- worker.Run(ctx) }()
		synctest.Wait()
		s.net.setDown(true)
		s.net.drop()
		synctest.Wait() // the subscription waits for the connection
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Run did not return a minute after its context ended, with the broker unreachable")
		}
		s.net.setDown(false) // for the cleanup's Close
	})
}

// An ordinary outage (the broker shuts the connection, refuses dials for
// a while, then comes back) with a worker retrying jobs through it logs
// nothing above WARN: nothing in it is for a person to act on. Ready
// follows the connection, for a readiness probe.
func TestAnOutageLogsNothingAboveWarnAndReadyFollowsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		logger := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 4, Retry: queuey.RetryPolicy{MaxAttempts: 10, Jitter: queuey.NoJitter}}}
		producer, err := queuey.NewProducer(t.Context(), s.b, queues, queuey.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		worker, err := queuey.NewWorker(t.Context(), s.b, queues, queuey.WorkerConfig{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs := map[int]int{}
		err = queuey.Register(worker, queuey.HandlerFunc[slowJob](func(ctx context.Context, j *queuey.Job[slowJob]) error {
			mu.Lock()
			runs[j.Args.N]++
			n := runs[j.Args.N]
			mu.Unlock()
			time.Sleep(time.Duration(j.Args.N) * 100 * time.Millisecond)
			if n == 1 {
				return errors.New("the first run fails") // a retry: a hold published on settling
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.b.Ready(); err != nil {
			t.Fatalf("Ready while connected: %v", err)
		}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- worker.Run(ctx) }()
		for n := 1; n <= 8; n++ {
			if _, err := producer.Enqueue(t.Context(), slowJob{N: n}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(250 * time.Millisecond) // handlers running, some settled
		s.net.setDown(true)
		s.net.drop()
		synctest.Wait()
		if err := s.b.Ready(); !errors.Is(err, ErrDisconnected) {
			t.Fatalf("Ready during the outage: %v, want ErrDisconnected", err)
		}
		time.Sleep(10 * time.Second)
		s.net.setDown(false)
		time.Sleep(2 * time.Minute) // reconnected; every retry came due
		synctest.Wait()
		if err := s.b.Ready(); err != nil {
			t.Fatalf("Ready after the outage: %v", err)
		}
		mu.Lock()
		for n := 1; n <= 8; n++ {
			if runs[n] < 2 {
				t.Errorf("job %d ran %d times; want its failure and its retry at least", n, runs[n])
			}
		}
		mu.Unlock()
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		logs := s.logs.String()
		if strings.Contains(logs, "level=ERROR") {
			t.Fatalf("an ordinary outage logged an ERROR:\n%s", logs)
		}
		if !strings.Contains(logs, "level=WARN") {
			t.Fatalf("the outage logged no WARN:\n%s", logs)
		}
		if err := s.b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.b.Ready(); !errors.Is(err, ErrBackendClosed) {
			t.Fatalf("Ready after Close: %v, want ErrBackendClosed", err)
		}
	})
}

// Close closes the publishing channel first: that is no loss to recover
// from, and the backend must not open another (nor say it resumed).
func TestCloseDoesNotResumePublishing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervised(t, Backoff{})
		if err := s.b.Close(); err != nil {
			t.Fatal(err)
		}
		if logs := s.logs.String(); strings.Contains(logs, "resumed") {
			t.Fatalf("Close logged a resumption:\n%s", logs)
		}
	})
}
