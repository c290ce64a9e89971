package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/membroker"
	amqp "github.com/rabbitmq/amqp091-go"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTimersFireInDeadlineThenSchedulingOrder(t *testing.T) {
	c := NewClock(epoch)
	var got []string
	at := func(name string, d time.Duration) {
		c.AfterFunc(d, func() { got = append(got, fmt.Sprintf("%s@%s", name, c.Since(epoch))) })
	}
	at("c", 3*time.Second)
	at("a", time.Second)
	at("b1", 2*time.Second)
	at("b2", 2*time.Second)
	at("now", 0)
	c.Advance(2 * time.Second)
	if c.Pending() != 1 {
		t.Fatalf("pending %d, want 1 (c at 3s)", c.Pending())
	}
	c.Advance(time.Hour)
	want := []string{"now@0s", "a@1s", "b1@2s", "b2@2s", "c@3s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("firing order (-want +got):\n%s", diff)
	}
	if c.Since(epoch) != time.Hour+2*time.Second || c.Fired() != 5 {
		t.Fatalf("now %s fired %d", c.Since(epoch), c.Fired())
	}
}

func TestCallbacksMayScheduleAtTheSameInstant(t *testing.T) {
	c := NewClock(epoch)
	var got []string
	c.AfterFunc(time.Second, func() {
		got = append(got, "first")
		c.AfterFunc(0, func() { got = append(got, "scheduled by first") })
	})
	c.AfterFunc(time.Second, func() { got = append(got, "second") })
	c.Advance(time.Second)
	if diff := cmp.Diff([]string{"first", "second", "scheduled by first"}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestNothingFiresUntilTimeMoves(t *testing.T) {
	c := NewClock(epoch)
	fired := false
	if c.AfterFunc(0, func() { fired = true }) != nil {
		t.Fatal("AfterFunc should return nil: simulation timers cannot be stopped")
	}
	if fired {
		t.Fatal("AfterFunc called f before returning")
	}
	c.Advance(0)
	if !fired {
		t.Fatal("a timer due now did not fire on Advance(0)")
	}
	c.RunUntil(epoch.Add(-time.Hour))
	if !c.Now().Equal(epoch) {
		t.Fatalf("time moved backwards to %s", c.Now())
	}
}

func TestChannelsTickersAndContexts(t *testing.T) {
	c := NewClock(epoch)
	after := c.After(time.Second)
	timer := c.Timer(2 * time.Second)
	ticks := c.Tick(time.Second)
	ctx, cancel := c.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	c.Advance(time.Second)
	if got := <-after; !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("After delivered %s", got)
	}
	if ctx.Err() != nil {
		t.Fatal("context cancelled before its virtual deadline")
	}
	c.Advance(3 * time.Second) // ticks at 2, 3, 4 s find the first one unread
	if got := <-ticks; !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("first tick %s; a ticker keeps the oldest unread tick", got)
	}
	select {
	case <-ticks:
		t.Fatal("a ticker buffered more than one tick")
	default:
	}
	if got := <-timer.C; !got.Equal(epoch.Add(2 * time.Second)) {
		t.Fatalf("Timer delivered %s", got)
	}
	if ctx.Err() == nil {
		t.Fatal("context not cancelled at its virtual deadline")
	}
}

func TestSleepPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Sleep returned")
		}
	}()
	NewClock(epoch).Sleep(time.Second)
}

// holdQueueRun runs n held messages through membroker on a sim clock:
// hold queues with staggered TTLs dead-letter into a work queue whose
// consumer receives them with nobody calling in. It returns the delivery
// log, each line with its virtual time.
func holdQueueRun(t *testing.T, n int) []string {
	t.Helper()
	c := NewClock(epoch)
	b := membroker.New(membroker.Config{Clock: c, Version: membroker.RabbitMQ40})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-max-priority": 10}); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []int{1000, 5000} {
		if _, err := ch.QueueDeclare(fmt.Sprintf("hold.%d", ttl), true, false, false, false, amqp.Table{
			"x-message-ttl": ttl, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"}); err != nil {
			t.Fatal(err)
		}
	}
	_ = ch.Qos(n+1, 0, false)
	deliveries, err := ch.Consume("work", "c", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var log []string
	// step moves time to the next timer, or by at most max, and records
	// what the consumer was handed meanwhile. A timer's delivery is handed
	// over inline as it fires, so the time recorded is its own.
	step := func(max time.Duration) {
		limit := c.Now().Add(max)
		if next, ok := c.Next(); ok && next.Before(limit) {
			limit = next
		}
		c.RunUntil(limit)
		for {
			select {
			case d := <-deliveries:
				log = append(log, fmt.Sprintf("%s %s", c.Since(epoch), d.Body))
				continue
			default:
			}
			return
		}
	}
	for i := range n {
		for end := c.Now().Add(time.Millisecond); c.Now().Before(end); {
			step(end.Sub(c.Now()))
		}
		ttl := []int{5000, 1000}[i%2]
		_ = ch.Publish("", fmt.Sprintf("hold.%d", ttl), false, false, amqp.Publishing{Body: []byte(fmt.Sprintf("m%d", i))})
	}
	for c.Pending() > 0 {
		step(time.Hour)
	}
	return log
}

// TestMembrokerOnTheSimClock: membroker arms its timers through AfterFunc
// and never stops them, so it runs on this clock; each dead letter reaches
// the consumer exactly at its virtual deadline, with nobody calling in,
// thousands of expiries cost no real sleep, and a second run is identical.
func TestMembrokerOnTheSimClock(t *testing.T) {
	const n = 20000
	first := holdQueueRun(t, n)
	if len(first) != n {
		t.Fatalf("%d deliveries, want %d", len(first), n)
	}
	if first[0] != "1.002s m1" {
		t.Fatalf("first delivery %q: m1 (1 s hold, published at 2 ms) is due at 1.002 s", first[0])
	}
	for _, line := range first {
		var at time.Duration
		var body string
		d, rest, _ := strings.Cut(line, " ")
		at, _ = time.ParseDuration(d)
		body = rest
		var i int
		_, _ = fmt.Sscanf(body, "m%d", &i)
		ttl := []time.Duration{5 * time.Second, time.Second}[i%2]
		if want := time.Duration(i+1)*time.Millisecond + ttl; at != want {
			t.Fatalf("%s delivered at %s, due at %s", body, at, want)
		}
	}
	if diff := cmp.Diff(first, holdQueueRun(t, n)); diff != "" {
		t.Fatalf("a second run differs:\n%s", diff)
	}
}

func TestStoppableTimers(t *testing.T) {
	c := NewClock(epoch)
	var fired []string
	live := true
	a := c.Stoppable(time.Second, func() bool { return true }, func() { fired = append(fired, "a") })
	c.Stoppable(2*time.Second, func() bool { return live }, func() { fired = append(fired, "b") })
	cc := c.Stoppable(3*time.Second, func() bool { return true }, func() { fired = append(fired, "c") })
	if !cc.Stop() || cc.Stop() {
		t.Fatal("stop of a pending timer: want true once, then false")
	}
	live = false
	c.RunUntil(epoch.Add(time.Minute))
	if len(fired) != 1 || fired[0] != "a" {
		t.Fatalf("fired %v, want only a", fired)
	}
	if a.Stop() {
		t.Fatal("stop of a timer that fired reported true")
	}
}
