package rabbitmq

// The consumer-timeout fault test: the broker's consumer_timeout set far
// below a handler's run (docs/consumer-timeout.md). It needs rabbitmqctl, so
// it runs in CI's fault step with the other TestLiveFault tests.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Job types of the test: one per queue, as a job's queue is its type's.
type (
	ctLongClassic struct{}
	ctLongQuorum  struct{}
	ctHungClassic struct{}
	ctHungQuorum  struct{}
)

func (ctLongClassic) Kind() string  { return "ct-long-classic" }
func (ctLongClassic) Queue() string { return "queuey-live-ct-long-classic" }
func (ctLongQuorum) Kind() string   { return "ct-long-quorum" }
func (ctLongQuorum) Queue() string  { return "queuey-live-ct-long-quorum" }
func (ctHungClassic) Kind() string  { return "ct-hung-classic" }
func (ctHungClassic) Queue() string { return "queuey-live-ct-hung-classic" }
func (ctHungQuorum) Kind() string   { return "ct-hung-quorum" }
func (ctHungQuorum) Queue() string  { return "queuey-live-ct-hung-quorum" }

// ctRuns records each run of a job: its attempt.
type ctRuns struct {
	mu       sync.Mutex
	attempts []int
	finished int
}

func (r *ctRuns) started(attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, attempt)
}

func (r *ctRuns) get() ([]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.attempts...), r.finished
}

// With the broker's consumer_timeout at 5 s and its channel tick at 1 s,
// a handler of 75 s on a default worker runs once and is acknowledged, and
// a handler that ignores its context past a 3 s Timeout runs its two
// attempts and is dead-lettered "timed out", on a classic and a quorum
// queue: the backend asked the broker for a limit above the worker's own
// (x-consumer-timeout on a 4.0 queue, on a 4.3 quorum consumer; a 4.3
// classic queue has none). Before, the 75 s job ran at attempt 1 again
// and again, never acknowledged (docs/rabbitmq-semantics.md §14).
func TestLiveFaultConsumerTimeout(t *testing.T) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	rabbitmqctl(t, "eval", "application:set_env(rabbit, channel_tick_interval, 1000).") // skips without QUEUEY_RABBITMQCTL
	t.Cleanup(func() {
		rabbitmqctl(t, "eval", "application:set_env(rabbit, consumer_timeout, 1800000).")
		rabbitmqctl(t, "eval", "application:set_env(rabbit, channel_tick_interval, 60000).")
	})
	rabbitmqctl(t, "eval", "application:set_env(rabbit, consumer_timeout, 5000).")

	long := 75 * time.Second
	if testing.Short() {
		long = 15 * time.Second
	}
	t.Run("long", func(t *testing.T) {
		t.Run("classic", func(t *testing.T) {
			t.Parallel()
			ctLong[ctLongClassic](t, url, queuey.Classic, long)
		})
		t.Run("quorum", func(t *testing.T) {
			t.Parallel()
			ctLong[ctLongQuorum](t, url, queuey.Quorum, long)
		})
		t.Run("hung-classic", func(t *testing.T) {
			t.Parallel()
			ctHung[ctHungClassic](t, url, queuey.Classic)
		})
		t.Run("hung-quorum", func(t *testing.T) {
			t.Parallel()
			ctHung[ctHungQuorum](t, url, queuey.Quorum)
		})
	})
}

// ctRig is a backend made by Connect (which reads the broker's release),
// a producer and a worker on queue q, declared afresh.
type ctRig struct {
	t      *testing.T
	admin  *amqp.Connection
	b      *Backend
	q      queuey.QueueConfig
	worker *queuey.Worker
	stop   context.CancelFunc
	ran    chan error
}

func newCTRig[T queuey.JobArgs](t *testing.T, url string, q queuey.QueueConfig) *ctRig {
	t.Helper()
	admin, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	b, err := Connect(t.Context(), ConnectOptions{URLs: []string{url}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &ctRig{t: t, admin: admin, b: b, q: q}
	r.deleteQueues()
	t.Cleanup(r.deleteQueues)
	queues := []queuey.QueueConfig{q}
	producer, err := queuey.NewProducer(t.Context(), b, queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var zero T
	if _, err := producer.Enqueue(t.Context(), zero); err != nil {
		t.Fatal(err)
	}
	if r.worker, err = queuey.NewWorker(t.Context(), b, queues, queuey.WorkerConfig{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *ctRig) run() {
	ctx, stop := context.WithCancel(context.Background())
	r.stop, r.ran = stop, make(chan error, 1)
	go func() { r.ran <- r.worker.Run(ctx) }()
	r.t.Cleanup(func() {
		r.stop()
		<-r.ran
		_ = r.b.Close()
	})
}

// stopWorker stops the worker gracefully: it settles what has finished.
func (r *ctRig) stopWorker() {
	r.stop()
	if err := <-r.ran; err != nil {
		r.t.Errorf("Run: %v", err)
	}
	r.ran <- nil // for the cleanup
}

func (r *ctRig) deleteQueues() {
	ch, err := r.admin.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	for _, name := range []string{r.q.Name, r.b.Topology().DeadQueue(r.q.Name)} {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			r.t.Fatalf("delete %s: %v", name, err)
		}
	}
}

// depth is how many messages wait on queue.
func (r *ctRig) depth(queue string) int {
	ch, err := r.admin.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		r.t.Fatalf("passive declare %s: %v", queue, err)
	}
	return st.Messages
}

func ctLong[T queuey.JobArgs](t *testing.T, url string, typ queuey.QueueType, long time.Duration) {
	var zero T
	runs := &ctRuns{}
	done := make(chan struct{})
	r := newCTRig[T](t, url, queuey.QueueConfig{Name: zero.Queue(), Type: typ})
	err := queuey.Register(r.worker, queuey.HandlerFunc[T](func(ctx context.Context, job *queuey.Job[T]) error {
		runs.started(job.Attempt)
		select {
		case <-time.After(long):
		case <-ctx.Done():
			return ctx.Err()
		}
		runs.mu.Lock()
		runs.finished++
		if runs.finished == 1 {
			close(done)
		}
		runs.mu.Unlock()
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	r.run()
	select {
	case <-done:
	case <-time.After(long + 2*time.Minute):
		attempts, _ := runs.get()
		t.Fatalf("no run finished within %s of a %s handler; runs at attempts %v", long+2*time.Minute, long, attempts)
	}
	r.stopWorker()
	attempts, finished := runs.get()
	if len(attempts) != 1 || attempts[0] != 1 || finished != 1 {
		t.Errorf("runs at attempts %v, %d finished; want one run at attempt 1", attempts, finished)
	}
	if n := r.depth(r.q.Name); n != 0 {
		t.Errorf("%d message(s) back on %s after the run: the job was not acknowledged", n, r.q.Name)
	}
	if n := r.depth(r.b.Topology().DeadQueue(r.q.Name)); n != 0 {
		t.Errorf("%d dead letter(s): want none", n)
	}
	t.Logf("RESULT consumer-timeout long %s %s: runs at attempts %v, acknowledged", typ, long, attempts)
}

func ctHung[T queuey.JobArgs](t *testing.T, url string, typ queuey.QueueType) {
	var zero T
	runs := &ctRuns{}
	release := make(chan struct{})
	q := queuey.QueueConfig{Name: zero.Queue(), Type: typ, Timeout: 3 * time.Second,
		Retry: queuey.RetryPolicy{MaxAttempts: 2, Base: 100 * time.Millisecond}}
	r := newCTRig[T](t, url, q)
	err := queuey.Register(r.worker, queuey.HandlerFunc[T](func(ctx context.Context, job *queuey.Job[T]) error {
		runs.started(job.Attempt)
		<-release // ignores its context
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	r.run()
	t.Cleanup(func() { close(release) })
	dead := r.b.Topology().DeadQueue(q.Name)
	deadline := time.Now().Add(2 * time.Minute)
	for r.depth(dead) == 0 {
		if time.Now().After(deadline) {
			attempts, _ := runs.get()
			t.Fatalf("not dead-lettered within 2 min; runs at attempts %v", attempts)
		}
		time.Sleep(250 * time.Millisecond) // a live broker: nothing to wait on but its queue
	}
	ch, err := r.admin.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	d, ok, err := ch.Get(dead, true)
	if err != nil || !ok {
		t.Fatalf("get dead letter: ok %v, %v", ok, err)
	}
	if reason := d.Headers[HeaderDeathReason]; reason != queuey.ReasonTimedOut {
		t.Errorf("dead-letter reason %q, want %q", reason, queuey.ReasonTimedOut)
	}
	attempts, _ := runs.get()
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Errorf("runs at attempts %v, want [1 2]", attempts)
	}
	t.Logf("RESULT consumer-timeout hung %s: runs at attempts %v, dead-lettered %q", typ, attempts, d.Headers[HeaderDeathReason])
}
