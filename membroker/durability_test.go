package membroker

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// crashTiming is the timing the simulator models a kill -9 with.
var crashTiming = Timing{ClassicSync: time.Second, QuorumRegister: 3 * time.Second}

// crashAndRedial crashes e's broker and gives e a new connection; confirm
// puts its channel in confirm mode.
func (e *env) crashAndRedial(confirm bool) {
	e.t.Helper()
	e.b.Crash()
	e.redial(confirm)
}

func (e *env) redial(confirm bool) {
	e.t.Helper()
	conn, err := e.b.Dial()
	if err != nil {
		e.t.Fatal(err)
	}
	e.conn = conn
	if e.ch, err = conn.Channel(); err != nil {
		e.t.Fatal(err)
	}
	if confirm {
		if err := e.ch.Confirm(false); err != nil {
			e.t.Fatal(err)
		}
		e.ch.NotifyPublish(make(chan amqp.Confirmation, 64))
	}
}

// holdToWork declares "work" and a classic hold of 100 ms dead-lettering
// into it, on a confirming channel, and holds message "a".
func holdToWork(t *testing.T, tm Timing) *env {
	t.Helper()
	e := newEnvWith(t, Config{Version: RabbitMQ40, Timing: tm})
	e.redial(true)
	e.declare("work", nil)
	e.declare("hold", amqp.Table{"x-message-ttl": int64(100), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"})
	e.publish("hold", "a", amqp.Publishing{DeliveryMode: amqp.Persistent})
	return e
}

var persistent = amqp.Publishing{DeliveryMode: amqp.Persistent}

func TestCrashLosesAnUnwrittenDeadLetter(t *testing.T) {
	e := holdToWork(t, crashTiming)
	e.advance(150 * time.Millisecond) // "a" is in work, not yet written
	e.publish("hold", "b", persistent)
	// The confirmed publish wrote the hold's removal of "a": nothing has
	// it on disk now.
	e.crashAndRedial(false)
	if got := e.drain("work"); len(got) != 0 {
		t.Fatalf("work after the crash: %q, want nothing: the dead letter was not written", got)
	}
	e.advance(time.Second)
	if got := e.drain("work"); len(got) != 1 || got[0] != "b" {
		t.Fatalf("work a second later: %q, want [b], held across the crash", got)
	}
}

func TestCrashKeepsWhatReachedDisk(t *testing.T) {
	cases := []struct {
		name   string
		tm     Timing
		before func(e *env) // after "a" is dead-lettered into work, before the crash
		want   []string
	}{
		{"exact timing writes every arrival", Timing{}, func(e *env) { e.publish("hold", "b", persistent) }, []string{"a"}},
		{"a confirmed publish writes the dead letters before it", crashTiming,
			func(e *env) { e.publish("hold", "b", persistent); e.publish("work", "c", persistent) }, []string{"a", "c"}},
		{"an idle queue hibernates", crashTiming,
			func(e *env) { e.publish("hold", "b", persistent); e.advance(2 * time.Second) }, []string{"a", "b"}},
		{"a hold that has not written its removal releases again", crashTiming, func(*env) {}, []string{"a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := holdToWork(t, c.tm)
			e.advance(150 * time.Millisecond)
			c.before(e)
			e.crashAndRedial(false)
			got := e.drain("work")
			if len(got) != len(c.want) {
				t.Fatalf("work after the crash: %q, want %q", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("work after the crash: %q, want %q", got, c.want)
				}
			}
		})
	}
}

func TestCrashLosesAnUnconfirmedPublishNotYetWritten(t *testing.T) {
	e := newEnvWith(t, Config{Version: RabbitMQ40, Timing: crashTiming})
	e.declare("work", nil)
	e.publish("work", "a", persistent) // no confirm mode: not written
	e.crashAndRedial(false)
	if got := e.drain("work"); len(got) != 0 {
		t.Fatalf("work after the crash: %q, want nothing", got)
	}
	e.publish("work", "b", persistent)
	e.advance(time.Second)
	e.b.Queues() // idle for a second: hibernated
	e.crashAndRedial(false)
	if got := e.drain("work"); len(got) != 1 || got[0] != "b" {
		t.Fatalf("work after the crash: %q, want [b]", got)
	}
}

func TestCrashEmptiesAYoungQuorumQueue(t *testing.T) {
	for _, c := range []struct {
		age  time.Duration
		want int
	}{{2900 * time.Millisecond, 0}, {3 * time.Second, 1}} {
		e := newEnvWith(t, Config{Version: RabbitMQ43, Timing: crashTiming})
		e.redial(true)
		e.declare("q", amqp.Table{"x-queue-type": "quorum"})
		e.publish("q", "a", persistent)
		e.advance(c.age)
		e.crashAndRedial(false)
		if got := e.info("q").Ready; got != c.want {
			t.Errorf("a quorum queue crashed %s after its creation has %d messages, want %d", c.age, got, c.want)
		}
	}
}

func TestCrashKeepsAQuorumHoldsAtLeastOnceDeadLetters(t *testing.T) {
	e := newEnvWith(t, Config{Version: RabbitMQ40, Timing: crashTiming})
	e.redial(true)
	e.declare("work", nil)
	e.declare("hold", amqp.Table{"x-queue-type": "quorum", "x-message-ttl": int64(100), "x-dead-letter-exchange": "",
		"x-dead-letter-routing-key": "work", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
	e.advance(5 * time.Second) // registered
	e.publish("hold", "a", persistent)
	e.advance(150 * time.Millisecond)
	e.crashAndRedial(false)
	if got := e.drain("work"); len(got) != 1 {
		t.Fatalf("work after the crash: %q, want [a]: the target confirmed it to the dead-letter worker", got)
	}
}

func TestRestartWritesEverything(t *testing.T) {
	e := holdToWork(t, crashTiming)
	e.advance(150 * time.Millisecond)
	e.publish("hold", "b", persistent)
	e.b.Restart()
	e.redial(false)
	if got := e.drain("work"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("work after a clean restart: %q, want [a]", got)
	}
}

// A Restart stops the classic queues over StopSpan, in no order: a hold's
// message due after its target stopped, and before the hold did, is lost;
// one due before either stopped, or after both, is not.
func TestRestartLosesWhatExpiresIntoAStoppedTarget(t *testing.T) {
	lost, kept := 0, 0
	for seed := range uint64(40) {
		e := newEnvWith(t, Config{Version: RabbitMQ40, Timing: Timing{StopSpan: 100 * time.Millisecond, Seed: seed}})
		e.declare("work", nil)
		e.declare("hold", amqp.Table{"x-message-ttl": int64(1050), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"})
		e.declare("late", amqp.Table{"x-message-ttl": int64(2000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"})
		e.publish("hold", "a", persistent) // due 50 ms into the stop
		e.publish("late", "b", persistent) // due long after it
		e.advance(time.Second)
		e.b.Restart()
		e.redial(false)
		e.advance(2 * time.Second)
		got := e.drain("work")
		switch {
		case len(got) == 2:
			kept++
		case len(got) == 1 && got[0] == "b":
			lost++
		default:
			t.Fatalf("seed %d: work has %q, want [a b] or [b]", seed, got)
		}
	}
	// "a" is lost when work stops before 50 ms and hold after: 1/2 × 1/2.
	if lost == 0 || kept == 0 {
		t.Fatalf("over 40 seeds, %d restarts lost the hold's message and %d kept it; want some of each", lost, kept)
	}
	e := newEnvWith(t, Config{Version: RabbitMQ40})
	e.declare("work", nil)
	e.declare("hold", amqp.Table{"x-message-ttl": int64(1050), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"})
	e.publish("hold", "a", persistent)
	e.advance(time.Second)
	e.b.Restart()
	e.redial(false)
	e.advance(time.Second)
	if got := e.drain("work"); len(got) != 1 {
		t.Fatalf("exact timing: work has %q after the restart, want [a]", got)
	}
}

// rejectedIntoDead publishes "a" to "work" with no confirm, so unwritten,
// and rejects it into "dead", where it is not written either.
func rejectedIntoDead(t *testing.T) *env {
	t.Helper()
	e := newEnvWith(t, Config{Version: RabbitMQ40, Timing: crashTiming})
	e.declare("dead", nil)
	e.declare("work", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
	e.publish("work", "a", persistent) // no confirm mode: not written
	d, ok := e.get("work")
	if !ok {
		t.Fatal("work is empty")
	}
	if err := d.Reject(false); err != nil { // into dead, not written there either
		t.Fatal(err)
	}
	return e
}

// A message that moved on to another classic queue is that queue's to
// write: the first queue's write does not cover it there.
func TestCrashLosesAMessageMovedOnBeforeItsNewQueueWrote(t *testing.T) {
	e := rejectedIntoDead(t)
	confirming := e.conn
	ch, err := confirming.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ch.NotifyPublish(make(chan amqp.Confirmation, 4))
	if err := ch.Publish("", "work", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	// work has written b and its removal of a; dead has not written a.
	e.crashAndRedial(false)
	if got := e.drain("dead"); len(got) != 0 {
		t.Fatalf("dead after the crash: %q, want nothing", got)
	}
	if got := e.drain("work"); len(got) != 1 || got[0] != "b" {
		t.Fatalf("work after the crash: %q, want [b]", got)
	}
}

// A message no queue has written, dead-lettered on into another, is still
// unwritten: a crash loses it, whatever the queue it left has written.
func TestCrashLosesAChainOfUnwrittenDeadLetters(t *testing.T) {
	e := rejectedIntoDead(t)
	e.crashAndRedial(false)
	if got := e.drain("dead"); len(got) != 0 {
		t.Fatalf("dead after the crash: %q, want nothing: no queue ever wrote it", got)
	}
}

// A quorum queue restarted empty for want of registration registers anew:
// a second kill as soon after empties it again.
func TestCrashEmptiesARestartedYoungQuorumQueueAgain(t *testing.T) {
	e := newEnvWith(t, Config{Version: RabbitMQ43, Timing: crashTiming})
	e.redial(true)
	e.declare("q", amqp.Table{"x-queue-type": "quorum"})
	e.advance(2500 * time.Millisecond)
	e.crashAndRedial(true)
	e.advance(time.Second) // 3.5 s after the declaration, 1 s after the restart
	e.publish("q", "a", persistent)
	e.crashAndRedial(false)
	if got := e.info("q").Ready; got != 0 {
		t.Fatalf("a quorum queue killed within QuorumRegister of its restart as a new member has %d messages, want 0", got)
	}
}

// A clean restart writes out Ra's table of members (ra_directory:deinit/1,
// docs/rabbitmq-semantics.md §13.4): a quorum queue that went through one
// is registered, and a crash right after it keeps its messages, however
// young the queue.
func TestRestartRegistersAYoungQuorumQueue(t *testing.T) {
	e := newEnvWith(t, Config{Version: RabbitMQ43, Timing: crashTiming})
	e.redial(true)
	e.declare("q", amqp.Table{"x-queue-type": "quorum"})
	e.b.Restart()
	e.redial(true)
	e.publish("q", "a", persistent)
	e.crashAndRedial(false)
	if got := e.info("q").Ready; got != 1 {
		t.Fatalf("a quorum queue crashed just after a clean restart has %d messages, want 1", got)
	}
}

// NextEvent is the next expiry the broker has armed, and nothing once the
// message has expired.
func TestNextEvent(t *testing.T) {
	e := newEnvWith(t, Config{Version: RabbitMQ43})
	e.redial(true)
	if _, ok := e.b.NextEvent(); ok {
		t.Fatal("an idle broker has a next event")
	}
	e.declare("hold", amqp.Table{"x-queue-type": "quorum", "x-message-ttl": int64(1500)})
	start := e.clk.Now()
	e.publish("hold", "a", persistent)
	if at, ok := e.b.NextEvent(); !ok || at.Sub(start) != 1500*time.Millisecond {
		t.Fatalf("next event at %v (%t), want 1.5 s after the publish", at.Sub(start), ok)
	}
	e.advance(1500 * time.Millisecond)
	if at, ok := e.b.NextEvent(); ok {
		t.Fatalf("a next event at %v after the only message expired", at.Sub(start))
	}
}
