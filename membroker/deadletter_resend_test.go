package membroker

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rungArgs are a hold-ladder rung's arguments: quorum, a TTL of ttl ms,
// at-least-once dead-lettering into "relay".
func rungArgs(ttl int64) amqp.Table {
	return amqp.Table{
		"x-queue-type": "quorum", "x-message-ttl": ttl,
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "relay",
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
	}
}

// resendRun publishes n messages into a 100 ms rung, crashes the broker
// 50 ms later, and returns when each reached the relay queue after the
// crash, and how many dead letters the rung held.
func resendRun(t *testing.T, tm Timing, n int) (arrivals []time.Duration, held int) {
	t.Helper()
	e, events := timingEnv(t, RabbitMQ43, tm)
	e.declare("relay", amqp.Table{"x-queue-type": "quorum"})
	e.declare("rung", rungArgs(100))
	for i := range n {
		e.publish("rung", fmt.Sprint(i), amqp.Publishing{MessageId: fmt.Sprint(i), DeliveryMode: amqp.Persistent})
	}
	e.advance(50 * time.Millisecond)
	e.b.Crash()
	crash := e.clk.Now()
	e.advance(10 * time.Minute)
	for _, ev := range events() {
		switch {
		case ev.Kind == EventEnqueued && ev.Queue == "relay":
			arrivals = append(arrivals, ev.at.Sub(crash))
		case ev.Kind == EventDeadLetterHeld:
			held++
		}
	}
	return arrivals, held
}

// After a kill, a rung whose dead letters go out before the relay queue
// has started again has them refused, and holds them, and every later
// one, for DeadLetterResend: all come back together three minutes late,
// in order, none lost. A rung that starts after the relay queue releases
// on time. Which comes first is drawn from the seed; exact timing never
// holds anything.
func TestARefusedDeadLetterWaitsForTheResend(t *testing.T) {
	const n = 40
	tm := Timing{BootSpan: 5 * time.Second, DeadLetterResend: 180 * time.Second}
	var stalled, onTime int
	for seed := range uint64(20) {
		tm.Seed = seed
		arrivals, held := resendRun(t, tm, n)
		if len(arrivals) != n {
			t.Fatalf("seed %d: %d of %d dead letters reached the relay queue", seed, len(arrivals), n)
		}
		first, last := arrivals[0], arrivals[n-1]
		switch {
		case held == n && first >= tm.DeadLetterResend && last == first:
			stalled++
		case held == 0 && last <= tm.BootSpan:
			onTime++
		default:
			t.Fatalf("seed %d: %d held, arrivals from %s to %s after the crash: neither all held for the resend nor all on time",
				seed, held, first, last)
		}
		if again, heldAgain := resendRun(t, tm, n); heldAgain != held || again[0] != first {
			t.Fatalf("seed %d: a second run held %d from %s; the first %d from %s", seed, heldAgain, again[0], held, first)
		}
	}
	if stalled == 0 || onTime == 0 {
		t.Fatalf("in 20 seeds, %d rungs stalled and %d released on time: want both", stalled, onTime)
	}
	// Without BootSpan every queue starts at once: the rung releases at
	// its TTL, 50 ms after the crash.
	if arrivals, held := resendRun(t, Timing{DeadLetterResend: 180 * time.Second}, n); held != 0 || arrivals[n-1] != 50*time.Millisecond {
		t.Fatalf("without BootSpan: %d held, the last back %s after the crash; want none held, all at the TTL", held, arrivals[n-1])
	}
}
