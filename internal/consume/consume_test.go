package consume

import (
	"errors"
	"testing"

	"github.com/queuey/queuey/membroker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// setup returns a broker with queue "q" holding bodies, a connection, and
// a subscription to q at prefetch 10.
func setup(t *testing.T, bodies ...string) (*membroker.Broker, *membroker.Connection, *Sub) {
	t.Helper()
	b := membroker.New(membroker.Config{})
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, body := range bodies {
		if err := ch.Publish("", "q", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	sch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(sch, "q", "c1", 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, conn, s
}

// take receives the next delivery already on the subscription's channel.
func take(t *testing.T, s *Sub) *Delivery {
	t.Helper()
	_, gen, in, _ := s.Current()
	select {
	case d := <-in:
		cd := &Delivery{D: d}
		s.Take(cd, gen)
		return cd
	default:
		t.Fatal("no delivery on the channel")
		return nil
	}
}

func TestASecondSettlementNeverReachesTheBroker(t *testing.T) {
	_, _, s := setup(t, "a", "b")
	d := take(t, s)
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	for _, settle := range []func() error{d.Ack, d.Requeue} {
		if err := settle(); !errors.Is(err, ErrSettled) {
			t.Fatalf("second settlement: %v, want ErrSettled", err)
		}
	}
	// Had it reached the broker, the unknown delivery tag would have
	// closed the channel.
	if s.Channel().IsClosed() {
		t.Fatal("the channel closed")
	}
	if err := take(t, s).Requeue(); err != nil {
		t.Fatal(err)
	}
}

// What the guard prevents: a second ack of one delivery sent to the
// broker (here past the core, on the delivery itself) closes the channel.
func TestWithoutTheGuardASecondAckClosesTheChannel(t *testing.T) {
	_, _, s := setup(t, "a")
	d := take(t, s)
	_ = d.Ack()
	_ = d.D.Ack(false)
	if !s.Channel().IsClosed() {
		t.Fatal("a second ack of one delivery left the channel open: the model of §E6 is wrong")
	}
}

func TestADeliveryGoesStaleWithItsChannel(t *testing.T) {
	_, conn, s := setup(t, "a")
	d := take(t, s)
	if d.Stale() || d.Generation() != 1 {
		t.Fatalf("fresh delivery: stale %t, generation %d", d.Stale(), d.Generation())
	}
	if err := s.Channel().Close(); err != nil {
		t.Fatal(err)
	}
	if !d.Stale() {
		t.Fatal("a delivery of a closed channel is not stale")
	}
	// Resumed on a fresh channel, the old delivery stays stale, the
	// broker's redelivery is of generation 2, and settles.
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	gen, err := s.Resume(ch)
	if err != nil || gen != 2 {
		t.Fatalf("Resume: generation %d, %v", gen, err)
	}
	if !d.Stale() {
		t.Fatal("a delivery of generation 1 is not stale on generation 2")
	}
	if err := d.Ack(); err == nil {
		t.Fatal("acked a delivery of a closed channel")
	}
	again := take(t, s)
	if again.Generation() != 2 || !again.Redelivered() || string(again.Body()) != "a" || again.Stale() {
		t.Fatalf("redelivery: generation %d, redelivered %t, body %q, stale %t", again.Generation(), again.Redelivered(), again.Body(), again.Stale())
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFailsOnAMissingQueue(t *testing.T) {
	b := membroker.New(membroker.Config{})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	if _, err := Open(ch, "missing", "c1", 1, nil); err == nil {
		t.Fatal("subscribed to a queue that does not exist")
	}
}
