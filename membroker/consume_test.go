package membroker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// qqConsume starts a manual-ack consumer with the given tag and prefetch on
// a new channel of e's connection, returning the channel and deliveries.
func qqConsume(e *env, queue, tag string, prefetch int) (*Channel, <-chan amqp.Delivery) {
	e.t.Helper()
	ch := e.channel()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		e.t.Fatal(err)
	}
	dels, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		e.t.Fatalf("consume %s: %v", queue, err)
	}
	return ch, dels
}

// qqConsumers starts manual-ack consumers on one new channel, setting
// Qos(prefetch) before each, and returns their deliveries by tag.
func qqConsumers(e *env, queue string, tags []string, prefetch []int) map[string]<-chan amqp.Delivery {
	e.t.Helper()
	ch := e.channel()
	out := map[string]<-chan amqp.Delivery{}
	for i, tag := range tags {
		if err := ch.Qos(prefetch[i], 0, false); err != nil {
			e.t.Fatal(err)
		}
		dels, err := ch.Consume(queue, tag, false, false, false, false, nil)
		if err != nil {
			e.t.Fatalf("consume %s: %v", queue, err)
		}
		out[tag] = dels
	}
	return out
}

// qqTake takes every delivery already waiting on c.
func qqTake(c <-chan amqp.Delivery) []amqp.Delivery {
	var out []amqp.Delivery
	for {
		select {
		case d, ok := <-c:
			if !ok {
				return out
			}
			out = append(out, d)
		default:
			return out
		}
	}
}

func qqBodies(ds []amqp.Delivery) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, string(d.Body))
	}
	return out
}

// qqQueueTypes runs f for a classic and a quorum queue named q.
func qqQueueTypes(t *testing.T, f func(t *testing.T, e *env)) {
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			e := newEnv(t, RabbitMQ40)
			e.declare("q", amqp.Table{"x-queue-type": typ})
			f(t, e)
		})
	}
}

// Qos(prefetch, 0, false) sets the limit of consumers created afterwards on
// the channel; consumers that exist keep theirs.
// Ref §7.1 (global=false stores consumer_prefetch, "applies separately to
// each consumer created afterwards"; rabbit_channel.erl:1460).
func TestConsumeQosAppliesToLaterConsumers(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("a", nil)
	e.declare("b", nil)
	ch := e.channel()
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	da, err := ch.Consume("a", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	db, err := ch.Consume("b", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	qqPublishN(e, "a", "a", 5, 0)
	qqPublishN(e, "b", "b", 5, 0)
	if got := len(qqTake(da)); got != 1 {
		t.Errorf("consumer created under Qos(1) holds %d, want 1 (Qos(3) must not change it)", got)
	}
	if got := len(qqTake(db)); got != 3 {
		t.Errorf("consumer created under Qos(3) holds %d, want 3", got)
	}
}

// A consumer's prefetch limits its unacked deliveries; an ack lets the next
// one through.
// Ref §7.1 and §11 (observed on 4.0.5: prefetch 2 over 3 ready, 2
// delivered, the third held back).
func TestConsumePrefetchLimitsUnacked(t *testing.T) {
	qqQueueTypes(t, func(t *testing.T, e *env) {
		qqPublishN(e, "q", "m", 3, 0)
		_, dels := qqConsume(e, "q", "", 2)
		got := qqTake(dels)
		if diff := cmp.Diff([]string{"m0", "m1"}, qqBodies(got)); diff != "" {
			t.Fatalf("delivered (-want +got):\n%s", diff)
		}
		qqWantReady(e, "q", 1, 2)
		got[0].Ack(false)
		if d := receive(t, dels); string(d.Body) != "m2" {
			t.Fatalf("after an ack got %q, want m2", d.Body)
		}
		noDelivery(t, dels)
	})
}

// Consumers attached before publishing receive in round robin.
// Ref §7.2 (rabbit_queue_consumers:deliver re-appends to the tail; quorum
// service_queue); checked live on 4.0.5: two consumers, 4 messages,
// A m0 m2, B m1 m3.
func TestConsumeRoundRobin(t *testing.T) {
	qqQueueTypes(t, func(t *testing.T, e *env) {
		cons := qqConsumers(e, "q", []string{"A", "B"}, []int{10, 10})
		qqPublishN(e, "q", "m", 4, 0)
		got := map[string][]string{"A": qqBodies(qqTake(cons["A"])), "B": qqBodies(qqTake(cons["B"]))}
		want := map[string][]string{"A": {"m0", "m2"}, "B": {"m1", "m3"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("round robin (-want +got):\n%s", diff)
		}
	})
}

// A consumer blocked at its prefetch limit and freed by an ack rejoins at the
// end of the round robin.
// Ref §7.2 ("When it is unblocked ... re-added at the end"); checked live on
// 4.0.5 for both queue types: A (prefetch 1), B and C (prefetch 10); m0..m3
// give A m0, B m1, C m2, B m3 (A blocked); after A's ack m4..m6 give C m4,
// B m5, A m6.
func TestConsumeFreedConsumerRejoinsAtEnd(t *testing.T) {
	qqQueueTypes(t, func(t *testing.T, e *env) {
		cons := qqConsumers(e, "q", []string{"A", "B", "C"}, []int{1, 10, 10})
		got := map[string][]string{}
		take := func() {
			for tag, ch := range cons {
				for _, d := range qqTake(ch) {
					got[tag] = append(got[tag], string(d.Body))
					if d.Body[1] == '0' {
						d.Ack(false) // A's m0, freeing A
					}
				}
			}
		}
		qqPublishN(e, "q", "m", 4, 0)
		take()
		for i := 4; i < 7; i++ {
			e.publish("q", fmt.Sprintf("m%d", i), amqp.Publishing{})
		}
		take()
		want := map[string][]string{"A": {"m0", "m6"}, "B": {"m1", "m3", "m5"}, "C": {"m2", "m4"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("deliveries (-want +got):\n%s", diff)
		}
	})
}

// Quorum queues take a consumer out of the service queue as soon as it runs
// out of credit and put it back at the end when an ack gives it credit, so
// consumers freed by acks are served in the order of the acks. (Classic
// queues block a consumer only when a delivery to it is attempted, so there
// the same steps keep the original rotation.)
// Ref §7.2 ("Quorum ... service_queue is a priority queue of consumers with
// credit. Each delivery pops one consumer and re-queues it if it still has
// credit"); checked live on 4.0.5: A, B, C at prefetch 1 get m0, m1, m2;
// ack B then A; m3, m4 go to B then A on a quorum queue, A then B on a
// classic one.
func TestConsumeConsumersFreedByAcksRejoinInAckOrder(t *testing.T) {
	for _, c := range []struct{ typ, m3, m4 string }{{"classic", "A", "B"}, {"quorum", "B", "A"}} {
		t.Run(c.typ, func(t *testing.T) {
			e := newEnv(t, RabbitMQ40)
			e.declare("q", amqp.Table{"x-queue-type": c.typ})
			cons := qqConsumers(e, "q", []string{"A", "B", "C"}, []int{1, 1, 1})
			qqPublishN(e, "q", "m", 3, 0)
			held := map[string]amqp.Delivery{}
			for _, tag := range []string{"A", "B", "C"} {
				held[tag] = receive(t, cons[tag])
			}
			held["B"].Ack(false)
			held["A"].Ack(false)
			e.publish("q", "m3", amqp.Publishing{})
			e.publish("q", "m4", amqp.Publishing{})
			got := map[string]string{}
			for tag, ch := range cons {
				for _, d := range qqTake(ch) {
					got[string(d.Body)] = tag
				}
			}
			if diff := cmp.Diff(map[string]string{"m3": c.m3, "m4": c.m4}, got); diff != "" {
				t.Fatalf("who got m3 and m4 (-want +got):\n%s", diff)
			}
		})
	}
}

// An auto-ack consumer's deliveries are settled on delivery: nothing is left
// unacked and the prefetch limit does not apply.
// Ref §6 (no_ack deliveries have no delivery tag to settle) and §7.1.
func TestConsumeAutoAck(t *testing.T) {
	qqQueueTypes(t, func(t *testing.T, e *env) {
		ch := e.channel()
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		dels, err := ch.Consume("q", "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		qqPublishN(e, "q", "m", 3, 0)
		if diff := cmp.Diff([]string{"m0", "m1", "m2"}, qqBodies(qqTake(dels))); diff != "" {
			t.Fatalf("auto-ack deliveries (-want +got):\n%s", diff)
		}
		qqWantReady(e, "q", 0, 0)
		ch.Close()
		qqWantReady(e, "q", 0, 0) // nothing to requeue
	})
}

// basic.cancel closes the delivery channel after the deliveries already
// handed over; the cancelled consumer's unacked deliveries stay unacked (not
// requeued) and can still be acked or nacked.
// Ref §5.2 ("basic.cancel ... does NOT return unacked messages ... can still
// be acked/nacked"; consumers.md: "Cancelling a consumer will neither
// discard nor requeue them").
func TestConsumeCancelKeepsUnacked(t *testing.T) {
	qqQueueTypes(t, func(t *testing.T, e *env) {
		ch, dels := qqConsume(e, "q", "c1", 3)
		qqPublishN(e, "q", "m", 2, 0)
		if err := ch.Cancel("c1", false); err != nil {
			t.Fatal(err)
		}
		a, b := receive(t, dels), receive(t, dels)
		select {
		case d, ok := <-dels:
			if ok {
				t.Fatalf("delivery %q after the pending ones", d.Body)
			}
		default:
			t.Fatal("delivery channel not closed after cancel")
		}
		e.publish("q", "later", amqp.Publishing{})
		qqWantReady(e, "q", 1, 2)
		if err := a.Ack(false); err != nil {
			t.Fatal(err)
		}
		if err := b.Nack(false, true); err != nil {
			t.Fatal(err)
		}
		if ch.IsClosed() {
			t.Fatal("settling a cancelled consumer's deliveries closed the channel")
		}
		qqWantReady(e, "q", 2, 0)
		if diff := cmp.Diff([]string{"m1", "later"}, e.drain("q")); diff != "" {
			t.Fatalf("after nack (-want +got):\n%s", diff)
		}
	})
}

// Cancelling an unknown consumer tag is not an error.
// Ref semantics §E4 ("basic.cancel with an unknown tag: basic.cancel_ok ... no
// error").
func TestConsumeCancelUnknownTag(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	if err := e.ch.Cancel("nobody", false); err != nil {
		t.Fatalf("cancel unknown tag: %v", err)
	}
	if e.ch.IsClosed() {
		t.Fatal("channel closed")
	}
}

// Generated consumer tags come from a per-broker counter: the same calls on
// a fresh broker give the same tags.
// Ref doc.go ("ctag-membroker-N", deterministic per broker); amqp091 names
// consumers client-side. (RabbitMQ itself would generate amq.ctag-<random>,
// semantics §E4 step 3.)
func TestConsumeGeneratedTagsAreDeterministic(t *testing.T) {
	run := func() []string {
		e := newEnv(t, RabbitMQ40)
		var tags []string
		for _, q := range []string{"q1", "q2"} {
			e.declare(q, nil)
			dels, err := e.ch.Consume(q, "", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			e.publish(q, "m", amqp.Publishing{})
			tags = append(tags, receive(t, dels).ConsumerTag)
		}
		return append(tags, append(e.info("q1").Consumers, e.info("q2").Consumers...)...)
	}
	want := []string{"ctag-membroker-1", "ctag-membroker-2", "ctag-membroker-1", "ctag-membroker-2"}
	if diff := cmp.Diff(want, run()); diff != "" {
		t.Fatalf("first broker (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, run()); diff != "" {
		t.Fatalf("second broker (-want +got):\n%s", diff)
	}
}

// Reusing a consumer tag on the same channel is a 530 NOT_ALLOWED connection
// error; the same tag on another channel is fine.
// Ref semantics §E4 step 1 ("attempt to reuse consumer tag", connection error).
func TestConsumeTagReuseClosesConnection(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	e.declare("r", nil)
	connErr := e.conn.NotifyClose(make(chan *amqp.Error, 1))
	chErr := closeErr(e.ch)
	if _, err := e.ch.Consume("q", "t", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.channel().Consume("q", "t", false, false, false, false, nil); err != nil {
		t.Fatalf("same tag on another channel: %v", err)
	}
	want := serverErr(amqp.NotAllowed, "NOT_ALLOWED - attempt to reuse consumer tag 't'")
	_, err := e.ch.Consume("r", "t", false, false, false, false, nil)
	if diff := cmp.Diff(want, err); diff != "" {
		t.Fatalf("Consume error (-want +got):\n%s", diff)
	}
	qqClosedWith(t, connErr, want)
	qqClosedWith(t, chErr, want)
	if !e.conn.IsClosed() {
		t.Fatal("connection still open")
	}
}

// When the queue is deleted under a consumer, NotifyCancel receives its tag
// and its delivery channel closes.
// Ref semantics §E3 (queue.delete cancels consumers; basic.cancel from the
// server, which amqp091 reports on NotifyCancel).
func TestConsumeQueueDeletedNotifiesCancel(t *testing.T) {
	qqQueueTypes(t, func(t *testing.T, e *env) {
		ch := e.channel()
		cancels := ch.NotifyCancel(make(chan string, 1))
		dels, err := ch.Consume("q", "c1", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.ch.QueueDelete("q", false, false, false); err != nil {
			t.Fatal(err)
		}
		select {
		case tag := <-cancels:
			if tag != "c1" {
				t.Fatalf("NotifyCancel got %q, want c1", tag)
			}
		default:
			t.Fatal("no consumer tag on NotifyCancel")
		}
		select {
		case _, ok := <-dels:
			if ok {
				t.Fatal("unexpected delivery")
			}
		default:
			t.Fatal("delivery channel not closed")
		}
		if ch.IsClosed() {
			t.Fatal("the channel must stay open")
		}
	})
}

// An exclusive consumer on a classic queue refuses other consumers, and an
// exclusive consume on a queue with consumers is refused: 403.
// Ref semantics §E4 step 6 (cqp line 1293: "ACCESS_REFUSED - queue 'q' in vhost
// '/' in exclusive use"); text checked live on 4.0.5.
func TestConsumeExclusiveRefusesOthers(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	want := serverErr(amqp.AccessRefused, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")
	if _, err := e.ch.Consume("q", "x", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch := e.channel()
	errs := closeErr(ch)
	_, err := ch.Consume("q", "y", false, false, false, false, nil)
	if diff := cmp.Diff(want, err); diff != "" {
		t.Fatalf("second consumer (-want +got):\n%s", diff)
	}
	qqClosedWith(t, errs, want)

	e.declare("p", nil)
	if _, err := e.ch.Consume("p", "plain", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch = e.channel()
	_, err = ch.Consume("p", "excl", false, true, false, false, nil)
	want = serverErr(amqp.AccessRefused, "ACCESS_REFUSED - queue 'p' in vhost '/' in exclusive use")
	if diff := cmp.Diff(want, err); diff != "" {
		t.Fatalf("exclusive after a consumer (-want +got):\n%s", diff)
	}
	if e.conn.IsClosed() {
		t.Fatal("403 is a channel error")
	}
}

// Consuming from a missing queue is a 404 channel error.
// Ref semantics §E4 step 4; text checked live on 4.0.5.
func TestConsumeMissingQueue(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	errs := closeErr(e.ch)
	_, err := e.ch.Consume("nope", "", false, false, false, false, nil)
	want := serverErr(amqp.NotFound, "NOT_FOUND - no queue 'nope' in vhost '/'")
	if diff := cmp.Diff(want, err); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	qqClosedWith(t, errs, want)
	if !e.ch.IsClosed() || e.conn.IsClosed() {
		t.Fatal("want the channel closed and the connection open")
	}
}

// A consumer without a prefetch limit on more messages than its delivery
// buffer (200) gets them all as it drains its channel and acks: the acks
// are broker calls, after which the held-back messages must flow.
// Ref doc.go ("further messages stay ready on the queue until the consumer
// drains its channel") and §7.2 (classic_queue_consumer_unsent_message_limit
// 200 "can ... block a channel temporarily").
func TestConsumeUnlimitedPrefetchDoesNotStall(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	const n = 250
	qqPublishN(e, "q", "m", n, 0)
	_, dels := qqConsume(e, "q", "", 0)
	for i := 0; i < n; i++ {
		var d amqp.Delivery
		select {
		case d = <-dels:
		default:
			select {
			case d = <-dels:
			case <-time.After(time.Second):
				t.Fatalf("stalled after %d of %d messages with the delivery channel drained and acked", i, n)
			}
		}
		if want := fmt.Sprintf("m%d", i); string(d.Body) != want {
			t.Fatalf("delivery %d is %q, want %s", i, d.Body, want)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	qqWantReady(e, "q", 0, 0)
}

// A channel's deliveries are numbered in the order they happen, across its
// consumers, and each consumer receives its queue's messages in order.
// Ref §6 (delivery tags are per channel, increasing) and doc.go (outputs
// handed over in order per connection).
func TestConsumeChannelDeliversInOrder(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("a", nil)
	qqDeclare(e, "b", nil)
	ch := e.channel()
	da, _ := ch.Consume("a", "", false, false, false, false, nil)
	db, _ := ch.Consume("b", "", false, false, false, false, nil)
	for i := 0; i < 50; i++ {
		e.publish("a", fmt.Sprintf("a%d", i), amqp.Publishing{})
		e.publish("b", fmt.Sprintf("b%d", i), amqp.Publishing{})
	}
	as, bs := qqTake(da), qqTake(db)
	if len(as) != 50 || len(bs) != 50 {
		t.Fatalf("got %d and %d deliveries, want 50 each", len(as), len(bs))
	}
	for i := 0; i < 50; i++ {
		if string(as[i].Body) != fmt.Sprintf("a%d", i) || as[i].DeliveryTag != uint64(2*i+1) {
			t.Fatalf("a delivery %d: %q tag %d", i, as[i].Body, as[i].DeliveryTag)
		}
		if string(bs[i].Body) != fmt.Sprintf("b%d", i) || bs[i].DeliveryTag != uint64(2*i+2) {
			t.Fatalf("b delivery %d: %q tag %d", i, bs[i].Body, bs[i].DeliveryTag)
		}
	}
}

// Ack, Nack and Reject settle one delivery, or with multiple every
// outstanding delivery up to the tag.
// Ref §6 (collect_acks), §7.3 (classic requeue to the original position).
func TestAckNackRejectMultiple(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	qqPublishN(e, "q", "m", 6, 0)
	var tags []uint64
	for i := 0; i < 6; i++ {
		tags = append(tags, e.mustGet("q").DeliveryTag)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3, 4, 5, 6}, tags); diff != "" {
		t.Fatalf("tags (-want +got):\n%s", diff)
	}
	e.ch.Ack(2, true) // m0 m1
	qqWantReady(e, "q", 0, 4)
	e.ch.Nack(4, true, true) // m2 m3 back
	qqWantReady(e, "q", 2, 2)
	e.ch.Reject(5, false) // m4 dropped
	qqWantReady(e, "q", 2, 1)
	e.ch.Nack(6, false, true) // m5 back
	qqWantReady(e, "q", 3, 0)
	if e.ch.IsClosed() {
		t.Fatal("channel closed")
	}
	if diff := cmp.Diff([]string{"m2", "m3", "m5"}, e.drain("q")); diff != "" {
		t.Fatalf("requeued (-want +got):\n%s", diff)
	}
}

// multiple=true with delivery tag 0 settles every outstanding delivery; with
// none outstanding it is a no-op.
// Ref §6 ("multiple=true with tag=0: settles all outstanding deliveries.
// With none outstanding this is a no-op").
func TestAckMultipleZeroSettlesAll(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	qqPublishN(e, "q", "m", 3, 0)
	for i := 0; i < 3; i++ {
		e.mustGet("q")
	}
	e.ch.Nack(0, true, true)
	qqWantReady(e, "q", 3, 0)
	for i := 0; i < 3; i++ {
		e.mustGet("q")
	}
	e.ch.Ack(0, true)
	qqWantReady(e, "q", 0, 0)
	e.ch.Ack(0, true) // nothing outstanding
	if e.ch.IsClosed() {
		t.Fatal("multiple with tag 0 closed the channel")
	}
}

// An unknown or already settled delivery tag closes the channel with 406
// "unknown delivery tag N": Ack itself returns nil, NotifyClose gets the
// error, later calls return amqp.ErrClosed, and the channel's unacked
// messages are requeued (nothing is settled by the failing call).
// Ref §6 (text, double ack, tag 0 without multiple, multiple with an
// unknown tag); checked live on 4.0.5: Ack(7) returned nil and the channel
// closed with "PRECONDITION_FAILED - unknown delivery tag 7".
func TestAckUnknownTagClosesChannel(t *testing.T) {
	for _, c := range []struct {
		name   string
		settle func(ch *Channel) error
		tag    int
	}{
		{"ack never issued", func(ch *Channel) error { return ch.Ack(7, false) }, 7},
		{"ack twice", func(ch *Channel) error { ch.Ack(1, false); return ch.Ack(1, false) }, 1},
		{"nack after reject", func(ch *Channel) error { ch.Reject(1, true); return ch.Nack(1, false, true) }, 1},
		{"ack tag 0 without multiple", func(ch *Channel) error { return ch.Ack(0, false) }, 0},
		{"multiple above the outstanding", func(ch *Channel) error { return ch.Ack(9, true) }, 9},
		{"reject unknown", func(ch *Channel) error { return ch.Reject(3, false) }, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, RabbitMQ40)
			e.declare("q", nil)
			qqPublishN(e, "q", "m", 2, 0)
			e.mustGet("q")
			e.mustGet("q")
			errs := closeErr(e.ch)
			if err := c.settle(e.ch); err != nil {
				t.Fatalf("settle returned %v, want nil (the error is asynchronous)", err)
			}
			qqClosedWith(t, errs, serverErr(amqp.PreconditionFailed,
				fmt.Sprintf("PRECONDITION_FAILED - unknown delivery tag %d", c.tag)))
			if _, ok := <-errs; ok {
				t.Fatal("close listener not closed after the error")
			}
			if err := e.ch.Ack(2, false); !errors.Is(err, amqp.ErrClosed) {
				t.Fatalf("Ack after the close = %v, want amqp.ErrClosed", err)
			}
			if !e.ch.IsClosed() || e.conn.IsClosed() {
				t.Fatal("want the channel closed and the connection open")
			}
			// What the channel still held went back to the queue.
			want := 2
			if c.name == "ack twice" {
				want = 1
			}
			qqWantReady(e, "q", want, 0)
		})
	}
}

// A delivery made with auto-ack has no tag to settle: acking it is an
// unknown delivery tag.
// Ref §6 ("ack of a tag delivered with no_ack=true: unknown delivery tag").
func TestAckOfAutoAckDeliveryIsUnknown(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	e.publish("q", "m", amqp.Publishing{})
	d, ok, err := e.ch.Get("q", true)
	if err != nil || !ok {
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	errs := closeErr(e.ch)
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	qqClosedWith(t, errs, serverErr(amqp.PreconditionFailed,
		fmt.Sprintf("PRECONDITION_FAILED - unknown delivery tag %d", d.DeliveryTag)))
	qqWantReady(e, "q", 0, 0)
}

// Deliveries carry their channel as the amqp.Acknowledger, so d.Ack, d.Nack
// and d.Reject settle them.
// Ref amqp091 Delivery.Ack/Nack/Reject (call Acknowledger with the
// delivery's tag) and doc.go.
func TestAckThroughDeliveryAcknowledger(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
	e.declare("dlq", nil)
	qqPublishN(e, "q", "m", 3, 0)
	a, b, c := e.mustGet("q"), e.mustGet("q"), e.mustGet("q")
	if a.Acknowledger != amqp.Acknowledger(e.ch) {
		t.Fatal("the delivery's Acknowledger is not its channel")
	}
	if err := a.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := b.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Reject(true); err != nil {
		t.Fatal(err)
	}
	qqWantReady(e, "q", 1, 0)
	if diff := cmp.Diff([]string{"m2"}, e.drain("q")); diff != "" {
		t.Errorf("q (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"m1"}, e.drain("dlq")); diff != "" {
		t.Errorf("dlq (-want +got):\n%s", diff)
	}
}

// wantQueuedCount checks the broker's count of held-back outputs against
// its connections' buffers: flush skips its walk when the count is zero.
func wantQueuedCount(t *testing.T, b *Broker) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.conns {
		n += len(c.out)
	}
	if b.queued != n {
		t.Fatalf("broker counts %d held-back outputs, its connections hold %d", b.queued, n)
	}
}

// Outputs held back because a listener's channel is full are counted while
// they wait, handed over as it drains, and dropped with their connection.
func TestHeldBackOutputsAreCounted(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	ch := e.channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	for i := range 5 {
		if err := ch.Publish("", "q", false, false, amqp.Publishing{Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		wantQueuedCount(t, e.b)
	}
	e.b.mu.Lock()
	held := e.b.queued
	e.b.mu.Unlock()
	if held != 4 {
		t.Fatalf("%d outputs held back, want the 4 confirms that do not fit", held)
	}
	for range 2 {
		<-confirms
		if _, err := ch.QueueDeclarePassive("q", false, false, false, false, nil); err != nil {
			t.Fatal(err) // any call hands over what fits now
		}
		wantQueuedCount(t, e.b)
	}
	if err := e.conn.Close(); err != nil {
		t.Fatal(err)
	}
	wantQueuedCount(t, e.b)
	// What the closed connection still holds is handed over as its
	// listener drains, on later calls into the broker, and then the
	// connection is let go.
	other, err := e.b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for open := true; open; {
		select {
		case _, open = <-confirms:
		default:
			if _, err := other.Channel(); err != nil {
				t.Fatal(err)
			}
		}
		wantQueuedCount(t, e.b)
	}
	if _, err := other.Channel(); err != nil {
		t.Fatal(err)
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if e.b.queued != 0 || len(e.b.conns) != 1 {
		t.Fatalf("after the close: %d outputs held back, %d connections kept", e.b.queued, len(e.b.conns))
	}
}
