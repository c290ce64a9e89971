package membroker

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestObserverSeesAHoldQueueRoundTrip follows one message through a hold
// queue: created, enqueued, expired and dead-lettered into the work queue,
// delivered, and the idle hold queue deleted by its x-expires lease. The
// events come in the order they happen, with the dead-letter provenance.
func TestObserverSeesAHoldQueueRoundTrip(t *testing.T) {
	clk := clock.NewMock()
	t0 := clk.Now()
	var got []Event
	b := New(Config{Clock: clk, Observer: func(ev Event) { got = append(got, ev) }})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-max-priority": int32(10)}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("work.hold.100", true, false, false, false, amqp.Table{
		"x-message-ttl": int64(100), "x-expires": int64(200),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work",
	}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "work.hold.100", false, false, amqp.Publishing{MessageId: "j1", Priority: 10}); err != nil {
		t.Fatal(err)
	}
	clk.Add(100 * time.Millisecond)
	if ch.Unacked() != 0 {
		t.Fatalf("Unacked before any delivery = %d", ch.Unacked())
	}
	d, ok, err := ch.Get("work", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if ch.Unacked() != 1 {
		t.Fatalf("Unacked after a get = %d, want 1", ch.Unacked())
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if ch.Unacked() != 0 {
		t.Fatalf("Unacked after the ack = %d", ch.Unacked())
	}
	clk.Add(200 * time.Millisecond)

	// Each event carries the broker's instant of it: the expiry at 100 ms,
	// the lease's end 200 ms after the hold queue was last used.
	want := []Event{
		{Kind: EventQueueCreated, Queue: "work", At: t0},
		{Kind: EventQueueCreated, Queue: "work.hold.100", At: t0},
		{Kind: EventEnqueued, Queue: "work.hold.100", MessageID: "j1", Priority: 10, At: t0},
		{Kind: EventDeadLettered, Queue: "work.hold.100", MessageID: "j1", Priority: 10, Reason: "expired", At: t0.Add(100 * time.Millisecond)},
		{Kind: EventEnqueued, Queue: "work", MessageID: "j1", Priority: 10, DeadLetteredFrom: "work.hold.100", Reason: "expired", At: t0.Add(100 * time.Millisecond)},
		{Kind: EventDelivered, Queue: "work", MessageID: "j1", Priority: 10, At: t0.Add(100 * time.Millisecond)},
		{Kind: EventQueueDeleted, Queue: "work.hold.100", Reason: "expired", At: t0.Add(200 * time.Millisecond)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

// TestObserverSeesDropsAndDeletions: a message expiring from a queue with
// no dead-letter exchange is reported dropped, and deleting a queue reports
// the messages that went with it.
func TestObserverSeesDropsAndDeletions(t *testing.T) {
	clk := clock.NewMock()
	t0 := clk.Now()
	var got []Event
	b := New(Config{Clock: clk, Observer: func(ev Event) { got = append(got, ev) }})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("ttl", true, false, false, false, amqp.Table{"x-message-ttl": int64(10)}); err != nil {
		t.Fatal(err)
	}
	_ = ch.Publish("", "ttl", false, false, amqp.Publishing{MessageId: "a"})
	clk.Add(10 * time.Millisecond)
	_ = ch.Publish("", "ttl", false, false, amqp.Publishing{MessageId: "b"})
	if _, err := ch.QueueDelete("ttl", false, false, false); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(10 * time.Millisecond)
	want := []Event{
		{Kind: EventQueueCreated, Queue: "ttl", At: t0},
		{Kind: EventEnqueued, Queue: "ttl", MessageID: "a", At: t0},
		{Kind: EventDeadLettered, Queue: "ttl", MessageID: "a", Reason: "expired", Dropped: true, At: t1},
		{Kind: EventEnqueued, Queue: "ttl", MessageID: "b", At: t1},
		{Kind: EventQueueDeleted, Queue: "ttl", Reason: "deleted", Messages: 1, At: t1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}
