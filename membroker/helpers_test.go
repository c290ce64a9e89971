package membroker

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	amqp "github.com/rabbitmq/amqp091-go"
)

// env is a broker on a mock clock with one open connection and channel.
type env struct {
	t    *testing.T
	b    *Broker
	clk  *clock.Mock
	conn *Connection
	ch   *Channel
}

// newEnv returns a broker of the given profile on a mock clock set to a
// fixed, non-zero instant.
func newEnv(t *testing.T, v Version) *env {
	t.Helper()
	return newEnvWith(t, Config{Version: v})
}

// newEnvWith is newEnv with the rest of cfg; its Clock is the env's.
func newEnvWith(t *testing.T, cfg Config) *env {
	t.Helper()
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cfg.Clock = clk
	b := New(cfg)
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, b: b, clk: clk, conn: conn, ch: ch}
}

// channel opens another channel on the env's connection.
func (e *env) channel() *Channel {
	e.t.Helper()
	ch, err := e.conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	return ch
}

// declare declares a durable queue and fails the test on error.
func (e *env) declare(name string, args amqp.Table) {
	e.t.Helper()
	if _, err := e.ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		e.t.Fatalf("declare %s: %v", name, err)
	}
}

// publish publishes body to queue with the given publishing as a template.
func (e *env) publish(queue, body string, p amqp.Publishing) {
	e.t.Helper()
	p.Body = []byte(body)
	if err := e.ch.Publish("", queue, false, false, p); err != nil {
		e.t.Fatalf("publish to %s: %v", queue, err)
	}
}

// get fetches one message with manual ack; ok is false when none is ready.
func (e *env) get(queue string) (amqp.Delivery, bool) {
	e.t.Helper()
	d, ok, err := e.ch.Get(queue, false)
	if err != nil {
		e.t.Fatalf("get %s: %v", queue, err)
	}
	return d, ok
}

// drain gets and acks every ready message, returning their bodies in order.
func (e *env) drain(queue string) []string {
	e.t.Helper()
	var out []string
	for {
		d, ok := e.get(queue)
		if !ok {
			return out
		}
		out = append(out, string(d.Body))
		if err := d.Ack(false); err != nil {
			e.t.Fatal(err)
		}
	}
}

// info returns a queue's introspection record, failing if it is missing.
func (e *env) info(queue string) QueueInfo {
	e.t.Helper()
	qi, ok := e.b.Queue(queue)
	if !ok {
		e.t.Fatalf("queue %s does not exist", queue)
	}
	return qi
}

// advance moves virtual time forward.
func (e *env) advance(d time.Duration) { e.clk.Add(d) }

// closeErr returns the error a channel was closed with, registering the
// listener first; call it before provoking the error.
func closeErr(ch *Channel) chan *amqp.Error {
	return ch.NotifyClose(make(chan *amqp.Error, 1))
}

// receive takes one delivery that must already be waiting.
func receive(t *testing.T, c <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case d, ok := <-c:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return d
	default:
		t.Fatal("no delivery waiting")
		return amqp.Delivery{}
	}
}

// noDelivery fails if a delivery is waiting.
func noDelivery(t *testing.T, c <-chan amqp.Delivery) {
	t.Helper()
	select {
	case d, ok := <-c:
		if ok {
			t.Fatalf("unexpected delivery %q", d.Body)
		}
	default:
	}
}

// mustGet fetches one message from queue without acknowledging it, and
// fails the test if the queue is empty.
func (e *env) mustGet(queue string) amqp.Delivery {
	e.t.Helper()
	d, ok := e.get(queue)
	if !ok {
		e.t.Fatalf("get %s: queue empty", queue)
	}
	return d
}

// serverErr is the *amqp.Error a broker closes with for code and reason.
// Recover marks AMQP 0-9-1's soft errors, which close only the channel;
// the list is the specification's, written out here rather than taken from
// the model's isSoftCode, so that the tests check the model against it.
func serverErr(code int, reason string) *amqp.Error {
	soft := code == 311 || code == 312 || code == 313 || code == 403 || code == 404 || code == 405 || code == 406
	return &amqp.Error{Code: code, Reason: reason, Server: true, Recover: soft}
}
