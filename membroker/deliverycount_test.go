package membroker

import (
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The RabbitMQ43 delivery counts of semantics §12, as a probe saw them on a
// live RabbitMQ 4.3.6 (cases the conformance scenarios do not cover).

func dlTo(typ, target string) amqp.Table {
	return amqp.Table{"x-queue-type": typ, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": target}
}

// getSeen gets one message that must be ready, settles it with settle and
// reports how it looked.
func getSeen(e *env, queue string, settle func(amqp.Delivery) error) qqSeen {
	e.t.Helper()
	d, ok := e.get(queue)
	if !ok {
		e.t.Fatalf("get %s: empty", queue)
	}
	if err := settle(d); err != nil {
		e.t.Fatal(err)
	}
	return qqSee(d)
}

func ack(d amqp.Delivery) error           { return d.Ack(false) }
func rejectRequeue(d amqp.Delivery) error { return d.Reject(true) }
func rejectDrop(d amqp.Delivery) error    { return d.Reject(false) }
func nackRequeue(d amqp.Delivery) error   { return d.Nack(false, true) }
func nackDrop(d amqp.Delivery) error      { return d.Nack(false, false) }

func wantSeen(t *testing.T, what string, got, want []qqSeen) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// A classic queue counts reject (requeue or not) and channel loss, not nack;
// the count travels with a dead letter and a quorum target shows it as both
// x-acquired-count and x-delivery-count until its own first return.
func TestRabbitMQ43ClassicDeliveryCountToQuorum(t *testing.T) {
	e := newEnv(t, RabbitMQ43)
	e.declare("dlq", amqp.Table{"x-queue-type": "quorum"})
	e.declare("src", dlTo("classic", "dlq"))
	e.publish("src", "m", amqp.Publishing{})
	var got []qqSeen
	got = append(got, getSeen(e, "src", nackRequeue))
	got = append(got, getSeen(e, "src", rejectRequeue))
	got = append(got, getSeen(e, "src", rejectRequeue))
	got = append(got, getSeen(e, "src", rejectDrop))
	got = append(got, getSeen(e, "dlq", rejectRequeue))
	got = append(got, getSeen(e, "dlq", nackRequeue))
	got = append(got, getSeen(e, "dlq", ack))
	wantSeen(t, "classic counts into a quorum target", got, []qqSeen{
		{"m", false, "-", "-"},
		{"m", true, "-", "-"},
		{"m", true, "-", "-"},
		{"m", true, "-", "-"},
		{"m", true, "3", "3"},
		{"m", true, "4", "1"},
		{"m", true, "4", "2"},
	})

	// Nacks alone leave no count; a channel going down leaves one.
	e.publish("src", "nacked", amqp.Publishing{})
	getSeen(e, "src", nackRequeue)
	getSeen(e, "src", nackDrop)
	ch2 := e.channel()
	e.publish("src", "closed", amqp.Publishing{})
	if _, ok, err := ch2.Get("src", false); !ok || err != nil {
		t.Fatalf("get on the second channel: %v %v", ok, err)
	}
	if err := ch2.Close(); err != nil {
		t.Fatal(err)
	}
	getSeen(e, "src", nackDrop)
	wantSeen(t, "after nacks, and after a channel close", qqDrainSeen(e, "dlq"), []qqSeen{
		{"nacked", false, "-", "-"},
		{"closed", true, "1", "1"},
	})
}

// A classic queue's is_delivered flag comes from its delivery count when the
// message is fetched from the queue, not when it goes straight to a waiting
// consumer.
func TestRabbitMQ43ClassicDeadLetterToWaitingConsumer(t *testing.T) {
	e := newEnv(t, RabbitMQ43)
	e.declare("dlq", nil)
	e.declare("src", dlTo("classic", "dlq"))
	e.publish("src", "m", amqp.Publishing{})
	ch2 := e.channel()
	c, err := ch2.Consume("dlq", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	getSeen(e, "src", rejectDrop)
	d := receive(t, c)
	if d.Redelivered {
		t.Fatal("first delivery to a waiting consumer: redelivered, want not")
	}
	if err := d.Reject(true); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, c); !d.Redelivered {
		t.Fatal("after reject(requeue): not redelivered")
	}
}

// A quorum nack is not a failed delivery on RabbitMQ43, without requeue
// either: a message nacked (or returned and then expired) carries no
// delivery count, and a quorum target shows the source's delivery count,
// not its acquired count.
func TestRabbitMQ43QuorumNackCarriesNoDeliveryCount(t *testing.T) {
	e := newEnv(t, RabbitMQ43)
	e.declare("qdlq", amqp.Table{"x-queue-type": "quorum"})
	e.declare("cdlq", nil)
	e.declare("toq", dlTo("quorum", "qdlq"))
	e.declare("toc", dlTo("quorum", "cdlq"))
	e.publish("toq", "m", amqp.Publishing{})
	e.publish("toc", "m2", amqp.Publishing{})
	getSeen(e, "toq", nackDrop)
	getSeen(e, "toc", nackDrop)
	wantSeen(t, "nacked into a quorum target", []qqSeen{
		getSeen(e, "qdlq", rejectRequeue),
		getSeen(e, "qdlq", ack),
	}, []qqSeen{
		{"m", false, "-", "-"},
		{"m", true, "1", "1"},
	})
	wantSeen(t, "nacked into a classic target", qqDrainSeen(e, "cdlq"), []qqSeen{{"m2", false, "-", "-"}})

	e.publish("toq", "n", amqp.Publishing{})
	getSeen(e, "toq", nackRequeue)
	getSeen(e, "toq", nackRequeue)
	getSeen(e, "toq", rejectDrop) // acquired 3, delivery_count 1
	wantSeen(t, "acquired 3 times, failed once", []qqSeen{
		getSeen(e, "qdlq", nackRequeue),
		getSeen(e, "qdlq", ack),
	}, []qqSeen{
		{"n", true, "1", "1"},
		{"n", true, "1", "1"},
	})

	e.declare("ttl", amqp.Table{"x-queue-type": "quorum", "x-message-ttl": 300,
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "qdlq"})
	e.publish("ttl", "x", amqp.Publishing{})
	getSeen(e, "ttl", nackRequeue)
	e.advance(600 * time.Millisecond)
	if _, ok := e.get("ttl"); ok {
		t.Fatal("expired message still in ttl")
	}
	wantSeen(t, "returned, then expired", qqDrainSeen(e, "qdlq"), []qqSeen{{"x", false, "-", "-"}})
}
