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

// resendRun publishes n messages into a 100 ms rung, crashes (or
// restarts) the broker 50 ms later, and returns when each reached the
// relay queue after the fault, and how many dead letters the rung held.
func resendRun(t *testing.T, tm Timing, n int, crash bool) (arrivals []time.Duration, held int) {
	t.Helper()
	e, events := timingEnv(t, RabbitMQ43, tm)
	e.declare("relay", amqp.Table{"x-queue-type": "quorum"})
	e.declare("rung", rungArgs(100))
	for i := range n {
		e.publish("rung", fmt.Sprint(i), amqp.Publishing{MessageId: fmt.Sprint(i), DeliveryMode: amqp.Persistent})
	}
	e.advance(50 * time.Millisecond)
	if crash {
		e.b.Crash()
	} else {
		e.b.Restart()
	}
	fault := e.clk.Now()
	e.advance(10 * time.Minute)
	for _, ev := range events() {
		switch {
		case ev.Kind == EventEnqueued && ev.Queue == "relay":
			arrivals = append(arrivals, ev.at.Sub(fault))
		case ev.Kind == EventDeadLetterHeld:
			held++
		}
	}
	return arrivals, held
}

// After a restart, a rung whose dead letters go out before the relay
// queue has started again has them refused: its worker's first 32 (its
// prefetch) wait for DeadLetterResend and come back three minutes late
// together, in order; the rest wait only for the relay queue to start.
// After a kill the rest wait for the resend too. None is lost. A rung that
// starts after the relay queue releases on time. Which comes first is
// drawn from the seed, the same way each time; exact timing never holds
// anything.
func TestARefusedDeadLetterWaitsForTheResend(t *testing.T) {
	const n = 40
	tm := Timing{BootSpan: 5 * time.Second, DeadLetterResend: 180 * time.Second}
	for _, crash := range []bool{false, true} {
		late := deadLetterPrefetch // how many a stalled rung sends late
		if crash {
			late = n
		}
		var stalled, onTime int
		for seed := range uint64(20) {
			tm.Seed = seed
			arrivals, held := resendRun(t, tm, n, crash)
			if len(arrivals) != n {
				t.Fatalf("crash %t, seed %d: %d of %d dead letters reached the relay queue", crash, seed, len(arrivals), n)
			}
			switch first := arrivals[n-late]; {
			case held == late && (late == n || arrivals[n-late-1] <= tm.BootSpan) &&
				first >= tm.DeadLetterResend && first == arrivals[n-1]:
				stalled++
			case held == 0 && arrivals[n-1] <= tm.BootSpan:
				onTime++
			default:
				t.Fatalf("crash %t, seed %d: %d held, arrivals %v after the fault: neither the first %d held for the resend nor all on time",
					crash, seed, held, arrivals, late)
			}
			if again, heldAgain := resendRun(t, tm, n, crash); heldAgain != held || again[n-1] != arrivals[n-1] {
				t.Fatalf("crash %t, seed %d: a second run held %d, the last back %s; the first %d, %s", crash, seed, heldAgain, again[n-1], held, arrivals[n-1])
			}
		}
		if stalled == 0 || onTime == 0 {
			t.Fatalf("crash %t: in 20 seeds, %d rungs stalled and %d released on time: want both", crash, stalled, onTime)
		}
	}
	// Without BootSpan every queue starts at once: the rung releases at
	// its TTL, 50 ms after the crash.
	if arrivals, held := resendRun(t, Timing{DeadLetterResend: 180 * time.Second}, n, true); held != 0 || arrivals[n-1] != 50*time.Millisecond {
		t.Fatalf("without BootSpan: %d held, the last back %s after the crash; want none held, all at the TTL", held, arrivals[n-1])
	}
}
