package rabbitmq

import (
	"github.com/queuey/queuey/internal/acktimeout"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ackTimeoutRig is a backend on a membroker whose consumer_timeout is 3 s
// and channel tick 1 s, far below a job's default Timeout: the broker
// would take back every delivery a handler held longer but for what the
// backend asks of it (docs/consumer-timeout.md).
func ackTimeoutRig(t *testing.T, v membroker.Version) (*Backend, *membroker.Broker, *clock.Mock, *membroker.Channel) {
	t.Helper()
	clk := clock.NewMock()
	broker := membroker.New(membroker.Config{Clock: clk, Version: v, ConsumerTimeout: 3 * time.Second, ChannelTick: time.Second})
	conn, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Channels(conn.Channel), Options{Topology: Topology{ClassicHolds: true}, ServerVersion: conn.ServerVersion()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	raw, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return b, broker, clk, raw
}

func TestConsumerTimeoutIsRaisedAboveTheJobsTimeout(t *testing.T) {
	for _, v := range []membroker.Version{membroker.RabbitMQ40, membroker.RabbitMQ43} {
		for _, typ := range []queuey.QueueType{queuey.Classic, queuey.Quorum} {
			t.Run(v.String()+"/"+typ.String(), func(t *testing.T) {
				b, broker, clk, raw := ackTimeoutRig(t, v)
				q := queuey.QueueConfig{Name: "jobs", Type: typ}.WithDefaults()
				if err := b.Declare(t.Context(), q); err != nil {
					t.Fatal(err)
				}
				info, _ := broker.Queue("jobs")
				arg, has := info.Arguments["x-consumer-timeout"]
				if wantArg := v == membroker.RabbitMQ40; has != wantArg || (has && arg != acktimeout.Arg(q)) {
					t.Fatalf("queue argument x-consumer-timeout = %v (present %v); want it on 4.0 only, %d ms", arg, has, acktimeout.Arg(q))
				}
				if err := raw.Publish("", "jobs", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
				c, err := b.Consume(t.Context(), "jobs", 1)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				receiveDelivery(t, c)
				// The job's Timeout passes, and the broker's 3 s many
				// times over: the consumer is still there.
				clk.Add(q.Timeout + queuey.AbandonGrace)
				if info, _ := broker.Queue("jobs"); len(info.Consumers) != 1 || info.Unacked != 1 {
					t.Fatalf("at Timeout + AbandonGrace: consumers %v, unacked %d; want the consumer holding its delivery", info.Consumers, info.Unacked)
				}
				// Past the limit the backend asked for, a release with a
				// consumer timeout takes the delivery back.
				clk.Add(acktimeout.Limit(q) - q.Timeout - queuey.AbandonGrace + 2*time.Second)
				info, _ = broker.Queue("jobs")
				gone := v == membroker.RabbitMQ40 || typ == queuey.Quorum
				if gone != (info.Ready == 1) {
					t.Fatalf("past the limit asked for: ready %d; want the delivery back: %v", info.Ready, gone)
				}
				if gone {
					awaitEnded(t, c)
				}
			})
		}
	}
}

func TestDeclareKeepsA43QuorumQueueCreatedWithAnotherConsumerTimeout(t *testing.T) {
	// A RabbitMQ 4.0 created the queue with its x-consumer-timeout; 4.3
	// refuses a redeclaration without it, and the backend uses the queue
	// as it is: its consumers' argument overrides the queue's.
	b, broker, _, raw := ackTimeoutRig(t, membroker.RabbitMQ43)
	q := queuey.QueueConfig{Name: "jobs", Type: queuey.Quorum}.WithDefaults()
	args := WorkQueueArgs(true, *q.MaxPriority, "jobs.dead")
	args["x-consumer-timeout"] = int64(1000)
	if _, err := raw.QueueDeclare("jobs", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := b.Declare(t.Context(), q); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	if info, ok := broker.Queue("jobs.dead"); !ok {
		t.Fatalf("dead-letter queue not declared: %+v", info)
	}
	// Declared differently otherwise, it is still refused.
	bad := queuey.QueueConfig{Name: "jobs"}.WithDefaults()
	if err := b.Declare(t.Context(), bad); err == nil || !strings.Contains(err.Error(), "inequivalent arg") {
		t.Fatalf("Declare as classic: %v, want it refused", err)
	}
}

func TestAckTimedOutRecognisesTheBrokersClose(t *testing.T) {
	closeErr := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - delivery acknowledgement on channel 2 timed out. Timeout value used: 3000 ms."}
	if !ackTimedOut(closeErr) {
		t.Error("the 4.0 consumer-timeout close not recognised")
	}
	for _, err := range []error{nil, amqp.ErrClosed, &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - unknown delivery tag 3"}} {
		if ackTimedOut(err) {
			t.Errorf("ackTimedOut(%v) = true", err)
		}
	}
}

// The broker's release is read from a membroker connection and from an
// amqp091 one, adapted or not; a connection that cannot tell gives "".
func TestServerVersionOfAConnection(t *testing.T) {
	amqpConn := &amqp.Connection{Properties: amqp.Table{"version": "4.0.5"}}
	broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ43})
	mconn, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		conn any
		want string
	}{
		{amqpConn, "4.0.5"},
		{AdaptConn[*amqp.Channel](amqpConn), "4.0.5"},
		{AdaptConn[*membroker.Channel](mconn), "4.3.6"},
		{&amqp.Connection{}, ""},
		{struct{}{}, ""},
	} {
		if got := serverVersionOf(c.conn); got != c.want {
			t.Errorf("serverVersionOf(%T) = %q, want %q", c.conn, got, c.want)
		}
	}
}
