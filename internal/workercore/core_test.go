package workercore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type msg string

func (m msg) Body() []byte { return []byte(m) }

// rules decode any body but "bad"; a nil result acks, any other publishes
// "successor of <job>".
type rules struct{}

func (rules) Decode(q int, body []byte) (string, error) {
	if string(body) == "bad" {
		return "", errors.New("not a job")
	}
	return string(body), nil
}

func (rules) Decide(q int, job string, result error, u float64) (string, bool) {
	if result == nil {
		return "", false
	}
	return "successor of " + job, true
}

func (rules) Timeout(q int) time.Duration { return time.Minute }

type core = Core[msg, string, string]
type acts = []Action[msg, string, string]

func newCore(t *testing.T) *core {
	t.Helper()
	c := New[msg](Rules[string, string](rules{}), Config{RequeueDelay: time.Second})
	c.ConnectionUp(1)
	return c
}

// show renders actions as "kind(id)", with a Publish's decision and a
// StartTimer's delay.
func show(as acts) string {
	var parts []string
	for _, a := range as {
		s := fmt.Sprintf("%s(%d)", a.Kind, a.ID)
		switch {
		case a.Kind == Publish && a.Malformed:
			s += " malformed"
		case a.Kind == Publish:
			s += " " + a.Decision
		case a.Kind == StartTimer:
			s += " " + a.Delay.String()
		case a.Kind == Done:
			s = "done"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func expect(t *testing.T, step string, got acts, want string) {
	t.Helper()
	if s := show(got); s != want {
		t.Fatalf("%s: got %q, want %q", step, s, want)
	}
}

var errFailed = errors.New("handler failed")
var errRefused = errors.New("publish refused")

func TestSettlementOrder(t *testing.T) {
	c := newCore(t)
	expect(t, "deliver", c.Deliver(nil, 0, 1, "a"), "run-handler(1)")
	expect(t, "success", c.HandlerDone(nil, 1, nil, 0), "ack(1)")

	expect(t, "deliver", c.Deliver(nil, 0, 1, "b"), "run-handler(2)")
	// The successor first; the ack only once it is confirmed.
	expect(t, "failure", c.HandlerDone(nil, 2, errFailed, 0), "publish(2) successor of b")
	expect(t, "confirmed", c.Published(nil, 2, nil), "ack(2)")
	if c.Inflight() != 0 {
		t.Fatalf("%d in flight after settling everything", c.Inflight())
	}
}

func TestAFailedSettlementIsRequeuedAfterTheDelay(t *testing.T) {
	c := newCore(t)
	c.Deliver(nil, 0, 1, "a")
	c.HandlerDone(nil, 1, errFailed, 0)
	expect(t, "refused", c.Published(nil, 1, errRefused), "start-timer(1) 1s")
	expect(t, "timer", c.TimerFired(nil, 1), "requeue(1)")
	expect(t, "timer again", c.TimerFired(nil, 1), "")
}

func TestMalformedBodiesAreDeadLetteredThenAcked(t *testing.T) {
	c := newCore(t)
	got := c.Deliver(nil, 0, 1, "bad")
	expect(t, "deliver", got, "publish(1) malformed")
	if got[0].Err == nil {
		t.Fatal("a malformed body's Publish carries no decode error")
	}
	expect(t, "confirmed", c.Published(nil, 1, nil), "ack(1)")
}

func TestStop(t *testing.T) {
	c := newCore(t)
	c.Deliver(nil, 0, 1, "a") // 1: waiting to be requeued
	c.HandlerDone(nil, 1, errFailed, 0)
	c.Published(nil, 1, errRefused)
	c.Deliver(nil, 0, 1, "b") // 2: its handler runs
	c.Deliver(nil, 0, 1, "c") // 3: publishing
	c.HandlerDone(nil, 3, errFailed, 0)

	expect(t, "stop", c.Stop(nil), "stop-timer(1); requeue(1)")
	expect(t, "deliver while stopping", c.Deliver(nil, 0, 1, "d"), "requeue(4)")
	expect(t, "a publish fails while stopping", c.Published(nil, 3, errRefused), "requeue(3)")
	expect(t, "the last handler returns", c.HandlerDone(nil, 2, nil, 0), "ack(2); done")
	expect(t, "stop again", c.Stop(nil), "")

	idle := newCore(t)
	expect(t, "stop with nothing in flight", idle.Stop(nil), "done")
}

// A delivery whose connection went is never settled, whatever phase it was
// in; nothing is published for it.
func TestADeliveryOfALostConnectionIsDropped(t *testing.T) {
	c := newCore(t)
	c.Deliver(nil, 0, 1, "running")    // 1
	c.Deliver(nil, 0, 1, "publishing") // 2
	c.HandlerDone(nil, 2, errFailed, 0)
	c.Deliver(nil, 0, 1, "waiting") // 3
	c.HandlerDone(nil, 3, errFailed, 0)
	c.Published(nil, 3, errRefused)

	expect(t, "lost", c.ConnectionLost(nil, 1), "stop-timer(3); drop(3)")
	c.ConnectionUp(2)
	expect(t, "late handler", c.HandlerDone(nil, 1, errFailed, 0), "drop(1)")
	expect(t, "late confirm", c.Published(nil, 2, nil), "drop(2)")
	expect(t, "late delivery of the old connection", c.Deliver(nil, 0, 1, "late"), "drop(4)")
	expect(t, "the new connection", c.Deliver(nil, 0, 2, "new"), "run-handler(5)")
	expect(t, "settled on it", c.HandlerDone(nil, 5, nil, 0), "ack(5)")
	expect(t, "stop", c.Stop(nil), "done")
}

func TestEventsForUnknownDeliveriesPanic(t *testing.T) {
	for name, f := range map[string]func(c *core){
		"HandlerDone": func(c *core) { c.HandlerDone(nil, 9, nil, 0) },
		"Published":   func(c *core) { c.Published(nil, 9, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f(newCore(t))
		})
	}
}

// BenchmarkSettleSuccess is the core's own cost per job on the hot path:
// a delivery taken, its handler's nil result, its ack. Worker.Run holds its
// lock for the two calls.
func BenchmarkSettleSuccess(b *testing.B) {
	c := New[msg](Rules[string, string](rules{}), Config{RequeueDelay: time.Second})
	c.ConnectionUp(1)
	var buf [2]Action[msg, string, string]
	b.ReportAllocs()
	for b.Loop() {
		acts := c.DeliverDecoded(buf[:0], 0, 1, "a", "a", nil)
		c.HandlerDecided(buf[:0], acts[0].ID, "", false)
	}
}

// A handler that overruns its timeout is abandoned: its job is settled
// without it, and when it returns at last, only Late answers.
func TestAnAbandonedHandlerSettlesItsJobOnce(t *testing.T) {
	c := newCore(t)
	run := c.Deliver(nil, 0, 1, "j1")
	if show(run) != "run-handler(1)" || run[0].Delay != time.Minute {
		t.Fatalf("deliver: %s, timeout %s", show(run), run[0].Delay)
	}
	if a, ok := c.Running(1); !ok || a.Job != "j1" || a.Delay != time.Minute {
		t.Fatalf("Running(1): %+v, %t", a, ok)
	}
	got := c.HandlerAbandoned(nil, 1, "successor of j1 (timed out)", true)
	if show(got) != "abandon(1); publish(1) successor of j1 (timed out)" {
		t.Fatalf("abandoned: %s", show(got))
	}
	if _, ok := c.Running(1); ok {
		t.Fatal("an abandoned handler is still running to the core")
	}
	if got := c.Published(nil, 1, nil); show(got) != "ack(1)" {
		t.Fatalf("published: %s", show(got))
	}
	got = c.HandlerDone(nil, 1, nil, 0.5)
	if show(got) != "late(1)" || got[0].Job != "j1" {
		t.Fatalf("the late return: %s (job %q)", show(got), got[0].Job)
	}
	if c.Inflight() != 0 || len(c.abandoned) != 0 {
		t.Fatalf("%d in flight, %d abandoned", c.Inflight(), len(c.abandoned))
	}
	// Abandoning a handler that has returned does nothing.
	c.Deliver(nil, 0, 1, "j2")
	c.HandlerDone(nil, 2, nil, 0.5)
	if got := c.HandlerAbandoned(nil, 2, "x", true); len(got) != 0 {
		t.Fatalf("abandoning a returned handler: %s", show(got))
	}
}

// An abandoned handler whose connection went is dropped, not settled.
func TestAnAbandonedHandlerOfALostConnectionIsDropped(t *testing.T) {
	c := newCore(t)
	c.Deliver(nil, 0, 1, "j1")
	c.ConnectionLost(nil, 1)
	if got := c.HandlerAbandoned(nil, 1, "x", true); show(got) != "abandon(1); drop(1)" {
		t.Fatalf("abandoned after the loss: %s", show(got))
	}
	if got := c.HandlerDone(nil, 1, errors.New("late"), 0.5); show(got) != "late(1)" {
		t.Fatalf("late: %s", show(got))
	}
}
