package rabbitmq

// Fault tests against the live broker: they stop the broker's world (a
// memory alarm blocks every publisher on it), so they run apart from the
// other live tests, only when QUEUEY_RABBITMQCTL names the command that
// runs rabbitmqctl against it (.ci/run sets it to "scripts/rabbitmq ctl"
// for a step of its own). Without it, or without AMQP_URL, they skip.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitmqctl runs the command QUEUEY_RABBITMQCTL names with args, skipping
// the test when it is unset.
func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	ctl := strings.Fields(os.Getenv("QUEUEY_RABBITMQCTL"))
	if len(ctl) == 0 {
		t.Skip("QUEUEY_RABBITMQCTL not set: skipping a fault test that needs rabbitmqctl (see .ci/run)")
	}
	out, err := exec.Command(ctl[0], append(ctl[1:], args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", strings.Join(ctl, " "), strings.Join(args, " "), err, out)
	}
}

// A memory alarm blocks publishing: an Enqueue whose ctx ends meanwhile
// says the job may have been enqueued and that the broker is blocking
// publishers, with its reason; once the alarm clears, the job is there.
// This is what a previous session saw as a bare "context deadline
// exceeded" for a job enqueued all the same.
func TestLiveFaultMemoryAlarmBlocksPublishers(t *testing.T) {
	if os.Getenv("AMQP_URL") == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4") // skips without QUEUEY_RABBITMQCTL
	conn, err := amqp.Dial(os.Getenv("AMQP_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := New(Channels(conn.Channel), Options{Blocked: conn.NotifyBlocked(make(chan amqp.Blocking, 1))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := newLiveRig(t, Options{}) // for its admin connection and the cleanup
	q := r.queue()
	if err := b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
		t.Fatal(err)
	}

	rabbitmqctl(t, "set_vm_memory_high_watermark", "absolute", "1MB")
	alarmOn := true
	defer func() {
		if alarmOn {
			rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4")
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err = b.Publish(ctx, testJob(q, "during-the-alarm", 0), 0, queuey.HoldRetry)
	t.Logf("publish during the alarm: %v", err)
	if !errors.Is(err, queuey.ErrMaybeEnqueued) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrPublishingBlocked) {
		t.Fatalf("a publish timing out during a memory alarm: %v; want queuey.ErrMaybeEnqueued, DeadlineExceeded and ErrPublishingBlocked", err)
	}

	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4")
	alarmOn = false
	deadline := time.Now().Add(30 * time.Second)
	for r.ready(q) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the job sent during the alarm is not on %s 30 s after it cleared", q)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := b.Publish(t.Context(), testJob(q, "after-the-alarm", 0), 0, queuey.HoldRetry); err != nil {
		t.Fatalf("a publish after the alarm: %v", err)
	}
}

// A supervised backend follows connection.blocked on its own connection:
// no Options.Blocked needed.
func TestLiveFaultMemoryAlarmOnASupervisedConnection(t *testing.T) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4") // skips without QUEUEY_RABBITMQCTL
	b, err := Connect(t.Context(), ConnectOptions{URLs: []string{url}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := newLiveRig(t, Options{})
	q := r.queue()
	if err := b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
		t.Fatal(err)
	}
	rabbitmqctl(t, "set_vm_memory_high_watermark", "absolute", "1MB")
	defer rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err = b.Publish(ctx, testJob(q, "during-the-alarm", 0), 0, queuey.HoldRetry)
	t.Logf("publish during the alarm: %v", err)
	if !errors.Is(err, queuey.ErrMaybeEnqueued) || !errors.Is(err, ErrPublishingBlocked) {
		t.Fatalf("a publish timing out during a memory alarm: %v; want queuey.ErrMaybeEnqueued and ErrPublishingBlocked", err)
	}
}

// With the default Backoff, a process reconnects soon after the broker
// comes back from a restart that kept it down long enough for the waits to
// reach their cap: within Backoff.Max, plus the time a connection takes to
// declare its queues again. It prints, for the README, how long after
// start_app returned each run's backend was connected again: in
// QUEUEY_BACKOFF_RUNS runs, 1 by default (scripts/soak makes 3).
func TestLiveFaultDefaultBackoffRecovery(t *testing.T) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	rabbitmqctl(t, "status") // skips without QUEUEY_RABBITMQCTL
	const down = 12 * time.Second
	runs := 1
	if n, err := strconv.Atoi(os.Getenv("QUEUEY_BACKOFF_RUNS")); err == nil && n > 0 {
		runs = n
	}
	var worst time.Duration
	for i := range runs {
		connected := make(chan time.Time, 8)
		// Classic holds: this test measures reconnection, and deletes its
		// queues as soon as the broker is back. Deleting a rung while its
		// dead-letter worker starts can stop RabbitMQ's supervisor of those
		// workers for good (docs/hold-ladder.md, "Deleting a ladder"): every
		// later ladder declaration on the node then fails with 541
		// INTERNAL_ERROR, as one CI run found.
		b, err := Connect(t.Context(), ConnectOptions{URLs: []string{url}, OnState: func(e ConnEvent) {
			if e.State == StateConnected && e.Gen > 1 {
				connected <- time.Now()
			}
		}}, Options{Topology: Topology{ClassicHolds: true}})
		if err != nil {
			t.Fatal(err)
		}
		q := "queuey-backoff-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + string(rune('a'+i))
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		c, err := b.Consume(t.Context(), q, 1)
		if err != nil {
			t.Fatal(err)
		}
		rabbitmqctl(t, "stop_app")
		time.Sleep(down) // the dials fail meanwhile, their waits growing to the cap
		for len(connected) > 0 {
			<-connected // none should come while the broker is down; keep none that did
		}
		before := time.Now() // start_app starts the listener before it returns
		rabbitmqctl(t, "start_app")
		back := time.Now()
		select {
		case at := <-connected:
			if at.Before(before) {
				t.Fatalf("run %d: connected again while the broker was stopped", i+1)
			}
			took := at.Sub(back)
			worst = max(worst, took)
			t.Logf("RESULT default backoff, run %d: connected again, its queues declared again, %s after start_app returned (down %s)",
				i+1, took.Round(time.Millisecond), down)
		case <-time.After(DefaultBackoffMax + 30*time.Second):
			t.Fatalf("run %d: not connected again %s after the broker came back", i+1, DefaultBackoffMax+30*time.Second)
		}
		_ = c.Close()
		_ = b.Close()
		if conn, err := amqp.Dial(url); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_, _ = ch.QueueDelete(Topology{}.DeadQueue(q), false, false, false)
			}
			_ = conn.Close()
		}
	}
	if limit := DefaultBackoffMax + 5*time.Second; worst > limit {
		t.Errorf("the slowest reconnection took %s, over Backoff.Max plus 5 s (%s)", worst, limit)
	}
}
