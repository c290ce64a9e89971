package rabbitmq

import (
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// sharedRig is a backend on membroker, inside a synctest bubble, for the
// shared ladder's tests, its logs kept.
type sharedRig struct {
	broker *membroker.Broker
	conn   *membroker.Connection
	b      *Backend
	logs   *backendLogBuffer
	admin  *membroker.Channel
}

// newSharedRig makes a rig whose backend has Topology.HoldWarmup warmup
// (0: the default; negative: none) and has declared queues.
func newSharedRig(t *testing.T, warmup time.Duration, queues ...string) *sharedRig {
	t.Helper()
	r := &sharedRig{broker: membroker.New(membroker.Config{Version: membroker.RabbitMQ40}), logs: &backendLogBuffer{}}
	var err error
	if r.conn, err = r.broker.Dial(); err != nil {
		t.Fatal(err)
	}
	if r.b, err = New(Channels(r.conn.Channel), Options{Topology: Topology{HoldWarmup: warmup}, Logger: slog.New(slog.NewTextHandler(r.logs, nil))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.b.Close() })
	for _, q := range queues {
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	if r.admin, err = r.conn.Channel(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *sharedRig) ready(name string) int {
	q, _ := r.broker.Queue(name)
	return q.Ready
}

// Ten work queues declared with the defaults bring 54 queues in all: each
// its dead-letter queue and warm marker, and one ladder of 22 rungs, a
// relay queue and a warm marker for all of them (issue 43 asks at most 60).
// Without a warm-up the markers are not declared.
func TestTenWorkQueuesShareOneLadder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSharedRig(t, 0)
		b, broker := r.b, r.broker
		var cfgs []queuey.QueueConfig
		for i := range 10 {
			cfgs = append(cfgs, queuey.QueueConfig{Name: "q" + string(rune('0'+i))})
		}
		if err := b.Declare(t.Context(), cfgs...); err != nil {
			t.Fatal(err)
		}
		// The warm-up ends with the first hold after HoldWarmup, which
		// declares the markers.
		time.Sleep(DefaultHoldWarmup)
		for _, c := range cfgs {
			if err := b.Publish(t.Context(), testJob(c.Name, "j-"+c.Name, 0), time.Second, queuey.HoldRetry); err != nil {
				t.Fatal(err)
			}
		}
		all := broker.Queues()
		if len(all) != 54 {
			names := make([]string, len(all))
			for i, q := range all {
				names[i] = q.Name
			}
			t.Fatalf("%d queues for ten work queues, want 54: %v", len(all), names)
		}
		if q, _ := broker.Queue("queuey.ladder.1000"); q.Ready != 10 {
			t.Fatalf("the shared 1 s rung holds %d jobs, want the ten queues' holds", q.Ready)
		}
	})
}

// A worker of one work queue relays the held jobs of another: a job on the
// shared ladder names its work queue in a header, and comes back there at
// its priority, whoever relays it.
func TestAWorkerRelaysAnotherQueuesJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSharedRig(t, -1, "mail", "billing")
		if err := r.b.Publish(t.Context(), testJob("billing", "invoice", 7), 3*time.Second, queuey.HoldDeferred); err != nil {
			t.Fatal(err)
		}
		c, err := r.b.Consume(t.Context(), "mail", 1) // no consumer of billing
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		time.Sleep(3*time.Second - time.Millisecond)
		synctest.Wait()
		if n := r.ready("billing"); n != 0 {
			t.Fatalf("billing has %d jobs before the 3 s hold ended", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		d, ok, err := r.admin.Get("billing", true)
		if err != nil || !ok {
			t.Fatalf("billing after 3 s: %v, %t; want the job back", err, ok)
		}
		if _, onLadder := d.Headers[HeaderQueue]; d.MessageId != "invoice" || d.Priority != 7 || onLadder {
			t.Fatalf("back as id %q priority %d headers %v; want invoice at 7 without the ladder's headers", d.MessageId, d.Priority, d.Headers)
		}
		if n := r.ready("mail"); n != 0 {
			t.Fatalf("mail has %d jobs: the relay sent billing's job to its own queue", n)
		}
	})
}

// A held job whose work queue was deleted while it waited is dropped when
// its wait is over, with a WARN that names it, rather than returned to the
// relay queue for ever; other jobs go on.
func TestAJobWhoseWorkQueueWasDeletedIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSharedRig(t, -1, "mail", "gone")
		if err := r.b.Publish(t.Context(), testJob("gone", "orphan", 0), time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Publish(t.Context(), testJob("mail", "kept", 0), time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		if _, err := r.admin.QueueDelete("gone", false, false, false); err != nil {
			t.Fatal(err)
		}
		c, err := r.b.Consume(t.Context(), "mail", 2)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := r.ready(r.b.top.RelayQueue()); n != 0 {
			t.Fatalf("the relay queue keeps %d jobs", n)
		}
		if q, _ := r.broker.Queue(r.b.top.RelayQueue()); q.Unacked != 0 {
			t.Fatalf("the relay holds %d jobs unacknowledged", q.Unacked)
		}
		logs := r.logs.String()
		if !strings.Contains(logs, `level=WARN msg="rabbitmq: a held job's work queue was deleted while it waited; the job is dropped with it" job_id=orphan queue=gone`) {
			t.Fatalf("no WARN naming the dropped job and its queue:\n%s", logs)
		}
		if strings.Contains(logs, "relaying a held job failed") {
			t.Fatalf("the dropped job was retried:\n%s", logs)
		}
		if err := receiveDelivery(t, c).Ack(); err != nil {
			t.Fatal(err)
		}
	})
}

// After an upgrade from a release whose ladder was per work queue, a
// worker still relays what the old rungs release into the old relay
// queue: a job without the queue header goes on down the shared ladder,
// and back to the work queue whose old relay queue it came from.
func TestAWorkerDrainsTheLadderOfAnEarlierRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSharedRig(t, -1)
		quorum := amqp.Table{"x-queue-type": "quorum"}
		if _, err := r.admin.QueueDeclare("jobs.deferred.relay", true, false, false, false, quorum); err != nil {
			t.Fatal(err)
		}
		// As the old rungs released it: what remains, the priority, no queue.
		if err := r.admin.Publish("", "jobs.deferred.relay", false, false, amqp.Publishing{MessageId: "old", Body: []byte(`{}`),
			Headers: amqp.Table{HeaderRemaining: int64(2000), HeaderPriority: int64(3)}}); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err)
		}
		c, err := r.b.Consume(t.Context(), "jobs", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		synctest.Wait()
		if n := r.ready("queuey.ladder.2000"); n != 1 || r.ready("jobs.deferred.relay") != 0 {
			t.Fatalf("the shared 2 s rung holds %d, the old relay queue %d; want the job moved on", n, r.ready("jobs.deferred.relay"))
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		d := receiveDelivery(t, c)
		if d.Priority() != 3 {
			t.Fatalf("back at priority %d, want 3", d.Priority())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	})
}

// A process that finds the queue's warm marker but not the ladder's (a
// queue first used by a release with a ladder of its own) waits out the
// warm-up: the shared ladder may be as young as its own declaration.
func TestANewLadderBesideAnOldMarkerWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSharedRig(t, 0)
		b, broker := r.b, r.broker
		if _, err := r.admin.QueueDeclare("jobs.deferred.warm", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(t.Context(), testJob("jobs", "j", 0), time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != DefaultHoldWarmup {
			t.Fatalf("the first hold went %s after the declaration, want %s", waited, DefaultHoldWarmup)
		}
		if _, ok := broker.Queue("queuey.warm"); !ok {
			t.Fatal("the ladder's warm marker was not declared after the wait")
		}
	})
}
