package queueytest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Work is a test job whose behaviour its handler looks up by Name.
type Work struct {
	Name string `json:"name"`
}

func (Work) Kind() string  { return "work" }
func (Work) Queue() string { return "jobs" }

var noJitter = queuey.RetryPolicy{Base: 2 * time.Second, Cap: time.Minute, MaxAttempts: 3, Jitter: queuey.NoJitter}

func jobsQueue() queuey.QueueConfig {
	return queuey.QueueConfig{Name: "jobs", Prefetch: 1, Retry: noJitter}
}

// brokerChannel opens a raw membroker channel next to the harness.
func brokerChannel(t *testing.T, h *queueytest.Harness) *membroker.Channel {
	t.Helper()
	conn, err := h.Broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// With classic holds (rabbitmq.Topology.ClassicHolds), a retry waits in a
// hold queue of its own TTL, declared as docs/hold-queue-expiry.md says.
func TestRetryWaitsInItsHoldQueueAndComesBackAtPriorityZero(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{Topology: rabbitmq.Topology{ClassicHolds: true}}, jobsQueue())
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		if job.Attempt == 1 {
			return errors.New("flaky")
		}
		return nil
	})
	h.Start()
	id, err := h.Producer.Defer(context.Background(), Work{Name: "a"}, time.Second) // arrives at priority 10
	if err != nil {
		t.Fatal(err)
	}
	h.Advance(time.Second)
	h.WaitFor("the retry to be held", func() bool { return h.Held("jobs") == 1 })
	hold, ok := h.Broker.Queue("jobs.deferred.2000")
	if !ok {
		t.Fatalf("no hold queue jobs.deferred.2000; queues: %v", h.Broker.Queues())
	}
	// docs/hold-queue-expiry.md: x-expires = TTL + max(TTL, 60 s).
	want := amqp.Table{"x-queue-type": "classic", "x-message-ttl": int64(2000), "x-expires": int64(62000),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs"}
	for k, v := range want {
		if hold.Arguments[k] != v {
			t.Errorf("hold queue argument %s = %v, want %v", k, hold.Arguments[k], v)
		}
	}
	h.Advance(1999 * time.Millisecond)
	if n := len(h.Log.RunsOf(id)); n != 1 || h.Held("jobs") != 1 {
		t.Fatalf("released early: %d runs, %d held at 1.999 s", n, h.Held("jobs"))
	}
	h.Advance(time.Millisecond)
	h.WaitFor("the second attempt", func() bool { return len(h.Log.RunsOf(id)) == 2 })
	runs := h.Log.RunsOf(id)
	if runs[0].Priority != 10 || runs[1].Attempt != 2 || runs[1].Priority != 0 {
		t.Fatalf("runs %v: want the deferred first run at priority 10, the retry at attempt 2 and priority 0", runs)
	}
}

func TestDeferralComesBackAheadOfTheBacklog(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	gate := make(chan struct{})
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		switch {
		case job.Args.Name == "limited" && job.Deferrals == 0:
			return queuey.Defer(10*time.Second, "429")
		case job.Args.Name == "backlog0":
			<-gate // the worker (prefetch 1) is busy while the deferral returns
		}
		return nil
	})
	h.Start()
	ctx := context.Background()
	if _, err := h.Producer.Enqueue(ctx, Work{Name: "limited"}); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("the deferral", func() bool { return h.Held("jobs") == 1 })
	for _, name := range []string{"backlog0", "backlog1", "backlog2"} {
		if _, err := h.Producer.Enqueue(ctx, Work{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	h.WaitFor("backlog0 to start", func() bool { return h.Pending("jobs") == 2 })
	h.Advance(10 * time.Second)
	h.WaitFor("the deferral to be released", func() bool { return h.Pending("jobs") == 3 })
	close(gate)
	h.WaitFor("everything to run", func() bool { return len(h.Log.Runs()) == 5 })
	names := make([]string, 0, 5)
	for _, r := range h.Log.Runs() {
		names = append(names, r.String())
	}
	runs := h.Log.Runs()
	if runs[2].Deferrals != 1 || runs[2].Priority != 10 {
		t.Fatalf("third run should be the returning deferral at priority 10, ahead of backlog1 and backlog2:\n%s", strings.Join(names, "\n"))
	}
}

func TestShortWaitNeverStuckBehindLongOne(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		if job.Deferrals > 0 {
			return nil
		}
		if job.Args.Name == "long" {
			return queuey.Defer(5*time.Minute, "")
		}
		return queuey.Defer(time.Second, "")
	})
	h.Start()
	ctx := context.Background()
	long, _ := h.Producer.Enqueue(ctx, Work{Name: "long"})
	h.WaitFor("the long wait", func() bool { return h.Held("jobs") == 1 })
	short, _ := h.Producer.Enqueue(ctx, Work{Name: "short"})
	h.WaitFor("the short wait", func() bool { return h.Held("jobs") == 2 })
	h.Advance(time.Second)
	h.WaitFor("the short job to come back after 1 s", func() bool { return len(h.Log.RunsOf(short)) == 2 })
	if n := len(h.Log.RunsOf(long)); n != 1 {
		t.Fatalf("the long job ran %d times by 1 s", n)
	}
}

func TestAttemptsExhaustedGoToTheDeadQueueWithReasonHeaders(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error { return errors.New("always") })
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), Work{Name: "doomed"})
	h.WaitFor("attempt 1's retry to be held", func() bool { return h.Held("jobs") == 1 })
	h.Advance(2 * time.Second)
	h.WaitFor("attempt 2's retry to be held", func() bool { return len(h.Log.RunsOf(id)) == 2 && h.Held("jobs") == 1 })
	h.Advance(4 * time.Second)
	h.WaitFor("attempt 3 and the dead letter", func() bool { return h.Dead("jobs") == 1 })
	d, ok, err := brokerChannel(t, h).Get("jobs.dead", true)
	if err != nil || !ok {
		t.Fatalf("get jobs.dead: %v %v", ok, err)
	}
	if d.Headers["x-death-reason"] != queuey.ReasonAttemptsExhausted || d.Headers["x-original-queue"] != "jobs" {
		t.Fatalf("dead letter headers %v", d.Headers)
	}
	if n, ok := asInt(d.Headers["x-attempts"]); !ok || n != 3 {
		t.Fatalf("x-attempts %v (%T), want 3", d.Headers["x-attempts"], d.Headers["x-attempts"])
	}
	env, err := queuey.DecodeEnvelope(d.Body)
	if err != nil || env.ID != id || env.Attempt != 3 {
		t.Fatalf("dead letter body: %+v, %v", env, err)
	}
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

func TestMalformedBodyDeadLetteredVerbatimAndConsumingGoesOn(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error { return nil })
	h.Start()
	ch := brokerChannel(t, h)
	if err := ch.Publish("", "jobs", false, false, amqp.Publishing{Body: []byte("not an envelope")}); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("the dead letter", func() bool { return h.Dead("jobs") == 1 })
	id, _ := h.Producer.Enqueue(context.Background(), Work{Name: "next"})
	h.WaitFor("the next job to run", func() bool { return len(h.Log.RunsOf(id)) == 1 })
	d, _, _ := ch.Get("jobs.dead", true)
	if string(d.Body) != "not an envelope" || d.Headers["x-death-reason"] != queuey.ReasonMalformed {
		t.Fatalf("dead letter %q %v", d.Body, d.Headers)
	}
}

type Unhandled struct{}

func (Unhandled) Kind() string  { return "unhandled" }
func (Unhandled) Queue() string { return "jobs" }

func TestUnknownKindDeadLetteredNeverRetried(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error { return nil })
	h.Start()
	if _, err := h.Producer.Enqueue(context.Background(), Unhandled{}); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("the dead letter", func() bool { return h.Dead("jobs") == 1 })
	if h.Held("jobs") != 0 {
		t.Fatal("an unknown kind was retried")
	}
}

func TestPanicIsRetriedAndLoggedWithStack(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	h := queueytest.New(t, queueytest.Options{Worker: queuey.WorkerConfig{Logger: logger}}, jobsQueue())
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		if job.Attempt == 1 {
			var m map[string]int
			m["boom"]++ //lint:ignore SA5000 the nil map write is the panic under test
		}
		return nil
	})
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), Work{Name: "p"})
	h.WaitFor("the retry to be held", func() bool { return h.Held("jobs") == 1 })
	h.Advance(2 * time.Second)
	h.WaitFor("attempt 2", func() bool { return len(h.Log.RunsOf(id)) == 2 })
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "handler panicked") || !strings.Contains(out, "stack=") {
		t.Fatalf("panic not logged at WARN with a stack:\n%s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestProducerErrors(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	ctx := context.Background()
	if _, err := h.Producer.EnqueueAfter(ctx, Work{}, 30*24*time.Hour); !errors.Is(err, queuey.ErrDelayTooLong) {
		t.Errorf("30-day delay: %v, want ErrDelayTooLong", err)
	}
	undeclared := queuey.NewUndeclaredProducer(h.Backend, queuey.ProducerConfig{})
	if _, err := undeclared.Enqueue(ctx, Work{}); err != nil {
		t.Errorf("an undeclared producer can enqueue: %v", err)
	}
	for name, call := range map[string]func() (string, error){
		"EnqueueAfter": func() (string, error) { return undeclared.EnqueueAfter(ctx, Work{}, time.Second) },
		"Defer":        func() (string, error) { return undeclared.Defer(ctx, Work{}, time.Second) },
	} {
		if _, err := call(); !errors.Is(err, queuey.ErrUnknownQueue) {
			t.Errorf("undeclared %s: %v, want ErrUnknownQueue", name, err)
		}
	}
	if err := queuey.Register(h.Worker, queuey.HandlerFunc[Elsewhere](func(context.Context, *queuey.Job[Elsewhere]) error { return nil })); !errors.Is(err, queuey.ErrUnknownQueue) {
		t.Errorf("registering a handler for a queue the worker does not consume: %v", err)
	}
}

type Elsewhere struct{}

func (Elsewhere) Kind() string  { return "elsewhere" }
func (Elsewhere) Queue() string { return "other" }

func TestLongQueueNameRefusedBeforeTheBroker(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	long := strings.Repeat("q", 250) // its warm marker's name would be 264 bytes
	_, err := queuey.NewProducer(context.Background(), h.Backend, []queuey.QueueConfig{{Name: long}}, queuey.ProducerConfig{})
	if err == nil || !strings.Contains(err.Error(), "name too long") {
		t.Fatalf("NewProducer with a 250-byte name: %v", err)
	}
	if _, ok := h.Broker.Queue(long); ok {
		t.Fatal("the long-named queue reached the broker")
	}
	if _, err := h.Producer.EnqueueAfter(context.Background(), Work{}, time.Second); err != nil {
		t.Fatalf("the backend is unusable after the refusal: %v", err)
	}
}

func TestRefusedDeclarationLeavesPublishingWorking(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	ctx := context.Background()
	_, err := queuey.NewProducer(ctx, h.Backend, []queuey.QueueConfig{{Name: "jobs", Type: queuey.Quorum}}, queuey.ProducerConfig{})
	if err == nil || !strings.Contains(err.Error(), "jobs") {
		t.Fatalf("redeclaring jobs as quorum: %v, want an error naming jobs", err)
	}
	if _, err := h.Producer.Enqueue(ctx, Work{}); err != nil {
		t.Fatalf("Enqueue after a refused declaration: %v", err)
	}
	if _, err := h.Producer.EnqueueAfter(ctx, Work{}, 3*time.Second); err != nil {
		t.Fatalf("EnqueueAfter (a hold declaration) after a refused declaration: %v", err)
	}
	if h.Pending("jobs") != 1 || h.Held("jobs") != 1 {
		t.Fatalf("pending %d held %d", h.Pending("jobs"), h.Held("jobs"))
	}
}

func TestGracefulStopWaitsForRunningHandlersAndSettlesThem(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	started, release := make(chan struct{}), make(chan struct{})
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		close(started)
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Worker.Run(ctx) }()
	if _, err := h.Producer.Enqueue(context.Background(), Work{}); err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a handler was running", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Run after a graceful stop: %v", err)
	}
	q, _ := h.Broker.Queue("jobs")
	if q.Ready != 0 || q.Unacked != 0 {
		t.Fatalf("after the stop: ready %d unacked %d; the running job should have been acked", q.Ready, q.Unacked)
	}
}

func TestConnectionDropEndsRunWithTheBrokersError(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Worker.Run(ctx) }()
	h.WaitFor("the worker to consume", func() bool {
		q, _ := h.Broker.Queue("jobs")
		return len(q.Consumers) == 1
	})
	dropped := &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'", Server: true}
	for _, c := range h.Broker.Connections() {
		h.Broker.CloseConnection(c, dropped)
	}
	err := <-done
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.ConnectionForced {
		t.Fatalf("Run returned %v, want an error wrapping the broker's 320", err)
	}
	if _, err := h.Producer.Enqueue(context.Background(), Work{}); err == nil {
		t.Fatal("Enqueue on a dropped connection succeeded")
	}
}

// TestQuorumPoisonJobReachesTheDeadQueueWithDeliveryLimit plays a job that
// kills its worker every time: each crash returns it with its delivery
// count raised, and past RabbitMQ's default limit of 20 the quorum work
// queue dead-letters it into the dead queue instead of dropping it.
func TestQuorumPoisonJobReachesTheDeadQueueWithDeliveryLimit(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{Version: membroker.RabbitMQ40},
		queuey.QueueConfig{Name: "jobs", Type: queuey.Quorum, Prefetch: 1})
	if _, err := h.Producer.Enqueue(context.Background(), Work{Name: "poison"}); err != nil {
		t.Fatal(err)
	}
	crashes := 0
	for {
		conn, _ := h.Broker.Dial()
		ch, _ := conn.Channel()
		_, ok, err := ch.Get("jobs", false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			_ = conn.Close()
			break
		}
		crashes++
		h.Broker.CloseConnection(conn, nil) // the worker dies mid-job
	}
	if crashes != 21 {
		t.Fatalf("delivered %d times, want 21 (the limit of 20 returns, plus the first delivery)", crashes)
	}
	d, ok, err := brokerChannel(t, h).Get("jobs.dead", true)
	if err != nil || !ok {
		t.Fatalf("nothing in jobs.dead: %v %v", ok, err)
	}
	if d.Headers["x-first-death-reason"] != "delivery_limit" {
		t.Fatalf("dead letter headers %v", d.Headers)
	}
}

// TestStopTimeoutCancelsHandlersThatIgnoreTheStop wires a worker on the
// real clock with a 50 ms StopTimeout: a handler that waits for its context
// keeps Run from returning until the timeout cancels it, and its job goes
// back to its queue: not acknowledged, not lost.
func TestStopTimeoutCancelsHandlersThatIgnoreTheStop(t *testing.T) {
	b := membroker.New(membroker.Config{})
	conn, _ := b.Dial()
	t.Cleanup(func() { _ = conn.Close() })
	backend, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	queues := []queuey.QueueConfig{jobsQueue()}
	producer, err := queuey.NewProducer(ctx, backend, queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := queuey.NewWorker(ctx, backend, []queuey.QueueConfig{jobsQueue()}, queuey.WorkerConfig{StopTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	started, cancelled := make(chan struct{}), make(chan struct{})
	if err := queuey.Register(worker, queuey.HandlerFunc[Work](func(ctx context.Context, job *queuey.Job[Work]) error {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	})); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- worker.Run(runCtx) }()
	if _, err := producer.Enqueue(ctx, Work{}); err != nil {
		t.Fatal(err)
	}
	<-started
	stop()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was never cancelled after StopTimeout")
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Settling runs on the cancelled context too, so the job is not
	// published anywhere: it goes back to its queue, unacknowledged.
	if q, _ := b.Queue("jobs"); q.Ready != 1 || q.Unacked != 0 {
		t.Fatalf("after the stop timeout: jobs has ready %d unacked %d; want the job back, ready", q.Ready, q.Unacked)
	}
}

// TestStopDoesNotWaitOutRequeueDelay: a job whose retry cannot be
// published (its rung of the hold ladder was deleted, so the broker returns
// it) waits RequeueDelay before going back to its queue, but not once the
// worker is stopping. Virtual time never moves here, so only the stop can
// end that wait.
func TestStopDoesNotWaitOutRequeueDelay(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	ch := brokerChannel(t, h)
	if _, err := ch.QueueDelete("queuey.ladder.2000", false, false, false); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return errors.New("fails, and its retry cannot be held")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Worker.Run(ctx) }()
	if _, err := h.Producer.Enqueue(context.Background(), Work{}); err != nil {
		t.Fatal(err)
	}
	<-ran
	h.WaitFor("the refused hold declaration", func() bool {
		q, _ := h.Broker.Queue("jobs")
		return q.Unacked == 1
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run waited out RequeueDelay after its context was cancelled")
	}
	if q, _ := h.Broker.Queue("jobs"); q.Ready != 1 || q.Unacked != 0 {
		t.Fatalf("jobs: ready %d unacked %d; want the job back on its queue", q.Ready, q.Unacked)
	}
}

// TestLogLevelsAndAttributes: a deferral is logged at INFO, a retry at WARN
// and a dead letter at ERROR, each with the job's id, queue, attempt and
// deferrals, and the delay where there is one.
func TestLogLevelsAndAttributes(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	q := jobsQueue()
	q.Retry.MaxAttempts = 2
	h := queueytest.New(t, queueytest.Options{Worker: queuey.WorkerConfig{Logger: logger}}, q)
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		if job.Deferrals == 0 {
			return queuey.Defer(time.Second, "429")
		}
		return errors.New("down")
	})
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), Work{})
	h.WaitFor("the deferral", func() bool { return h.Held("jobs") == 1 })
	h.Advance(time.Second)
	h.WaitFor("the retry", func() bool { return len(h.Log.RunsOf(id)) == 2 && h.Held("jobs") == 1 })
	h.Advance(2 * time.Second)
	h.WaitFor("the dead letter", func() bool { return h.Dead("jobs") == 1 })
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	for _, want := range []string{
		`"level":"INFO","msg":"queuey: job deferred","job_id":"` + id + `","queue":"jobs","kind":"work","attempt":1,"deferrals":0,"delay":1000000000,"reason":"429"`,
		`"level":"WARN","msg":"queuey: job failed, retrying","job_id":"` + id + `","queue":"jobs","kind":"work","attempt":1,"deferrals":1,"delay":2000000000`,
		`"level":"ERROR","msg":"queuey: job dead-lettered","job_id":"` + id + `","queue":"jobs","kind":"work","attempt":2,"deferrals":1,"reason":"attempts exhausted"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no log line containing\n%s\nin\n%s", want, out)
		}
	}
}

// A handler that defers its job with no delay every time does not spin:
// each deferral waits one deferred granule in a hold queue (1 s by
// default), so in five virtual seconds the job runs six times, not
// thousands.
func TestDeferWithoutDelayWaitsOneGranule(t *testing.T) {
	h := queueytest.New(t, queueytest.Options{}, jobsQueue())
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		return queuey.Defer(0, "again")
	})
	h.Start()
	id, err := h.Producer.Enqueue(context.Background(), Work{Name: "eager"})
	if err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 6; want++ {
		h.WaitFor(fmt.Sprint("run ", want), func() bool { return len(h.Log.RunsOf(id)) == want && h.Held("jobs") == 1 })
		if want < 6 {
			h.Advance(time.Second)
		}
	}
	runs := h.Log.RunsOf(id)
	if last := runs[len(runs)-1]; last.Deferrals != 5 || last.Attempt != 1 {
		t.Fatalf("sixth run: attempt %d, deferrals %d; want attempt 1, deferrals 5", last.Attempt, last.Deferrals)
	}
}

// A handler still waiting on its context when a test of New ends (on a
// sleep of the mock clock, say) is cancelled once the worker's StopTimeout
// has passed. That time passed on the mock clock, which nothing moved: the
// test's cleanup waited for ever.
func TestNewCleanupEndsAHandlerWaitingOnItsContext(t *testing.T) {
	ft := &exampleT{}
	h := queueytest.New(ft, queueytest.Options{}, jobsQueue())
	started := make(chan struct{})
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	h.Start()
	if _, err := h.Producer.Enqueue(context.Background(), Work{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	h.WaitFor("the handler to start", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	cleaned := make(chan struct{})
	go func() { ft.done(); close(cleaned) }()
	select {
	case <-cleaned:
	case <-time.After(10 * time.Second):
		t.Fatal("the harness's cleanup still waits for the handler after 10 s")
	}
	if q, _ := h.Broker.Queue("jobs"); q.Ready+q.Unacked != 1 {
		t.Fatalf("the job: %d ready, %d unacked; want it back on its queue", q.Ready, q.Unacked)
	}
}

// A handler still doing real work when a test of New ends (an httptest
// call, say) finishes, its context intact, as it would in production.
func TestNewCleanupLetsARunningHandlerFinish(t *testing.T) {
	ft := &exampleT{}
	h := queueytest.New(ft, queueytest.Options{}, jobsQueue())
	started := make(chan struct{})
	ended := make(chan error, 1)
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
		close(started)
		time.Sleep(100 * time.Millisecond) // real work, in real time, well within the grace
		ended <- ctx.Err()
		return nil
	})
	h.Start()
	if _, err := h.Producer.Enqueue(context.Background(), Work{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	<-started
	ft.done()
	if err := <-ended; err != nil {
		t.Fatalf("the handler's context at the end of its work: %v, want it intact", err)
	}
	if runs := h.Log.Runs(); len(runs) != 1 || runs[0].Err != nil {
		t.Fatalf("runs: %v", runs)
	}
}
