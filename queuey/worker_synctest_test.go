package queuey_test

// Worker.Run, the goroutine shell, tested in testing/synctest bubbles: the
// broker (membroker), the backend and the worker all run on the bubble's
// fake clock, so stop, StopTimeout and RequeueDelay are timed exactly,
// with no polling and no sleeps of the wall clock.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

type tick struct{}

func (tick) Kind() string  { return "tick" }
func (tick) Queue() string { return "jobs" }

// bubble is a broker, a backend, a producer and a worker for queue "jobs"
// (prefetch 2), made inside a synctest bubble; stop closes them all so
// that the bubble's goroutines end.
type bubble struct {
	t        *testing.T
	broker   *membroker.Broker
	producer *queuey.Producer
	worker   *queuey.Worker
	backend  *rabbitmq.Backend
	conn     *membroker.Connection
}

func newBubble(t *testing.T, cfg queuey.WorkerConfig, handler func(ctx context.Context, job *queuey.Job[tick]) error) *bubble {
	t.Helper()
	broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40}) // the real clock: the bubble's
	conn, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	// No warm-up for the hold ladder: the bubble's membroker is never killed.
	backend, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{Topology: rabbitmq.Topology{HoldWarmup: -1}})
	if err != nil {
		t.Fatal(err)
	}
	queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 2}}
	producer, err := queuey.NewProducer(t.Context(), backend, queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := queuey.NewWorker(t.Context(), backend, queues, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := queuey.Register(worker, queuey.HandlerFunc[tick](handler)); err != nil {
		t.Fatal(err)
	}
	b := &bubble{t: t, broker: broker, producer: producer, worker: worker, backend: backend, conn: conn}
	t.Cleanup(func() {
		_ = backend.Close()
		_ = conn.Close()
	})
	return b
}

// run starts Run and returns its result channel.
func (b *bubble) run(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.worker.Run(ctx) }()
	return done
}

func (b *bubble) enqueue() {
	b.t.Helper()
	if _, err := b.producer.Enqueue(b.t.Context(), tick{}); err != nil {
		b.t.Fatal(err)
	}
}

// counts is how many messages are ready and unacknowledged on queue.
func (b *bubble) counts(queue string) (ready, unacked int) {
	q, _ := b.broker.Queue(queue)
	return q.Ready, q.Unacked
}

// A graceful stop waits for the running handler, settles its job and
// returns nil the instant the handler is done.
func TestRunGracefulStopWaitsForTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, queuey.WorkerConfig{}, func(ctx context.Context, job *queuey.Job[tick]) error {
			time.Sleep(20 * time.Second) // work that does not watch ctx
			return nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := b.run(ctx)
		b.enqueue()
		time.Sleep(5 * time.Second)
		start := time.Now()
		cancel()
		synctest.Wait()
		if len(done) != 0 {
			t.Fatal("Run returned while a handler was running")
		}
		if err := <-done; err != nil {
			t.Fatalf("Run after a graceful stop: %v", err)
		}
		if waited := time.Since(start); waited != 15*time.Second {
			t.Errorf("Run returned %s after the stop, want 15s (the handler's rest)", waited)
		}
		if ready, unacked := b.counts("jobs"); ready != 0 || unacked != 0 {
			t.Errorf("after the stop: ready %d, unacked %d; want the job acknowledged", ready, unacked)
		}
	})
}

// StopTimeout bounds the wait: the handler's context is cancelled exactly
// StopTimeout after the stop, and a job whose settling was cut short goes
// back to its queue, never lost.
func TestRunStopTimeoutCancelsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cancelledAfter time.Duration
		var stoppedAt time.Time
		b := newBubble(t, queuey.WorkerConfig{StopTimeout: 7 * time.Second}, func(ctx context.Context, job *queuey.Job[tick]) error {
			<-ctx.Done()
			cancelledAfter = time.Since(stoppedAt)
			return ctx.Err()
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := b.run(ctx)
		b.enqueue()
		synctest.Wait() // the handler is running
		stoppedAt = time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run after StopTimeout: %v", err)
		}
		if cancelledAfter != 7*time.Second || time.Since(stoppedAt) != 7*time.Second {
			t.Errorf("handler cancelled %s after the stop and Run returned %s after it, want 7s and 7s", cancelledAfter, time.Since(stoppedAt))
		}
		if ready, unacked := b.counts("jobs"); ready+unacked != 1 {
			t.Errorf("after the timeout: ready %d, unacked %d; want the job back on its queue", ready, unacked)
		}
	})
}

// A job whose successor cannot be published waits exactly RequeueDelay,
// unacknowledged, before it goes back to its queue; then it runs again.
func TestRunRequeueDelayBoundsRetriesOfAFailingSettlement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs []time.Time
		b := newBubble(t, queuey.WorkerConfig{RequeueDelay: 3 * time.Second}, func(ctx context.Context, job *queuey.Job[tick]) error {
			runs = append(runs, time.Now())
			return queuey.Defer(time.Second, "later")
		})
		// An operator deleted the ladder's 1 s rung: every deferral's
		// successor is returned.
		admin, err := b.conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		// The retry's rung is gone: the broker returns the retry.
		if _, err := admin.QueueDelete("queuey.ladder.1000", false, false, false); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := b.run(ctx)
		b.enqueue()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(runs) != 4 {
			t.Fatalf("%d runs in 10 s with a 3 s RequeueDelay, want 4 (at 0, 3, 6 and 9 s)", len(runs))
		}
		for i := 1; i < len(runs); i++ {
			if gap := runs[i].Sub(runs[i-1]); gap != 3*time.Second {
				t.Errorf("run %d came %s after the one before, want exactly the RequeueDelay, 3s", i+1, gap)
			}
		}
	})
}

// A stop does not wait out RequeueDelay: the job waiting to be returned is
// returned at once, and Run ends at the instant of the stop.
func TestRunStopDoesNotWaitOutRequeueDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, queuey.WorkerConfig{RequeueDelay: time.Hour}, func(ctx context.Context, job *queuey.Job[tick]) error {
			return queuey.Fatal(errors.New("bad"))
		})
		// The dead-letter queue is gone: every dead letter is returned
		// (NO_ROUTE), and the job waits to go back to its queue.
		admin, err := b.conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.QueueDelete("jobs.dead", false, false, false); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := b.run(ctx)
		b.enqueue()
		time.Sleep(time.Minute)
		synctest.Wait()
		start := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("Run returned %s after the stop, want at once", waited)
		}
		if ready, unacked := b.counts("jobs"); ready != 1 || unacked != 0 {
			t.Errorf("after the stop: ready %d, unacked %d; want the job back on its queue", ready, unacked)
		}
	})
}
