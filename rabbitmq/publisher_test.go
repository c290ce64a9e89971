package rabbitmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The compile-time proof that the backend runs on both: a live broker's
// channel and membroker's model satisfy Channel.
var (
	_ Channel = (*amqp.Channel)(nil)
	_ Channel = (*membroker.Channel)(nil)
)

// pubEnv is one broker to run a publisher test on: membroker (RabbitMQ40,
// mock clock) or the live RabbitMQ at AMQP_URL. Publishers get channels on
// their own connection, so a test that has the broker close it keeps the
// admin connection for checking and cleaning up.
type pubEnv struct {
	live bool
	mem  *membroker.Broker // nil on the live broker

	// channel opens a channel on the publishing connection.
	channel func(t *testing.T) Channel
	// admin is a channel on the admin connection.
	admin interface {
		QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
		QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
		Get(queue string, autoAck bool) (amqp.Delivery, bool, error)
	}
}

// eachBroker runs test on membroker and, when AMQP_URL is set, on the live
// broker (skipped with a notice otherwise).
func eachBroker(t *testing.T, test func(t *testing.T, env *pubEnv)) {
	t.Run("broker=membroker", func(t *testing.T) {
		b := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
		admin, _ := b.Dial()
		pub, _ := b.Dial()
		t.Cleanup(func() { _ = admin.Close(); _ = pub.Close() })
		ach, err := admin.Channel()
		if err != nil {
			t.Fatal(err)
		}
		test(t, &pubEnv{
			mem:   b,
			admin: ach,
			channel: func(t *testing.T) Channel {
				ch, err := pub.Channel()
				if err != nil {
					t.Fatal(err)
				}
				return ch
			},
		})
	})
	t.Run("broker=live", func(t *testing.T) {
		url := os.Getenv("AMQP_URL")
		if url == "" {
			t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
		}
		admin, err := amqp.Dial(url)
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		pub, err := amqp.Dial(url)
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		t.Cleanup(func() { _ = admin.Close(); _ = pub.Close() })
		ach, err := admin.Channel()
		if err != nil {
			t.Fatal(err)
		}
		test(t, &pubEnv{
			live:  true,
			admin: ach,
			channel: func(t *testing.T) Channel {
				ch, err := pub.Channel()
				if err != nil {
					t.Fatal(err)
				}
				return ch
			},
		})
	})
}

// queue declares a durable classic queue with a fresh name, deleted at the
// end of the test.
func (env *pubEnv) queue(t *testing.T) string {
	t.Helper()
	name := uniqueName("queuey-pub")
	if _, err := env.admin.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = env.admin.QueueDelete(name, false, false, false) })
	return name
}

// missingQueue is a fresh name no queue has.
func (env *pubEnv) missingQueue() string { return uniqueName("queuey-pub-missing") }

// drain takes every message off queue.
func (env *pubEnv) drain(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := env.admin.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// newTestPublisher starts a publisher on ch, closed at the end of the test.
func newTestPublisher(t *testing.T, ch Channel, logger *slog.Logger) *publisher {
	t.Helper()
	p, err := newPublisher(ch, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func bodies(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	slices.Sort(out)
	return out
}

func msg(body string) amqp.Publishing {
	return amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)}
}

// wantReturned fails t unless err is a 312 NO_ROUTE return of queue.
func wantReturned(t *testing.T, err error, queue string) {
	t.Helper()
	var re *ReturnError
	if !errors.Is(err, ErrReturned) || !errors.As(err, &re) {
		t.Fatalf("publish to missing queue %s: got %v, want ErrReturned", queue, err)
	}
	if want := (ReturnError{Queue: queue, Code: amqp.NoRoute, Text: "NO_ROUTE"}); *re != want {
		t.Fatalf("return: got %+v, want %+v", *re, want)
	}
}

// wantClosed fails t unless err wraps ErrPublisherClosed and the broker's
// *amqp.Error with code (0: no *amqp.Error at all).
func wantClosed(t *testing.T, err error, code int) {
	t.Helper()
	if !errors.Is(err, ErrPublisherClosed) {
		t.Fatalf("got %v, want ErrPublisherClosed", err)
	}
	var ae *amqp.Error
	switch {
	case code == 0 && errors.As(err, &ae):
		t.Fatalf("got %v wrapping %#v, want no *amqp.Error", err, ae)
	case code != 0 && !errors.As(err, &ae):
		t.Fatalf("got %v, want it to wrap the broker's *amqp.Error %d", err, code)
	case code != 0 && ae.Code != code:
		t.Fatalf("got %v, want the broker's *amqp.Error with code %d", err, code)
	}
}

func TestPublisherPublishesToExistingQueue(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		p := newTestPublisher(t, env.channel(t), nil)
		headers := amqp.Table{"kind": "email"}
		err := p.Publish(t.Context(), q, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/json", Priority: 3,
			Headers: headers, Body: []byte(`{"id":1}`),
		})
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if diff := cmp.Diff(amqp.Table{"kind": "email"}, headers); diff != "" {
			t.Errorf("the caller's headers were modified (-want +got):\n%s", diff)
		}
		got := env.drain(t, q)
		if len(got) != 1 {
			t.Fatalf("queue holds %d messages, want 1", len(got))
		}
		d := got[0]
		if string(d.Body) != `{"id":1}` || d.ContentType != "application/json" || d.Priority != 3 || d.DeliveryMode != amqp.Persistent {
			t.Errorf("delivered %+v", d)
		}
		want := amqp.Table{"kind": "email", publishIDHeader: "1"}
		if diff := cmp.Diff(want, d.Headers); diff != "" {
			t.Errorf("headers (-want +got):\n%s", diff)
		}
	})
}

func TestPublisherReturnsMissingQueue(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		p := newTestPublisher(t, env.channel(t), nil)
		missing := env.missingQueue()
		wantReturned(t, p.Publish(t.Context(), missing, msg("lost")), missing)
		// The channel survives a return: the next publish goes through.
		if err := p.Publish(t.Context(), q, msg("kept")); err != nil {
			t.Fatalf("publish after a return: %v", err)
		}
		if got := bodies(env.drain(t, q)); !slices.Equal(got, []string{"kept"}) {
			t.Errorf("queue holds %q, want [kept]", got)
		}
	})
}

// Each message carries its own headers and the publish id, nothing from
// the publish before it, and the caller's table is left as it was.
func TestPublisherHeadersDoNotCarryOver(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		p := newTestPublisher(t, env.channel(t), nil)
		withHeaders := amqp.Table{"a": "1", "b": int64(2)}
		for _, h := range []amqp.Table{nil, withHeaders, nil, {"c": "3"}, {}, nil} {
			m := msg("x")
			m.Headers = h
			if err := p.Publish(t.Context(), q, m); err != nil {
				t.Fatal(err)
			}
		}
		if len(withHeaders) != 2 {
			t.Fatalf("the caller's table was changed: %v", withHeaders)
		}
		want := []amqp.Table{{}, {"a": "1", "b": int64(2)}, {}, {"c": "3"}, {}, {}}
		for i, d := range env.drain(t, q) {
			id, ok := d.Headers[publishIDHeader].(string)
			if !ok || id == "" {
				t.Fatalf("message %d has no publish id: %v", i, d.Headers)
			}
			delete(d.Headers, publishIDHeader)
			if !cmp.Equal(d.Headers, want[i], cmpopts.EquateEmpty()) {
				t.Errorf("message %d headers %v, want %v", i, d.Headers, want[i])
			}
		}
	})
}

// publishAll publishes n messages from g goroutines, body i to queueOf(i),
// and returns each publish's error.
func publishAll(ctx context.Context, p *publisher, n, g int, queueOf func(i int) string) []error {
	errs := make([]error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for i := range next {
				errs[i] = p.Publish(ctx, queueOf(i), msg(strconv.Itoa(i)))
			}
		})
	}
	wg.Wait()
	return errs
}

func TestPublisherConcurrentPublishesAllConfirmed(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		p := newTestPublisher(t, env.channel(t), nil)
		const n = 100
		errs := publishAll(t.Context(), p, n, 16, func(int) string { return q })
		for i, err := range errs {
			if err != nil {
				t.Errorf("publish %d: %v", i, err)
			}
		}
		got := env.drain(t, q)
		var want []string
		for i := range n {
			want = append(want, strconv.Itoa(i))
		}
		slices.Sort(want)
		if diff := cmp.Diff(want, bodies(got)); diff != "" {
			t.Errorf("bodies on the queue (-want +got):\n%s", diff)
		}
		ids := map[string]bool{}
		for _, d := range got {
			id, _ := d.Headers[publishIDHeader].(string)
			if id == "" || ids[id] {
				t.Errorf("message %s: publish id %q missing or repeated", d.Body, id)
			}
			ids[id] = true
		}
	})
}

// TestPublisherCorrelatesMixedOutcomes is the correlation test: concurrent
// publishes to an existing and a missing queue, many rounds, each publish
// getting its own outcome. On membroker a publish's return and confirm are
// both ready when the dispatcher wakes, which is where a dispatcher that
// completed a confirm before draining the returns would report success.
func TestPublisherCorrelatesMixedOutcomes(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		missing := env.missingQueue()
		p := newTestPublisher(t, env.channel(t), nil)
		rounds := 200
		if env.live {
			rounds = 20
		}
		const n = 64
		for round := range rounds {
			toMissing := make([]bool, n)
			for i := range toMissing {
				toMissing[i] = rand.IntN(2) == 0
			}
			errs := publishAll(t.Context(), p, n, 16, func(i int) string {
				if toMissing[i] {
					return missing
				}
				return q
			})
			var want []string
			for i, err := range errs {
				if toMissing[i] {
					wantReturned(t, err, missing)
					continue
				}
				if err != nil {
					t.Fatalf("round %d: publish %d to %s: %v", round, i, q, err)
				}
				want = append(want, strconv.Itoa(i))
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, bodies(env.drain(t, q))); diff != "" {
				t.Fatalf("round %d: bodies on the queue (-want +got):\n%s", round, diff)
			}
		}
	})
}

// gatedChannel holds back the confirms (those holdConfirm names, or all) and,
// with holdReturns, the returns the broker sends until open is closed, so
// that a test can keep publishes in flight as long as it likes. Held
// returns are handed over before held confirms, as the client library
// would; after opening, returns and confirms flow through separate
// goroutines, so a test with holdReturns must not publish to a missing
// queue after opening.
type gatedChannel struct {
	Channel
	holdReturns bool
	holdConfirm func(seq uint64) bool // nil: hold every confirm
	open        chan struct{}
	published   chan uint64   // the sequence number of every publish written
	held        chan uint64   // the sequence number of every confirm held
	returned    chan struct{} // closed once held returns are handed over
}

func gated(ch Channel, holdReturns bool) *gatedChannel {
	return &gatedChannel{Channel: ch, holdReturns: holdReturns, open: make(chan struct{}),
		published: make(chan uint64, 1024), held: make(chan uint64, 1024), returned: make(chan struct{})}
}

func (g *gatedChannel) PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error {
	seq := g.GetNextPublishSeqNo() // the publisher holds its lock around both
	err := g.Channel.PublishWithContext(ctx, exchange, key, mandatory, immediate, msg)
	if err == nil {
		g.published <- seq
	}
	return err
}

// awaitPublished waits until n more publishes have been written.
func (g *gatedChannel) awaitPublished(n int) {
	for range n {
		<-g.published
	}
}

// awaitHeld waits until n more confirms have been held back. A publish's
// return reaches the gate before its confirm does, so returns for them are
// held (with holdReturns) or handed over (without) by then.
func (g *gatedChannel) awaitHeld(n int) {
	for range n {
		<-g.held
	}
}

func (g *gatedChannel) NotifyReturn(c chan amqp.Return) chan amqp.Return {
	if !g.holdReturns {
		close(g.returned)
		return g.Channel.NotifyReturn(c)
	}
	in := g.Channel.NotifyReturn(make(chan amqp.Return, cap(c)))
	go forwardGated(in, c, g.open, nil, g.returned, func(amqp.Return) bool { return true }, nil)
	return c
}

func (g *gatedChannel) NotifyPublish(c chan amqp.Confirmation) chan amqp.Confirmation {
	in := g.Channel.NotifyPublish(make(chan amqp.Confirmation, cap(c)))
	hold := func(c amqp.Confirmation) bool { return g.holdConfirm == nil || g.holdConfirm(c.DeliveryTag) }
	go forwardGated(in, c, g.open, g.returned, nil, hold, func(c amqp.Confirmation) { g.held <- c.DeliveryTag })
	return c
}

// forwardGated forwards what arrives on in to out, except that what hold
// names is held (and reported to onHold) until open and after are closed;
// what is already waiting on in when open closes is held too. It closes out
// (and flushed, if any, once what was held is handed over) when in closes.
// What is held when in closes first is dropped, as a broker's confirms are
// when the channel closes under them.
func forwardGated[T any](in <-chan T, out chan T, open, after <-chan struct{}, flushed chan struct{}, hold func(T) bool, onHold func(T)) {
	defer close(out)
	if flushed != nil {
		defer func() {
			if flushed != nil {
				close(flushed)
			}
		}()
	}
	var held []T
	for open != nil {
		select {
		case v, ok := <-in:
			if !ok {
				return
			}
			if hold(v) {
				held = append(held, v)
				if onHold != nil {
					onHold(v)
				}
			} else {
				out <- v
			}
		case <-open:
			open = nil
		}
	}
	for drained := false; !drained; {
		select {
		case v, ok := <-in:
			if !ok {
				return
			}
			held = append(held, v)
		default:
			drained = true
		}
	}
	if after != nil {
		<-after
	}
	for _, v := range held {
		out <- v
	}
	if flushed != nil {
		close(flushed)
		flushed = nil
	}
	for v := range in {
		out <- v
	}
}

// TestPublisherReturnReadyWithItsConfirm holds returns and confirms back
// and hands them over together, so that the dispatcher finds both ready:
// every publish to the missing queue must still come out ErrReturned.
func TestPublisherReturnReadyWithItsConfirm(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		missing := env.missingQueue()
		rounds := 50
		if env.live {
			rounds = 5
		}
		for range rounds {
			g := gated(env.channel(t), true)
			p := newTestPublisher(t, g, nil)
			const n = 16
			errs := make(chan error, n)
			for i := range n {
				go func() {
					target := q
					if i%2 == 0 {
						target = missing
					}
					err := p.Publish(t.Context(), target, msg(strconv.Itoa(i)))
					if i%2 == 0 {
						if !errors.Is(err, ErrReturned) {
							err = fmt.Errorf("publish %d to the missing queue: got %v, want ErrReturned", i, err)
						} else {
							err = nil
						}
					} else if err != nil {
						err = fmt.Errorf("publish %d: %w", i, err)
					}
					errs <- err
				}()
			}
			g.awaitHeld(n)
			close(g.open)
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if got := len(env.drain(t, q)); got != n/2 {
				t.Fatalf("queue holds %d messages, want %d", got, n/2)
			}
			_ = p.Close()
		}
	})
}

// inFlight starts n publishes to q on p and waits until all are written;
// their confirms are held back by g. It returns their outcomes.
func inFlight(t *testing.T, p *publisher, g *gatedChannel, q string, n int) <-chan error {
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- p.Publish(t.Context(), q, msg(fmt.Sprint("in flight ", i))) }()
	}
	g.awaitPublished(n)
	return errs
}

// TestPublisherChannelClosedByBroker has the broker close the publishing
// channel (a message with an invalid expiration is a 406 channel
// exception) while publishes are waiting for their confirms: they all fail
// with ErrPublisherClosed wrapping the broker's error, and so does every
// later publish. The broker did enqueue the messages before the bad one:
// ErrPublisherClosed means "not known to be delivered".
func TestPublisherChannelClosedByBroker(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		g := gated(env.channel(t), false)
		p := newTestPublisher(t, g, nil)
		const n = 10
		errs := inFlight(t, p, g, q, n)

		bad := amqp.Publishing{Expiration: "soon", Body: []byte("bad")}
		wantClosed(t, p.Publish(t.Context(), q, bad), amqp.PreconditionFailed)
		for range n {
			err := <-errs
			wantClosed(t, err, amqp.PreconditionFailed)
			if !errors.Is(err, queuey.ErrMaybeEnqueued) {
				t.Fatalf("a publish in flight when the channel closed: %v; want queuey.ErrMaybeEnqueued", err)
			}
		}
		<-p.Done()
		wantClosed(t, p.Err(), amqp.PreconditionFailed)
		later := p.Publish(t.Context(), q, msg("later"))
		wantClosed(t, later, amqp.PreconditionFailed)
		if errors.Is(later, queuey.ErrMaybeEnqueued) {
			t.Fatalf("a publish never sent: %v; want no queuey.ErrMaybeEnqueued", later)
		}
		if got := len(env.drain(t, q)); got != n {
			t.Errorf("queue holds %d messages, want the %d published before the bad one", got, n)
		}
		if err := p.Close(); err != nil {
			t.Errorf("Close after the broker closed the channel: %v", err)
		}
	})
}

// TestPublisherConnectionClosedByBroker has the broker close the whole
// publishing connection (basic.publish with immediate=true, on another
// channel, is a 540 NOT_IMPLEMENTED connection exception).
func TestPublisherConnectionClosedByBroker(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		g := gated(env.channel(t), false)
		p := newTestPublisher(t, g, nil)
		const n = 5
		errs := inFlight(t, p, g, q, n)

		other := env.channel(t)
		_ = other.PublishWithContext(t.Context(), "", q, false, true, msg("immediate"))
		for range n {
			wantClosed(t, <-errs, amqp.NotImplemented)
		}
		<-p.Done()
		wantClosed(t, p.Publish(t.Context(), q, msg("later")), amqp.NotImplemented)
	})
}

// TestPublisherBrokerFaultInjection closes the publishing channel and
// connection through membroker's fault injection, with the broker's own
// errors.
func TestPublisherBrokerFaultInjection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(b *membroker.Broker, conn *membroker.Connection, ch *membroker.Channel)
		code  int
	}{
		{"CloseChannel", func(b *membroker.Broker, _ *membroker.Connection, ch *membroker.Channel) {
			b.CloseChannel(ch, &amqp.Error{Code: amqp.InternalError, Reason: "INTERNAL_ERROR", Server: true})
		}, amqp.InternalError},
		{"CloseConnection", func(b *membroker.Broker, conn *membroker.Connection, _ *membroker.Channel) {
			b.CloseConnection(conn, nil) // 320 CONNECTION_FORCED
		}, amqp.ConnectionForced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
			admin, _ := b.Dial()
			ach, _ := admin.Channel()
			if _, err := ach.QueueDeclare("q", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			conn, _ := b.Dial()
			ch, _ := conn.Channel()
			g := gated(ch, false)
			p := newTestPublisher(t, g, nil)
			const n = 8
			errs := inFlight(t, p, g, "q", n)
			tc.fault(b, conn, ch)
			for range n {
				wantClosed(t, <-errs, tc.code)
			}
			<-p.Done()
			wantClosed(t, p.Publish(t.Context(), "q", msg("later")), tc.code)
			if !ch.IsClosed() {
				t.Error("channel still open")
			}
		})
	}
}

// nackingChannel turns the broker's confirm of the publishes it names into
// nacks: membroker never nacks and RabbitMQ only does on internal failure.
type nackingChannel struct {
	Channel
	nack func(seq uint64) bool
}

func (n *nackingChannel) NotifyPublish(c chan amqp.Confirmation) chan amqp.Confirmation {
	in := n.Channel.NotifyPublish(make(chan amqp.Confirmation, cap(c)))
	go func() {
		defer close(c)
		for conf := range in {
			if n.nack(conf.DeliveryTag) {
				conf.Ack = false
			}
			c <- conf
		}
	}()
	return c
}

func TestPublisherNacked(t *testing.T) {
	b := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
	conn, _ := b.Dial()
	admin, _ := conn.Channel()
	if _, err := admin.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch, _ := conn.Channel()
	p := newTestPublisher(t, &nackingChannel{Channel: ch, nack: func(seq uint64) bool { return seq == 2 }}, nil)
	for i, want := range []error{nil, ErrNacked, nil} {
		if err := p.Publish(t.Context(), "q", msg(strconv.Itoa(i))); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("publish %d: got %v, want %v", i+1, err, want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger on another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (p *publisher) pendingCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

func TestPublisherContextCancelled(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		t.Run("before publishing", func(t *testing.T) {
			q := env.queue(t)
			p := newTestPublisher(t, env.channel(t), nil)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if err := p.Publish(ctx, q, msg("never")); err != context.Canceled {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			if got := len(env.drain(t, q)); got != 0 {
				t.Errorf("queue holds %d messages, want 0", got)
			}
		})

		t.Run("queued behind the lock", func(t *testing.T) {
			q := env.queue(t)
			p := newTestPublisher(t, env.channel(t), nil)
			p.lock <- struct{}{} // as a Publish blocked in its write would
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- p.Publish(ctx, q, msg("never")) }()
			cancel()
			if err := <-done; err != context.Canceled {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			<-p.lock
			if err := p.Publish(t.Context(), q, msg("after")); err != nil {
				t.Fatalf("publish after: %v", err)
			}
			if got := bodies(env.drain(t, q)); !slices.Equal(got, []string{"after"}) {
				t.Errorf("queue holds %q, want [after]", got)
			}
		})

		t.Run("waiting for the confirm", func(t *testing.T) {
			q := env.queue(t)
			g := gated(env.channel(t), false)
			p := newTestPublisher(t, g, nil)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- p.Publish(ctx, q, msg("abandoned")) }()
			g.awaitPublished(1)
			cancel()
			// Sent, so perhaps enqueued: the error says so, and why.
			if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, queuey.ErrMaybeEnqueued) {
				t.Fatalf("got %v, want context.Canceled and queuey.ErrMaybeEnqueued", err)
			}
			if n := p.pendingCount(); n != 0 {
				t.Errorf("%d waiters left behind", n)
			}
			close(g.open) // the abandoned publish's confirm goes to nobody
			if err := p.Publish(t.Context(), q, msg("next")); err != nil {
				t.Fatalf("publish after: %v", err)
			}
			// The abandoned message was delivered all the same.
			if got := bodies(env.drain(t, q)); !slices.Equal(got, []string{"abandoned", "next"}) {
				t.Errorf("queue holds %q, want [abandoned next]", got)
			}
		})

		t.Run("return after giving up", func(t *testing.T) {
			q := env.queue(t)
			missing := env.missingQueue()
			g := gated(env.channel(t), true)
			var log syncBuffer
			p := newTestPublisher(t, g, slog.New(slog.NewTextHandler(&log, nil)))
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- p.Publish(ctx, missing, msg("lost")) }()
			g.awaitHeld(1)
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, queuey.ErrMaybeEnqueued) {
				t.Fatalf("got %v, want context.Canceled and queuey.ErrMaybeEnqueued", err)
			}
			close(g.open)
			// Held returns reach the dispatcher before the next confirm does.
			if err := p.Publish(t.Context(), q, msg("next")); err != nil {
				t.Fatalf("publish after: %v", err)
			}
			if got := log.String(); !bytes.Contains([]byte(got), []byte("publish returned after its caller stopped waiting")) ||
				!bytes.Contains([]byte(got), []byte("reply_code=312")) {
				t.Errorf("log does not report the late return:\n%s", got)
			}
		})

		t.Run("return known when giving up", func(t *testing.T) {
			q := env.queue(t)
			missing := env.missingQueue()
			g := gated(env.channel(t), false) // returns pass
			g.holdConfirm = func(seq uint64) bool { return seq == 1 }
			p := newTestPublisher(t, g, nil)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- p.Publish(ctx, missing, msg("lost")) }()
			g.awaitPublished(1)
			// The broker sent the first publish's return before the second
			// publish's confirm, and the dispatcher drains returns before
			// completing a confirm: once this returns, the return is known.
			if err := p.Publish(t.Context(), q, msg("next")); err != nil {
				t.Fatalf("second publish: %v", err)
			}
			cancel()
			wantReturned(t, <-done, missing)
			close(g.open)
		})
	})
}

func TestPublisherClose(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		g := gated(env.channel(t), false)
		p, err := newPublisher(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		const n = 3
		errs := inFlight(t, p, g, q, n)
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for range n {
			wantClosed(t, <-errs, 0)
		}
		select {
		case <-p.Done():
		default:
			t.Error("Done not closed after Close")
		}
		if !g.IsClosed() {
			t.Error("Close left the channel open")
		}
		wantClosed(t, p.Publish(t.Context(), q, msg("later")), 0)
		if err := p.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

func TestNewPublisherOnClosedChannel(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		ch := env.channel(t)
		_ = ch.Close()
		if p, err := newPublisher(ch, nil); err == nil {
			_ = p.Close()
			t.Fatal("newPublisher on a closed channel: no error")
		}
	})
}

// TestPublisherRefusedByClient: a message the client library refuses to
// encode fails alone, before reaching the broker, and the publisher goes
// on.
func TestPublisherRefusedByClient(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		p := newTestPublisher(t, env.channel(t), nil)
		bad := amqp.Publishing{Headers: amqp.Table{"unencodable": struct{}{}}, Body: []byte("bad")}
		err := p.Publish(t.Context(), q, bad)
		if err == nil || errors.Is(err, ErrPublisherClosed) || errors.Is(err, ErrReturned) {
			t.Fatalf("got %v, want the client library's refusal", err)
		}
		if err := p.Publish(t.Context(), q, msg("good")); err != nil {
			t.Fatalf("publish after a refused one: %v", err)
		}
		if n := p.pendingCount(); n != 0 {
			t.Errorf("%d waiters left behind", n)
		}
		got := env.drain(t, q)
		if len(got) != 1 || string(got[0].Body) != "good" || got[0].Headers[publishIDHeader] != "1" {
			t.Errorf("queue holds %v, want the good message with publish id 1", got)
		}
	})
}

// resettingChannel fails every write as a TCP connection reset would: the
// broker was killed while the message was on its way.
type resettingChannel struct{ Channel }

func (resettingChannel) PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error {
	return &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
}

// The first write that fails on the wire may have been sent whole by
// another channel's flush of the shared writer: the error says the job may
// have been enqueued (seen live with a kill -9). Every later one wrote
// nothing, the writer refusing with its first error: not sent, and not a
// maybe (a restart gave eleven such false maybes in 40 ms, none enqueued).
func TestPublisherWriteResetMayHaveEnqueued(t *testing.T) {
	b := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	p := newTestPublisher(t, resettingChannel{ch}, nil)
	err := p.Publish(t.Context(), "q", msg("x"))
	if !errors.Is(err, queuey.ErrMaybeEnqueued) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("publish over a reset connection: %v; want queuey.ErrMaybeEnqueued wrapping ECONNRESET", err)
	}
	for range 3 {
		err := p.Publish(t.Context(), "q", msg("y"))
		if errors.Is(err, queuey.ErrMaybeEnqueued) || !errors.Is(err, ErrPublisherClosed) || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("publish after the connection failed: %v; want ErrPublisherClosed wrapping ECONNRESET, not a maybe", err)
		}
	}
}

// More confirms than the publisher's buffer holds, all of publishes whose
// callers stopped waiting, with no Publish waiting when they arrive: the
// client library hands each confirm over from the connection's reader,
// which waits up to 5 s on a full buffer, and every consumer on the
// connection with it (docs/reconnection.md). The gate here waits for ever,
// so a confirm left unread stays in the buffer. The publisher's watcher
// now reads them.
func TestPublisherReadsConfirmsNobodyWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ch := bubbleChannel(t)
		g := gated(ch, false)
		p := newTestPublisher(t, g, nil)
		abandon(t, p, g, confirmBuffer+100)
		close(g.open) // the broker confirms them all
		synctest.Wait()
		if left := len(p.confirms); left != 0 || p.hasOrphans() {
			t.Fatalf("%d confirms left unread (buffer of %d), orphans left: %t", left, confirmBuffer, p.hasOrphans())
		}
		if err := p.Publish(t.Context(), "q", msg("after")); err != nil {
			t.Fatalf("a publish after: %v", err)
		}
	})
}

// A channel the broker closes while the watcher adopts orphaned confirms
// still shuts the publisher down, with the broker's reason, even with a
// confirm listener the client library leaves open after the close: the
// watcher watches the close notification while it adopts.
func TestPublisherClosesWhileAdoptingOrphans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, ch := bubbleChannel(t)
		release := make(chan struct{})
		defer close(release)
		g := gated(confirmsLeftOpen{ch, release}, false)
		p := newTestPublisher(t, g, nil)
		abandon(t, p, g, 1)
		synctest.Wait() // the watcher is adopting, its confirm held back
		if !p.hasOrphans() {
			t.Fatal("no orphan counted")
		}
		b.CloseChannel(ch, &amqp.Error{Code: amqp.InternalError, Reason: "INTERNAL_ERROR", Server: true})
		<-p.Done()
		wantClosed(t, p.Err(), amqp.InternalError)
	})
}

// confirmsLeftOpen forwards the broker's confirms but leaves the
// publisher's confirm listener open when the channel closes, until the
// test closes release.
type confirmsLeftOpen struct {
	Channel
	release chan struct{}
}

func (c confirmsLeftOpen) NotifyPublish(out chan amqp.Confirmation) chan amqp.Confirmation {
	in := c.Channel.NotifyPublish(make(chan amqp.Confirmation, cap(out)))
	go func() {
		for v := range in {
			out <- v
		}
		<-c.release
		close(out)
	}()
	return out
}

// bubbleChannel is a channel of a membroker on the bubble's clock (which
// hands over what did not fit in a listener's buffer at its next poll),
// with the queue "q" declared.
func bubbleChannel(t *testing.T) (*membroker.Broker, *membroker.Channel) {
	t.Helper()
	b := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return b, ch
}

// abandon publishes n messages to "q" whose confirms g holds back, and
// gives up on all of them (a memory alarm outlasted every caller's
// deadline, say).
func abandon(t *testing.T, p *publisher, g *gatedChannel, n int) {
	t.Helper()
	ctx, giveUp := context.WithCancel(t.Context())
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- p.Publish(ctx, "q", msg(strconv.Itoa(i))) }()
	}
	go g.awaitPublished(n)
	g.awaitHeld(n)
	giveUp()
	for range n {
		if err := <-errs; !errors.Is(err, queuey.ErrMaybeEnqueued) || !errors.Is(err, context.Canceled) {
			t.Fatalf("publish whose caller gave up: %v, want ErrMaybeEnqueued and context.Canceled", err)
		}
	}
}
