package rabbitmq

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// A deferral no hold queue can take (a Retry-After of 30 days, over
// MaxHoldTTL) is dead-lettered with its reason. Before, the refusal sent
// the job back to its queue, and it ran again every RequeueDelay, calling
// the rate-limited service each time, for ever.
func TestWorkerDeadLettersADelayNoHoldCanTake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		producer, worker := jobsDeployment(t, Channels(conn.Channel))
		var runs atomic.Int32
		err = queuey.Register(worker, queuey.HandlerFunc[slowJob](func(context.Context, *queuey.Job[slowJob]) error {
			runs.Add(1)
			return queuey.Defer(30*24*time.Hour, "Retry-After: 30 days")
		}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := producer.Enqueue(t.Context(), slowJob{N: 1}); err != nil {
			t.Fatal(err)
		}
		runOnceInTenRequeueDelays(t, worker, &runs)
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		d := takeDeadLetter(t, ch)
		env, err := queuey.DecodeEnvelope(d.Body)
		if err != nil {
			t.Fatal(err)
		}
		if reason := d.Headers[HeaderDeathReason]; reason != queuey.ReasonDelayTooLong || env.Deferrals != 0 || env.Attempt != 1 {
			t.Fatalf("dead letter: reason %v, deferrals %d, attempt %d; want %q, 0, 1", reason, env.Deferrals, env.Attempt, queuey.ReasonDelayTooLong)
		}
	})
}

// A retry cap no hold queue can take is refused when the queue is
// declared, rather than at the first retry that reaches it.
func TestDeclareRefusesARetryCapNoHoldCanTake(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs", Retry: queuey.RetryPolicy{Cap: 40 * 24 * time.Hour}})
	if !errors.Is(err, queuey.ErrDelayTooLong) {
		t.Fatalf("Declare with a 40-day retry cap: %v, want ErrDelayTooLong", err)
	}
}

// A dead-letter reason longer than MaxReason (a fatal error quoting a
// 200 KB response body) is cut at a character's start: whole, the header
// frame would exceed RabbitMQ's frame_max and the broker would close the
// connection.
func TestDeadLetterCutsALongReason(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	reason := "fatal: upstream said: " + strings.Repeat("é", 100_000)
	if err := r.b.DeadLetter(t.Context(), "jobs", []byte(`{}`), reason, 1); err != nil {
		t.Fatal(err)
	}
	ch, err := r.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d := takeDeadLetter(t, ch)
	got, _ := d.Headers[HeaderDeathReason].(string)
	if len(got) > MaxReason || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "fatal: upstream said: éé") {
		t.Fatalf("reason of %d bytes, valid UTF-8 %t: %.40q…", len(got), utf8.ValidString(got), got)
	}
	if short := cutReason("fatal: boom"); short != "fatal: boom" {
		t.Fatalf("a short reason was changed: %q", short)
	}
}

// EnqueueAfter with a delay of zero or less enqueues now; with one no hold
// can take, it is refused before anything is sent.
func TestEnqueueAfterAtTheEdges(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	queues := []queuey.QueueConfig{{Name: "jobs"}}
	producer, err := queuey.NewProducer(t.Context(), r.b, queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.EnqueueAfter(t.Context(), slowJob{N: 1}, -time.Hour); err != nil {
		t.Fatal(err)
	}
	if id, err := producer.EnqueueAfter(t.Context(), slowJob{N: 2}, 30*24*time.Hour); !errors.Is(err, queuey.ErrDelayTooLong) || id != "" {
		t.Fatalf("EnqueueAfter 30 days: %q, %v; want ErrDelayTooLong and no ID", id, err)
	}
	held := 0
	for _, q := range r.broker.Queues() {
		held += q.Ready
	}
	if q, _ := r.broker.Queue("jobs"); q.Ready != 1 || held != 1 {
		t.Fatalf("%d ready on jobs, %d in all; want the negative-delay job alone, on jobs", q.Ready, held)
	}
}

// jobsDeployment is a backend on open with the queue "jobs" at prefetch 1,
// and a producer and a worker for it.
func jobsDeployment(t *testing.T, open func() (Channel, error)) (*queuey.Producer, *queuey.Worker) {
	t.Helper()
	b, err := New(open, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 1}}
	producer, err := queuey.NewProducer(t.Context(), b, queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := queuey.NewWorker(t.Context(), b, queues, queuey.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return producer, worker
}

// A deferral whose successor grows past MaxMessageSize (the priority of
// the deferral's round takes a digit more, and an Observer stamps when the
// job is due) is dead-lettered as the job ran, with its reason. Before, the
// refusal sent the job back to its queue, and it ran again every
// RequeueDelay for ever. The dead letter drops the due stamp, so it is no
// larger than the delivery the broker took.
func TestWorkerDeadLettersASuccessorTooLarge(t *testing.T) {
	for _, observed := range []bool{false, true} {
		name := "plain"
		if observed {
			name = "observed"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				testSuccessorTooLarge(t, observed)
			})
		})
	}
}

func testSuccessorTooLarge(t *testing.T, observed bool) {
	broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
	conn, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 1}}
	producerBackend, err := New(Channels(conn.Channel), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = producerBackend.Close() })
	producer, err := queuey.NewProducer(t.Context(), producerBackend, queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Enqueue(t.Context(), slowJob{N: 1}); err != nil {
		t.Fatal(err)
	}
	// The worker's backend takes nothing larger than the job as enqueued.
	q, _ := broker.Queue("jobs")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("jobs", false)
	if err != nil || !ok || q.Ready != 1 {
		t.Fatalf("the enqueued job: %v, %v", ok, err)
	}
	size := len(d.Body)
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	workerBackend, err := New(Channels(conn.Channel), Options{MaxMessageSize: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = workerBackend.Close() })
	var logs syncBuffer
	cfg := queuey.WorkerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if observed {
		cfg.Observer = nopObserver{}
	}
	worker, err := queuey.NewWorker(t.Context(), workerBackend, queues, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	err = queuey.Register(worker, queuey.HandlerFunc[slowJob](func(context.Context, *queuey.Job[slowJob]) error {
		runs.Add(1)
		return queuey.Defer(time.Second, "rate limited")
	}))
	if err != nil {
		t.Fatal(err)
	}
	runOnceInTenRequeueDelays(t, worker, &runs)
	dead := takeDeadLetter(t, ch)
	env, err := queuey.DecodeEnvelope(dead.Body)
	if err != nil {
		t.Fatal(err)
	}
	if reason := dead.Headers[HeaderDeathReason]; reason != queuey.ReasonJobTooLarge || env.Deferrals != 0 || env.Attempt != 1 || env.Priority != 0 {
		t.Fatalf("dead letter: reason %v, deferrals %d, attempt %d, priority %d; want %q, 0, 1, 0",
			reason, env.Deferrals, env.Attempt, env.Priority, queuey.ReasonJobTooLarge)
	}
	if _, stamped := env.Ext[queuey.ExtDueAt]; stamped || len(dead.Body) > size {
		t.Fatalf("dead letter of %d bytes (the delivery had %d), due stamp kept: %t", len(dead.Body), size, stamped)
	}
	if got := logs.String(); !strings.Contains(got, `level=ERROR msg="queuey: job dead-lettered: no hold can take its defer"`) ||
		!strings.Contains(got, `reason="job too large"`) {
		t.Fatalf("the worker did not log the dead letter:\n%s", got)
	}
}

// nopObserver observes nothing; a worker with an Observer stamps each
// retry and deferral with when it is due.
type nopObserver struct{}

func (nopObserver) Enqueue(context.Context, *queuey.Envelope) func(error) { return func(error) {} }
func (nopObserver) Run(ctx context.Context, _ queuey.RunInfo) (context.Context, func(queuey.RunOutcome)) {
	return ctx, func(queuey.RunOutcome) {}
}
func (nopObserver) Malformed(context.Context, string) {}

// A job another producer wrote more tersely than Encode does (no deferrals
// or priority, a whole-second enqueued_at), just under MaxMessageSize:
// neither its retry nor its re-encoded dead letter fits, so it is
// dead-lettered byte for byte as it was delivered. Before, the re-encoded
// dead letter was refused too, and the job ran every RequeueDelay for ever.
func TestWorkerDeadLettersATerseJobVerbatimWhenItCannotGrow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(`{"v":1,"id":"terse-1","kind":"slow","queue":"jobs","payload":{"N":1},"attempt":1,"enqueued_at":"2025-01-02T03:04:05Z"}`)
		b, err := New(Channels(conn.Channel), Options{MaxMessageSize: len(body)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 1, Retry: queuey.RetryPolicy{MaxAttempts: 5}}}
		worker, err := queuey.NewWorker(t.Context(), b, queues, queuey.WorkerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		err = queuey.Register(worker, queuey.HandlerFunc[slowJob](func(context.Context, *queuey.Job[slowJob]) error {
			runs.Add(1)
			return errors.New("upstream unavailable")
		}))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Publish("", "jobs", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}); err != nil {
			t.Fatal(err)
		}
		runOnceInTenRequeueDelays(t, worker, &runs)
		dead := takeDeadLetter(t, ch)
		if reason, attempts := dead.Headers[HeaderDeathReason], dead.Headers[HeaderAttempts]; reason != queuey.ReasonJobTooLarge ||
			attempts != int64(1) || string(dead.Body) != string(body) {
			t.Fatalf("dead letter: reason %v, x-attempts %v, body %s; want %q, 1 and the delivered body", reason, attempts, dead.Body, queuey.ReasonJobTooLarge)
		}
	})
}

// runOnceInTenRequeueDelays runs worker for ten RequeueDelays of the
// bubble's clock and fails t unless its handler, which counts its runs in
// runs, ran exactly once in that time.
func runOnceInTenRequeueDelays(t *testing.T, worker *queuey.Worker, runs *atomic.Int32) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx) }()
	time.Sleep(10 * time.Second)
	synctest.Wait()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times in 10 s, want once", n)
	}
}

// takeDeadLetter takes the first message of the dead-letter queue of
// "jobs", failing t if there is none.
func takeDeadLetter(t *testing.T, ch *membroker.Channel) amqp.Delivery {
	t.Helper()
	d, ok, err := ch.Get("jobs.dead", true)
	if err != nil || !ok {
		t.Fatalf("no dead letter (%v)", err)
	}
	return d
}
