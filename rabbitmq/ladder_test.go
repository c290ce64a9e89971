package rabbitmq

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/internal/relay"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestRungs(t *testing.T) {
	for _, c := range []struct {
		top         Topology
		first, last int64
		n           int
	}{
		{Topology{}, 1000, 1000 << 21, 22},
		{Topology{RetryGranularity: 10 * time.Second}, 1000, 1000 << 21, 22}, // the finer one
		{Topology{RetryGranularity: 100 * time.Millisecond, DeferredGranularity: 100 * time.Millisecond}, 100, 100 << 24, 25},
		{Topology{RetryGranularity: time.Microsecond, DeferredGranularity: time.Microsecond}, 1, 1 << 30, 31},
	} {
		r := c.top.Rungs()
		if len(r) != c.n || r[0] != c.first || r[len(r)-1] != c.last {
			t.Errorf("%+v: %d rungs %d..%d; want %d rungs %d..%d", c.top, len(r), r[0], r[len(r)-1], c.n, c.first, c.last)
		}
	}
}

func TestRung(t *testing.T) {
	var top Topology
	for _, c := range []struct{ remaining, ttl, after int64 }{
		{1, 1000, 0}, // under the shortest rung: rounded up, never early
		{1000, 1000, 0},
		{1500, 1000, 500},
		{5000, 4000, 1000},
		{30000, 16000, 14000},
		{MaxHoldTTL, 1000 << 21, MaxHoldTTL - 1000<<21},
	} {
		ttl, after := top.rung(c.remaining)
		if ttl != c.ttl || after != c.after {
			t.Errorf("rung(%d) = %d, %d; want %d, %d", c.remaining, ttl, after, c.ttl, c.after)
		}
	}
}

// walk follows a hold of ttl ms down the ladder as the relay takes it,
// and returns the rungs it waited in.
func walk(t *testing.T, top Topology, ttl int64) []int64 {
	t.Helper()
	first, after := top.rung(ttl)
	rungs := []int64{first}
	msg := ladderPublishing(amqp.Publishing{Body: []byte("x"), MessageId: "j"}, "jobs", 7, after)
	for range 64 {
		// Any worker relays it, whatever its own queue.
		target, next, final := top.relayNext("other", amqp.Delivery{Headers: msg.Headers, Priority: msg.Priority, Body: msg.Body, MessageId: msg.MessageId})
		if final != (target == "jobs") {
			t.Fatalf("relayed to %q, final %t", target, final)
		}
		if target == "jobs" {
			if next.Priority != 7 || next.Headers != nil || string(next.Body) != "x" || next.MessageId != "j" {
				t.Fatalf("released as %+v", next)
			}
			return rungs
		}
		var r int64
		for _, ttl := range top.Rungs() {
			if top.LadderQueue(ttl) == target {
				r = ttl
			}
		}
		if r == 0 || next.Priority != 0 {
			t.Fatalf("relayed to %q at priority %d", target, next.Priority)
		}
		rungs = append(rungs, r)
		msg = next
	}
	t.Fatalf("a hold of %d ms never came back", ttl)
	return nil
}

// A hold waits for exactly its TTL on the ladder when the TTL is a whole
// number of the shortest rung, at most one rung more otherwise, in no more
// rungs than the TTL has binary digits.
func TestLadderWaitsExactlyTheTTL(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, top := range []Topology{{}, {RetryGranularity: 1500 * time.Millisecond}} {
		base := top.ladderBase()
		for range 2000 {
			ttl := 1 + rnd.Int64N(MaxHoldTTL)
			var sum int64
			rungs := walk(t, top, ttl)
			for _, r := range rungs {
				sum += r
			}
			if sum < ttl || sum >= ttl+base || (ttl%base == 0 && sum != ttl) {
				t.Fatalf("a hold of %d ms waited %d ms (%v)", ttl, sum, rungs)
			}
			if len(rungs) > len(top.Rungs()) {
				t.Fatalf("a hold of %d ms took %d rungs", ttl, len(rungs))
			}
		}
	}
	if diff := cmp.Diff([]int64{16000, 8000, 4000, 2000}, walk(t, Topology{}, 30000)); diff != "" {
		t.Fatalf("30 s (-want +got):\n%s", diff)
	}
}

// A message in a relay queue without the ladder's headers (from a
// per-queue relay queue of an earlier release, or published there by
// hand) goes to the fallback work queue as it is.
func TestRelayOfAForeignMessage(t *testing.T) {
	target, msg, final := Topology{}.relayNext("jobs", amqp.Delivery{Priority: 3, Body: []byte("b")})
	if target != "jobs" || !final || msg.Priority != 3 || string(msg.Body) != "b" || msg.DeliveryMode != amqp.Persistent {
		t.Fatalf("relayed to %q as %+v", target, msg)
	}
}

// A process's first hold waits until its ladder is HoldWarmup old, then
// goes; a later one does not wait. A hold whose context's deadline comes
// first fails at once, saying until when the ladder warms up; one whose
// context is cancelled while it waits says why.
func TestHoldWaitsForTheLadderToWarmUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		b, err := New(Channels(conn.Channel), Options{Topology: Topology{HoldWarmup: 3 * time.Second},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		start := time.Now()
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err = b.Publish(ctx, testJob("jobs", "early", 0), time.Second, queuey.HoldRetry)
		we, ok := errors.AsType[*WarmupError](err)
		if !ok || !errors.Is(err, context.DeadlineExceeded) || we.Queue != "jobs" || !we.Ready.Equal(start.Add(3*time.Second)) {
			t.Fatalf("a hold whose deadline comes before the warm-up ends: %v", err)
		}
		if time.Since(start) != 0 {
			t.Fatalf("it failed after %s, want at once", time.Since(start))
		}
		ctx, cancelWait := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancelWait)
		err = b.Publish(ctx, testJob("jobs", "cancelled", 0), time.Second, queuey.HoldRetry)
		if !errors.Is(err, context.Canceled) || errors.As(err, &we) || time.Since(start) != time.Second {
			t.Fatalf("a hold whose context is cancelled 1s into the warm-up: %v, after %s", err, time.Since(start))
		}
		if err := b.Publish(t.Context(), testJob("jobs", "j", 0), time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Fatalf("the first hold went %s after the declaration, want 3s", waited)
		}
		// The wait is logged once, at INFO, with how long and why.
		if n := strings.Count(logs.String(), "level=INFO msg=\"rabbitmq: the queue or the hold ladder is new on this broker"); n != 1 ||
			!strings.Contains(logs.String(), "queue=jobs wait=3s") {
			t.Fatalf("%d warm-up logs, want 1 saying queue=jobs wait=3s:\n%s", n, logs.String())
		}
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err) // declaring again does not start the warm-up again
		}
		at := time.Now()
		if err := b.Publish(t.Context(), testJob("jobs", "k", 0), time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		if time.Since(at) != 0 {
			t.Fatal("a later hold waited")
		}
		if q, _ := broker.Queue("queuey.ladder.1000"); q.Ready != 2 {
			t.Fatalf("the 1 s rung has %d, want 2", q.Ready)
		}

		// The warm marker the first hold declared spares the next process
		// the wait: a restarted worker holds at once.
		if q, ok := broker.Queue("jobs.deferred.warm"); !ok || q.Type != "quorum" || q.Ready != 0 {
			t.Fatalf("warm marker %+v, %t", q, ok)
		}
		next, err := New(Channels(conn.Channel), Options{Topology: Topology{HoldWarmup: 3 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close()
		if err := next.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err)
		}
		at = time.Now()
		if err := next.Publish(t.Context(), testJob("jobs", "l", 0), time.Second, queuey.HoldRetry); err != nil || time.Since(at) != 0 {
			t.Fatalf("a process finding the warm marker: %v after %s", err, time.Since(at))
		}
	})
}

// Through a consumer made by Consume, a 30 s deferral walks the ladder on
// its own and comes back at 30 s, at the top priority, ahead of a backlog
// that waited on the queue all along: the consumer, busy with one job at a
// time for 20 s each, takes it at 40 s, before the last backlog job.
func TestLadderDeferralComesBackAheadOfTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(Channels(conn.Channel), Options{Topology: Topology{HoldWarmup: -1}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		q := queuey.QueueConfig{Name: "jobs"}
		if err := b.Declare(t.Context(), q); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := b.Publish(t.Context(), testJob("jobs", "deferred", q.WithDefaults().TopPriority()), 30*time.Second, queuey.HoldDeferred); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := b.Publish(t.Context(), testJob("jobs", "backlog", 0), 0, queuey.HoldRetry); err != nil {
				t.Fatal(i, err)
			}
		}
		c, err := b.Consume(t.Context(), "jobs", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The worker is slow: it holds each backlog job for 20 s.
		var order []string
		for range 4 {
			d := <-c.Deliveries()
			order = append(order, testJobID(t, d.Body()))
			if testJobID(t, d.Body()) == "deferred" {
				// Back on the queue at 30 s, delivered at the next ack.
				if at := time.Since(start); at != 40*time.Second || d.Priority() != 10 {
					t.Fatalf("the deferral was delivered after %s at priority %d; want 40s at 10", at, d.Priority())
				}
			} else {
				time.Sleep(20 * time.Second)
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff([]string{"backlog", "backlog", "deferred", "backlog"}, order); diff != "" {
			t.Fatalf("order (-want +got):\n%s", diff)
		}
		relay, _ := broker.Queue("jobs.deferred.relay")
		if relay.Ready != 0 || relay.Unacked != 0 {
			t.Fatalf("relay queue %+v; want it empty", relay)
		}
	})
}

// internalErrorChannel refuses every ladder rung's declaration with 541
// INTERNAL_ERROR, as RabbitMQ 4.0.5 does once its supervisor of dead-letter
// workers has stopped (docs/hold-ladder.md, "Deleting a ladder").
type internalErrorChannel struct{ Channel }

func (c internalErrorChannel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	if strings.HasPrefix(name, "queuey.ladder.") {
		return amqp.Queue{}, &amqp.Error{Code: amqp.InternalError, Reason: "INTERNAL_ERROR", Server: true}
	}
	return c.Channel.QueueDeclare(name, durable, autoDelete, exclusive, noWait, args)
}

// A rung the broker fails to declare from the inside is an error that says
// what to do: restart the node; and it is logged at ERROR, since a person
// must act.
func TestLadderDeclarationInternalErrorSaysRestartTheNode(t *testing.T) {
	broker := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
	conn, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	logs := &backendLogBuffer{}
	b, err := New(func() (Channel, error) {
		ch, err := conn.Channel()
		if err != nil {
			return nil, err
		}
		return internalErrorChannel{ch}, nil
	}, Options{Topology: Topology{HoldWarmup: -1}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"})
	if err == nil || !strings.Contains(err.Error(), "restart it") || !strings.Contains(err.Error(), "Deleting a ladder") {
		t.Fatalf("Declare: %v; want an error that says to restart the node", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("logs:\n%s\nwant an ERROR", logs)
	}
}

// A relay whose publish fails (its rung was deleted: 312 NO_ROUTE) leaves
// the job in the relay queue and tries again after the relay core's pause,
// not before; once the rung is back, the job goes on, nothing lost.
func TestFailedRelayPausesThenGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		logs := &backendLogBuffer{}
		b, err := New(Channels(conn.Channel), Options{Topology: Topology{HoldWarmup: -1}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		cfg := queuey.QueueConfig{Name: "jobs"}
		if err := b.Declare(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		rung := b.top.LadderQueue(1000)
		if _, err := ch.QueueDelete(rung, false, false, false); err != nil {
			t.Fatal(err)
		}
		c, err := b.Consume(t.Context(), "jobs", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A job with 1 s still to wait: its next step is the deleted rung.
		if err := ch.Publish("", b.top.RelayQueue(), false, false, ladderPublishing(amqp.Publishing{MessageId: "j1", Body: []byte("{}")}, "jobs", 0, 1000)); err != nil {
			t.Fatal(err)
		}
		failures := func() int { return strings.Count(logs.String(), "relaying a held job failed") }
		synctest.Wait()
		if n := failures(); n != 1 {
			t.Fatalf("%d failed relays at once; want 1", n)
		}
		time.Sleep(relay.DefaultPause - time.Millisecond)
		synctest.Wait()
		if n := failures(); n != 1 {
			t.Fatalf("%d failed relays before the pause was over; want 1", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := failures(); n != 2 {
			t.Fatalf("%d failed relays once the pause was over; want 2", n)
		}
		if err := b.Declare(t.Context(), cfg); err != nil { // the rung is back
			t.Fatal(err)
		}
		time.Sleep(relay.DefaultPause)
		synctest.Wait()
		q, err := ch.QueueDeclarePassive(rung, true, false, false, false, nil)
		if err != nil || q.Messages != 1 {
			t.Fatalf("the rung holds %d messages (%v); want the job", q.Messages, err)
		}
	})
}

// The warm-up is timed on Options.Clock: with a mock clock, the first hold
// waits until the mock has moved HoldWarmup on, whatever the real time.
func TestWarmupIsTimedOnOptionsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mock := clock.NewMock()
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(Channels(conn.Channel), Options{Topology: Topology{HoldWarmup: 3 * time.Second}, Clock: mock})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- b.Publish(t.Context(), testJob("jobs", "j", 0), time.Second, queuey.HoldRetry) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the hold went before the mock clock moved: %v", err)
		default:
		}
		mock.Add(3 * time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
