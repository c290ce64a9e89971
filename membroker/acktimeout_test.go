package membroker

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ackTimeoutRig is a queue of one message, consumed without an ack on a
// second channel of a broker whose consumer_timeout is 3 s and channel
// tick 1 s (the live probe's settings: docs/rabbitmq-semantics.md §14).
type ackTimeoutRig struct {
	*env
	q       string
	cch     *Channel
	closes  chan *amqp.Error
	cancels chan string
	d       amqp.Delivery
}

func newAckTimeoutRig(t *testing.T, v Version, qargs, cargs amqp.Table) *ackTimeoutRig {
	t.Helper()
	e := newEnvWith(t, Config{Version: v, ConsumerTimeout: 3 * time.Second, ChannelTick: time.Second})
	r := &ackTimeoutRig{env: e, q: "jobs"}
	e.declare(r.q, qargs)
	e.publish(r.q, "m0", amqp.Publishing{})
	r.cch = e.channel()
	r.closes = r.cch.NotifyClose(make(chan *amqp.Error, 1))
	r.cancels = r.cch.NotifyCancel(make(chan string, 1))
	if err := r.cch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := r.cch.Consume(r.q, "c1", false, false, false, false, cargs)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	r.d = <-ds
	return r
}

// after advances the clock by d and reports what the consumer's channel
// was told: "closed: <reason>", "cancelled" or "".
func (r *ackTimeoutRig) after(d time.Duration) string {
	r.clk.Add(d)
	r.b.Queues()
	select {
	case err := <-r.closes:
		if err == nil {
			return "closed"
		}
		return "closed: " + err.Reason
	default:
	}
	select {
	case _, ok := <-r.cancels:
		if ok {
			return "cancelled"
		}
		return "cancel listener closed"
	default:
		return ""
	}
}

func (r *ackTimeoutRig) ready() (ready, consumers int) {
	r.t.Helper()
	st, err := r.ch.QueueDeclarePassive(r.q, true, false, false, false, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return st.Messages, st.Consumers
}

func TestAckTimeout40ClosesTheChannelOnItsTick(t *testing.T) {
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			r := newAckTimeoutRig(t, RabbitMQ40, amqp.Table{"x-queue-type": typ}, nil)
			if got := r.after(3 * time.Second); got != "" {
				t.Fatalf("at the deadline: %q, want nothing yet (the check is strictly after it)", got)
			}
			got := r.after(time.Second)
			want := "closed: PRECONDITION_FAILED - delivery acknowledgement on channel 2 timed out. Timeout value used: 3000 ms."
			if !strings.HasPrefix(got, want) {
				t.Fatalf("one tick after the deadline: %q, want %q...", got, want)
			}
			if ready, consumers := r.ready(); ready != 1 || consumers != 0 {
				t.Fatalf("ready %d, consumers %d; want the message back, no consumer", ready, consumers)
			}
			d, ok := r.get(r.q)
			if !ok || !d.Redelivered {
				t.Fatalf("get: ok %v, redelivered %v; want the message, redelivered", ok, d.Redelivered)
			}
			if n, _ := d.Headers["x-delivery-count"].(int64); typ == "quorum" && n != 1 {
				t.Errorf("x-delivery-count %v, want 1: a channel closing is a failed delivery", d.Headers["x-delivery-count"])
			}
		})
	}
}

func TestAckTimeout40HonoursTheQueueArgumentOnly(t *testing.T) {
	// The queue's argument overrides the broker's timeout, both ways; a
	// consumer argument is ignored.
	r := newAckTimeoutRig(t, RabbitMQ40, amqp.Table{"x-consumer-timeout": int64(60000)}, amqp.Table{"x-consumer-timeout": int64(1000)})
	if got := r.after(59 * time.Second); got != "" {
		t.Fatalf("under the queue's 60 s: %q, want nothing", got)
	}
	if got := r.after(2 * time.Second); !strings.Contains(got, "Timeout value used: 60000 ms") {
		t.Fatalf("past the queue's 60 s: %q, want the channel closed with 60000 ms", got)
	}
	short := newAckTimeoutRig(t, RabbitMQ40, amqp.Table{"x-consumer-timeout": int64(1000)}, nil)
	if got := short.after(2 * time.Second); !strings.Contains(got, "Timeout value used: 1000 ms") {
		t.Fatalf("past the queue's 1 s: %q, want the channel closed with 1000 ms", got)
	}
}

func TestAckTimeout43ClassicQueuesHaveNone(t *testing.T) {
	r := newAckTimeoutRig(t, RabbitMQ43, nil, nil)
	if got := r.after(10 * time.Minute); got != "" {
		t.Fatalf("a classic queue on 4.3: %q, want no consumer timeout", got)
	}
	if err := r.d.Ack(false); err != nil || r.cch.IsClosed() {
		t.Fatalf("late ack: %v, channel closed %v", err, r.cch.IsClosed())
	}
	e := newEnv(t, RabbitMQ43)
	_, err := e.ch.QueueDeclare("c", true, false, false, false, amqp.Table{"x-consumer-timeout": int64(1000)})
	if err == nil || !strings.Contains(err.Error(), "invalid arg 'x-consumer-timeout' for queue 'c' in vhost '/' of queue type rabbit_classic_queue") {
		t.Fatalf("declaring a classic queue with x-consumer-timeout: %v, want refused", err)
	}
	ch := e.channel()
	e.ch = ch
	e.declare("c", nil)
	if _, err := ch.Consume("c", "", false, false, false, false, amqp.Table{"x-consumer-timeout": int64(1000)}); err == nil ||
		!strings.Contains(err.Error(), "invalid arg 'x-consumer-timeout'") {
		t.Fatalf("consuming a classic queue with x-consumer-timeout: %v, want refused", err)
	}
}

func TestAckTimeout43QuorumCancelsAtTheDeadline(t *testing.T) {
	cases := []struct {
		name         string
		qargs, cargs amqp.Table
		deadline     time.Duration
	}{
		{"broker", amqp.Table{}, nil, 3 * time.Second},
		{"queue argument over broker", amqp.Table{"x-consumer-timeout": int64(10000)}, nil, 10 * time.Second},
		{"consumer argument over queue", amqp.Table{"x-consumer-timeout": int64(1000)}, amqp.Table{"x-consumer-timeout": int64(20000)}, 20 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.qargs["x-queue-type"] = "quorum"
			r := newAckTimeoutRig(t, RabbitMQ43, tc.qargs, tc.cargs)
			if got := r.after(tc.deadline - time.Millisecond); got != "" {
				t.Fatalf("before the deadline: %q", got)
			}
			if got := r.after(time.Millisecond); got != "cancelled" {
				t.Fatalf("at the deadline: %q, want cancelled", got)
			}
			if r.cch.IsClosed() {
				t.Fatal("the channel closed; want it open")
			}
			if ready, consumers := r.ready(); ready != 1 || consumers != 1 {
				t.Fatalf("ready %d, consumers %d; want 1 and the timed-out consumer still counted", ready, consumers)
			}
			if err := r.d.Ack(false); err != nil || r.cch.IsClosed() {
				t.Fatalf("late ack: %v, channel closed %v", err, r.cch.IsClosed())
			}
			if ready, consumers := r.ready(); ready != 0 || consumers != 1 {
				t.Fatalf("after the late ack: ready %d, consumers %d; want 0, and the consumer counted until its channel closes", ready, consumers)
			}
			if err := r.cch.Close(); err != nil {
				t.Fatal(err)
			}
			if _, consumers := r.ready(); consumers != 0 {
				t.Fatalf("after its channel closed: consumers %d, want 0", consumers)
			}
		})
	}
}

func TestAckTimeout43QuorumReturnsEachDeliveryAtItsOwnDeadline(t *testing.T) {
	r := newAckTimeoutRig(t, RabbitMQ43, amqp.Table{"x-queue-type": "quorum"}, nil)
	// A second consumer on its own channel takes the returned message:
	// redelivered, and not a failed delivery.
	r.publish(r.q, "m1", amqp.Publishing{})
	if got := r.after(3 * time.Second); got != "cancelled" {
		t.Fatalf("at the deadline: %q", got)
	}
	ch2 := r.channel()
	ds, err := ch2.Consume(r.q, "c2", false, false, false, false, amqp.Table{"x-consumer-timeout": int64(600000)})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for range 2 {
		d := <-ds
		got = append(got, string(d.Body))
		if string(d.Body) == "m0" && (!d.Redelivered || d.Headers["x-delivery-count"] != nil) {
			t.Errorf("m0 again: redelivered %v, x-delivery-count %v; want true and none", d.Redelivered, d.Headers["x-delivery-count"])
		}
	}
	if strings.Join(got, " ") != "m0 m1" {
		t.Fatalf("second consumer got %v, want m0 then m1", got)
	}
	// The late ack of m0 finds it delivered again: it changes nothing.
	if err := r.d.Ack(false); err != nil || r.cch.IsClosed() {
		t.Fatalf("late ack: %v", err)
	}
}

func TestAckTimeout43QuorumArgumentIsCheckedOnRedeclaration(t *testing.T) {
	e := newEnv(t, RabbitMQ43)
	e.declare("q", amqp.Table{"x-queue-type": "quorum"})
	_, err := e.ch.QueueDeclare("q", true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-consumer-timeout": int64(1000)})
	if err == nil || !strings.Contains(err.Error(), "inequivalent arg 'x-consumer-timeout'") {
		t.Fatalf("adding x-consumer-timeout to a 4.3 quorum queue: %v, want inequivalent", err)
	}
	e40 := newEnv(t, RabbitMQ40)
	e40.declare("q", amqp.Table{"x-queue-type": "quorum"})
	e40.declare("q", amqp.Table{"x-queue-type": "quorum", "x-consumer-timeout": int64(1000)})
}

// A late ack whose message was settled elsewhere since, its memory reused
// for another message, removes nothing: the other message stays.
func TestAckTimeout43LateAckSparesAMessageThatReusedItsMemory(t *testing.T) {
	r := newAckTimeoutRig(t, RabbitMQ43, amqp.Table{"x-queue-type": "quorum"}, nil)
	if got := r.after(3 * time.Second); got != "cancelled" {
		t.Fatalf("at the deadline: %q", got)
	}
	d, ok := r.get(r.q) // m0 again, acked: its memory goes back to the broker
	if !ok || string(d.Body) != "m0" {
		t.Fatalf("get: %v %q", ok, d.Body)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	r.publish(r.q, "m1", amqp.Publishing{})
	d, ok = r.get(r.q)
	if !ok || string(d.Body) != "m1" {
		t.Fatalf("get: %v %q", ok, d.Body)
	}
	if err := d.Reject(true); err != nil { // back among the returns
		t.Fatal(err)
	}
	if err := r.d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if ready, _ := r.ready(); ready != 1 {
		t.Fatalf("ready %d after the late ack of m0; want m1 still there", ready)
	}
}
