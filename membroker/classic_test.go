package membroker

// Tests of classic-queue semantics: ordering, priorities, requeue, message
// TTL, dead-lettering, x-expires, exclusive and auto-delete queues.
//
// Citations: "semantics §N" is docs/rabbitmq-semantics.md, "semantics
// §11" its observations on a live RabbitMQ 4.0.5, "semantics §EN" its error
// texts. Behaviour marked "live" was checked against a RabbitMQ 4.0.5 broker
// with amqp091-go v1.16.0 while these tests were written.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// cqDelivery is the part of a delivery most tests compare.
type cqDelivery struct {
	Body        string
	Priority    uint8
	Redelivered bool
}

// cqDrain gets and acks every ready message of queue, in order.
func cqDrain(e *env, queue string) []cqDelivery {
	e.t.Helper()
	var out []cqDelivery
	for {
		d, ok := e.get(queue)
		if !ok {
			return out
		}
		out = append(out, cqDelivery{string(d.Body), d.Priority, d.Redelivered})
		if err := d.Ack(false); err != nil {
			e.t.Fatal(err)
		}
	}
}

// cqReady reports a queue's ready count, failing if it is gone.
func cqReady(e *env, queue string) int {
	e.t.Helper()
	return e.info(queue).Ready
}

// cqExists reports whether a queue exists, without touching its lease.
func cqExists(e *env, queue string) bool {
	_, ok := e.b.Queue(queue)
	return ok
}

// cqDiff fails the test with a diff when got differs from want.
func cqDiff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

// cqAmqpErr extracts the *amqp.Error from err.
func cqAmqpErr(t *testing.T, err error) *amqp.Error {
	t.Helper()
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *amqp.Error", err, err)
	}
	return ae
}

// cqWait waits, bounded, for a delivery the clock's timer goroutine hands
// over; the timeout is only the failure path.
func cqWait(t *testing.T, c <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case d, ok := <-c:
		if !ok {
			t.Fatal("delivery channel closed")
		}
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery within 5s")
		return amqp.Delivery{}
	}
}

// cqDeadLetterArgs dead-letters through the default exchange to target.
func cqDeadLetterArgs(target string, more amqp.Table) amqp.Table {
	args := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": target}
	for k, v := range more {
		args[k] = v
	}
	return args
}

// cqLockedReason is RabbitMQ's 405 text for another connection's exclusive queue.
func cqLockedReason(q string) string {
	return "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '" + q +
		"' in vhost '/'. It could be originally declared on another connection or the " +
		"exclusive property value does not match that of the original declaration."
}

// ---------------------------------------------------------------------------
// Ordering and priorities

// TestClassicFIFOOrder: a classic queue without x-max-priority delivers in
// publish order, to basic.get and to a consumer alike.
// semantics §4.1 (one FIFO backing queue), §7.3; rabbit_variable_queue.
func TestClassicFIFOOrder(t *testing.T) {
	for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
		t.Run(v.String(), func(t *testing.T) {
			e := newEnv(t, v)
			e.declare("q", nil)
			var want []string
			for i := range 10 {
				body := fmt.Sprintf("m%d", i)
				want = append(want, body)
				// Priorities are ignored without x-max-priority.
				e.publish("q", body, amqp.Publishing{Priority: uint8(9 - i)})
			}
			cqDiff(t, "basic.get order", want, e.drain("q"))

			for _, b := range want {
				e.publish("q", b, amqp.Publishing{})
			}
			deliveries, err := e.ch.Consume("q", "c", true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for range want {
				got = append(got, string(receive(t, deliveries).Body))
			}
			noDelivery(t, deliveries)
			cqDiff(t, "consumer order", want, got)
		})
	}
}

// TestClassicPriorityStrictFIFOWithinLevel: with x-max-priority every fetch
// takes the head of the highest non-empty level; FIFO within a level;
// messages without a priority count as 0.
// semantics §4.1; rabbit_priority_queue.erl fetch/2; priority_queue_SUITE simple_order.
func TestClassicPriorityStrictFIFOWithinLevel(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-max-priority": 3})
	for round := range 3 {
		for _, p := range []uint8{1, 2, 3, 0} {
			e.publish("q", fmt.Sprintf("p%d-%d", p, round), amqp.Publishing{Priority: p})
		}
	}
	want := []string{
		"p3-0", "p3-1", "p3-2", "p2-0", "p2-1", "p2-2",
		"p1-0", "p1-1", "p1-2", "p0-0", "p0-1", "p0-2",
	}
	cqDiff(t, "order", want, e.drain("q"))
}

// TestClassicPriorityAboveMaxActsAsMax: a priority above x-max-priority is
// filed at the maximum (FIFO with messages at the maximum) and the delivered
// priority property is not rewritten.
// semantics §4.1 and semantics §11 (max 10: three at 0, one at 20, one at 5 ->
// p20 p5 low0 low1 low2); rabbit_priority_queue.erl priority/2;
// priority_queue_SUITE matching.
func TestClassicPriorityAboveMaxActsAsMax(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-max-priority": 10})
	for i := range 3 {
		e.publish("q", fmt.Sprintf("low%d", i), amqp.Publishing{})
	}
	e.publish("q", "p20", amqp.Publishing{Priority: 20})
	e.publish("q", "p5", amqp.Publishing{Priority: 5})
	want := []cqDelivery{{"p20", 20, false}, {"p5", 5, false}, {"low0", 0, false}, {"low1", 0, false}, {"low2", 0, false}}
	cqDiff(t, "observed order", want, cqDrain(e, "q"))

	// priority_queue_SUITE matching: max 5, [undefined,0,5,10,undefined]
	// comes out as [5,10,undefined,0,undefined]: 10 is filed with 5, after it.
	e.declare("m", amqp.Table{"x-max-priority": 5})
	e.publish("m", "u1", amqp.Publishing{})
	e.publish("m", "zero", amqp.Publishing{Priority: 0})
	e.publish("m", "five", amqp.Publishing{Priority: 5})
	e.publish("m", "ten", amqp.Publishing{Priority: 10})
	e.publish("m", "u2", amqp.Publishing{})
	cqDiff(t, "matching order", []string{"five", "ten", "u1", "zero", "u2"}, e.drain("m"))
}

// TestClassicMaxPriorityZeroActsAsOne: x-max-priority 0 is accepted and
// gives two levels, 0 and 1 (every priority >= 1 is filed at 1, FIFO).
// semantics §4.1 ("x-max-priority=0 behaves like 1", UNCERTAIN there; live 4.0.5:
// 0,1,5,0,2 -> m1 m5 m2 m0 m0); rabbit_priority_queue.erl priorities/1.
func TestClassicMaxPriorityZeroActsAsOne(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-max-priority": 0})
	for i, p := range []uint8{0, 1, 5, 0, 2} {
		e.publish("q", fmt.Sprintf("m%d-p%d", i, p), amqp.Publishing{Priority: p})
	}
	want := []cqDelivery{
		{"m1-p1", 1, false}, {"m2-p5", 5, false}, {"m4-p2", 2, false},
		{"m0-p0", 0, false}, {"m3-p0", 0, false},
	}
	cqDiff(t, "order", want, cqDrain(e, "q"))
}

// ---------------------------------------------------------------------------
// Requeue

// TestClassicRejectRequeueRestoresOriginalPosition: reject/nack with requeue
// puts a message back at its original position, redelivered=true, whatever
// order the rejections come in.
// semantics §7.3 and semantics §11 (get m0, get m1, reject m1, reject m0 -> m0 m1 m2);
// rabbit_variable_queue:requeue.
func TestClassicRejectRequeueRestoresOriginalPosition(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	for i := range 4 {
		e.publish("q", fmt.Sprintf("m%d", i), amqp.Publishing{})
	}
	m0 := e.mustGet("q")
	m1 := e.mustGet("q")
	if err := m1.Reject(true); err != nil {
		t.Fatal(err)
	}
	if err := m0.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	want := []cqDelivery{{"m0", 0, true}, {"m1", 0, true}, {"m2", 0, false}, {"m3", 0, false}}
	cqDiff(t, "order after requeue", want, cqDrain(e, "q"))
}

// TestClassicNackMultipleRequeue: nack(multiple, requeue) returns every
// delivery up to the tag to its original position, even around a message
// that stays unacknowledged and one published meanwhile.
// semantics §6 (multiple), §7.3; rabbit_channel collect_acks, rabbit_variable_queue:requeue.
func TestClassicNackMultipleRequeue(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	for i := range 4 {
		e.publish("q", fmt.Sprintf("m%d", i), amqp.Publishing{})
	}
	e.mustGet("q") // m0
	m1 := e.mustGet("q")
	m2 := e.mustGet("q")
	e.publish("q", "m4", amqp.Publishing{})
	// m2 stays out: nack multiple up to m1 only.
	if err := m1.Nack(true, true); err != nil {
		t.Fatal(err)
	}
	if qi := e.info("q"); qi.Ready != 4 || qi.Unacked != 1 {
		t.Fatalf("ready/unacked = %d/%d, want 4/1", qi.Ready, qi.Unacked)
	}
	if err := m2.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	want := []cqDelivery{{"m0", 0, true}, {"m1", 0, true}, {"m2", 0, true}, {"m3", 0, false}, {"m4", 0, false}}
	cqDiff(t, "order", want, cqDrain(e, "q"))
}

// TestClassicChannelCloseRequeues: unacked deliveries of a closing channel
// (consumer and basic.get alike) go back to their original positions with
// redelivered=true.
// semantics §7.3 and semantics §11 (prefetch 2 over 3, close: c0* c1* c2);
// rabbit_amqqueue_process handle_ch_down.
func TestClassicChannelCloseRequeues(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	for i := range 4 {
		e.publish("q", fmt.Sprintf("c%d", i), amqp.Publishing{})
	}
	cch := e.channel()
	if err := cch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := cch.Consume("q", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, deliveries)
	receive(t, deliveries)
	noDelivery(t, deliveries)
	if _, ok, err := cch.Get("q", false); err != nil || !ok { // c2, via basic.get
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	if err := cch.Close(); err != nil {
		t.Fatal(err)
	}
	want := []cqDelivery{{"c0", 0, true}, {"c1", 0, true}, {"c2", 0, true}, {"c3", 0, false}}
	cqDiff(t, "order after close", want, cqDrain(e, "q"))
}

// TestClassicPriorityRequeueToOwnLevel: a requeued message returns to its
// own priority level at its original position, ahead of later messages of
// that level.
// semantics §4.1 (test requeue: get 3,2,1, nack-multiple, get 3,2,1 again);
// rabbit_priority_queue.erl requeue/2 (ack tags carry {Priority, Tag}).
func TestClassicPriorityRequeueToOwnLevel(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-max-priority": 3})
	for _, p := range []uint8{1, 2, 3} {
		e.publish("q", fmt.Sprintf("p%d", p), amqp.Publishing{Priority: p})
	}
	var last amqp.Delivery
	var got []string
	for range 3 {
		last = e.mustGet("q")
		got = append(got, string(last.Body))
	}
	cqDiff(t, "first pass", []string{"p3", "p2", "p1"}, got)
	// Published while the others are out: behind the requeued ones of its level.
	e.publish("q", "p3-late", amqp.Publishing{Priority: 3})
	if err := last.Nack(true, true); err != nil {
		t.Fatal(err)
	}
	want := []cqDelivery{{"p3", 3, true}, {"p3-late", 3, false}, {"p2", 2, true}, {"p1", 1, true}}
	cqDiff(t, "after nack multiple", want, cqDrain(e, "q"))
}

// ---------------------------------------------------------------------------
// Message TTL

// TestClassicMessageTTLLowerWins: with x-message-ttl and a per-message
// expiration the lower one applies.
// semantics §1.1 (calculate_msg_expiry: lists:min); ttl.md "the lower one wins".
func TestClassicMessageTTLLowerWins(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-message-ttl": 1000})
	e.publish("q", "longer", amqp.Publishing{Expiration: "5000"}) // queue TTL wins: 1000
	e.publish("q", "plain", amqp.Publishing{})                    // 1000
	e.declare("r", amqp.Table{"x-message-ttl": 1000})
	e.publish("r", "shorter", amqp.Publishing{Expiration: "300"}) // message wins: 300
	e.publish("r", "plain", amqp.Publishing{})

	e.advance(299 * time.Millisecond)
	if got := cqReady(e, "r"); got != 2 {
		t.Fatalf("r at 299ms: ready %d, want 2", got)
	}
	e.advance(1 * time.Millisecond)
	if got := cqReady(e, "r"); got != 1 {
		t.Fatalf("r at 300ms: ready %d, want 1 (per-message 300 < queue 1000)", got)
	}
	e.advance(699 * time.Millisecond)
	if got := cqReady(e, "q"); got != 2 {
		t.Fatalf("q at 999ms: ready %d, want 2", got)
	}
	e.advance(1 * time.Millisecond)
	if got := cqReady(e, "q"); got != 0 {
		t.Fatalf("q at 1000ms: ready %d, want 0 (queue 1000 < per-message 5000)", got)
	}
	if got := cqReady(e, "r"); got != 0 {
		t.Fatalf("r at 1000ms: ready %d, want 0", got)
	}
}

// TestClassicMessageTTLFixedAtEnqueue: the expiry is computed once, at
// enqueue: later messages get their own deadline, and a requeue keeps the
// original one.
// semantics §1.1 ("fixed at enqueue time"), §1.5 ("original expiry time ... is
// preserved if it is requeued"); rabbit_amqqueue_process calculate_msg_expiry.
func TestClassicMessageTTLFixedAtEnqueue(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-message-ttl": 1000})
	e.publish("q", "m1", amqp.Publishing{}) // expires at 1000
	e.advance(600 * time.Millisecond)
	e.publish("q", "m2", amqp.Publishing{}) // expires at 1600
	d := e.mustGet("q")
	if string(d.Body) != "m1" {
		t.Fatalf("got %q, want m1", d.Body)
	}
	if err := d.Reject(true); err != nil { // back at the head, still due at 1000
		t.Fatal(err)
	}
	e.advance(399 * time.Millisecond)
	if got := cqReady(e, "q"); got != 2 {
		t.Fatalf("at 999ms: ready %d, want 2", got)
	}
	e.advance(1 * time.Millisecond)
	if got := cqReady(e, "q"); got != 1 {
		t.Fatalf("at 1000ms: ready %d, want 1 (requeue must not restart m1's TTL)", got)
	}
	e.advance(599 * time.Millisecond)
	cqDiff(t, "at 1599ms", []string{"m2"}, e.drain("q"))
}

// TestClassicExpiryOnlyAtHead: an expired message behind a live head stays,
// counted in Ready, and is dropped only when it reaches the head.
// semantics §1.2 and semantics §11 (per-message 2000 then 200, wait 500, drain ->
// only the 2000 ms message); rabbit_amqqueue_process drop_expired_msgs/2.
func TestClassicExpiryOnlyAtHead(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", nil))
	e.publish("q", "long", amqp.Publishing{Expiration: "2000"})
	e.publish("q", "short", amqp.Publishing{Expiration: "200"})
	e.advance(500 * time.Millisecond)
	if qi := e.info("q"); qi.Ready != 2 {
		t.Fatalf("ready %d, want 2: the expired message is behind a live head", qi.Ready)
	}
	if got := cqReady(e, "dlq"); got != 0 {
		t.Fatalf("dlq ready %d before the short message reached the head", got)
	}
	d := e.mustGet("q")
	if string(d.Body) != "long" || d.MessageCount != 0 {
		t.Fatalf("got %q message_count %d, want long and 0", d.Body, d.MessageCount)
	}
	if got := e.drain("dlq"); !cmp.Equal(got, []string{"short"}) {
		t.Fatalf("dlq = %q, want [short] dead-lettered when it reached the head", got)
	}
}

// TestClassicPriorityExpiryOnlyAtHighestLevelHead: in a priority queue only
// the head of the highest non-empty level is checked, so an expired
// low-priority message stays behind a live high-priority head and still
// counts in Ready.
// semantics §1.4 (priority.md "Interaction with Other Features";
// rabbit_priority_queue.erl dropwhile/2, find2); live 4.0.5: count 2, get
// high with message_count 0.
func TestClassicPriorityExpiryOnlyAtHighestLevelHead(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-max-priority": 5})
	e.publish("q", "low", amqp.Publishing{Expiration: "100"})
	e.publish("q", "high", amqp.Publishing{Priority: 5})
	e.advance(400 * time.Millisecond)
	qi, err := e.ch.QueueDeclarePassive("q", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if qi.Messages != 2 || cqReady(e, "q") != 2 {
		t.Fatalf("declare-ok messages %d, ready %d; want 2 and 2", qi.Messages, cqReady(e, "q"))
	}
	d := e.mustGet("q")
	if string(d.Body) != "high" || d.MessageCount != 0 {
		t.Fatalf("got %q message_count %d, want high and 0", d.Body, d.MessageCount)
	}
	if got := cqReady(e, "q"); got != 0 {
		t.Fatalf("ready %d after the high head left, want 0", got)
	}
}

// TestClassicPriorityShorterHeadWaitsForTimer: a higher-priority message
// with a shorter TTL published into a non-empty priority queue becomes the
// head without the TTL timer being re-armed (deliver_or_enqueue runs
// drop_expired_msgs only when the queue had been empty), so it is
// dead-lettered when the timer armed for the old head fires, and a
// basic.get or a consumer before that receives it although it has expired
// (fetch/2 takes the head before dropping); basic.cancel reaps it
// (stop_consumer runs requeue_and_run).
// semantics §1.2 (fetch race), §1.4 (timer not re-armed, "UNCERTAIN in
// practice"); rabbit_amqqueue_process deliver_or_enqueue, fetch/2,
// ensure_ttl_timer; live 4.0.5: conformance scenarios
// classic-ttl-priority-shorter-head-not-rearmed,
// classic-ttl-priority-expired-head-fetched,
// classic-ttl-priority-expired-head-consumed,
// classic-ttl-priority-cancel-drops-expired-head.
func TestClassicPriorityShorterHeadWaitsForTimer(t *testing.T) {
	setup := func(t *testing.T) *env {
		e := newEnv(t, RabbitMQ40)
		e.declare("dlq", nil)
		e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-max-priority": 5}))
		return e
	}
	publish := func(e *env) {
		e.publish("q", "low", amqp.Publishing{Expiration: "1500"})
		e.publish("q", "high", amqp.Publishing{Expiration: "200", Priority: 5})
		e.advance(500 * time.Millisecond)
	}
	t.Run("timer", func(t *testing.T) {
		e := setup(t)
		publish(e)
		if got := cqReady(e, "q"); got != 2 {
			t.Fatalf("ready %d at 500 ms, want 2: no timer covers the expired high head", got)
		}
		e.advance(1200 * time.Millisecond)
		cqDiff(t, "dlq at 1700 ms", []string{"high", "low"}, e.drain("dlq"))
	})
	t.Run("get", func(t *testing.T) {
		e := setup(t)
		publish(e)
		cqDiff(t, "gets", []string{"high", "low"}, e.drain("q"))
		cqDiff(t, "dlq", []string(nil), e.drain("dlq"))
	})
	t.Run("consume", func(t *testing.T) {
		e := setup(t)
		publish(e)
		c, err := e.ch.Consume("q", "late", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		cqDiff(t, "deliveries", []string{"high", "low"},
			[]string{string(receive(t, c).Body), string(receive(t, c).Body)})
	})
	t.Run("cancel", func(t *testing.T) {
		e := setup(t)
		if err := e.ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		c, err := e.ch.Consume("q", "busy", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.publish("q", "x", amqp.Publishing{})
		receive(t, c) // held unacked: no room for more
		publish(e)
		if got := cqReady(e, "q"); got != 2 {
			t.Fatalf("ready %d before the cancel, want 2", got)
		}
		if err := e.ch.Cancel("busy", false); err != nil {
			t.Fatal(err)
		}
		cqDiff(t, "dlq after cancel", []string{"high"}, e.drain("dlq"))
		cqDiff(t, "q after cancel", []string{"low"}, e.drain("q"))
	})
}

// TestClassicUnackedMessagesNeverExpire: TTL applies to messages in the
// queue only; a delivered, unacknowledged message is neither expired nor
// dead-lettered however long it is held, and acking it is fine.
// semantics §1.5, §1.6 ("unacked messages are not expired"); rabbit_amqqueue_process (only BQ
// messages are dropped).
func TestClassicUnackedMessagesNeverExpire(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-message-ttl": 100}))
	e.publish("q", "m", amqp.Publishing{Expiration: "50"})
	d := e.mustGet("q")
	e.advance(10 * time.Second)
	if qi := e.info("q"); qi.Unacked != 1 || qi.Ready != 0 {
		t.Fatalf("ready/unacked %d/%d, want 0/1", qi.Ready, qi.Unacked)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if e.ch.IsClosed() {
		t.Fatal("ack of a long-held message closed the channel")
	}
	if got := cqReady(e, "dlq"); got != 0 {
		t.Fatalf("dlq ready %d: an unacked message was dead-lettered", got)
	}
	if qi := e.info("q"); qi.Unacked != 0 || qi.Ready != 0 {
		t.Fatalf("ready/unacked %d/%d after ack, want 0/0", qi.Ready, qi.Unacked)
	}
}

// TestClassicRequeuedExpiredMessageDeadLetteredAtHead: a message whose TTL
// passed while it was unacknowledged is dead-lettered as expired as soon as
// a requeue puts it back at the head; it is not redelivered.
// semantics §1.5 (requeue_and_run runs drop_expired_msgs); live 4.0.5: dlq 0
// before the reject, 1 after, reason expired.
func TestClassicRequeuedExpiredMessageDeadLetteredAtHead(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-message-ttl": 200}))
	e.publish("q", "m", amqp.Publishing{})
	d := e.mustGet("q")
	e.advance(500 * time.Millisecond)
	if got := cqReady(e, "dlq"); got != 0 {
		t.Fatalf("dlq ready %d while the message is unacked", got)
	}
	if err := d.Reject(true); err != nil {
		t.Fatal(err)
	}
	if qi := e.info("q"); qi.Ready != 0 || qi.Unacked != 0 {
		t.Fatalf("q ready/unacked %d/%d, want 0/0", qi.Ready, qi.Unacked)
	}
	dl := e.mustGet("dlq")
	if string(dl.Body) != "m" || dl.Headers["x-first-death-reason"] != "expired" {
		t.Fatalf("dead letter %q with first death reason %v, want m/expired", dl.Body, dl.Headers["x-first-death-reason"])
	}
}

// TestClassicMessageTTLZeroDeliversToWaitingConsumer: with x-message-ttl 0 a
// consumer with room gets the message; requeued into the queue it expires
// at once and is not redelivered.
// semantics §1.3 (deliver_or_enqueue attempts delivery first; requeue into a
// TTL=0 queue drops); live 4.0.5: consumer got it, not redelivered after nack.
func TestClassicMessageTTLZeroDeliversToWaitingConsumer(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-message-ttl": 0})
	deliveries, err := e.ch.Consume("q", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.publish("q", "m", amqp.Publishing{})
	d := receive(t, deliveries)
	if string(d.Body) != "m" {
		t.Fatalf("got %q", d.Body)
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	noDelivery(t, deliveries)
	if qi := e.info("q"); qi.Ready != 0 || qi.Unacked != 0 {
		t.Fatalf("ready/unacked %d/%d after requeue into a TTL 0 queue, want 0/0", qi.Ready, qi.Unacked)
	}
}

// TestClassicMessageTTLZeroWithoutDLXDrops: with x-message-ttl 0, no
// consumer and no DLX, the message is discarded without being enqueued, and
// the publisher confirm is still an ack.
// semantics §1.3, §8 ("Messages discarded because of TTL=0 with no DLX are still
// acked"); live 4.0.5: confirm {1 true}, count 0.
func TestClassicMessageTTLZeroWithoutDLXDrops(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-message-ttl": 0})
	if err := e.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := e.ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	e.publish("q", "m", amqp.Publishing{})
	select {
	case c := <-confirms:
		if c != (amqp.Confirmation{DeliveryTag: 1, Ack: true}) {
			t.Fatalf("confirm %+v, want ack of tag 1", c)
		}
	default:
		t.Fatal("no confirm")
	}
	if got := cqReady(e, "q"); got != 0 {
		t.Fatalf("ready %d, want 0", got)
	}
	if _, ok := e.get("q"); ok {
		t.Fatal("a TTL 0 message was fetched")
	}
}

// TestClassicMessageTTLZeroWithDLXDeadLetters: with x-message-ttl 0, no
// consumer and a DLX, the message is dead-lettered with reason expired.
// semantics §1.3 (ttl.md: "if a dead letter exchange is set then messages will be
// dead-lettered"); live 4.0.5.
func TestClassicMessageTTLZeroWithDLXDeadLetters(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-message-ttl": 0}))
	e.publish("q", "m", amqp.Publishing{})
	if got := cqReady(e, "q"); got != 0 {
		t.Fatalf("q ready %d, want 0", got)
	}
	d := e.mustGet("dlq")
	if string(d.Body) != "m" {
		t.Fatalf("dead letter %q", d.Body)
	}
	xd, _ := d.Headers["x-death"].([]any)
	if len(xd) != 1 || xd[0].(amqp.Table)["reason"] != "expired" || xd[0].(amqp.Table)["queue"] != "q" {
		t.Fatalf("x-death = %#v, want one {q, expired} entry", d.Headers["x-death"])
	}
}

// TestClassicPerMessageExpirationZero: expiration "0" does not take the
// TTL-0 shortcut: the message is enqueued already due, expiring at once at
// the head or later when it reaches the head.
// semantics §1.3 ("Per-message expiration: "0" does not use the discard
// shortcut"); live 4.0.5: alone -> count 0; behind a live head -> count 2,
// dead-lettered after the head is fetched.
func TestClassicPerMessageExpirationZero(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("alone", nil)
	e.publish("alone", "z", amqp.Publishing{Expiration: "0"})
	if got := cqReady(e, "alone"); got != 0 {
		t.Fatalf("alone: ready %d, want 0", got)
	}

	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", nil))
	e.publish("q", "live", amqp.Publishing{})
	e.publish("q", "zero", amqp.Publishing{Expiration: "0"})
	if got := cqReady(e, "q"); got != 2 {
		t.Fatalf("q ready %d, want 2 (zero is behind a live head)", got)
	}
	cqDiff(t, "q", []string{"live"}, e.drain("q"))
	cqDiff(t, "dlq", []string{"zero"}, e.drain("dlq"))
}

// ---------------------------------------------------------------------------
// Timer-driven expiry

// TestClassicExpiryTimerDeliversDeadLetter: advancing the mock clock past a
// head's TTL dead-letters it and delivers it to a consumer of the target
// with no other call into the broker.
// semantics §1.2 (one timer for the head, ensure_ttl_timer; {drop_expired,Vsn});
// doc.go "Time and determinism".
func TestClassicExpiryTimerDeliversDeadLetter(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-message-ttl": 1000}))
	deliveries, err := e.ch.Consume("dlq", "c", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.publish("q", "m1", amqp.Publishing{})
	e.publish("q", "m2", amqp.Publishing{Expiration: "1500"})
	e.advance(999 * time.Millisecond)
	noDelivery(t, deliveries)
	e.advance(2 * time.Second) // nothing else is called until both are received
	d1, d2 := cqWait(t, deliveries), cqWait(t, deliveries)
	cqDiff(t, "dead letters", []string{"m1", "m2"}, []string{string(d1.Body), string(d2.Body)})
	if d1.Headers["x-last-death-reason"] != "expired" || d1.Exchange != "" || d1.RoutingKey != "dlq" {
		t.Fatalf("delivery %+v", d1)
	}
}

// TestClassicClockAdvanceObservedByNextCall: after clk.Add(d) any broker
// call, even introspection, sees the state at the new time.
// doc.go "Time and determinism" ("With a *clock.Mock, Add(d) followed by any
// call observes the state at the new time"); semantics §1.2.
func TestClassicClockAdvanceObservedByNextCall(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-message-ttl": 1000}))
	e.publish("q", "m", amqp.Publishing{})
	e.clk.Add(999 * time.Millisecond)
	if q, dlq := e.info("q").Ready, e.info("dlq").Ready; q != 1 || dlq != 0 {
		t.Fatalf("at 999ms q/dlq ready %d/%d, want 1/0", q, dlq)
	}
	e.clk.Add(time.Millisecond)
	if q, dlq := e.info("q").Ready, e.info("dlq").Ready; q != 0 || dlq != 1 {
		t.Fatalf("at 1000ms q/dlq ready %d/%d, want 0/1", q, dlq)
	}
	// Queue expiry too.
	e.declare("x", amqp.Table{"x-expires": 500})
	e.clk.Add(500 * time.Millisecond)
	if cqExists(e, "x") {
		t.Fatal("Queue still reports a queue whose x-expires passed")
	}
}

// ---------------------------------------------------------------------------
// Dead-lettering

// TestClassicDeadLetterXDeathEntryFields: the first death adds one x-death
// entry {count int64 1, reason, queue, time (whole seconds, the death's
// virtual time), exchange, routing-keys}, with original-expiration only
// when the message had a per-message expiration, plus x-first-death-* and
// x-last-death-*.
// semantics §3.3 (mc:record_death, mc_amqpl death_table); live 4.0.5 headers.
func TestClassicDeadLetterXDeathEntryFields(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-message-ttl": 1500}))
	start := e.clk.Now() // 03:04:05 UTC

	// Rejected, with a per-message expiration, 2.7 s in.
	e.publish("q", "rej", amqp.Publishing{Expiration: "60000"})
	d := e.mustGet("q")
	e.advance(2700 * time.Millisecond)
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	got := e.mustGet("dlq")
	want := amqp.Table{
		"x-death": []any{amqp.Table{
			"count":               int64(1),
			"reason":              "rejected",
			"queue":               "q",
			"time":                start.Add(2 * time.Second),
			"exchange":            "",
			"routing-keys":        []any{"q"},
			"original-expiration": "60000",
		}},
		"x-first-death-reason": "rejected", "x-first-death-queue": "q", "x-first-death-exchange": "",
		"x-last-death-reason": "rejected", "x-last-death-queue": "q", "x-last-death-exchange": "",
	}
	cqDiff(t, "rejected headers", want, got.Headers)
	if _, ok := got.Headers["x-death"].([]any)[0].(amqp.Table)["time"].(time.Time); !ok {
		t.Fatalf("time is %T, want time.Time", got.Headers["x-death"].([]any)[0].(amqp.Table)["time"])
	}

	// Expired by the queue TTL only: no original-expiration. Published at
	// 2.7 s, due at 4.2 s, so the death time is 03:04:09 even though the
	// clock is advanced well past it.
	e.publish("q", "exp", amqp.Publishing{})
	e.advance(5 * time.Second)
	got = e.mustGet("dlq")
	want = amqp.Table{
		"x-death": []any{amqp.Table{
			"count":        int64(1),
			"reason":       "expired",
			"queue":        "q",
			"time":         start.Add(4 * time.Second),
			"exchange":     "",
			"routing-keys": []any{"q"},
		}},
		"x-first-death-reason": "expired", "x-first-death-queue": "q", "x-first-death-exchange": "",
		"x-last-death-reason": "expired", "x-last-death-queue": "q", "x-last-death-exchange": "",
	}
	cqDiff(t, "expired headers", want, got.Headers)
}

// TestClassicDeadLetterRepeatedDeathMovesToFront: x-death is newest first
// with one entry per {queue, reason}; a repeat increments that entry's count
// and moves it to the front, keeping its first time and
// original-expiration; x-first-death-* never change and x-last-death-*
// follow the latest death.
// semantics §3.3 ("Repeated deaths", deaths v2 lists:keytake), §3.5; live 4.0.5
// q1 -> q2 -> q1 -> q2 scenario.
func TestClassicDeadLetterRepeatedDeathMovesToFront(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	start := e.clk.Now()
	e.declare("q1", cqDeadLetterArgs("q2", nil))
	e.declare("q2", cqDeadLetterArgs("q1", amqp.Table{"x-message-ttl": 1500}))
	e.publish("q1", "m", amqp.Publishing{Expiration: "60000"})

	if err := e.mustGet("q1").Reject(false); err != nil { // {q1,rejected} at :05
		t.Fatal(err)
	}
	e.advance(3 * time.Second) // {q2,expired} at :06.5, back in q1
	d := e.mustGet("q1")
	wantDeaths := []any{
		amqp.Table{"count": int64(1), "reason": "expired", "queue": "q2", "time": start.Add(time.Second),
			"exchange": "", "routing-keys": []any{"q2"}},
		amqp.Table{"count": int64(1), "reason": "rejected", "queue": "q1", "time": start,
			"exchange": "", "routing-keys": []any{"q1"}, "original-expiration": "60000"},
	}
	cqDiff(t, "x-death after two deaths", wantDeaths, d.Headers["x-death"])
	cqDiff(t, "first/last after two deaths",
		[]any{"rejected", "q1", "expired", "q2"},
		[]any{d.Headers["x-first-death-reason"], d.Headers["x-first-death-queue"], d.Headers["x-last-death-reason"], d.Headers["x-last-death-queue"]})
	if d.Expiration != "" || d.RoutingKey != "q1" {
		t.Fatalf("expiration %q routing key %q, want none and q1", d.Expiration, d.RoutingKey)
	}

	if err := d.Reject(false); err != nil { // {q1,rejected} again at :08
		t.Fatal(err)
	}
	d = e.mustGet("q2")
	wantDeaths = []any{
		amqp.Table{"count": int64(2), "reason": "rejected", "queue": "q1", "time": start,
			"exchange": "", "routing-keys": []any{"q1"}, "original-expiration": "60000"},
		amqp.Table{"count": int64(1), "reason": "expired", "queue": "q2", "time": start.Add(time.Second),
			"exchange": "", "routing-keys": []any{"q2"}},
	}
	cqDiff(t, "x-death after the repeat", wantDeaths, d.Headers["x-death"])
	cqDiff(t, "first/last after the repeat",
		[]any{"rejected", "q1", "", "rejected", "q1", ""},
		[]any{d.Headers["x-first-death-reason"], d.Headers["x-first-death-queue"], d.Headers["x-first-death-exchange"],
			d.Headers["x-last-death-reason"], d.Headers["x-last-death-queue"], d.Headers["x-last-death-exchange"]})
}

// TestClassicDeadLetterRemovesExpirationKeepsProperties: dead-lettering
// removes the expiration property (it survives as original-expiration) and
// keeps every other property and the client's own headers.
// semantics §3.3 ("expiration is removed", "Other properties are preserved") and
// semantics §11 (priority 10 and delivery mode 2 kept); live 4.0.5.
func TestClassicDeadLetterRemovesExpirationKeepsProperties(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", nil))
	ts := e.clk.Now().Add(-time.Hour)
	pub := amqp.Publishing{
		Headers: amqp.Table{"h": "v", "n": int32(7)}, ContentType: "text/plain", ContentEncoding: "gzip",
		DeliveryMode: amqp.Persistent, Priority: 7, CorrelationId: "corr", ReplyTo: "rt",
		Expiration: "60000", MessageId: "id1", Timestamp: ts, Type: "kind", UserId: "guest", AppId: "app",
	}
	e.publish("q", "m", pub)
	if err := e.mustGet("q").Reject(false); err != nil {
		t.Fatal(err)
	}
	d := e.mustGet("dlq")
	type props struct {
		ContentType, ContentEncoding         string
		DeliveryMode, Priority               uint8
		CorrelationId, ReplyTo, Expiration   string
		MessageId, Type, UserId, AppId, Body string
		Timestamp                            time.Time
		H                                    any
		N                                    any
	}
	want := props{"text/plain", "gzip", 2, 7, "corr", "rt", "", "id1", "kind", "guest", "app", "m",
		time.Unix(ts.Unix(), 0), "v", int32(7)}
	got := props{d.ContentType, d.ContentEncoding, d.DeliveryMode, d.Priority, d.CorrelationId, d.ReplyTo,
		d.Expiration, d.MessageId, d.Type, d.UserId, d.AppId, string(d.Body), d.Timestamp, d.Headers["h"], d.Headers["n"]}
	cqDiff(t, "properties", want, got)
	if oe := d.Headers["x-death"].([]any)[0].(amqp.Table)["original-expiration"]; oe != "60000" {
		t.Fatalf("original-expiration %v, want 60000", oe)
	}
}

// TestClassicDeadLetterNackIsRejected: nack without requeue dead-letters
// with reason rejected, like reject; nack(multiple) dead-letters each.
// semantics §3.1 (basic.reject or basic.nack with requeue=false -> rejected).
func TestClassicDeadLetterNackIsRejected(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", nil))
	e.publish("q", "a", amqp.Publishing{})
	e.publish("q", "b", amqp.Publishing{})
	e.mustGet("q")
	if err := e.mustGet("q").Nack(true, false); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"a", "b"} {
		d := e.mustGet("dlq")
		if string(d.Body) != body || d.Headers["x-first-death-reason"] != "rejected" {
			t.Fatalf("got %q reason %v, want %s/rejected", d.Body, d.Headers["x-first-death-reason"], body)
		}
	}
}

// TestClassicDeadLetterRoutingKey: x-dead-letter-routing-key replaces the
// routing key; without it the message's own routing key is used (for the
// default exchange, its original queue).
// semantics §3.2 ("If x-dead-letter-routing-key is not set, the message's own
// routing keys are used"), §3.3 (what the DLQ consumer sees).
func TestClassicDeadLetterRoutingKey(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("withrk", cqDeadLetterArgs("dlq", nil))
	e.declare("ownrk", amqp.Table{"x-dead-letter-exchange": ""})
	e.publish("withrk", "a", amqp.Publishing{})
	e.publish("ownrk", "b", amqp.Publishing{})
	if err := e.mustGet("withrk").Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := e.mustGet("ownrk").Reject(false); err != nil {
		t.Fatal(err)
	}
	a := e.mustGet("dlq")
	if string(a.Body) != "a" || a.RoutingKey != "dlq" || a.Exchange != "" {
		t.Fatalf("via DLRK: %q rk %q ex %q", a.Body, a.RoutingKey, a.Exchange)
	}
	cqDiff(t, "routing-keys via DLRK", []any{"withrk"}, a.Headers["x-death"].([]any)[0].(amqp.Table)["routing-keys"])
	b := e.mustGet("ownrk")
	if string(b.Body) != "b" || b.RoutingKey != "ownrk" {
		t.Fatalf("own key: %q rk %q", b.Body, b.RoutingKey)
	}
	if got := cqReady(e, "dlq"); got != 0 {
		t.Fatalf("dlq ready %d", got)
	}
}

// TestClassicDeadLetterToMissingQueueDropsSilently: DLX "" with a routing
// key naming no queue drops the dead letter, with no error.
// semantics §3.2 ("DLX exists but routes to no queue ... dropped silently").
func TestClassicDeadLetterToMissingQueueDropsSilently(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", cqDeadLetterArgs("missing", amqp.Table{"x-message-ttl": 100}))
	e.publish("q", "rej", amqp.Publishing{})
	e.publish("q", "exp", amqp.Publishing{})
	if err := e.mustGet("q").Reject(false); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Second)
	if qi := e.info("q"); qi.Ready != 0 || qi.Unacked != 0 {
		t.Fatalf("ready/unacked %d/%d", qi.Ready, qi.Unacked)
	}
	if e.ch.IsClosed() || e.conn.IsClosed() {
		t.Fatal("dead-lettering to a missing queue closed something")
	}
	cqDiff(t, "queues", []string{"q"}, cqNames(e.b.Queues()))
}

// TestClassicDeadLetterToMissingExchangeDropsSilently: a DLX naming an
// exchange that does not exist drops dead letters silently.
// semantics §3.2 (dlx.md "If it is missing then, the messages are silently
// dropped"; rabbit_amqqueue_process with_dlx); live 4.0.5 with DLX "nope".
func TestClassicDeadLetterToMissingExchangeDropsSilently(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	// Queues named by the routing keys must not receive it either.
	e.declare("nope", nil)
	e.declare("q", amqp.Table{"x-dead-letter-exchange": "nope", "x-dead-letter-routing-key": "nope", "x-message-ttl": 100})
	e.declare("r", amqp.Table{"x-dead-letter-exchange": "nope"})
	e.publish("q", "rej", amqp.Publishing{})
	e.publish("q", "exp", amqp.Publishing{})
	e.publish("r", "rej", amqp.Publishing{})
	if err := e.mustGet("q").Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := e.mustGet("r").Reject(false); err != nil {
		t.Fatal(err)
	}
	if got := cqReady(e, "r"); got != 0 {
		t.Fatalf("r ready %d: the dead letter was routed by its own key", got)
	}
	e.advance(time.Second)
	if got := cqReady(e, "q"); got != 0 {
		t.Fatalf("q ready %d", got)
	}
	if got := cqReady(e, "nope"); got != 0 {
		t.Fatalf("queue 'nope' got %d dead letters", got)
	}
	if e.ch.IsClosed() {
		t.Fatal("channel closed")
	}
}

// TestClassicDeadLetterExpiryCycleDropped: a queue dead-lettering to itself
// drops a message that expires in it (a cycle with no rejection).
// semantics §3.5 (rabbit_dead_letter:detect_cycles; dlx.md "Dead-letter cycle");
// live 4.0.5: count 0 after expiry.
func TestClassicDeadLetterExpiryCycleDropped(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-dead-letter-exchange": ""})
	e.publish("q", "m", amqp.Publishing{Expiration: "50"})
	e.advance(200 * time.Millisecond)
	if got := cqReady(e, "q"); got != 0 {
		t.Fatalf("ready %d, want 0: the expired message cycled back", got)
	}
	if _, ok := e.get("q"); ok {
		t.Fatal("message came back")
	}
}

// TestClassicDeadLetterRejectCycleRequeues: with reject(requeue=false) a
// queue dead-lettering to itself gets the message back (no cycle check for
// rejected), its x-death count growing at each rejection.
// semantics §3.5 ("If the reason is rejected, there is no cycle check at all");
// live 4.0.5: back in q with count 1, then 2.
func TestClassicDeadLetterRejectCycleRequeues(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-dead-letter-exchange": ""})
	e.publish("q", "m", amqp.Publishing{})
	for want := int64(1); want <= 3; want++ {
		if err := e.mustGet("q").Reject(false); err != nil {
			t.Fatal(err)
		}
		d := e.mustGet("q")
		xd := d.Headers["x-death"].([]any)
		if len(xd) != 1 || xd[0].(amqp.Table)["count"] != want || d.Redelivered {
			t.Fatalf("after %d rejections: x-death %#v redelivered %v", want, xd, d.Redelivered)
		}
		if err := d.Nack(false, true); err != nil { // put it back for the next round
			t.Fatal(err)
		}
	}
}

// TestClassicDeadLetterIgnoresClientXDeath: an x-death header (and
// x-first-death-*) supplied by the publisher is not interpreted: the first
// broker death overwrites them.
// semantics §3.4 (release-notes 4.0.1 "AMQP 0.9.1 x-death header";
// rabbit_misc:set_table_value); live 4.0.5: client x-death replaced,
// x-first-death-queue "client" overwritten.
func TestClassicDeadLetterIgnoresClientXDeath(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", nil))
	e.publish("q", "m", amqp.Publishing{Headers: amqp.Table{
		"x-death":             []any{amqp.Table{"count": int64(7), "reason": "expired", "queue": "q"}},
		"x-first-death-queue": "client",
		"h":                   "v",
	}})
	if err := e.mustGet("q").Reject(false); err != nil {
		t.Fatal(err)
	}
	d := e.mustGet("dlq")
	want := amqp.Table{
		"h": "v",
		"x-death": []any{amqp.Table{"count": int64(1), "reason": "rejected", "queue": "q",
			"time": e.clk.Now(), "exchange": "", "routing-keys": []any{"q"}}},
		"x-first-death-reason": "rejected", "x-first-death-queue": "q", "x-first-death-exchange": "",
		"x-last-death-reason": "rejected", "x-last-death-queue": "q", "x-last-death-exchange": "",
	}
	cqDiff(t, "headers", want, d.Headers)
}

// ---------------------------------------------------------------------------
// Queue expiry (x-expires)

// TestClassicQueueExpiresMustBePositive: x-expires 0 is refused with
// {value_zero,0}; 1 is accepted and the queue goes after 1 ms unused.
// semantics §2 ("It must be a positive integer"), semantics §E1.3; semantics §11.
func TestClassicQueueExpiresMustBePositive(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	_, err := e.ch.QueueDeclare("zero", true, false, false, false, amqp.Table{"x-expires": 0})
	ae := cqAmqpErr(t, err)
	want := "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'zero' in vhost '/': {value_zero,0}"
	if ae.Code != amqp.PreconditionFailed || ae.Reason != want {
		t.Fatalf("got %d %q, want 406 %q", ae.Code, ae.Reason, want)
	}
	e.ch = e.channel()
	e.declare("one", amqp.Table{"x-expires": 1})
	if !cqExists(e, "one") {
		t.Fatal("x-expires 1 queue missing at once")
	}
	e.advance(time.Millisecond)
	if cqExists(e, "one") {
		t.Fatal("x-expires 1 queue still there after 1 ms")
	}
}

// TestClassicQueueExpiresRenewedByDeclare: a non-nowait redeclare restarts
// the full x-expires period; a nowait one does not.
// semantics §2 (stat via rabbit_channel:maybe_stat(false, Q); maybe_stat(true,_)
// does not call the queue).
func TestClassicQueueExpiresRenewedByDeclare(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	args := amqp.Table{"x-expires": 1000}
	e.declare("q", args)
	e.advance(800 * time.Millisecond)
	e.declare("q", args) // renewed: now due at 1800
	e.advance(800 * time.Millisecond)
	if !cqExists(e, "q") {
		t.Fatal("gone at 1600ms although redeclared at 800ms")
	}
	if _, err := e.ch.QueueDeclare("q", true, false, false, true, args); err != nil { // nowait: no renewal
		t.Fatal(err)
	}
	e.advance(199 * time.Millisecond)
	if !cqExists(e, "q") {
		t.Fatal("gone at 1799ms")
	}
	e.advance(time.Millisecond)
	if cqExists(e, "q") {
		t.Fatal("still there at 1800ms: a nowait declare renewed the lease")
	}
}

// TestClassicQueueExpiresRenewedByPassiveDeclare: a passive declare renews
// the lease.
// semantics §2 (stat "active or passive"), semantics §E2.4 ("stat (renews x-expires
// unless nowait)").
func TestClassicQueueExpiresRenewedByPassiveDeclare(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-expires": 1000})
	e.advance(900 * time.Millisecond)
	if _, err := e.ch.QueueDeclarePassive("q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.advance(999 * time.Millisecond)
	if !cqExists(e, "q") {
		t.Fatal("gone 999ms after a passive declare")
	}
	e.advance(time.Millisecond)
	if cqExists(e, "q") {
		t.Fatal("still there 1000ms after the passive declare")
	}
}

// TestClassicQueueExpiresRenewedByGet: basic.get renews the lease, even on
// an empty queue.
// semantics §2 ("basic.get, even when the queue is empty (line 1274)"); live
// 4.0.5: x-expires 1000, empty get at 700 ms, still there at 1400 ms.
func TestClassicQueueExpiresRenewedByGet(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-expires": 1000})
	e.advance(700 * time.Millisecond)
	if _, ok := e.get("q"); ok {
		t.Fatal("empty queue returned a message")
	}
	e.advance(700 * time.Millisecond)
	if !cqExists(e, "q") {
		t.Fatal("gone at 1400ms although an empty get at 700ms renewed it")
	}
	e.publish("q", "m", amqp.Publishing{})
	e.advance(200 * time.Millisecond) // 1600: get at 1600 renews until 2600
	e.mustGet("q")
	e.advance(999 * time.Millisecond)
	if !cqExists(e, "q") {
		t.Fatal("gone 999ms after a get")
	}
	e.advance(time.Millisecond)
	if cqExists(e, "q") {
		t.Fatal("still there 1000ms after the last get")
	}
}

// TestClassicQueueExpiresNotRenewedByPublish: publishing does not renew the
// lease.
// semantics §2 ("Publishing, acks and other operations do not renew it") and ref
// observed (x-expires 1600, a publish every 300 ms: gone 2.4 s after its
// one declare; in virtual time exactly at 1600 ms).
func TestClassicQueueExpiresNotRenewedByPublish(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-expires": 1600})
	for range 5 { // 300 .. 1500 ms
		e.advance(300 * time.Millisecond)
		e.publish("q", "m", amqp.Publishing{})
	}
	e.advance(99 * time.Millisecond)
	if !cqExists(e, "q") {
		t.Fatal("gone before 1600ms")
	}
	e.advance(time.Millisecond)
	if cqExists(e, "q") {
		t.Fatal("still there at 1600ms: publishing renewed the lease")
	}
	if _, err := e.ch.QueueDeclarePassive("q", false, false, false, false, nil); cqAmqpErr(t, err).Code != amqp.NotFound {
		t.Fatalf("passive declare after expiry: %v, want 404", err)
	}
}

// TestClassicQueueNeverExpiresWithConsumers: a queue with a consumer does
// not expire however long it is unused otherwise.
// semantics §2 ("While any consumer exists, the timer does not fire the
// deletion"); ttl.md "Unused means the queue has no consumers".
func TestClassicQueueNeverExpiresWithConsumers(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-expires": 1000})
	if _, err := e.ch.Consume("q", "c", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Hour)
	qi, ok := e.b.Queue("q")
	if !ok || !cmp.Equal(qi.Consumers, []string{"c"}) {
		t.Fatalf("queue with a consumer: exists=%v consumers=%v", ok, qi.Consumers)
	}
}

// TestClassicQueueExpiresRenewedWhenLastConsumerLeaves: the full period
// starts again when the last consumer goes (cancel or channel close), not
// before.
// semantics §2 ("basic.cancel of the last consumer (stop_consumer)", "a channel
// going down (handle_ch_down)").
func TestClassicQueueExpiresRenewedWhenLastConsumerLeaves(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", amqp.Table{"x-expires": 1000})
	other := e.channel()
	if _, err := e.ch.Consume("q", "a", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Consume("q", "b", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.advance(5 * time.Second)
	if err := e.ch.Cancel("a", false); err != nil {
		t.Fatal(err)
	}
	e.advance(5 * time.Second) // one consumer left: no expiry
	if !cqExists(e, "q") {
		t.Fatal("expired while a consumer remained")
	}
	if err := other.Close(); err != nil { // the last consumer goes at 10 s
		t.Fatal(err)
	}
	e.advance(999 * time.Millisecond)
	if !cqExists(e, "q") {
		t.Fatal("gone 999ms after the last consumer left")
	}
	e.advance(time.Millisecond)
	if cqExists(e, "q") {
		t.Fatal("still there 1000ms after the last consumer left")
	}
}

// TestClassicQueueExpiryDiscardsMessages: an expiring queue vanishes with
// its messages, which are not dead-lettered.
// semantics §2 (dlx.md "If an entire queue expires, the messages in the queue are
// not dead-lettered"; cqp line 1635).
func TestClassicQueueExpiryDiscardsMessages(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-expires": 1000}))
	e.publish("q", "a", amqp.Publishing{})
	e.publish("q", "b", amqp.Publishing{})
	e.advance(time.Second)
	if cqExists(e, "q") {
		t.Fatal("queue did not expire")
	}
	if got := cqReady(e, "dlq"); got != 0 {
		t.Fatalf("dlq got %d messages from an expired queue", got)
	}
	// A new queue of the same name starts empty.
	e.declare("q", cqDeadLetterArgs("dlq", amqp.Table{"x-expires": 1000}))
	if got := cqReady(e, "q"); got != 0 {
		t.Fatalf("redeclared queue has %d messages", got)
	}
}

// ---------------------------------------------------------------------------
// Exclusive and auto-delete queues

// TestClassicExclusiveQueueLockedToOtherConnections: another connection's
// consume, get, purge, passive declare, delete and redeclare (exclusive or
// not) get 405 RESOURCE_LOCKED, closing only that channel; other channels
// of the owning connection may use the queue.
// semantics §E2.2 (a), §E2.4, §E3, §E4, §E10 (lax vs strict checks);
// live 4.0.5: the same text for all seven.
func TestClassicExclusiveQueueLockedToOtherConnections(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	if _, err := e.ch.QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	e.publish("ex", "m", amqp.Publishing{})
	other, err := e.b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		op   func(*Channel) error
	}{
		{"consume", func(c *Channel) error { _, err := c.Consume("ex", "", false, false, false, false, nil); return err }},
		{"get", func(c *Channel) error { _, _, err := c.Get("ex", false); return err }},
		{"purge", func(c *Channel) error { _, err := c.QueuePurge("ex", false); return err }},
		{"passive", func(c *Channel) error {
			_, err := c.QueueDeclarePassive("ex", false, false, false, false, nil)
			return err
		}},
		{"delete", func(c *Channel) error { _, err := c.QueueDelete("ex", false, false, false); return err }},
		{"redeclare exclusive", func(c *Channel) error { _, err := c.QueueDeclare("ex", false, false, true, false, nil); return err }},
		{"redeclare shared", func(c *Channel) error { _, err := c.QueueDeclare("ex", false, false, false, false, nil); return err }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			ch, err := other.Channel()
			if err != nil {
				t.Fatal(err)
			}
			errc := closeErr(ch)
			ae := cqAmqpErr(t, op.op(ch))
			if ae.Code != amqp.ResourceLocked || ae.Reason != cqLockedReason("ex") {
				t.Fatalf("got %d %q", ae.Code, ae.Reason)
			}
			cqChannelClosedWith(t, ch, errc, ae)
			if other.IsClosed() {
				t.Fatal("connection closed by a channel error")
			}
		})
	}
	// The queue is untouched, and usable from the owner's other channels.
	owner2 := e.channel()
	d, ok, err := owner2.Get("ex", false)
	if err != nil || !ok || string(d.Body) != "m" {
		t.Fatalf("owner's second channel: %q ok=%v err=%v", d.Body, ok, err)
	}
	if _, err := owner2.QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatalf("owner's redeclare: %v", err)
	}
}

// TestClassicExclusiveQueueDeletedWhenOwnerCloses: closing the owning
// connection deletes the exclusive queue with its messages (not
// dead-lettered); other connections' queues stay.
// semantics §E10 ("When the owning connection closes"); live 4.0.5.
func TestClassicExclusiveQueueDeletedWhenOwnerCloses(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("dlq", nil)
	owner, err := e.b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	och, err := owner.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := och.QueueDeclare("ex", false, false, true, false, cqDeadLetterArgs("dlq", nil)); err != nil {
		t.Fatal(err)
	}
	e.publish("ex", "m", amqp.Publishing{})
	if _, _, err := och.Get("ex", false); err != nil { // one unacked too
		t.Fatal(err)
	}
	e.publish("ex", "n", amqp.Publishing{})
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	if cqExists(e, "ex") {
		t.Fatal("exclusive queue survived its connection")
	}
	if got := cqReady(e, "dlq"); got != 0 {
		t.Fatalf("dlq got %d messages", got)
	}
	if _, err := e.ch.QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatalf("another connection cannot take the name: %v", err)
	}
}

// TestClassicExclusiveQueueAcceptsPublishFromOtherConnection: publishing is
// not an exclusive-access operation.
// semantics §E7 ("Publishing into another connection's exclusive queue is
// allowed"); live 4.0.5: confirm ack, channel open, message there.
func TestClassicExclusiveQueueAcceptsPublishFromOtherConnection(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	if _, err := e.ch.QueueDeclare("ex", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	other, _ := e.b.Dial()
	pch, err := other.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := pch.Publish("", "ex", true, false, amqp.Publishing{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-confirms:
		if !c.Ack {
			t.Fatalf("confirm %+v", c)
		}
	default:
		t.Fatal("no confirm")
	}
	if pch.IsClosed() {
		t.Fatal("publishing channel closed")
	}
	cqDiff(t, "owner drains", []string{"m"}, e.drain("ex"))
}

// TestClassicAutoDeleteWhenLastConsumerCancelled: an auto-delete queue is
// deleted when its last consumer is cancelled (or its channel closes), with
// its messages, and not while another consumer remains.
// semantics §E11 (should_auto_delete: has_had_consumers and
// consumer_count == 0); live 4.0.5.
func TestClassicAutoDeleteWhenLastConsumerCancelled(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	for _, how := range []string{"cancel", "channel close"} {
		t.Run(how, func(t *testing.T) {
			if _, err := e.ch.QueueDeclare("ad", false, true, false, false, nil); err != nil {
				t.Fatal(err)
			}
			e.publish("ad", "m", amqp.Publishing{})
			ch := e.channel()
			d1, err := e.ch.Consume("ad", "one", false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ch.Consume("ad", "two", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			receive(t, d1) // held unacked on "one"
			e.publish("ad", "n", amqp.Publishing{})
			if err := e.ch.Cancel("one", false); err != nil {
				t.Fatal(err)
			}
			if !cqExists(e, "ad") {
				t.Fatal("deleted while a consumer remained")
			}
			if how == "cancel" {
				err = ch.Cancel("two", false)
			} else {
				err = ch.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			if cqExists(e, "ad") {
				t.Fatal("auto-delete queue survived its last consumer")
			}
			// The unacked delivery of the deleted queue can still be acked.
			if err := e.ch.Ack(0, true); err != nil || e.ch.IsClosed() {
				t.Fatalf("ack after deletion: %v closed=%v", err, e.ch.IsClosed())
			}
		})
	}
}

// TestClassicAutoDeleteKeptWithoutConsumers: an auto-delete queue that
// never had a consumer is kept, even after basic.get.
// semantics §E11 ("An auto-delete queue that never had a consumer is kept
// indefinitely"; basic.get does not set has_had_consumers); live 4.0.5.
func TestClassicAutoDeleteKeptWithoutConsumers(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	if _, err := e.ch.QueueDeclare("ad", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.publish("ad", "m", amqp.Publishing{})
	if d := e.mustGet("ad"); d.Ack(false) != nil {
		t.Fatal("ack failed")
	}
	e.advance(time.Hour)
	if !cqExists(e, "ad") {
		t.Fatal("auto-delete queue without consumers was deleted")
	}
}

// cqChannelClosedWith checks that ch is closed by want: IsClosed, the next
// call returns amqp.ErrClosed, and the NotifyClose listener got want and was
// closed.
func cqChannelClosedWith(t *testing.T, ch *Channel, errc chan *amqp.Error, want *amqp.Error) {
	t.Helper()
	if !ch.IsClosed() {
		t.Fatal("channel not closed")
	}
	if _, _, err := ch.Get("anything", false); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("next call returned %v, want amqp.ErrClosed", err)
	}
	select {
	case got, ok := <-errc:
		if !ok || got == nil {
			t.Fatal("NotifyClose listener closed without an error")
		}
		if got.Code != want.Code || got.Reason != want.Reason {
			t.Fatalf("NotifyClose got %d %q, want %d %q", got.Code, got.Reason, want.Code, want.Reason)
		}
	default:
		t.Fatal("NotifyClose listener got nothing")
	}
	select {
	case _, ok := <-errc:
		if ok {
			t.Fatal("NotifyClose listener got a second error")
		}
	default:
		t.Fatal("NotifyClose listener not closed")
	}
}

// cqNames lists the queue names of infos.
func cqNames(qs []QueueInfo) []string {
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.Name)
	}
	return out
}
