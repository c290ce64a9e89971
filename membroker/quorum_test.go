package membroker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Shared helpers of quorum_test.go, consume_test.go, publish_test.go and
// fault_test.go carry a qq prefix.

// qqDeclare declares a durable quorum queue with the given extra arguments.
func qqDeclare(e *env, name string, args amqp.Table) {
	e.t.Helper()
	a := amqp.Table{"x-queue-type": "quorum"}
	for k, v := range args {
		a[k] = v
	}
	e.declare(name, a)
}

// qqCount renders a quorum delivery's counters as RabbitMQ shows them:
// "-" for an absent header.
func qqCount(d amqp.Delivery, header string) string {
	v, ok := d.Headers[header]
	if !ok {
		return "-"
	}
	return fmt.Sprint(v)
}

// qqSeen is what one delivery looked like: body, redelivered flag and the
// x-delivery-count and x-acquired-count headers ("-" when absent).
type qqSeen struct {
	Body        string
	Redelivered bool
	Count       string
	Acquired    string
}

func qqSee(d amqp.Delivery) qqSeen {
	return qqSeen{Body: string(d.Body), Redelivered: d.Redelivered,
		Count: qqCount(d, "x-delivery-count"), Acquired: qqCount(d, "x-acquired-count")}
}

// qqDrainSeen gets and acks every ready message, recording how each looked.
func qqDrainSeen(e *env, queue string) []qqSeen {
	e.t.Helper()
	var out []qqSeen
	for {
		d, ok := e.get(queue)
		if !ok {
			return out
		}
		out = append(out, qqSee(d))
		if err := d.Ack(false); err != nil {
			e.t.Fatal(err)
		}
	}
}

// qqPublishN publishes prefix0..prefix(n-1) at one priority.
func qqPublishN(e *env, queue, prefix string, n int, priority uint8) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		e.publish(queue, fmt.Sprintf("%s%d", prefix, i), amqp.Publishing{Priority: priority})
	}
}

// qqWantReady fails unless queue has ready ready and unacked unacked messages.
func qqWantReady(e *env, queue string, ready, unacked int) {
	e.t.Helper()
	qi := e.info(queue)
	if qi.Ready != ready || qi.Unacked != unacked {
		e.t.Fatalf("queue %s: ready=%d unacked=%d, want ready=%d unacked=%d", queue, qi.Ready, qi.Unacked, ready, unacked)
	}
}

// qqClosedWith takes the error a NotifyClose listener must already hold and
// compares it with want.
func qqClosedWith(t *testing.T, c <-chan *amqp.Error, want *amqp.Error) {
	t.Helper()
	select {
	case got, ok := <-c:
		if !ok {
			t.Fatalf("close listener closed without an error, want %v", want)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("close error (-want +got):\n%s", diff)
		}
	default:
		t.Fatalf("no close error waiting, want %v", want)
	}
}

// x-delivery-count is absent on the first delivery and then counts the
// returns; redelivered is set once it is above zero.
// Ref §5.2 (add_delivery_count_header; test subscribe_redelivery) and §11:
// on 4.0.5, alternating Nack(requeue) and Reject(requeue) through basic.get
// gave x-delivery-count 1,2,3,4,5, the first delivery having no header and
// redelivered=false. The consumer path was seen live too (none, 1, 2).
func TestQuorumDeliveryCountHeaderCountsReturns(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	e.publish("q", "m", amqp.Publishing{})
	var got []qqSeen
	for i := 0; i < 6; i++ {
		d := e.mustGet("q")
		got = append(got, qqSee(d))
		if i%2 == 0 {
			d.Nack(false, true)
		} else {
			d.Reject(true)
		}
	}
	want := []qqSeen{
		{"m", false, "-", "-"}, {"m", true, "1", "-"}, {"m", true, "2", "-"},
		{"m", true, "3", "-"}, {"m", true, "4", "-"}, {"m", true, "5", "-"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("basic.get deliveries (-want +got):\n%s", diff)
	}

	// The same through a consumer.
	qqDeclare(e, "c", nil)
	e.publish("c", "n", amqp.Publishing{})
	dels, err := e.ch.Consume("c", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for i := 0; i < 3; i++ {
		d := receive(t, dels)
		got = append(got, qqSee(d))
		d.Nack(false, true)
	}
	want = []qqSeen{{"n", false, "-", "-"}, {"n", true, "1", "-"}, {"n", true, "2", "-"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("consumer deliveries (-want +got):\n%s", diff)
	}
}

// Without x-delivery-limit a quorum queue has a limit of 20 and drops the
// message (no DLX) on the 21st return: 21 deliveries, the last showing
// x-delivery-count 20. Rejects are failed deliveries, so RabbitMQ43 gives the
// same (§5.4).
// Ref §5.1 (?DEFAULT_DELIVERY_LIMIT = 20), §5.2 (strictly greater-than) and
// §11 (observed on 4.0.5: delivered 21 times, last x-delivery-count 20, gone).
func TestQuorumDefaultDeliveryLimitIs20(t *testing.T) {
	for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
		t.Run(v.String(), func(t *testing.T) { qqDefaultLimit(t, v) })
	}
}

func qqDefaultLimit(t *testing.T, v Version) {
	e := newEnv(t, v)
	qqDeclare(e, "q", nil)
	e.publish("q", "m", amqp.Publishing{})
	deliveries, last := 0, ""
	for {
		d, ok := e.get("q")
		if !ok {
			break
		}
		deliveries++
		last = qqCount(d, "x-delivery-count")
		if deliveries > 30 {
			t.Fatal("message never dropped")
		}
		d.Reject(true)
	}
	if deliveries != 21 || last != "20" {
		t.Fatalf("delivered %d times, last x-delivery-count %s; want 21 times, last 20", deliveries, last)
	}
	qqWantReady(e, "q", 0, 0)
}

// With x-delivery-limit 2 and a dead-letter target a message is delivered
// 3 times and then dead-lettered with reason delivery_limit: x-death (with
// original-expiration only when the message had an expiration, which is
// removed), x-first-death-* and x-last-death-*, priority and headers kept.
// In the target (classic or quorum) it is a first delivery: no
// x-delivery-count, redelivered=false.
// Ref §3.1, §3.3, §5.2, §10 item 6 and §11 (observed on 4.0.5 with limit 2);
// the target's view, with and without an expiration, checked live on 4.0.5
// for both target types.
func TestQuorumDeliveryLimitDeadLetters(t *testing.T) {
	for _, target := range []string{"classic", "quorum"} {
		t.Run(target, func(t *testing.T) {
			e := newEnv(t, RabbitMQ40)
			e.declare("dlq", amqp.Table{"x-queue-type": target})
			qqDeclare(e, "src", amqp.Table{"x-delivery-limit": 2, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
			e.publish("src", "m", amqp.Publishing{Priority: 7, Headers: amqp.Table{"app": "x"}})
			e.publish("src", "e", amqp.Publishing{Expiration: "60000"})
			deliveries := map[string]int{}
			for {
				d, ok := e.get("src")
				if !ok {
					break
				}
				deliveries[string(d.Body)]++
				if deliveries[string(d.Body)] > 10 {
					t.Fatal("message never dead-lettered")
				}
				d.Reject(true)
			}
			if diff := cmp.Diff(map[string]int{"m": 3, "e": 3}, deliveries); diff != "" {
				t.Fatalf("deliveries from src (-want +got):\n%s", diff)
			}
			qqWantReady(e, "src", 0, 0)

			now := time.Unix(e.clk.Now().Unix(), 0)
			death := func(extra amqp.Table) amqp.Table {
				h := amqp.Table{
					"x-death": []any{amqp.Table{
						"count": int64(1), "reason": "delivery_limit", "queue": "src", "time": now,
						"exchange": "", "routing-keys": []any{"src"},
					}},
					"x-first-death-reason": "delivery_limit", "x-first-death-queue": "src", "x-first-death-exchange": "",
					"x-last-death-reason": "delivery_limit", "x-last-death-queue": "src", "x-last-death-exchange": "",
				}
				for k, v := range extra {
					h[k] = v
				}
				return h
			}
			d := e.mustGet("dlq")
			if diff := cmp.Diff(death(amqp.Table{"app": "x"}), d.Headers); diff != "" {
				t.Errorf("m: dead letter headers (-want +got):\n%s", diff)
			}
			if d.Priority != 7 || d.Redelivered || d.Exchange != "" || d.RoutingKey != "dlq" || string(d.Body) != "m" {
				t.Errorf("m: priority=%d redelivered=%v exchange=%q key=%q body=%q; want 7 false \"\" dlq m",
					d.Priority, d.Redelivered, d.Exchange, d.RoutingKey, d.Body)
			}
			d = e.mustGet("dlq")
			want := death(nil)
			want["x-death"].([]any)[0].(amqp.Table)["original-expiration"] = "60000"
			if diff := cmp.Diff(want, d.Headers); diff != "" {
				t.Errorf("e: dead letter headers (-want +got):\n%s", diff)
			}
			if d.Expiration != "" || d.Redelivered || string(d.Body) != "e" {
				t.Errorf("e: expiration=%q redelivered=%v body=%q; want no expiration, not redelivered", d.Expiration, d.Redelivered, d.Body)
			}
		})
	}
}

// A negative x-delivery-limit disables the limit.
// Ref §5.1 (rabbit_fifo:update_config maps DL < 0 to undefined).
func TestQuorumNegativeDeliveryLimitDisables(t *testing.T) {
	for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
		t.Run(v.String(), func(t *testing.T) {
			e := newEnv(t, v)
			qqDeclare(e, "q", amqp.Table{"x-delivery-limit": -1})
			e.publish("q", "m", amqp.Publishing{})
			for i := 0; i < 40; i++ {
				e.mustGet("q").Reject(true)
			}
			d := e.mustGet("q")
			if got := qqCount(d, "x-delivery-count"); got != "40" {
				t.Fatalf("x-delivery-count after 40 rejects = %s, want 40", got)
			}
		})
	}
}

// With x-delivery-limit 0 the first return drops the message.
// Ref §5.2 ("Limit 0: the first return drops it"), checked live on 4.0.5.
func TestQuorumDeliveryLimitZeroDropsOnFirstReturn(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", amqp.Table{"x-delivery-limit": 0})
	e.publish("q", "m", amqp.Publishing{})
	e.mustGet("q").Reject(true)
	qqWantReady(e, "q", 0, 0)
}

// RabbitMQ40 counts every return toward the limit: reject, nack, and the
// channel or connection going down with the message unacked.
// Ref §5.2 ("What increments acquired_count ... in 4.0-4.2") and §11
// (nack and reject both counted on 4.0.5; a channel close with limit 1
// twice dropped the message, checked live).
func TestQuorumRabbitMQ40CountsEveryReturn(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	e.publish("q", "m", amqp.Publishing{})
	e.mustGet("q").Reject(true)
	e.mustGet("q").Nack(false, true)
	ch2 := e.channel()
	if _, ok, err := ch2.Get("q", false); !ok || err != nil {
		t.Fatalf("get on second channel: ok=%v err=%v", ok, err)
	}
	ch2.Close()
	conn2, _ := e.b.Dial()
	ch3, _ := conn2.Channel()
	if _, ok, err := ch3.Get("q", false); !ok || err != nil {
		t.Fatalf("get on second connection: ok=%v err=%v", ok, err)
	}
	conn2.Close()
	got := qqSee(e.mustGet("q"))
	if diff := cmp.Diff(qqSeen{"m", true, "4", "-"}, got); diff != "" {
		t.Fatalf("after reject, nack, channel close, connection close (-want +got):\n%s", diff)
	}

	// Nacks alone reach the limit.
	qqDeclare(e, "lim", amqp.Table{"x-delivery-limit": 1})
	e.publish("lim", "m", amqp.Publishing{})
	e.mustGet("lim").Nack(false, true)
	e.mustGet("lim").Nack(false, true)
	qqWantReady(e, "lim", 0, 0)
}

// RabbitMQ43 counts reject and channel/connection loss toward the limit but
// not nack: x-delivery-count is the number of failed deliveries (absent until
// one), x-acquired-count the number of all returns.
// Ref §5.4 (v4.3.0 rabbit_channel: reject -> modify(failed), nack -> requeue;
// docs table "When is delivery count incremented?"; rabbit_fifo_client:243).
func TestQuorumRabbitMQ43CountsFailedDeliveriesOnly(t *testing.T) {
	e := newEnv(t, RabbitMQ43)
	qqDeclare(e, "q", nil)
	e.publish("q", "m", amqp.Publishing{})
	var got []qqSeen
	d := e.mustGet("q")
	got = append(got, qqSee(d))
	d.Nack(false, true)
	d = e.mustGet("q")
	got = append(got, qqSee(d))
	d.Reject(true)
	d = e.mustGet("q")
	got = append(got, qqSee(d))
	d.Nack(false, true)
	ch2 := e.channel()
	if _, ok, err := ch2.Get("q", false); !ok || err != nil {
		t.Fatalf("get on second channel: ok=%v err=%v", ok, err)
	}
	ch2.Close()
	got = append(got, qqSee(e.mustGet("q")))
	want := []qqSeen{
		{"m", false, "-", "-"},
		{"m", true, "-", "1"}, // nack: acquired only
		{"m", true, "1", "2"}, // reject: both
		{"m", true, "2", "4"}, // nack, then channel close (failed)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("deliveries (-want +got):\n%s", diff)
	}

	// With limit 1, nacks never drop the message; the second failed
	// delivery does.
	qqDeclare(e, "lim", amqp.Table{"x-delivery-limit": 1})
	e.publish("lim", "m", amqp.Publishing{})
	for i := 0; i < 5; i++ {
		e.mustGet("lim").Nack(false, true)
	}
	e.mustGet("lim").Reject(true)
	if got := qqSee(e.mustGet("lim")); got != (qqSeen{"m", true, "1", "6"}) {
		t.Fatalf("after 5 nacks and a reject: %+v, want x-delivery-count 1, x-acquired-count 6", got)
	}
	e.b.CloseChannel(e.ch, nil) // the second failed delivery
	ch := e.channel()
	if _, ok, err := ch.Get("lim", false); ok || err != nil {
		t.Fatalf("after the second failed delivery: ok=%v err=%v, want the message dropped", ok, err)
	}
}

// Returned messages go to the front, in the order they were returned.
// Ref §5.3 (returns queue served first) and §11 (observed on 4.0.5: get m0,
// get m1, reject m1, reject m0 gives m1 m0 m2, each x-delivery-count 1).
// RabbitMQ 4.3 keeps the returns queue (§4.3 "returned messages go to the
// returns queue regardless of priority").
func TestQuorumReturnsGoToFrontInReturnOrder(t *testing.T) {
	for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
		t.Run(v.String(), func(t *testing.T) {
			e := newEnv(t, v)
			qqDeclare(e, "q", nil)
			qqPublishN(e, "q", "m", 4, 0)
			m0 := e.mustGet("q")
			m1 := e.mustGet("q")
			m1.Reject(true)
			m0.Reject(true)
			var got []string
			for _, s := range qqDrainSeen(e, "q") {
				got = append(got, s.Body+"/"+s.Count)
			}
			want := []string{"m1/1", "m0/1", "m2/-", "m3/-"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("order (-want +got):\n%s", diff)
			}
		})
	}
}

// A nack with multiple returns the messages oldest first.
// Ref §5.3 ("Within one basic.nack(multiple), the channel passes ids
// oldest-first"), checked live on 4.0.5: m0 m1 m2 (each count 1) then m3.
func TestQuorumNackMultipleReturnsOldestFirst(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	qqPublishN(e, "q", "m", 4, 0)
	e.mustGet("q")
	e.mustGet("q")
	last := e.mustGet("q")
	if err := e.ch.Nack(last.DeliveryTag, true, true); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range qqDrainSeen(e, "q") {
		got = append(got, s.Body+"/"+s.Count)
	}
	if diff := cmp.Diff([]string{"m0/1", "m1/1", "m2/1", "m3/-"}, got); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

// Closing a channel with unacked deliveries returns them in delivery order,
// counted.
// Ref §7.3 (return_all sorts by message id) and §11 (observed on 4.0.5:
// prefetch 2 consumer on 3 messages, close: c0 c1 c2 with
// x-delivery-count 1 on the first two).
func TestQuorumChannelCloseReturnsInDeliveryOrder(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	qqPublishN(e, "q", "c", 3, 0)
	ch2 := e.channel()
	if err := ch2.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	dels, err := ch2.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, dels)
	receive(t, dels)
	noDelivery(t, dels)
	if err := ch2.Close(); err != nil {
		t.Fatal(err)
	}
	got := qqDrainSeen(e, "q")
	want := []qqSeen{{"c0", true, "1", "-"}, {"c1", true, "1", "-"}, {"c2", false, "-", "-"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after channel close (-want +got):\n%s", diff)
	}
}

// With x-delivery-limit -1, an explicit reject or nack with requeue puts the
// message at the back of the queue on 4.0 and at the front on 4.3; a channel
// close returns it to the front on both.
// Semantics §5.3 ("Without a limit ... #requeue ... at the back"; release
// notes 3.10.0) and §12.6, checked live: on 4.0.5 reject m0 gives m1 m2 m0,
// nack the same, channel close gives m0 m1 m2; on 4.3.6 all three give
// m0 m1 m2 (conformance scenario quorum-unlimited-requeue-same-priority).
func TestQuorumUnlimitedExplicitRequeue(t *testing.T) {
	for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
		t.Run(v.String(), func(t *testing.T) {
			explicit := []string{"m1", "m2", "m0"}
			if v == RabbitMQ43 {
				explicit = []string{"m0", "m1", "m2"}
			}
			e := newEnv(t, v)
			qqDeclare(e, "q", amqp.Table{"x-delivery-limit": -1})
			bodies := func() []string {
				var out []string
				for _, s := range qqDrainSeen(e, "q") {
					out = append(out, s.Body)
				}
				return out
			}
			qqPublishN(e, "q", "m", 3, 0)
			e.mustGet("q").Reject(true)
			if diff := cmp.Diff(explicit, bodies()); diff != "" {
				t.Errorf("after reject (-want +got):\n%s", diff)
			}
			qqPublishN(e, "q", "m", 3, 0)
			e.mustGet("q").Nack(false, true)
			if diff := cmp.Diff(explicit, bodies()); diff != "" {
				t.Errorf("after nack (-want +got):\n%s", diff)
			}
			qqPublishN(e, "q", "m", 3, 0)
			ch2 := e.channel()
			if _, ok, err := ch2.Get("q", false); !ok || err != nil {
				t.Fatalf("get: ok=%v err=%v", ok, err)
			}
			ch2.Close()
			if diff := cmp.Diff([]string{"m0", "m1", "m2"}, bodies()); diff != "" {
				t.Errorf("after channel close (-want +got):\n%s", diff)
			}
		})
	}
}

// On RabbitMQ40 with x-delivery-limit -1, an explicitly requeued
// high-priority message goes into the normal tier, behind normal messages.
// Ref §4.2 (apply #requeue: rabbit_fifo_q:in(no, ...)), checked live on
// 4.0.5: h(10) l0 l1, get h, reject h -> l0 l1 h.
func TestQuorum40UnlimitedRequeueLosesHighTier(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", amqp.Table{"x-delivery-limit": -1})
	e.publish("q", "h", amqp.Publishing{Priority: 10})
	e.publish("q", "l0", amqp.Publishing{})
	e.publish("q", "l1", amqp.Publishing{})
	d := e.mustGet("q")
	if string(d.Body) != "h" {
		t.Fatalf("first get = %q, want h", d.Body)
	}
	d.Reject(true)
	got := qqDrainSeen(e, "q")
	want := []qqSeen{{"l0", false, "-", "-"}, {"l1", false, "-", "-"}, {"h", true, "1", "-"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

// RabbitMQ40 quorum priorities: two tiers (priority > 4 is high) served 2:1,
// a high message published first always winning on the normal tier's turn.
// Ref §4.2 (rabbit_fifo_q:out/1) and §11 (observed on 4.0.5: six at 0 then
// six at 10 drained by basic.get: high0 high1 low0 high2 high3 low1 high4
// high5 low2 low3 low4 low5).
func TestQuorum40PriorityTiersServedTwoToOne(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	qqPublishN(e, "q", "low", 6, 0)
	qqPublishN(e, "q", "high", 6, 10)
	want := []string{"high0", "high1", "low0", "high2", "high3", "low1", "high4", "high5", "low2", "low3", "low4", "low5"}
	if diff := cmp.Diff(want, e.drain("q")); diff != "" {
		t.Errorf("observed order (-want +got):\n%s", diff)
	}

	// The boundary: 4 is normal, 5 is high. The counter is at 0 again here
	// (12 takes), so the same pattern repeats.
	qqDeclare(e, "b", nil)
	qqPublishN(e, "b", "p4-", 3, 4)
	qqPublishN(e, "b", "p5-", 3, 5)
	want = []string{"p5-0", "p5-1", "p4-0", "p5-2", "p4-1", "p4-2"}
	if diff := cmp.Diff(want, e.drain("b")); diff != "" {
		t.Errorf("boundary order (-want +got):\n%s", diff)
	}

	// High published before normal: all high first (test priority_queue_fifo).
	qqDeclare(e, "f", nil)
	qqPublishN(e, "f", "high", 3, 9)
	qqPublishN(e, "f", "low", 3, 1)
	want = []string{"high0", "high1", "high2", "low0", "low1", "low2"}
	if diff := cmp.Diff(want, e.drain("f")); diff != "" {
		t.Errorf("high-first order (-want +got):\n%s", diff)
	}
}

// The RabbitMQ40 dequeue counter advances on every take, including a
// basic.get and a TTL expiry when only one tier is non-empty, and is never
// reset: one normal message taken first shifts the pattern.
// Ref §4.2 ("The counter advances on every out ... basic.get, and TTL
// expiry ... never reset"), §10 item 3; checked live on 4.0.5: after one
// get (or one expiry) of n0, publishing l0..l2 then h0..h2 drains as
// h0 l0 h1 h2 l1 l2.
func TestQuorum40PriorityCounterAdvancesOnEveryTake(t *testing.T) {
	want := []string{"h0", "l0", "h1", "h2", "l1", "l2"}
	t.Run("get", func(t *testing.T) {
		e := newEnv(t, RabbitMQ40)
		qqDeclare(e, "q", nil)
		e.publish("q", "n0", amqp.Publishing{})
		if got := e.drain("q"); len(got) != 1 {
			t.Fatalf("drained %v", got)
		}
		qqPublishN(e, "q", "l", 3, 0)
		qqPublishN(e, "q", "h", 3, 10)
		if diff := cmp.Diff(want, e.drain("q")); diff != "" {
			t.Fatalf("order (-want +got):\n%s", diff)
		}
	})
	t.Run("expiry", func(t *testing.T) {
		e := newEnv(t, RabbitMQ40)
		qqDeclare(e, "q", nil)
		e.publish("q", "n0", amqp.Publishing{Expiration: "50"})
		e.advance(100 * time.Millisecond)
		qqWantReady(e, "q", 0, 0)
		qqPublishN(e, "q", "l", 3, 0)
		qqPublishN(e, "q", "h", 3, 10)
		if diff := cmp.Diff(want, e.drain("q")); diff != "" {
			t.Fatalf("order (-want +got):\n%s", diff)
		}
	})
}

// Taking a returned message does not advance the RabbitMQ40 counter.
// Ref §4.2 ("Messages in the returns queue ... do not advance the
// counter"); checked live on 4.0.5: get n0, reject n0, publish l0..l2,
// h0..h2: n0 h0 l0 h1 h2 l1 l2.
func TestQuorum40ReturnsDoNotAdvancePriorityCounter(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	e.publish("q", "n0", amqp.Publishing{})
	e.mustGet("q").Reject(true)
	qqPublishN(e, "q", "l", 3, 0)
	qqPublishN(e, "q", "h", 3, 10)
	want := []string{"n0", "h0", "l0", "h1", "h2", "l1", "l2"}
	if diff := cmp.Diff(want, e.drain("q")); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
}

// RabbitMQ43 quorum priorities: 32 strict levels, FIFO within a level, no
// priority property (amqp091 sends priority 0 as absent) counting as 4, and
// values above 31 clamped to 31. Returned messages still come first.
// Ref §4.3 (4.3 docs "Message Priorities"; ?DEFAULT_PRIORITY = 4,
// ?MAX_PRIORITY = 31 in v4.3.0 rabbit_fifo.erl). Not verified live.
func TestQuorum43StrictPriorities(t *testing.T) {
	e := newEnv(t, RabbitMQ43)
	qqDeclare(e, "q", nil)
	for _, p := range []struct {
		body string
		prio uint8
	}{{"a0", 0}, {"a3", 3}, {"a4", 4}, {"a5", 5}, {"a31", 31}, {"a200", 200}, {"b0", 0}, {"b30", 30}} {
		e.publish("q", p.body, amqp.Publishing{Priority: p.prio})
	}
	want := []string{"a31", "a200", "b30", "a5", "a0", "a4", "b0", "a3"}
	if diff := cmp.Diff(want, e.drain("q")); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}

	// A returned low-priority message is served before a waiting high one.
	e.publish("q", "low", amqp.Publishing{Priority: 1})
	e.mustGet("q").Reject(true)
	e.publish("q", "high", amqp.Publishing{Priority: 20})
	if diff := cmp.Diff([]string{"low", "high"}, e.drain("q")); diff != "" {
		t.Errorf("returns first (-want +got):\n%s", diff)
	}
}

// Quorum TTL is head-only: an expired message behind a live head stays until
// it reaches the head.
// Ref §1.6 (expire_msgs looks only at the next message) and §11 (observed:
// per-message TTL 2000 then 200 ms, wait 500 ms: only the 2000 ms message
// comes out; quorum and classic alike).
func TestQuorumTTLHeadOnly(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	e.publish("q", "long", amqp.Publishing{Expiration: "2000"})
	e.publish("q", "short", amqp.Publishing{Expiration: "200"})
	e.advance(500 * time.Millisecond)
	qqWantReady(e, "q", 2, 0)
	if diff := cmp.Diff([]string{"long"}, e.drain("q")); diff != "" {
		t.Fatalf("drained (-want +got):\n%s", diff)
	}
	qqWantReady(e, "q", 0, 0)
}

// Quorum x-message-ttl 0 is "now + 1 ms": a waiting consumer gets the
// message, a basic.get in the same millisecond too, and one millisecond later
// it is gone.
// Ref §1.6 (update_expiry_header(RaCmdTs, 0, ...) -> RaCmdTs + 1: "we
// discard the message if it cannot be consumed within the same
// millisecond"); checked live on 4.0.5: with a waiting consumer delivered,
// without one gone.
func TestQuorumTTLZeroIsOneMillisecond(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", amqp.Table{"x-message-ttl": 0})

	e.publish("q", "same-ms", amqp.Publishing{})
	if diff := cmp.Diff([]string{"same-ms"}, e.drain("q")); diff != "" {
		t.Errorf("get in the same millisecond (-want +got):\n%s", diff)
	}

	e.publish("q", "late", amqp.Publishing{})
	e.advance(999 * time.Microsecond)
	qqWantReady(e, "q", 1, 0)
	e.advance(time.Microsecond)
	qqWantReady(e, "q", 0, 0)

	ch2 := e.channel()
	dels, err := ch2.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.publish("q", "waiting", amqp.Publishing{})
	if d := receive(t, dels); string(d.Body) != "waiting" {
		t.Fatalf("consumer got %q", d.Body)
	}
}

// A quorum queue's x-expires lease is not renewed by re-declaring it (nor by
// a passive declare), but is renewed by basic.get, even an empty one.
// Ref §2 "Quorum queue" (last_active set on dequeue; 4.0 docs feature
// matrix: "lease is not renewed on queue re-declaration").
func TestQuorumExpiresNotRenewedByRedeclare(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	args := amqp.Table{"x-expires": 1000}
	qqDeclare(e, "q", args)
	e.advance(600 * time.Millisecond)
	qqDeclare(e, "q", args)
	if _, err := e.ch.QueueDeclarePassive("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.advance(500 * time.Millisecond)
	if _, ok := e.b.Queue("q"); ok {
		t.Fatal("queue still exists 1100 ms after its declaration: the redeclare renewed the lease")
	}

	qqDeclare(e, "g", args)
	e.advance(600 * time.Millisecond)
	if _, ok := e.get("g"); ok {
		t.Fatal("unexpected message")
	}
	e.advance(600 * time.Millisecond)
	if _, ok := e.b.Queue("g"); !ok {
		t.Fatal("queue gone 600 ms after a basic.get: the get did not renew the lease")
	}
	e.advance(500 * time.Millisecond)
	if _, ok := e.b.Queue("g"); ok {
		t.Fatal("queue still exists 1100 ms after the last basic.get")
	}
}

// A quorum consumer with prefetch 0 gets at most 2000 unacked messages.
// Ref §5.5 and §7.1 (rabbit_fifo_client ?UNLIMITED_PREFETCH_COUNT = 2000);
// checked live on 4.0.5: 2100 ready, prefetch 0, 2000 delivered.
func TestQuorumPrefetchZeroCappedAt2000(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	for i := 0; i < 2100; i++ {
		e.publish("q", "x", amqp.Publishing{})
	}
	ch2 := e.channel()
	dels, err := ch2.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(dels); n != 2000 {
		t.Fatalf("consumer with prefetch 0 holds %d deliveries, want 2000", n)
	}
	qqWantReady(e, "q", 100, 2000)
}

// Quorum queues ignore the exclusive flag of basic.consume: a second
// consumer (exclusive or not) is accepted.
// Ref semantics §E4 step 6 ("Quorum: the exclusive flag is ignored"); checked
// live on 4.0.5: two exclusive consumers and a plain one all accepted.
func TestQuorumIgnoresExclusiveConsume(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	for _, c := range []struct {
		tag       string
		exclusive bool
	}{{"a", true}, {"b", true}, {"c", false}} {
		if _, err := e.ch.Consume("q", c.tag, false, c.exclusive, false, false, nil); err != nil {
			t.Fatalf("consume %s: %v", c.tag, err)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, e.info("q").Consumers); diff != "" {
		t.Fatalf("consumers (-want +got):\n%s", diff)
	}
}

// A message dead-lettered out of a RabbitMQ40 quorum queue carries the
// header's delivery_count (failed deliveries: a channel going down and the
// discard itself, not reject or nack with requeue), invisible on a classic
// queue; a quorum queue it reaches, directly or through a classic one,
// starts its delivery_count there, so the first delivery is redelivered
// with that x-delivery-count, and after a return x-delivery-count is the
// new acquired_count.
// Ref v4.0.5 rabbit_fifo: discard/7 incr_msg(DelFailed=true),
// rabbit_fifo_dlx:discard annotate_msg, maybe_set_msg_delivery_count,
// rabbit_fifo_client:add_delivery_count_header; checked live on 4.0.5
// (conformance scenarios quorum-dead-letter-to-quorum,
// quorum-dead-letter-count-through-classic).
func TestQuorum40DeadLetterCarriesDeliveryCount(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", amqp.Table{"x-queue-type": "quorum"})
	qqDeclare(e, "src", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
	e.publish("src", "m", amqp.Publishing{})
	if err := e.mustGet("src").Reject(true); err != nil { // acquired 1, delivery 0
		t.Fatal(err)
	}
	ch := e.channel()
	if _, ok, err := ch.Get("src", false); !ok || err != nil {
		t.Fatalf("get on a second channel: ok=%v err=%v", ok, err)
	}
	// Closing the channel returns it: acquired 2, delivery 1.
	ch.Close()
	// Rejecting it without requeue: delivery 2.
	if err := e.mustGet("src").Reject(false); err != nil {
		t.Fatal(err)
	}
	d := e.mustGet("dlq")
	if got, want := qqSee(d), (qqSeen{Body: "m", Redelivered: true, Count: "2", Acquired: "-"}); got != want {
		t.Fatalf("first delivery from the quorum target: %+v, want %+v", got, want)
	}
	if err := d.Reject(true); err != nil {
		t.Fatal(err)
	}
	if got, want := qqSee(e.mustGet("dlq")), (qqSeen{Body: "m", Redelivered: true, Count: "1", Acquired: "-"}); got != want {
		t.Fatalf("after a return in the quorum target: %+v, want %+v", got, want)
	}

	e.declare("last", amqp.Table{"x-queue-type": "quorum"})
	e.declare("mid", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "last"})
	qqDeclare(e, "first", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "mid"})
	e.publish("first", "n", amqp.Publishing{})
	if err := e.mustGet("first").Reject(false); err != nil {
		t.Fatal(err)
	}
	d = e.mustGet("mid")
	if got, want := qqSee(d), (qqSeen{Body: "n", Count: "-", Acquired: "-"}); got != want {
		t.Fatalf("delivery from the classic queue in between: %+v, want %+v", got, want)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	if got, want := qqSee(e.mustGet("last")), (qqSeen{Body: "n", Redelivered: true, Count: "1", Acquired: "-"}); got != want {
		t.Fatalf("delivery from the quorum queue behind the classic one: %+v, want %+v", got, want)
	}
}

// A consumer cancelled on a quorum queue with deliveries unsettled stays
// one of the queue's consumers until they are settled: queue.declare
// counts it and the queue does not expire meanwhile; settling the last one
// removes it and starts the x-expires period.
// Ref v4.0.5 rabbit_fifo: maybe_return_all(cancel) keeps the consumer with
// status cancelled, update_or_remove_con removes it when checked_out is
// empty and sets last_active, query_stat counts maps:size(Consumers),
// is_expired needs no consumers; consumer count checked live on 4.0.5
// (conformance scenario consumer-cancel-keeps-unacked-quorum).
func TestQuorumCancelledConsumerLingersUntilSettled(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", amqp.Table{"x-expires": 1000})
	ch, dels := qqConsume(e, "q", "c1", 5)
	qqPublishN(e, "q", "m", 2, 0)
	a, b := receive(t, dels), receive(t, dels)
	if err := ch.Cancel("c1", false); err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		t.Helper()
		q, err := e.ch.QueueDeclarePassive("q", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Consumers
	}
	if n := consumers(); n != 1 {
		t.Fatalf("after cancel with 2 unacked: consumers=%d, want 1", n)
	}
	if err := a.Ack(false); err != nil {
		t.Fatal(err)
	}
	e.advance(2 * time.Second)
	if n := consumers(); n != 1 {
		t.Fatalf("with 1 unacked left: consumers=%d, want 1", n)
	}
	if err := b.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	if n := consumers(); n != 0 {
		t.Fatalf("all settled: consumers=%d, want 0", n)
	}
	e.advance(900 * time.Millisecond)
	if _, ok := e.b.Queue("q"); !ok {
		t.Fatal("queue expired less than x-expires after its last consumer went")
	}
	e.advance(200 * time.Millisecond)
	if _, ok := e.b.Queue("q"); ok {
		t.Fatal("queue still there x-expires after its last consumer went")
	}

	// A classic queue drops the cancelled consumer at once.
	e.declare("c", nil)
	ch, dels = qqConsume(e, "c", "c2", 5)
	e.publish("c", "m", amqp.Publishing{})
	receive(t, dels)
	if err := ch.Cancel("c2", false); err != nil {
		t.Fatal(err)
	}
	if q, err := e.ch.QueueDeclarePassive("c", true, false, false, false, nil); err != nil || q.Consumers != 0 {
		t.Fatalf("classic after cancel: consumers=%d err=%v, want 0", q.Consumers, err)
	}
}

// basic.get's message count on a quorum queue is messages_ready right after
// the checkout: an expired message left at the head still counts after a
// manual-ack get, while a no-ack get is settled in the same command and the
// settlement's checkout reaps it first.
// Ref v4.0.5 rabbit_fifo apply(#checkout{spec = {dequeue, Settlement}}):
// reply with messages_ready(State4), settled → complete_and_checkout →
// checkout_one → expire_msgs; checked live on 4.0.5 (conformance scenario
// quorum-ttl-get-remaining: remaining 3, then 0).
func TestQuorumGetCountsExpiredHeadUntilSettled(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	qqDeclare(e, "q", nil)
	for _, m := range []struct{ body, exp string }{{"a", "2000"}, {"b", "200"}, {"c", "2000"}, {"d", "200"}} {
		e.publish("q", m.body, amqp.Publishing{Expiration: m.exp})
	}
	e.advance(500 * time.Millisecond)
	d, ok, err := e.ch.Get("q", false)
	if err != nil || !ok || string(d.Body) != "a" || d.MessageCount != 3 {
		t.Fatalf("manual-ack get: %q remaining=%d ok=%v err=%v, want a remaining=3", d.Body, d.MessageCount, ok, err)
	}
	d, ok, err = e.ch.Get("q", true)
	if err != nil || !ok || string(d.Body) != "c" || d.MessageCount != 0 {
		t.Fatalf("no-ack get: %q remaining=%d ok=%v err=%v, want c remaining=0", d.Body, d.MessageCount, ok, err)
	}
}

// TestQuorum40PurgeResetsPriorityCounter: rabbit_fifo's purge replaces the
// message queue with rabbit_fifo_q:new(), so the 2:1 counter starts again
// from 0 (rabbit_fifo.erl apply(#purge{})). Found by the generated
// conformance sequences (regression 35cdb4289a4a).
func TestQuorum40PurgeResetsPriorityCounter(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("qq", amqp.Table{"x-queue-type": "quorum"})
	e.publish("qq", "first", amqp.Publishing{})
	e.drain("qq") // one take: the counter is at 1
	e.publish("qq", "second", amqp.Publishing{})
	if _, err := e.ch.QueuePurge("qq", false); err != nil {
		t.Fatal(err)
	}
	// With the counter back at 0, two high messages go before a normal one
	// published earlier; had it stayed at 1, the normal one would come second.
	e.publish("qq", "lo", amqp.Publishing{Priority: 1})
	e.publish("qq", "hi1", amqp.Publishing{Priority: 6})
	e.publish("qq", "hi2", amqp.Publishing{Priority: 8})
	got := strings.Join(e.drain("qq"), " ")
	if want := "hi1 hi2 lo"; got != want {
		t.Fatalf("after a purge: %s, want %s", got, want)
	}
}

// TestClassicDeadLettersLandBeforeQuorumOnes: one basic.nack with multiple
// over deliveries of a quorum and a classic queue lands the classic queue's
// dead letters first, whichever delivery tags come first: the quorum queue
// publishes its own only after the Raft commit (docs/rabbitmq-semantics.md
// §3.7; conformance scenario dead-letter-order-classic-before-quorum).
func TestClassicDeadLettersLandBeforeQuorumOnes(t *testing.T) {
	for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
		for _, quorumFirst := range []bool{true, false} {
			e := newEnv(t, v)
			dl := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
			e.declare("dead", nil)
			qqDeclare(e, "qq", dl)
			e.declare("cq", dl)
			order := []string{"cq", "qq"}
			if quorumFirst {
				order = []string{"qq", "cq"}
			}
			for _, q := range order {
				e.publish(q, "from-"+q, amqp.Publishing{})
				e.publish(q, "again-"+q, amqp.Publishing{})
			}
			var last uint64
			for _, q := range order {
				for range 2 {
					last = e.mustGet(q).DeliveryTag
				}
			}
			if err := e.ch.Nack(last, true, false); err != nil {
				t.Fatal(err)
			}
			got := strings.Join(e.drain("dead"), " ")
			if want := "from-cq again-cq from-qq again-qq"; got != want {
				t.Errorf("%s, quorum delivered first %v: dead-letter queue holds %q, want %q", v, quorumFirst, got, want)
			}
		}
	}
}
