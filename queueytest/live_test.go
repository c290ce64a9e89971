package queueytest_test

// The behaviours of worker_test.go, end to end against the live RabbitMQ at
// AMQP_URL: a producer and a worker on the rabbitmq backend, real hold
// queues, real time (1 s holds). Without AMQP_URL every test skips with a
// one-line notice.
//
// Each test works on fresh queues named queuey-live-<random hex>, and
// deletes at the end the work queue, its dead queue and every hold queue it
// may have created (hold queue names are q + ".deferred." + TTL in ms, so
// each test lists the TTLs it uses).
//
// A job type names its queue by type, not by value (Register asks the zero
// value), so Work, whose queue is always "jobs", cannot serve a fresh queue
// per test. LiveWork's queue is the current live test's, which is why the
// live tests take turns (liveTurn) instead of running in parallel.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	// liveTurn serialises the live tests: they share liveQueue.
	liveTurn sync.Mutex
	// liveQueue is the work queue of the live test that has the turn.
	liveQueue atomic.Pointer[string]
)

// LiveWork is a test job on the current live test's queue, whose behaviour
// its handler looks up by Name.
type LiveWork struct {
	Name string `json:"name"`
}

func (LiveWork) Kind() string  { return "live-work" }
func (LiveWork) Queue() string { return liveQueueName() }

// LiveUnhandled is a job on the live queue that no handler is registered
// for.
type LiveUnhandled struct{}

func (LiveUnhandled) Kind() string  { return "live-unhandled" }
func (LiveUnhandled) Queue() string { return liveQueueName() }

// liveQueueName is the queue of the live test that has the turn; "" (which
// no queue config accepts) outside one.
func liveQueueName() string {
	if q := liveQueue.Load(); q != nil {
		return *q
	}
	return ""
}

// liveRetry retries after exactly 1 s, then 2 s, and dead-letters after the
// third attempt.
var liveRetry = queuey.RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 3, Jitter: queuey.NoJitter}

// liveTopology rounds holds to the second, so that a test knows which hold
// queues it may have created. These checks compare one classic hold queue
// per TTL with the live broker (ClassicHolds); the default ladder is held
// to live RabbitMQ by package rabbitmq (TestBackendHolds, the fault
// workloads).
var liveTopology = rabbitmq.Topology{RetryGranularity: time.Second, DeferredGranularity: time.Second, ClassicHolds: true}

// liveRun is one handler run, timed.
type liveRun struct {
	Name string
	queuey.JobContext
	Start, End time.Time
	Err        error
}

func (r liveRun) String() string {
	return fmt.Sprintf("%s(%s) attempt=%d deferrals=%d priority=%d err=%v",
		r.Name, r.ID, r.Attempt, r.Deferrals, r.Priority, r.Err)
}

// liveRig is a producer and a worker on the rabbitmq backend, on its own
// connection to the broker at AMQP_URL, for one fresh queue; and an admin
// connection to look at queues, publish raw and clean up.
type liveRig struct {
	t        *testing.T
	url      string
	q        string
	conn     *amqp.Connection // the backend's
	admin    *amqp.Connection
	backend  *rabbitmq.Backend
	producer *queuey.Producer
	worker   *queuey.Worker

	mu   sync.Mutex
	runs []liveRun

	cancel    context.CancelFunc
	done      chan error
	runErr    error
	ended     bool // Run's result has been read
	collected bool // ... by the test, which checks it itself
}

// newLiveRig skips the test when AMQP_URL is unset. Otherwise it takes the
// live turn, names a fresh queue, declares cfg (its Name set to that queue)
// through a producer and a worker, and at the end deletes the queue, its
// dead queue and its hold queues for holdTTLs (in ms).
func newLiveRig(t *testing.T, cfg queuey.QueueConfig, holdTTLs ...int64) *liveRig {
	t.Helper()
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	liveTurn.Lock()
	t.Cleanup(liveTurn.Unlock) // registered first: runs last

	var b [8]byte
	_, _ = rand.Read(b[:])
	q := "queuey-live-" + hex.EncodeToString(b[:])
	liveQueue.Store(&q)
	r := &liveRig{t: t, url: url, q: q}

	admin, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() {
		defer func() { _ = admin.Close() }()
		ch, err := admin.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		names := []string{q, liveTopology.DeadQueue(q), liveTopology.WarmQueue(q)} // the shared ladder stays
		for _, ttl := range holdTTLs {
			names = append(names, liveTopology.HoldQueue(q, ttl))
		}
		for _, name := range names {
			if _, err := ch.QueueDelete(name, false, false, false); err != nil {
				t.Errorf("cleanup: delete %s: %v", name, err)
				return
			}
		}
	})
	r.admin = admin

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	r.conn = conn
	backend, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{Topology: liveTopology})
	if err != nil {
		t.Fatal(err)
	}
	r.backend = backend
	t.Cleanup(func() {
		_ = backend.Close()
		_ = conn.Close() // fails once a test has dropped the connection
	})

	cfg.Name = q
	ctx := context.Background()
	if r.producer, err = queuey.NewProducer(ctx, backend, []queuey.QueueConfig{cfg}, queuey.ProducerConfig{}); err != nil {
		t.Fatalf("producer: %v", err)
	}
	// A handler stuck on a failed test's gate is cancelled after 5 s.
	wcfg := queuey.WorkerConfig{StopTimeout: 5 * time.Second}
	if r.worker, err = queuey.NewWorker(ctx, backend, []queuey.QueueConfig{cfg}, wcfg); err != nil {
		t.Fatalf("worker: %v", err)
	}
	return r
}

// handle registers fn for LiveWork jobs, recording every run.
func (r *liveRig) handle(fn func(ctx context.Context, job *queuey.Job[LiveWork]) error) {
	r.t.Helper()
	err := queuey.Register(r.worker, queuey.HandlerFunc[LiveWork](func(ctx context.Context, job *queuey.Job[LiveWork]) error {
		start := time.Now()
		err := fn(ctx, job)
		r.mu.Lock()
		r.runs = append(r.runs, liveRun{Name: job.Args.Name, JobContext: job.JobContext, Start: start, End: time.Now(), Err: err})
		r.mu.Unlock()
		return err
	}))
	if err != nil {
		r.t.Fatal(err)
	}
}

// start runs the worker until the test ends (or stop); at the end a Run
// that returned an error the test did not collect fails the test.
func (r *liveRig) start() {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan error, 1)
	go func() { r.done <- r.worker.Run(ctx) }()
	r.t.Cleanup(func() {
		if err := r.stop(); err != nil && !r.collected {
			r.t.Errorf("worker: %v", err)
		}
	})
}

// stop cancels Run's context and returns what Run returned.
func (r *liveRig) stop() error {
	r.t.Helper()
	r.cancel()
	return r.result(10 * time.Second)
}

// result waits up to timeout for Run to return and returns its error.
func (r *liveRig) result(timeout time.Duration) error {
	r.t.Helper()
	if r.ended {
		return r.runErr
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r.runErr = <-r.done:
		r.ended = true
	case <-timer.C:
		r.t.Fatalf("Run has not returned %s later", timeout)
	}
	return r.runErr
}

// Runs returns every run so far, in the order they returned.
func (r *liveRig) Runs() []liveRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]liveRun(nil), r.runs...)
}

func (r *liveRig) hold(ttl int64) string { return liveTopology.HoldQueue(r.q, ttl) }
func (r *liveRig) dead() string          { return liveTopology.DeadQueue(r.q) }

// waitFor polls cond until it holds, failing the test with what after 5 s.
func (r *liveRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out after 5 s waiting for %s; runs so far: %v", what, r.Runs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// channel opens a channel on the admin connection; close it after use.
func (r *liveRig) channel() *amqp.Channel {
	r.t.Helper()
	ch, err := r.admin.Channel()
	if err != nil {
		r.t.Fatalf("admin channel: %v", err)
	}
	return ch
}

// inspect is a passive declaration of queue: its ready messages and
// consumers, or ok false if it does not exist.
func (r *liveRig) inspect(queue string) (q amqp.Queue, ok bool) {
	r.t.Helper()
	ch := r.channel()
	defer func() { _ = ch.Close() }() // a 404 has closed it already
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return q, false
	}
	if err != nil {
		r.t.Fatalf("passive declare %s: %v", queue, err)
	}
	return q, true
}

// awaitNoConsumers waits until the worker's consumer is gone from the
// queue. The broker requeues a consumer's unacknowledged deliveries as it
// removes it, so afterwards the queue's count tells whether a job was acked.
func (r *liveRig) awaitNoConsumers() {
	r.t.Helper()
	r.waitFor("the worker's consumer to be gone", func() bool {
		q, ok := r.inspect(r.q)
		return ok && q.Consumers == 0
	})
}

// ready is how many messages wait on queue; -1 if it does not exist.
func (r *liveRig) ready(queue string) int {
	r.t.Helper()
	q, ok := r.inspect(queue)
	if !ok {
		return -1
	}
	return q.Messages
}

// get takes one message off queue (auto-ack), failing if there is none.
func (r *liveRig) get(queue string) amqp.Delivery {
	r.t.Helper()
	ch := r.channel()
	defer func() { _ = ch.Close() }()
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		r.t.Fatalf("get from %s: ok=%v err=%v", queue, ok, err)
	}
	return d
}

// sameArgs checks that queue was declared with args: RabbitMQ accepts an
// equivalent re-declaration and refuses any other with 406.
func (r *liveRig) sameArgs(queue string, args amqp.Table) {
	r.t.Helper()
	ch := r.channel()
	defer func() { _ = ch.Close() }()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		r.t.Fatalf("%s was not declared with %v: %v", queue, args, err)
	}
}

// checkDeadHeaders checks the three headers DeadLetter sets.
func (r *liveRig) checkDeadHeaders(d amqp.Delivery, reason string, attempts int64) {
	r.t.Helper()
	want := map[string]any{
		rabbitmq.HeaderDeathReason:   reason,
		rabbitmq.HeaderOriginalQueue: r.q,
		rabbitmq.HeaderAttempts:      attempts,
	}
	for k, v := range want {
		if d.Headers[k] != v {
			r.t.Errorf("dead letter header %s = %v (%T), want %v (%T); headers %v", k, d.Headers[k], d.Headers[k], v, v, d.Headers)
		}
	}
}

// liveReceive waits up to 5 s for a value on ch.
func liveReceive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after 5 s waiting for %s", what)
		panic("unreachable")
	}
}

// liveNames lists the runs, one a line, for failure messages.
func liveNames(runs []liveRun) string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.String()
	}
	return strings.Join(out, "\n")
}

func TestLiveJobRunsAndIsAcked(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error { return nil })
	r.start()
	id, err := r.producer.Enqueue(t.Context(), LiveWork{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("the job to run", func() bool { return len(r.Runs()) == 1 })
	// Stopping closes the consumer's channel: a delivery left unacked would
	// be back on the queue.
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.awaitNoConsumers()
	run := r.Runs()[0]
	if run.ID != id || run.Attempt != 1 || run.Deferrals != 0 || run.Priority != 0 || run.Queue != r.q {
		t.Fatalf("run %v, want job %s on %s at attempt 1, deferrals 0, priority 0", run, id, r.q)
	}
	if n, dead, held := r.ready(r.q), r.ready(r.dead()), r.ready(r.hold(1000)); n != 0 || dead != 0 || held != -1 {
		t.Fatalf("after the run: %d ready, %d dead, hold queue %d (-1: none); want 0, 0, none", n, dead, held)
	}
}

func TestLiveFailedJobRetriedAfterItsHoldAtAttemptTwoAndPriorityZero(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error {
		if job.Attempt == 1 {
			return errors.New("flaky")
		}
		return nil
	})
	r.start()
	// Deferred by the producer, the first run arrives at priority 10; the
	// retry must not keep it.
	id, err := r.producer.Defer(t.Context(), LiveWork{Name: "a"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("the first attempt", func() bool { return len(r.Runs()) == 1 })
	r.waitFor("the retry to wait in "+r.hold(1000), func() bool { return r.ready(r.hold(1000)) == 1 })
	r.sameArgs(r.hold(1000), amqp.Table{"x-queue-type": "classic", "x-message-ttl": int64(1000), "x-expires": int64(61000),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": r.q})
	r.waitFor("the second attempt", func() bool { return len(r.Runs()) == 2 })
	runs := r.Runs()
	if runs[0].ID != id || runs[0].Attempt != 1 || runs[0].Priority != 10 || runs[0].Err == nil {
		t.Fatalf("first run %v: want job %s failing at attempt 1, priority 10", runs[0], id)
	}
	if runs[1].ID != id || runs[1].Attempt != 2 || runs[1].Priority != 0 || runs[1].Deferrals != 0 {
		t.Fatalf("second run %v: want the retry at attempt 2, priority 0, deferrals 0", runs[1])
	}
	if gap := runs[1].Start.Sub(runs[0].End); gap < time.Second {
		t.Fatalf("the retry ran %s after the failure, before its 1 s hold", gap)
	}
}

func TestLiveDeferralComesBackAheadOfTheBacklog(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	started, gate := make(chan struct{}), make(chan struct{})
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error {
		switch {
		case job.Args.Name == "limited" && job.Deferrals == 0:
			return queuey.Defer(time.Second, "429")
		case job.Args.Name == "backlog0":
			close(started)
			select { // the worker (prefetch 1) is busy while the deferral returns
			case <-gate:
			case <-ctx.Done():
			}
		}
		return nil
	})
	// Everything is on the queue before the worker starts: with prefetch 1
	// it runs limited (deferred for 1 s), then takes backlog0 and blocks,
	// while backlog1 and backlog2 wait on the queue.
	for _, name := range []string{"limited", "backlog0", "backlog1", "backlog2"} {
		if _, err := r.producer.Enqueue(t.Context(), LiveWork{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	r.start()
	liveReceive(t, "backlog0 to start", started)
	r.waitFor("the deferral to be released behind backlog1 and backlog2", func() bool { return r.ready(r.q) == 3 })
	close(gate)
	r.waitFor("all five runs", func() bool { return len(r.Runs()) == 5 })
	runs := r.Runs()
	order := []string{"limited", "backlog0", "limited", "backlog1", "backlog2"}
	for i, name := range order {
		if runs[i].Name != name {
			t.Fatalf("run order (want %v):\n%s", order, liveNames(runs))
		}
	}
	if d := runs[2]; d.ID != runs[0].ID || d.Attempt != 1 || d.Deferrals != 1 || d.Priority != 10 {
		t.Fatalf("the returning deferral %v: want attempt 1, deferrals 1, priority 10", d)
	}
	if gap := runs[2].Start.Sub(runs[0].End); gap < time.Second {
		t.Fatalf("the deferral ran again %s after deferring, before its 1 s", gap)
	}
	if runs[3].Priority != 0 || runs[4].Priority != 0 {
		t.Fatalf("backlog runs:\n%s", liveNames(runs))
	}
}

func TestLiveAttemptsExhaustedGoToTheDeadQueueWithReasonHeaders(t *testing.T) {
	policy := liveRetry
	policy.MaxAttempts = 2
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: policy}, 1000)
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error { return errors.New("always") })
	r.start()
	id, err := r.producer.Enqueue(t.Context(), LiveWork{Name: "doomed"})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("attempt 2 to fail into "+r.dead(), func() bool { return r.ready(r.dead()) == 1 })
	d := r.get(r.dead())
	r.checkDeadHeaders(d, queuey.ReasonAttemptsExhausted, 2)
	env, err := queuey.DecodeEnvelope(d.Body)
	if err != nil || env.ID != id || env.Attempt != 2 || env.Queue != r.q {
		t.Fatalf("dead letter body: %+v, %v; want job %s at attempt 2", env, err, id)
	}
	if runs := r.Runs(); len(runs) != 2 || runs[0].Attempt != 1 || runs[1].Attempt != 2 {
		t.Fatalf("runs (want attempts 1 and 2):\n%s", liveNames(runs))
	}
	if n := r.ready(r.q); n != 0 {
		t.Fatalf("%d left on the work queue", n)
	}
}

func TestLiveMalformedBodyDeadLetteredVerbatimAndConsumingGoesOn(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error { return nil })
	r.start()
	body := []byte("not an envelope \x00\xff")
	ch := r.channel()
	defer func() { _ = ch.Close() }()
	if err := ch.PublishWithContext(t.Context(), "", r.q, false, false, amqp.Publishing{Body: body}); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the malformed body in "+r.dead(), func() bool { return r.ready(r.dead()) == 1 })
	id, err := r.producer.Enqueue(t.Context(), LiveWork{Name: "next"})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("the next job to run", func() bool { return len(r.Runs()) == 1 })
	if run := r.Runs()[0]; run.ID != id {
		t.Fatalf("ran %v, want %s", run, id)
	}
	d := r.get(r.dead())
	if string(d.Body) != string(body) {
		t.Fatalf("dead letter body %q, want %q verbatim", d.Body, body)
	}
	r.checkDeadHeaders(d, queuey.ReasonMalformed, 0)
}

func TestLiveUnknownKindDeadLetteredNeverRetried(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error { return nil })
	r.start()
	id, err := r.producer.Enqueue(t.Context(), LiveUnhandled{})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("the dead letter", func() bool { return r.ready(r.dead()) == 1 })
	d := r.get(r.dead())
	r.checkDeadHeaders(d, queuey.ReasonUnknownKind, 1)
	if env, err := queuey.DecodeEnvelope(d.Body); err != nil || env.ID != id || env.Kind != "live-unhandled" {
		t.Fatalf("dead letter body: %+v, %v", env, err)
	}
	// A retry would have gone through the 1 s hold queue.
	if n := r.ready(r.hold(1000)); n != -1 {
		t.Fatalf("%s exists (%d messages): the unknown kind was retried", r.hold(1000), n)
	}
	if runs := r.Runs(); len(runs) != 0 {
		t.Fatalf("a handler ran:\n%s", liveNames(runs))
	}
}

func TestLiveUndeclaredProducerEnqueueAfterIsErrUnknownQueue(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	// A process that must not touch the topology: its own backend, nothing
	// declared through it.
	backend, err := rabbitmq.New(rabbitmq.Channels(r.conn.Channel), rabbitmq.Options{Topology: liveTopology})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	undeclared := queuey.NewUndeclaredProducer(backend, queuey.ProducerConfig{})
	ctx := t.Context()
	if _, err := undeclared.EnqueueAfter(ctx, LiveWork{}, time.Second); !errors.Is(err, queuey.ErrUnknownQueue) {
		t.Errorf("undeclared EnqueueAfter: %v, want ErrUnknownQueue", err)
	}
	if _, err := undeclared.Defer(ctx, LiveWork{}, time.Second); !errors.Is(err, queuey.ErrUnknownQueue) {
		t.Errorf("undeclared Defer: %v, want ErrUnknownQueue", err)
	}
	if n := r.ready(r.hold(1000)); n != -1 {
		t.Fatalf("%s exists (%d messages) after refused holds", r.hold(1000), n)
	}
	if _, err := undeclared.Enqueue(ctx, LiveWork{}); err != nil {
		t.Fatalf("an undeclared producer can Enqueue: %v", err)
	}
	if n := r.ready(r.q); n != 1 {
		t.Fatalf("%d ready after Enqueue, want 1", n)
	}
}

func TestLiveDelayTooLongIsRefusedNotClamped(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry})
	ctx := t.Context()
	for _, delay := range []time.Duration{30 * 24 * time.Hour, (rabbitmq.MaxHoldTTL + 1) * time.Millisecond} {
		if _, err := r.producer.EnqueueAfter(ctx, LiveWork{}, delay); !errors.Is(err, queuey.ErrDelayTooLong) {
			t.Errorf("EnqueueAfter %s: %v, want ErrDelayTooLong", delay, err)
		}
		if _, err := r.producer.Defer(ctx, LiveWork{}, delay); !errors.Is(err, queuey.ErrDelayTooLong) {
			t.Errorf("Defer %s: %v, want ErrDelayTooLong", delay, err)
		}
	}
	if n := r.ready(r.q); n != 0 {
		t.Fatalf("%d jobs reached the work queue", n)
	}
}

func TestLiveRefusedDeclarationLeavesPublishingWorking(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 60000)
	ctx := t.Context()
	_, err := queuey.NewProducer(ctx, r.backend, []queuey.QueueConfig{{Name: r.q, Type: queuey.Quorum}}, queuey.ProducerConfig{})
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), strconv.Quote(r.q)) {
		t.Fatalf("redeclaring %s as quorum: %v; want a 406 naming the queue", r.q, err)
	}
	if _, err := r.producer.Enqueue(ctx, LiveWork{}); err != nil {
		t.Fatalf("Enqueue after a refused declaration: %v", err)
	}
	if _, err := r.producer.EnqueueAfter(ctx, LiveWork{}, time.Minute); err != nil {
		t.Fatalf("EnqueueAfter (a hold declaration) after a refused declaration: %v", err)
	}
	if n, held := r.ready(r.q), r.ready(r.hold(60000)); n != 1 || held != 1 {
		t.Fatalf("%d ready, %d held; want 1 and 1", n, held)
	}
	r.sameArgs(r.q, amqp.Table{"x-max-priority": int32(queuey.DefaultMaxPriority)}) // still the classic queue
}

// TestLiveQuorumPoisonJobReachesTheDeadQueueWithDeliveryLimit plays a job
// that kills its worker every time: a raw consumer gets it without acking
// and its connection dies. On RabbitMQ 4.0 and 4.3 alike each such return
// (a channel loss) counts as a delivery; past the default limit of 20 the
// broker itself dead-letters it, through the quorum work queue's
// x-dead-letter-* arguments, into q.dead, with x-first-death-reason
// delivery_limit (4.3 counts reject but not nack; queuey never does either
// to a job it ran).
func TestLiveQuorumPoisonJobReachesTheDeadQueueWithDeliveryLimit(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Type: queuey.Quorum, Prefetch: 1, Retry: liveRetry})
	id, err := r.producer.Enqueue(t.Context(), LiveWork{Name: "poison"})
	if err != nil {
		t.Fatal(err)
	}
	crashes := 0
	for attempt := 0; ; attempt++ {
		if attempt > 100 {
			t.Fatalf("still not dead-lettered after %d crashes", crashes)
		}
		var back, dead int
		r.waitFor(fmt.Sprintf("the job back on the queue or in the dead queue after %d crashes", crashes), func() bool {
			back, dead = r.ready(r.q), r.ready(r.dead())
			return back+dead == 1
		})
		if dead == 1 {
			break
		}
		conn, err := amqp.Dial(r.url)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		_, ok, err := ch.Get(r.q, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			crashes++
		}
		_ = conn.Close() // the worker dies mid-job
	}
	if crashes != 21 {
		t.Fatalf("delivered %d times, want 21 (the first delivery and the limit of 20 returns)", crashes)
	}
	d := r.get(r.dead())
	if d.Headers["x-first-death-reason"] != "delivery_limit" || d.Headers["x-first-death-queue"] != r.q {
		t.Fatalf("dead letter headers %v; want x-first-death-reason delivery_limit from %s", d.Headers, r.q)
	}
	if env, err := queuey.DecodeEnvelope(d.Body); err != nil || env.ID != id {
		t.Fatalf("dead letter body: %+v, %v", env, err)
	}
}

// TestLiveQuorumRetriesAndDeferralsNeverCountTowardTheDeliveryLimit runs
// a job on a quorum work queue 22 times: deferred 11 times, then failing
// 10 times, then succeeding. Each deferral and retry is a new message
// through a hold queue, and the delivery is acknowledged, so none of them
// counts toward the broker's default delivery limit of 20 returns, on
// RabbitMQ 4.0 (where every return counts) as on 4.3 (where only reject
// and channel loss do): the job is never dead-lettered for delivery_limit.
func TestLiveQuorumRetriesAndDeferralsNeverCountTowardTheDeliveryLimit(t *testing.T) {
	const deferrals, failures = 11, 10
	retry := queuey.RetryPolicy{Base: time.Second, Cap: time.Second, MaxAttempts: failures + 1, Jitter: queuey.NoJitter}
	r := newLiveRig(t, queuey.QueueConfig{Type: queuey.Quorum, Prefetch: 1, Retry: retry}, 1000)
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error {
		switch {
		case job.Deferrals < deferrals:
			return queuey.Defer(time.Second, "429")
		case job.Attempt <= failures:
			return errors.New("flaky")
		}
		return nil
	})
	r.start()
	id, err := r.producer.Enqueue(t.Context(), LiveWork{Name: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	const want = deferrals + failures + 1
	for n := 1; n <= want; n++ { // a second's hold between runs
		r.waitFor(fmt.Sprintf("run %d of %d", n, want), func() bool { return len(r.Runs()) >= n })
	}
	runs := r.Runs()
	last := runs[len(runs)-1]
	if last.ID != id || last.Err != nil || last.Attempt != failures+1 || last.Deferrals != deferrals {
		t.Fatalf("last run %v: want job %s succeeding at attempt %d after %d deferrals", last, id, failures+1, deferrals)
	}
	if n := r.ready(r.dead()); n != 0 {
		t.Fatalf("%d dead letters; want none: a deferral or retry counted toward the delivery limit", n)
	}
}

// TestLiveConnectionExceptionEndsRunWithTheBrokersError provokes a real
// connection exception on the worker's connection (Qos with a prefetch
// size: 540 NOT_IMPLEMENTED) while a handler runs. Run waits for the
// handler, returns an error wrapping the broker's *amqp.Error, and the job,
// whose ack could no longer reach the broker, is back on the queue.
func TestLiveConnectionExceptionEndsRunWithTheBrokersError(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	started, gate := make(chan struct{}), make(chan struct{})
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error {
		close(started)
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	})
	r.start()
	if _, err := r.producer.Enqueue(t.Context(), LiveWork{Name: "in flight"}); err != nil {
		t.Fatal(err)
	}
	liveReceive(t, "the handler to start", started)
	other, err := r.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_ = other.Qos(0, 1, false) // prefetch_size != 0: a connection exception
	close(gate)
	err = r.result(5 * time.Second)
	r.collected = true
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotImplemented || !amqpErr.Server {
		t.Fatalf("Run returned %v; want an error wrapping the broker's 540 *amqp.Error", err)
	}
	if _, err := r.producer.Enqueue(t.Context(), LiveWork{}); err == nil {
		t.Fatal("Enqueue on the closed connection succeeded")
	}
	r.waitFor("the unsettled job back on the queue", func() bool { return r.ready(r.q) == 1 })
	if runs := r.Runs(); len(runs) != 1 {
		t.Fatalf("runs:\n%s", liveNames(runs))
	}
}

// TestLiveClientClosedConnectionEndsRunWithErrClosed closes the worker's
// connection from the client side. The broker gives no reason, so Run
// returns an error wrapping amqp091's amqp.ErrClosed (an *amqp.Error, 504
// CHANNEL_ERROR, Server false), not nil: the worker did not stop because
// it was asked to.
func TestLiveClientClosedConnectionEndsRunWithErrClosed(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error { return nil })
	r.start()
	r.waitFor("the worker to consume", func() bool {
		q, ok := r.inspect(r.q)
		return ok && q.Consumers == 1
	})
	if err := r.conn.Close(); err != nil {
		t.Fatal(err)
	}
	err := r.result(5 * time.Second)
	r.collected = true
	var amqpErr *amqp.Error
	if !errors.Is(err, amqp.ErrClosed) || !errors.As(err, &amqpErr) {
		t.Fatalf("Run returned %v; want an error wrapping amqp.ErrClosed", err)
	}
}

func TestLiveGracefulStopSettlesTheRunningHandler(t *testing.T) {
	r := newLiveRig(t, queuey.QueueConfig{Prefetch: 1, Retry: liveRetry}, 1000)
	started, release := make(chan struct{}), make(chan struct{})
	r.handle(func(ctx context.Context, job *queuey.Job[LiveWork]) error {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	r.start()
	if _, err := r.producer.Enqueue(t.Context(), LiveWork{}); err != nil {
		t.Fatal(err)
	}
	liveReceive(t, "the handler to start", started)
	r.cancel()
	close(release)
	if err := r.result(5 * time.Second); err != nil {
		t.Fatalf("Run after a graceful stop: %v", err)
	}
	// Run has closed the consumer's channel: an unacked job would be back.
	r.awaitNoConsumers()
	if n, runs := r.ready(r.q), len(r.Runs()); n != 0 || runs != 1 {
		t.Fatalf("after the stop: %d ready, %d runs; want the job run once and acked", n, runs)
	}
}
