package membroker

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// qqClosedClean fails unless the listener is closed with nothing sent.
func qqClosedClean[T any](t *testing.T, what string, c <-chan T) {
	t.Helper()
	select {
	case v, ok := <-c:
		if ok {
			t.Fatalf("%s received %v, want it closed with nothing sent", what, v)
		}
	default:
		t.Fatalf("%s not closed", what)
	}
}

// qqClosedAfter fails unless the listener holds want and is then closed.
func qqClosedAfter(t *testing.T, what string, c <-chan *amqp.Error, want *amqp.Error) {
	t.Helper()
	select {
	case got, ok := <-c:
		if !ok {
			t.Fatalf("%s closed without an error", what)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s error (-want +got):\n%s", what, diff)
		}
	default:
		t.Fatalf("%s: no error waiting", what)
	}
	qqClosedClean(t, what+" after its error", c)
}

var qqForced = serverErr(amqp.ConnectionForced,
	"CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")

// Broker.CloseConnection closes a connection from the broker's side: the
// connection's and every channel's NotifyClose listeners get the error, the
// channels close, consumers' delivery channels close, unacked messages are
// requeued (a failed delivery on a quorum queue), exclusive queues go, and
// other connections are untouched.
// Ref §7.3 (unacked requeued on channel/connection close; quorum returns
// count), semantics §E10 (exclusive queues deleted with their owner), amqp091
// Connection.shutdown (a connection error is sent to every channel's
// NotifyClose).
func TestFaultCloseConnection(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "qq", nil)
	e.declare("cq", nil)
	if _, err := e.ch.QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	e.publish("qq", "q0", amqp.Publishing{})
	e.publish("cq", "c0", amqp.Publishing{})
	ch1 := e.channel()
	ch1.Qos(1, 0, false)
	dels, err := ch1.Consume("qq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, dels)
	ch2 := e.channel()
	if _, ok, err := ch2.Get("cq", false); !ok || err != nil {
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	connErrs := e.conn.NotifyClose(make(chan *amqp.Error, 1))
	errs0, errs1, errs2 := closeErr(e.ch), closeErr(ch1), closeErr(ch2)
	confirms := ch1.NotifyPublish(make(chan amqp.Confirmation, 1))

	other, _ := e.b.Dial()
	och, _ := other.Channel()

	cause := &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - test", Server: true}
	e.b.CloseConnection(e.conn, cause)

	qqClosedAfter(t, "connection NotifyClose", connErrs, cause)
	qqClosedAfter(t, "channel 0 NotifyClose", errs0, cause)
	qqClosedAfter(t, "channel 1 NotifyClose", errs1, cause)
	qqClosedAfter(t, "channel 2 NotifyClose", errs2, cause)
	qqClosedClean(t, "NotifyPublish", confirms)
	noDelivery(t, dels)
	if _, ok := <-dels; ok {
		t.Fatal("consumer delivery channel not closed")
	}
	if !e.conn.IsClosed() || !e.ch.IsClosed() || !ch1.IsClosed() || !ch2.IsClosed() {
		t.Fatal("connection or a channel still open")
	}
	if _, err := e.conn.Channel(); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("Channel() on the closed connection = %v, want amqp.ErrClosed", err)
	}
	if err := ch1.Publish("", "qq", false, false, amqp.Publishing{}); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("Publish on a closed channel = %v, want amqp.ErrClosed", err)
	}
	if _, ok := e.b.Queue("ex"); ok {
		t.Fatal("exclusive queue survived its connection")
	}
	if other.IsClosed() || och.IsClosed() {
		t.Fatal("another connection was closed")
	}
	if qi, _ := e.b.Queue("qq"); len(qi.Consumers) != 0 {
		t.Fatalf("consumers left: %v", qi.Consumers)
	}
	d, ok, err := och.Get("qq", false)
	if !ok || err != nil {
		t.Fatalf("quorum message not requeued: ok=%v err=%v", ok, err)
	}
	if got := qqSee(d); got != (qqSeen{"q0", true, "1", "-"}) {
		t.Fatalf("requeued quorum message %+v, want redelivered with x-delivery-count 1", got)
	}
	d, ok, err = och.Get("cq", false)
	if !ok || err != nil || string(d.Body) != "c0" || !d.Redelivered {
		t.Fatalf("classic message: ok=%v err=%v body=%q redelivered=%v", ok, err, d.Body, d.Redelivered)
	}
}

// Broker.CloseChannel closes one channel with the error; the connection and
// its other channels stay open, and the closed channel's unacked messages are
// requeued.
// Ref semantics §E0 (soft errors close the channel only) and §7.3.
func TestFaultCloseChannel(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	e.publish("q", "m", amqp.Publishing{})
	victim := e.channel()
	if _, ok, err := victim.Get("q", false); !ok || err != nil {
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	errs, connErrs := closeErr(victim), e.conn.NotifyClose(make(chan *amqp.Error, 1))
	cause := serverErr(amqp.PreconditionFailed, "PRECONDITION_FAILED - injected")
	e.b.CloseChannel(victim, cause)
	qqClosedAfter(t, "channel NotifyClose", errs, cause)
	if !victim.IsClosed() || e.ch.IsClosed() || e.conn.IsClosed() {
		t.Fatal("want only the victim channel closed")
	}
	select {
	case err := <-connErrs:
		t.Fatalf("connection listener got %v", err)
	default:
	}
	if diff := cmp.Diff([]string{"m"}, e.drain("q")); diff != "" {
		t.Fatalf("requeued (-want +got):\n%s", diff)
	}
	if _, err := e.conn.Channel(); err != nil {
		t.Fatalf("new channel on the open connection: %v", err)
	}

	// A nil error is a 406.
	other := e.channel()
	errs = closeErr(other)
	e.b.CloseChannel(other, nil)
	select {
	case err := <-errs:
		if err == nil || err.Code != amqp.PreconditionFailed {
			t.Fatalf("nil cause closed the channel with %v, want a 406", err)
		}
	default:
		t.Fatal("no close error")
	}
}

// Broker.Restart closes every connection with 320 CONNECTION_FORCED;
// non-durable (transient and exclusive) queues vanish; durable classic
// queues keep only persistent messages; quorum queues keep all; unacked
// messages are back on their queues first.
// Ref the Broker.Restart contract in inspect.go, which follows RabbitMQ's
// durability rules (a transient or exclusive queue is not recovered; a
// classic queue recovers only persistent messages; a quorum queue's log
// keeps everything), §7.3 (unacked messages requeued on connection loss,
// quorum returns to the front) and the 320 text rabbit_reader sends on
// node shutdown. Not checked live: that would restart the shared broker.
func TestFaultRestart(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	if _, err := e.ch.QueueDeclare("transient", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ch.QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	e.declare("dc", nil)
	qqDeclare(e, "qq", nil)
	for i, body := range []string{"p0", "t1", "p2", "t3"} {
		mode := amqp.Transient
		if i%2 == 0 {
			mode = amqp.Persistent
		}
		e.publish("dc", body, amqp.Publishing{DeliveryMode: mode})
	}
	qqPublishN(e, "qq", "q", 3, 0)
	e.publish("transient", "x", amqp.Publishing{DeliveryMode: amqp.Persistent})
	e.mustGet("dc")
	e.mustGet("dc")
	e.mustGet("qq")
	e.mustGet("qq")
	ch := e.channel()
	dels, err := ch.Consume("transient", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, dels)
	connErrs := e.conn.NotifyClose(make(chan *amqp.Error, 1))
	chErrs := closeErr(ch)

	e.b.Restart()

	qqClosedAfter(t, "connection NotifyClose", connErrs, qqForced)
	qqClosedAfter(t, "channel NotifyClose", chErrs, qqForced)
	if _, ok := <-dels; ok {
		t.Fatal("consumer delivery channel not closed")
	}
	if !e.conn.IsClosed() || len(e.b.Connections()) != 0 {
		t.Fatal("connections survived the restart")
	}
	var names []string
	for _, qi := range e.b.Queues() {
		names = append(names, qi.Name)
	}
	if diff := cmp.Diff([]string{"dc", "qq"}, names); diff != "" {
		t.Fatalf("queues after restart (-want +got):\n%s", diff)
	}

	conn, err := e.b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	e.conn = conn
	e.ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p0", "p2"}, e.drain("dc")); diff != "" {
		t.Errorf("durable classic queue (-want +got):\n%s", diff)
	}
	var got []string
	for _, s := range qqDrainSeen(e, "qq") {
		got = append(got, fmt.Sprintf("%s/%v", s.Body, s.Redelivered))
	}
	if diff := cmp.Diff([]string{"q0/true", "q1/true", "q2/false"}, got); diff != "" {
		t.Errorf("quorum queue (-want +got):\n%s", diff)
	}
}

// Connection.Close is a clean close: every listener (connection and channel
// NotifyClose, NotifyPublish, NotifyReturn, NotifyCancel, deliveries) is
// closed with nothing sent; unacked messages are requeued; a second Close
// and Channel() return amqp.ErrClosed.
// Ref amqp091 Connection.Close (listeners closed without an error; closing a
// closed connection is ErrClosed), checked live on 4.0.5 with amqp091
// v1.16.0; §7.3 for the requeue.
func TestFaultConnectionCloseIsClean(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	e.publish("q", "m", amqp.Publishing{})
	if _, ok := e.get("q"); !ok {
		t.Fatal("no message")
	}
	dels, err := e.ch.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	connErrs := e.conn.NotifyClose(make(chan *amqp.Error, 1))
	chErrs := closeErr(e.ch)
	confirms := e.ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	returns := e.ch.NotifyReturn(make(chan amqp.Return, 1))
	cancels := e.ch.NotifyCancel(make(chan string, 1))

	if err := e.conn.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	qqClosedClean(t, "connection NotifyClose", connErrs)
	qqClosedClean(t, "channel NotifyClose", chErrs)
	qqClosedClean(t, "NotifyPublish", confirms)
	qqClosedClean(t, "NotifyReturn", returns)
	qqClosedClean(t, "NotifyCancel", cancels)
	qqClosedClean(t, "deliveries", dels)
	if err := e.conn.Close(); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("second Close = %v, want amqp.ErrClosed", err)
	}
	if _, err := e.conn.Channel(); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("Channel() on a closed connection = %v, want amqp.ErrClosed", err)
	}
	if !e.conn.IsClosed() || !e.ch.IsClosed() {
		t.Fatal("IsClosed false after Close")
	}
	if qi := e.info("q"); qi.Ready != 1 || qi.Unacked != 0 || len(qi.Consumers) != 0 {
		t.Fatalf("queue after close: %+v, want the message requeued and no consumers", qi)
	}
}

// Notify listeners registered on a closed channel or connection are closed
// at once.
// Ref amqp091 Channel.NotifyClose/NotifyPublish/...: "if the channel is
// already closed, the receiver is closed"; checked live for NotifyClose.
func TestFaultNotifyOnClosedIsClosedAtOnce(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	if err := e.ch.Close(); err != nil {
		t.Fatal(err)
	}
	qqClosedClean(t, "NotifyClose", e.ch.NotifyClose(make(chan *amqp.Error, 1)))
	qqClosedClean(t, "NotifyPublish", e.ch.NotifyPublish(make(chan amqp.Confirmation, 1)))
	qqClosedClean(t, "NotifyReturn", e.ch.NotifyReturn(make(chan amqp.Return, 1)))
	qqClosedClean(t, "NotifyCancel", e.ch.NotifyCancel(make(chan string, 1)))
	e.conn.Close()
	qqClosedClean(t, "connection NotifyClose", e.conn.NotifyClose(make(chan *amqp.Error, 1)))
}

// Many clients at once, each on its own channel: publishers in confirm mode,
// consumers acking, a basic.get poller; every message is delivered exactly
// once and every publish confirmed. Run with -race.
// Ref doc.go ("safe for concurrent use"; one mutex).
func TestFaultConcurrentClientsDeliverExactlyOnce(t *testing.T) {
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			e := newEnv(t, RabbitMQ40)
			e.declare("work", amqp.Table{"x-queue-type": typ})
			const publishers, perPublisher, consumers = 4, 200, 3
			const total = publishers * perPublisher

			var mu sync.Mutex
			seen := map[string]int{}
			done := make(chan struct{})
			record := func(body string) {
				mu.Lock()
				defer mu.Unlock()
				seen[body]++
				n := 0
				for _, c := range seen {
					n += c
				}
				if n == total {
					close(done)
				}
			}
			var wg sync.WaitGroup
			errc := make(chan error, publishers+consumers+1)
			for c := 0; c < consumers; c++ {
				ch := e.channel()
				ch.Qos(10, 0, false)
				dels, err := ch.Consume("work", "", false, false, false, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case d := <-dels:
							record(string(d.Body))
							if err := d.Ack(false); err != nil {
								errc <- err
								return
							}
						case <-done:
							return
						}
					}
				}()
			}
			getter := e.channel()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					default:
					}
					d, ok, err := getter.Get("work", false)
					if err != nil {
						errc <- err
						return
					}
					if !ok {
						runtime.Gosched()
						continue
					}
					record(string(d.Body))
					if err := d.Ack(false); err != nil {
						errc <- err
						return
					}
				}
			}()
			for p := 0; p < publishers; p++ {
				ch := e.channel()
				confirms := ch.NotifyPublish(make(chan amqp.Confirmation, perPublisher))
				ch.Confirm(false)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < perPublisher; i++ {
						body := []byte(fmt.Sprintf("p%d-%d", p, i))
						if err := ch.Publish("", "work", false, false, amqp.Publishing{Body: body}); err != nil {
							errc <- err
							return
						}
					}
					for i := 1; i <= perPublisher; i++ {
						if c := <-confirms; c.DeliveryTag != uint64(i) || !c.Ack {
							errc <- fmt.Errorf("confirm %+v, want tag %d ack", c, i)
							return
						}
					}
				}()
			}
			select {
			case <-done:
			case err := <-errc:
				t.Fatal(err)
			case <-time.After(20 * time.Second):
				mu.Lock()
				n := len(seen)
				mu.Unlock()
				t.Fatalf("only %d of %d distinct messages consumed", n, total)
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			if len(seen) != total {
				t.Fatalf("%d distinct messages, want %d", len(seen), total)
			}
			for body, n := range seen {
				if n != 1 {
					t.Fatalf("%s delivered %d times", body, n)
				}
			}
			qqWantReady(e, "work", 0, 0)
		})
	}
}
