package rabbitmq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// backendRig is a Backend on membroker under a mock clock, plus a channel on a
// second connection for looking at queues without touching the backend's.
type backendRig struct {
	t      *testing.T
	clk    *clock.Mock
	broker *membroker.Broker
	conn   *membroker.Connection
	b      *Backend
	raw    *membroker.Channel
	logs   *backendLogBuffer
}

func newBackendRig(t *testing.T, version membroker.Version, opts Options) *backendRig {
	t.Helper()
	clk := clock.NewMock()
	broker := membroker.New(membroker.Config{Clock: clk, Version: version})
	conn, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	logs := &backendLogBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// These are the unit tests of classic holds and of what does not
	// depend on the hold queues; ladder_test.go has the ladder's.
	opts.ClassicHolds = true
	opts.Clock = clk
	b, err := New(Channels(conn.Channel), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	inspect, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := inspect.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &backendRig{t: t, clk: clk, broker: broker, conn: conn, b: b, raw: raw, logs: logs}
}

// backendLogBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type backendLogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *backendLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *backendLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (r *backendRig) declare(queues ...queuey.QueueConfig) {
	r.t.Helper()
	if err := r.b.Declare(r.t.Context(), queues...); err != nil {
		r.t.Fatalf("Declare: %v", err)
	}
}

func (r *backendRig) publish(env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) {
	r.t.Helper()
	if err := r.b.Publish(r.t.Context(), env, hold, kind); err != nil {
		r.t.Fatalf("Publish %s (hold %s): %v", env.ID, hold, err)
	}
}

// ready is how many messages wait on queue; -1 if it does not exist.
func (r *backendRig) ready(queue string) int {
	r.t.Helper()
	info, ok := r.broker.Queue(queue)
	if !ok {
		return -1
	}
	return info.Ready
}

// get takes the next message off queue, failing the test if there is none.
func (r *backendRig) get(queue string) amqp.Delivery {
	r.t.Helper()
	d, ok, err := r.raw.Get(queue, true)
	if err != nil || !ok {
		r.t.Fatalf("get from %s: ok=%v err=%v", queue, ok, err)
	}
	return d
}

var testEnqueuedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testJob(queue, id string, priority uint8) queuey.Envelope {
	return queuey.Envelope{
		ID: id, Kind: "send_email", Queue: queue, Payload: json.RawMessage(`{"to":"a@example.com"}`),
		Attempt: 1, Priority: priority, EnqueuedAt: testEnqueuedAt,
	}
}

func testJobID(t *testing.T, body []byte) string {
	t.Helper()
	env, err := queuey.DecodeEnvelope(body)
	if err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return env.ID
}

// receiveDelivery waits, boundedly, for the consumer's next delivery.
func receiveDelivery(t *testing.T, c queuey.Consumer) queuey.Delivery {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case d, ok := <-c.Deliveries():
		if !ok {
			t.Fatalf("Deliveries closed; Err = %v", c.Err())
		}
		return d
	case <-timer.C:
		t.Fatal("no delivery within 5 s")
	}
	return nil
}

// awaitEnded waits, boundedly, for the consumer's Deliveries to close, reading
// past anything still in it, and returns how many it read.
func awaitEnded(t *testing.T, c queuey.Consumer) int {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	n := 0
	for {
		select {
		case _, ok := <-c.Deliveries():
			if !ok {
				return n
			}
			n++
		case <-timer.C:
			t.Fatal("Deliveries still open after 5 s")
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestNewValidatesOptions(t *testing.T) {
	broker := membroker.New(membroker.Config{Clock: clock.NewMock()})
	conn, _ := broker.Dial()
	_, err := New(Channels(conn.Channel), Options{Topology: Topology{DeadSuffix: ".x", DeferredSuffix: ".x"}})
	if err == nil || !strings.Contains(err.Error(), `both ".x"`) {
		t.Fatalf("New with colliding suffixes: %v", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	if len(broker.Connections()) != 1 || conn.IsClosed() {
		t.Fatal("a refused New touched the connection")
	}
}

func TestNewFailsClearlyOnClosedConnection(t *testing.T) {
	broker := membroker.New(membroker.Config{Clock: clock.NewMock()})
	conn, _ := broker.Dial()
	_ = conn.Close()
	_, err := New(Channels(conn.Channel), Options{})
	if !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("New on a closed connection: %v, want amqp.ErrClosed wrapped", err)
	}
}

func TestDeclareCreatesWorkAndDeadQueues(t *testing.T) {
	tests := []struct {
		name     string
		cfg      queuey.QueueConfig
		wantType string
		wantArgs amqp.Table
	}{
		{"classic gets x-max-priority 10 by default", queuey.QueueConfig{Name: "jobs"}, "classic",
			amqp.Table{"x-queue-type": "classic", "x-max-priority": int32(10)}},
		{"classic takes MaxPriority", queuey.QueueConfig{Name: "jobs", MaxPriority: ptrTo(uint8(3))}, "classic",
			amqp.Table{"x-queue-type": "classic", "x-max-priority": int32(3)}},
		{"max priority 0 is a plain queue", queuey.QueueConfig{Name: "jobs", MaxPriority: new(uint8(0))}, "classic",
			amqp.Table{"x-queue-type": "classic"}}, // what RabbitMQ 4 records for no arguments
		{"quorum dead-letters to the dead queue, never x-max-priority", queuey.QueueConfig{Name: "jobs", Type: queuey.Quorum}, "quorum",
			amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.dead"}},
	}
	for _, version := range []membroker.Version{membroker.RabbitMQ40, membroker.RabbitMQ43} {
		for _, tc := range tests {
			t.Run(version.String()+"/"+tc.name, func(t *testing.T) {
				r := newBackendRig(t, version, Options{})
				r.declare(tc.cfg)
				want := []membroker.QueueInfo{
					{Name: "jobs", Type: tc.wantType, Durable: true, Arguments: tc.wantArgs, Consumers: []string{}},
					{Name: "jobs.dead", Type: "classic", Durable: true, Arguments: amqp.Table{"x-queue-type": "classic"}, Consumers: []string{}},
				}
				if diff := cmp.Diff(want, r.broker.Queues()); diff != "" {
					t.Fatalf("queues (-want +got):\n%s", diff)
				}
				// Declaring again is equivalent.
				r.declare(tc.cfg)
				if !strings.Contains(r.logs.String(), `level=DEBUG msg="rabbitmq: declared queue" queue=jobs`) {
					t.Errorf("declaration not logged at DEBUG:\n%s", r.logs)
				}
			})
		}
	}
}

func TestDeclareSkipsDeadLetterQueuesWhenAsked(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{SkipDeadLetterQueues: true})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	if r.ready("jobs") != 0 || r.ready("jobs.dead") != -1 {
		t.Fatalf("queues: %+v; want jobs only", r.broker.Queues())
	}
	// DeadLetter then fails rather than drop the testJob.
	err := r.b.DeadLetter(t.Context(), "jobs", []byte("x"), "fatal", 1)
	if !errors.Is(err, ErrReturned) {
		t.Fatalf("DeadLetter without a dead queue: %v, want ErrReturned", err)
	}
}

func TestDeclareUsesTheConfiguredDeadSuffix(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{Topology: Topology{DeadSuffix: "-dlq"}})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	if r.ready("jobs-dlq") != 0 {
		t.Fatalf("queues: %+v; want jobs-dlq", r.broker.Queues())
	}
}

func TestDeclareRefusesOverLongNameBeforeTheBroker(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	long := strings.Repeat("q", 250) // fits AMQP, but its hold queues would not
	err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: "fine"}, queuey.QueueConfig{Name: long})
	if err == nil || !strings.Contains(err.Error(), `queue "`+long+`": name too long`) {
		t.Fatalf("Declare of a 250-byte name: %v", err)
	}
	if qs := r.broker.Queues(); len(qs) != 0 {
		t.Fatalf("something reached the broker: %+v", qs)
	}
	// The connection and the backend are still usable.
	r.declare(queuey.QueueConfig{Name: "fine"})
	r.publish(testJob("fine", "j1", 0), 0, queuey.HoldRetry)
	if r.ready("fine") != 1 {
		t.Fatal("publish after a refused name did not land")
	}
}

func TestRefusedDeclarationLeavesPublishingAndHoldsWorking(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "before", 0), time.Second, queuey.HoldRetry) // the hold channel is open

	err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs", Type: queuey.Quorum}, queuey.QueueConfig{Name: "other"})
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), `queue "jobs"`) {
		t.Fatalf("redeclaring jobs as quorum: %v; want a 406 naming jobs", err)
	}
	if !strings.Contains(r.logs.String(), `level=WARN msg="rabbitmq: queue declaration refused" queue=jobs`) {
		t.Errorf("refusal not logged at WARN:\n%s", r.logs)
	}
	// The other queue in the same call was still declared.
	if r.ready("other") != 0 {
		t.Fatal("a refusal stopped the declarations after it")
	}

	r.publish(testJob("jobs", "now", 0), 0, queuey.HoldRetry)
	r.publish(testJob("jobs", "held", 0), time.Second, queuey.HoldRetry)
	r.publish(testJob("other", "other", 0), 2*time.Second, queuey.HoldDeferred)
	if err := r.b.DeadLetter(t.Context(), "jobs", []byte("x"), "fatal", 1); err != nil {
		t.Fatalf("DeadLetter after a refused declaration: %v", err)
	}
	if got := r.ready("jobs.deferred.1000"); got != 2 {
		t.Fatalf("jobs.deferred.1000 has %d, want 2", got)
	}
	if r.ready("jobs") != 1 || r.ready("other.deferred.2000") != 1 || r.ready("jobs.dead") != 1 {
		t.Fatalf("queues after a refused declaration: %+v", r.broker.Queues())
	}
	// The remembered configuration is still the accepted one.
	if info, _ := r.broker.Queue("jobs"); info.Type != "classic" {
		t.Fatalf("jobs is %s", info.Type)
	}
}

func TestDeclareValidatesEveryConfigFirst(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: "good"}, queuey.QueueConfig{Name: "bad", Prefetch: -1})
	if err == nil || !strings.Contains(err.Error(), `queue "bad"`) {
		t.Fatalf("Declare with an invalid config: %v", err)
	}
	if qs := r.broker.Queues(); len(qs) != 0 {
		t.Fatalf("declared despite an invalid config: %+v", qs)
	}
}

func TestPublishNowLandsOnWorkQueueWithProperties(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	env := testJob("jobs", "job-1", 7)
	r.publish(env, 0, queuey.HoldRetry)
	if n := len(r.broker.Queues()); n != 2 {
		t.Fatalf("a publish without a hold created a queue: %+v", r.broker.Queues())
	}
	d := r.get("jobs")
	body, _ := env.Encode()
	if !bytes.Equal(d.Body, body) {
		t.Errorf("body %s, want %s", d.Body, body)
	}
	got := struct {
		ContentType, MessageId, Type, Expiration string
		DeliveryMode, Priority                   uint8
		Timestamp                                time.Time
	}{d.ContentType, d.MessageId, d.Type, d.Expiration, d.DeliveryMode, d.Priority, d.Timestamp}
	want := got
	want.ContentType, want.MessageId, want.Type, want.Expiration = "application/json", "job-1", "send_email", ""
	want.DeliveryMode, want.Priority, want.Timestamp = amqp.Persistent, 7, testEnqueuedAt
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("properties (-want +got):\n%s", diff)
	}
}

func TestPublishNowNeedsNoDeclarationButAnExistingQueue(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	if _, err := r.raw.QueueDeclare("theirs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r.publish(testJob("theirs", "j1", 0), 0, queuey.HoldDeferred) // an undeclared producer can enqueue
	if r.ready("theirs") != 1 {
		t.Fatal("publish to an undeclared but existing queue did not land")
	}
	err := r.b.Publish(t.Context(), testJob("missing", "j2", 0), 0, queuey.HoldRetry)
	var ret *ReturnError
	if !errors.Is(err, ErrReturned) || !errors.As(err, &ret) || ret.Code != amqp.NoRoute {
		t.Fatalf("publish to a missing queue: %v; want a 312 return", err)
	}
}

func TestPublishRefusesAnInvalidEnvelope(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	env := testJob("jobs", "j1", 0)
	env.Attempt = 0
	if err := r.b.Publish(t.Context(), env, 0, queuey.HoldRetry); !errors.Is(err, queuey.ErrMalformedEnvelope) {
		t.Fatalf("Publish of an invalid envelope: %v", err)
	}
	// A kind over 255 bytes would not fit the type property, an AMQP short
	// string: amqp091-go would close the whole connection over it.
	env = testJob("jobs", "j1", 0)
	env.Kind = strings.Repeat("k", 300)
	if err := r.b.Publish(t.Context(), env, 0, queuey.HoldRetry); !errors.Is(err, queuey.ErrMalformedEnvelope) {
		t.Fatalf("Publish of a 300-byte kind: %v", err)
	}
	r.declare(queuey.QueueConfig{Name: "jobs"})
	if err := r.b.Publish(t.Context(), testJob("jobs", "j2", 0), 0, queuey.HoldRetry); err != nil {
		t.Fatalf("publish after the refusal: %v", err)
	}
}

func TestRetryHoldWaitsInHoldQueueAndReturnsAfterTTL(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "held", 5), 1500*time.Millisecond, queuey.HoldRetry) // rounds up to 2 s

	hold, ok := r.broker.Queue("jobs.deferred.2000")
	if !ok {
		t.Fatalf("no hold queue jobs.deferred.2000: %+v", r.broker.Queues())
	}
	want := membroker.QueueInfo{Name: "jobs.deferred.2000", Type: "classic", Durable: true,
		Arguments: holdQueueArgs("jobs", 2000), Ready: 1, Consumers: []string{}, Published: 1}
	if diff := cmp.Diff(want, hold); diff != "" {
		t.Fatalf("hold queue (-want +got):\n%s", diff)
	}
	if !strings.Contains(r.logs.String(), `msg="rabbitmq: declared hold queue" queue=jobs hold_queue=jobs.deferred.2000 ttl_ms=2000`) {
		t.Errorf("hold declaration not logged:\n%s", r.logs)
	}

	r.clk.Add(1999 * time.Millisecond)
	if r.ready("jobs") != 0 || r.ready("jobs.deferred.2000") != 1 {
		t.Fatalf("released early: jobs %d, hold %d at 1.999 s", r.ready("jobs"), r.ready("jobs.deferred.2000"))
	}
	r.clk.Add(time.Millisecond)
	if r.ready("jobs") != 1 || r.ready("jobs.deferred.2000") != 0 {
		t.Fatalf("not released at 2 s: jobs %d, hold %d", r.ready("jobs"), r.ready("jobs.deferred.2000"))
	}
	d := r.get("jobs")
	if testJobID(t, d.Body) != "held" || d.Priority != 5 || d.Expiration != "" || d.DeliveryMode != amqp.Persistent {
		t.Fatalf("released message: id %s priority %d expiration %q mode %d", testJobID(t, d.Body), d.Priority, d.Expiration, d.DeliveryMode)
	}
}

func TestDeferralComesBackAheadOfTheBacklog(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	cfg := queuey.QueueConfig{Name: "jobs"}
	r.declare(cfg)
	r.publish(testJob("jobs", "deferred", cfg.TopPriority()), 30*time.Second, queuey.HoldDeferred)
	for i := range 3 {
		r.publish(testJob("jobs", fmt.Sprint("backlog", i), 0), 0, queuey.HoldRetry)
	}
	r.clk.Add(30 * time.Second)
	if id := testJobID(t, r.get("jobs").Body); id != "deferred" {
		t.Fatalf("first off the queue after 30 s: %s, want the deferred job", id)
	}
}

func TestHoldGranularityDependsOnKind(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{Topology: Topology{RetryGranularity: 10 * time.Second, DeferredGranularity: time.Second}})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "retry", 0), 12*time.Second, queuey.HoldRetry)
	r.publish(testJob("jobs", "deferred", 0), 12*time.Second, queuey.HoldDeferred)
	if r.ready("jobs.deferred.20000") != 1 || r.ready("jobs.deferred.12000") != 1 {
		t.Fatalf("queues: %+v; want the retry in .20000 and the deferral in .12000", r.broker.Queues())
	}
	if err := r.b.Publish(t.Context(), testJob("jobs", "x", 0), time.Second, queuey.HoldKind(7)); err == nil {
		t.Fatal("an unknown HoldKind was accepted")
	}
}

func TestShortHoldNeverStuckBehindLongHold(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "long", 0), 5*time.Minute, queuey.HoldRetry)
	r.publish(testJob("jobs", "short", 0), time.Second, queuey.HoldRetry)
	r.clk.Add(time.Second)
	if r.ready("jobs") != 1 {
		t.Fatalf("after 1 s jobs has %d ready; the 1 s hold is stuck", r.ready("jobs"))
	}
	if id := testJobID(t, r.get("jobs").Body); id != "short" {
		t.Fatalf("released %s, want short", id)
	}
	r.clk.Add(5*time.Minute - time.Second)
	if id := testJobID(t, r.get("jobs").Body); id != "long" {
		t.Fatalf("released %s, want long", id)
	}
}

func TestHoldQueueDeclaredBeforeEveryPublish(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "j1", 0), time.Second, queuey.HoldRetry)
	// Deleted under the backend: a cached declaration would now be returned.
	if _, err := r.raw.QueueDelete("jobs.deferred.1000", false, false, false); err != nil {
		t.Fatal(err)
	}
	r.publish(testJob("jobs", "j2", 0), time.Second, queuey.HoldRetry)
	if r.ready("jobs.deferred.1000") != 1 {
		t.Fatal("the hold queue was not declared again")
	}
	// Expired after its lease, TTL + holdExpiryMargin from the last
	// declaration: declared again as well.
	r.clk.Add(time.Second) // j2 goes back to jobs
	r.clk.Add(holdExpiryMargin - time.Millisecond)
	if r.ready("jobs.deferred.1000") != 0 {
		t.Fatal("hold queue expired before its lease ended")
	}
	r.clk.Add(time.Millisecond)
	if r.ready("jobs.deferred.1000") != -1 {
		t.Fatal("idle hold queue did not expire")
	}
	r.publish(testJob("jobs", "j3", 0), time.Second, queuey.HoldRetry)
	if r.ready("jobs.deferred.1000") != 1 {
		t.Fatal("the expired hold queue was not declared again")
	}
}

func TestRefusedHoldDeclarationDoesNotDisableLaterHolds(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	// Someone else made jobs.deferred.1000 with other arguments.
	if _, err := r.raw.QueueDeclare("jobs.deferred.1000", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	err := r.b.Publish(t.Context(), testJob("jobs", "j1", 0), time.Second, queuey.HoldRetry)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), `"jobs.deferred.1000"`) {
		t.Fatalf("hold into a conflicting hold queue: %v; want a 406 naming it", err)
	}
	if !strings.Contains(r.logs.String(), `level=WARN msg="rabbitmq: hold queue declaration refused" queue=jobs hold_queue=jobs.deferred.1000 ttl_ms=1000`) {
		t.Errorf("refusal not logged at WARN:\n%s", r.logs)
	}
	r.publish(testJob("jobs", "j2", 0), 2*time.Second, queuey.HoldRetry)
	r.publish(testJob("jobs", "j3", 0), 0, queuey.HoldRetry)
	if r.ready("jobs.deferred.2000") != 1 || r.ready("jobs") != 1 || r.ready("jobs.deferred.1000") != 0 {
		t.Fatalf("queues after a refused hold: %+v", r.broker.Queues())
	}
}

func TestHoldOnUndeclaredQueueIsErrUnknownQueue(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	// The queue exists, but was not declared through this backend.
	if _, err := r.raw.QueueDeclare("theirs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []queuey.HoldKind{queuey.HoldRetry, queuey.HoldDeferred} {
		err := r.b.Publish(t.Context(), testJob("theirs", "j1", 0), time.Second, kind)
		if !errors.Is(err, queuey.ErrUnknownQueue) || !strings.Contains(err.Error(), `"theirs"`) {
			t.Fatalf("hold (kind %d) on an undeclared queue: %v; want ErrUnknownQueue naming it", kind, err)
		}
	}
	if r.ready("theirs.deferred.1000") != -1 {
		t.Fatal("a hold queue was declared for an unknown queue")
	}
}

func TestHoldTooLongIsErrDelayTooLong(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	err := r.b.Publish(t.Context(), testJob("jobs", "j1", 0), 30*24*time.Hour, queuey.HoldDeferred)
	if !errors.Is(err, queuey.ErrDelayTooLong) {
		t.Fatalf("a 30-day hold: %v; want ErrDelayTooLong", err)
	}
	if n := len(r.broker.Queues()); n != 2 {
		t.Fatalf("a refused hold declared something: %+v", r.broker.Queues())
	}
}

func TestDeadLetterLandsInDeadQueueWithHeaders(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	body := []byte("\x00not an envelope{")
	if err := r.b.DeadLetter(t.Context(), "jobs", body, "malformed envelope", 3); err != nil {
		t.Fatal(err)
	}
	d := r.get("jobs.dead")
	if !bytes.Equal(d.Body, body) {
		t.Errorf("body %q, want %q verbatim", d.Body, body)
	}
	got := amqp.Table{}
	for _, k := range []string{HeaderDeathReason, HeaderOriginalQueue, HeaderAttempts} {
		got[k] = d.Headers[k]
	}
	want := amqp.Table{"x-death-reason": "malformed envelope", "x-original-queue": "jobs", "x-attempts": int64(3)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("delivery mode %d, want persistent", d.DeliveryMode)
	}
}

func TestDeadLetterOnUndeclaredQueueIsErrUnknownQueue(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	err := r.b.DeadLetter(t.Context(), "jobs", []byte("x"), "fatal", 1)
	if !errors.Is(err, queuey.ErrUnknownQueue) || !strings.Contains(err.Error(), `"jobs"`) {
		t.Fatalf("DeadLetter on an undeclared queue: %v; want ErrUnknownQueue naming it", err)
	}
}

func TestConsumeHonoursPrefetch(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	for i := range 3 {
		r.publish(testJob("jobs", fmt.Sprint("j", i), 0), 0, queuey.HoldRetry)
	}
	c, err := r.b.Consume(t.Context(), "jobs", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, second := receiveDelivery(t, c), receiveDelivery(t, c)
	if info, _ := r.broker.Queue("jobs"); info.Ready != 1 || info.Unacked != 2 {
		t.Fatalf("with prefetch 2: ready %d, unacked %d; want 1 and 2", info.Ready, info.Unacked)
	}
	if err := first.Ack(); err != nil {
		t.Fatal(err)
	}
	third := receiveDelivery(t, c)
	if ids := []string{testJobID(t, first.Body()), testJobID(t, second.Body()), testJobID(t, third.Body())}; !sameStrings(ids, []string{"j0", "j1", "j2"}) {
		t.Fatalf("delivered %v", ids)
	}
	if _, err := r.b.Consume(t.Context(), "jobs", 0); err == nil {
		t.Fatal("prefetch 0 was accepted")
	}
}

func sameStrings(a, b []string) bool { return cmp.Equal(a, b) }

func TestAckRemovesAndRequeueReturns(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "acked", 0), 0, queuey.HoldRetry)
	r.publish(testJob("jobs", "requeued", 0), 0, queuey.HoldRetry)
	c, err := r.b.Consume(t.Context(), "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := receiveDelivery(t, c)
	if testJobID(t, d.Body()) != "acked" || d.Redelivered() {
		t.Fatalf("first delivery %s redelivered=%v", testJobID(t, d.Body()), d.Redelivered())
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	d = receiveDelivery(t, c)
	if err := d.Requeue(); err != nil {
		t.Fatal(err)
	}
	d = receiveDelivery(t, c)
	if testJobID(t, d.Body()) != "requeued" || !d.Redelivered() {
		t.Fatalf("after Requeue got %s redelivered=%v; want requeued again, redelivered", testJobID(t, d.Body()), d.Redelivered())
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	if info, _ := r.broker.Queue("jobs"); info.Ready != 0 || info.Unacked != 0 {
		t.Fatalf("after acks: %+v", info)
	}
}

// On RabbitMQ 4.3 only basic.reject counts toward a quorum queue's delivery
// limit; a nack with requeue leaves x-delivery-count absent. So the header
// proves Requeue rejects.
func TestRequeueUsesRejectOnQuorum(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ43, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs", Type: queuey.Quorum})
	r.publish(testJob("jobs", "j1", 0), 0, queuey.HoldRetry)
	c, err := r.b.Consume(t.Context(), "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for want := range int64(3) {
		d := receiveDelivery(t, c)
		got, _ := d.(*consume.Delivery).D.Headers["x-delivery-count"].(int64)
		if got != want {
			t.Fatalf("delivery %d: x-delivery-count %v, want %d", want+1, d.(*consume.Delivery).D.Headers["x-delivery-count"], want)
		}
		if err := d.Requeue(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSettlingTwiceNeverReachesTheBroker(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "j1", 0), 0, queuey.HoldRetry)
	r.publish(testJob("jobs", "j2", 0), 0, queuey.HoldRetry)
	c, err := r.b.Consume(t.Context(), "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := receiveDelivery(t, c)
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	for _, settle := range []func() error{d.Ack, d.Requeue} {
		if err := settle(); err == nil || !strings.Contains(err.Error(), "already settled") {
			t.Fatalf("second settlement: %v", err)
		}
	}
	// The channel survived (an unknown tag would have closed it).
	if d := receiveDelivery(t, c); testJobID(t, d.Body()) != "j2" || d.Ack() != nil {
		t.Fatal("consumer broken by a double settlement")
	}
}

func TestCancelStopsDeliveriesAndKeepsSettling(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	for i := range 4 {
		r.publish(testJob("jobs", fmt.Sprint("j", i), 0), 0, queuey.HoldRetry)
	}
	c, err := r.b.Consume(t.Context(), "jobs", 2)
	if err != nil {
		t.Fatal(err)
	}
	held := receiveDelivery(t, c)
	if err := c.Cancel(); err != nil {
		t.Fatal(err)
	}
	rest := awaitEnded(t, c) // the broker had sent 2: one held, at most one more to read
	if c.Err() != nil {
		t.Fatalf("Err after Cancel: %v", c.Err())
	}
	if info, _ := r.broker.Queue("jobs"); len(info.Consumers) != 0 || info.Ready != 2 || info.Unacked != 2 {
		t.Fatalf("after Cancel: %+v (read %d more); want no consumer, 2 ready, 2 unacked", info, rest)
	}
	if err := held.Ack(); err != nil {
		t.Fatalf("settling after Cancel: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if info, _ := r.broker.Queue("jobs"); info.Ready != 3 || info.Unacked != 0 {
		t.Fatalf("after Close: %+v; want the unsettled one requeued", info)
	}
}

func TestConsumerCloseRequeuesUnsettled(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "j1", 0), 0, queuey.HoldRetry)
	r.publish(testJob("jobs", "j2", 0), 0, queuey.HoldRetry)
	c, err := r.b.Consume(t.Context(), "jobs", 2)
	if err != nil {
		t.Fatal(err)
	}
	d := receiveDelivery(t, c) // the other one is on its way, never read
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-c.Deliveries(); ok {
		t.Fatal("Deliveries open after Close")
	}
	if c.Err() != nil {
		t.Fatalf("Err after Close: %v", c.Err())
	}
	if info, _ := r.broker.Queue("jobs"); info.Ready != 2 || info.Unacked != 0 || len(info.Consumers) != 0 {
		t.Fatalf("after Close: %+v; want both requeued", info)
	}
	if err := d.Ack(); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("Ack after Close: %v; want amqp.ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestConsumeContextBoundsOnlyTheStart(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	ctx, cancel := context.WithCancel(t.Context())
	c, err := r.b.Consume(ctx, "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	r.publish(testJob("jobs", "j1", 0), 0, queuey.HoldRetry)
	if d := receiveDelivery(t, c); testJobID(t, d.Body()) != "j1" {
		t.Fatal("wrong delivery")
	}
	if _, err := r.b.Consume(ctx, "jobs", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume with a done context: %v", err)
	}
}

func TestConsumeOnMissingQueueFailsAndBackendKeepsWorking(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	_, err := r.b.Consume(t.Context(), "missing", 1)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound || !strings.Contains(err.Error(), `"missing"`) {
		t.Fatalf("Consume of a missing queue: %v; want a 404 naming it", err)
	}
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "j1", 0), time.Second, queuey.HoldRetry)
}

func TestConnectionDropEndsConsumerWithAmqpError(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	r.publish(testJob("jobs", "j1", 0), 0, queuey.HoldRetry)
	c, err := r.b.Consume(t.Context(), "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := receiveDelivery(t, c)

	r.broker.CloseConnection(r.conn, &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - test"})
	awaitEnded(t, c)
	var amqpErr *amqp.Error
	if !errors.As(c.Err(), &amqpErr) || amqpErr.Code != amqp.ConnectionForced {
		t.Fatalf("consumer Err after the connection dropped: %v; want the 320 *amqp.Error", c.Err())
	}
	if err := d.Ack(); err == nil {
		t.Fatal("Ack on a dropped connection succeeded")
	}
	if r.ready("jobs") != 1 {
		t.Fatal("the unsettled delivery was not requeued")
	}

	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case <-r.b.Done():
	case <-timer.C:
		t.Fatal("publisher still open 5 s after the connection dropped")
	}
	for name, err := range map[string]error{
		"Publish":      r.b.Publish(t.Context(), testJob("jobs", "j2", 0), 0, queuey.HoldRetry),
		"Publish hold": r.b.Publish(t.Context(), testJob("jobs", "j3", 0), time.Second, queuey.HoldRetry),
		"DeadLetter":   r.b.DeadLetter(t.Context(), "jobs", []byte("x"), "fatal", 1),
	} {
		if !errors.Is(err, ErrPublisherClosed) || !errors.As(err, &amqpErr) || amqpErr.Code != amqp.ConnectionForced {
			t.Errorf("%s after the connection dropped: %v; want ErrPublisherClosed wrapping the 320", name, err)
		}
	}
	for name, err := range map[string]error{
		"Declare": r.b.Declare(t.Context(), queuey.QueueConfig{Name: "more"}),
		"Consume": func() error { _, err := r.b.Consume(t.Context(), "jobs", 1); return err }(),
	} {
		if !errors.Is(err, amqp.ErrClosed) || !errors.As(err, &amqpErr) || !strings.Contains(err.Error(), "CONNECTION_FORCED") {
			t.Errorf("%s after the connection dropped: %v; want amqp.ErrClosed and the broker's reason", name, err)
		}
	}
	if err := r.b.Close(); err != nil {
		t.Errorf("Close after the connection dropped: %v", err)
	}
}

func TestBrokerCancelIsReportedByErr(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	c, err := r.b.Consume(t.Context(), "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := r.raw.QueueDelete("jobs", false, false, false); err != nil {
		t.Fatal(err)
	}
	awaitEnded(t, c)
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "cancelled by the broker") {
		t.Fatalf("Err after the queue was deleted: %v", err)
	}
}

// Concurrent holds of many TTLs share the hold channel without tripping
// over each other, and each testJob lands in its own hold queue.
func TestConcurrentHolds(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			errs <- r.b.Publish(t.Context(), testJob("jobs", fmt.Sprint("j", i), 0), time.Duration(1+i%8)*time.Second, queuey.HoldRetry)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for s := 1; s <= 8; s++ {
		if got := r.ready(fmt.Sprintf("jobs.deferred.%d", s*1000)); got != 5 {
			t.Errorf("jobs.deferred.%d has %d, want 5", s*1000, got)
		}
	}
}

// ExampleBackend defers a job on membroker under a virtual clock: it waits
// in its hold queue, then comes back ahead of the backlog. It uses classic
// holds, whose one hold queue releases the job straight into its work
// queue, so that the clock can jump 30 s at once; the default ladder needs
// a consumer relaying while time passes (ExampleBackend_Relay).
func ExampleBackend() {
	clk := clock.NewMock()
	broker := membroker.New(membroker.Config{Clock: clk, Version: membroker.RabbitMQ40})
	conn, _ := broker.Dial()
	backend, err := New(Channels(conn.Channel), Options{Topology: Topology{ClassicHolds: true}})
	if err != nil {
		panic(err)
	}
	defer backend.Close()
	ctx := context.Background()

	emails := queuey.QueueConfig{Name: "emails"}
	if err := backend.Declare(ctx, emails); err != nil {
		panic(err)
	}
	newJob := func(id string, priority uint8) queuey.Envelope {
		return queuey.Envelope{ID: id, Kind: "send_email", Queue: "emails", Payload: json.RawMessage(`null`),
			Attempt: 1, Priority: priority, EnqueuedAt: clk.Now()}
	}
	// Retry-After: 30 from a rate-limited API.
	_ = backend.Publish(ctx, newJob("rate-limited", emails.TopPriority()), 30*time.Second, queuey.HoldDeferred)
	_ = backend.Publish(ctx, newJob("backlog", 0), 0, queuey.HoldRetry)
	for _, q := range broker.Queues() {
		fmt.Println(q.Name, q.Ready)
	}

	clk.Add(30 * time.Second)
	consumer, _ := backend.Consume(ctx, "emails", 1)
	defer consumer.Close()
	for range 2 {
		d := <-consumer.Deliveries()
		env, _ := queuey.DecodeEnvelope(d.Body())
		fmt.Println("delivered", env.ID, "at priority", d.Priority())
		_ = d.Ack()
	}
	// Output:
	// emails 1
	// emails.dead 0
	// emails.deferred.30000 1
	// delivered rate-limited at priority 10
	// delivered backlog at priority 0
}

// bigJob is a job whose encoded message is just over RabbitMQ 4's default
// max_message_size of 16 MiB.
func bigJob(queue, id string) queuey.Envelope {
	env := testJob(queue, id, 0)
	env.Payload = json.RawMessage(`"` + strings.Repeat("x", DefaultMaxMessageSize) + `"`)
	return env
}

// A job over MaxMessageSize is refused before anything is sent, with an
// error of its own; the backend, its publishing channel and the queue are
// as they were.
func TestJobOverMaxMessageSizeIsRefusedBeforeSending(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	for _, hold := range []time.Duration{0, time.Second} {
		err := r.b.Publish(t.Context(), bigJob("jobs", "big"), hold, queuey.HoldRetry)
		if !errors.Is(err, queuey.ErrJobTooLarge) || !strings.Contains(err.Error(), "over the 16777216 of MaxMessageSize") {
			t.Fatalf("a 16 MiB job, hold %s: %v; want queuey.ErrJobTooLarge with the sizes", hold, err)
		}
	}
	if r.ready("jobs") != 0 || r.ready("jobs.deferred.1000") != -1 {
		t.Fatalf("queues after refused jobs: %+v", r.broker.Queues())
	}
	r.publish(testJob("jobs", "small", 0), 0, queuey.HoldRetry)
	if testJobID(t, r.get("jobs").Body) != "small" {
		t.Fatal("the next job did not land")
	}
}

// With MaxMessageSize over the broker's limit, the broker refuses the big
// job by closing the publishing channel (406): that publish fails, saying
// it may have been enqueued, and a fresh channel takes over, so the next
// publish goes through and the backend is not Done.
func TestPublishingChannelClosedByTheBrokerIsReplaced(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{MaxMessageSize: 32 << 20})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	err := r.b.Publish(t.Context(), bigJob("jobs", "big"), 0, queuey.HoldRetry)
	var amqpErr *amqp.Error
	if !errors.Is(err, ErrPublisherClosed) || !errors.Is(err, queuey.ErrMaybeEnqueued) ||
		!errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
		t.Fatalf("a job over the broker's limit: %v; want ErrPublisherClosed, queuey.ErrMaybeEnqueued and the broker's 406", err)
	}
	for i, hold := range []time.Duration{0, time.Second} {
		r.publish(testJob("jobs", fmt.Sprint("after-", i), 0), hold, queuey.HoldRetry)
	}
	if err := r.b.DeadLetter(t.Context(), "jobs", []byte("x"), "fatal", 1); err != nil {
		t.Fatalf("dead-letter after the channel was replaced: %v", err)
	}
	if r.ready("jobs") != 1 || r.ready("jobs.deferred.1000") != 1 || r.ready("jobs.dead") != 1 {
		t.Fatalf("queues after the replacement: %+v", r.broker.Queues())
	}
	select {
	case <-r.b.Done():
		t.Fatal("Done closed after a channel exception")
	default:
	}
	if !strings.Contains(r.logs.String(), `level=WARN msg="rabbitmq: the broker closed the publishing channel; publishing goes on on a fresh one"`) {
		t.Errorf("the replacement was not logged at WARN:\n%s", r.logs)
	}
	if err := r.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-r.b.Done()
}

// Publishes that found the channel closed by another publish's refusal,
// and so were never sent, wait for the fresh channel and go out on it;
// only the publish that caused the refusal fails. The fresh channel is
// held back until every publish is waiting for it.
func TestOnlyThePublishThatBrokeTheChannelFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		var armed atomic.Bool // the next channel opened is the fresh publishing one
		open := func() (Channel, error) {
			if armed.CompareAndSwap(true, false) {
				<-gate
			}
			return conn.Channel()
		}
		b, err := New(open, Options{MaxMessageSize: 32 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		if err := b.Publish(t.Context(), bigJob("jobs", "big"), 0, queuey.HoldRetry); !errors.Is(err, queuey.ErrMaybeEnqueued) {
			t.Fatalf("the big job: %v", err)
		}
		const n = 20
		errs := make(chan error, n)
		for i := range n {
			go func() { errs <- b.Publish(t.Context(), testJob("jobs", fmt.Sprint("j", i), 0), 0, queuey.HoldRetry) }()
		}
		synctest.Wait() // every publish waits for the fresh channel
		if len(errs) != 0 {
			t.Fatalf("a publish returned before the fresh channel opened: %v", <-errs)
		}
		close(gate)
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("a publish after the refusal: %v", err)
			}
		}
		if info, _ := broker.Queue("jobs"); info.Ready != n {
			t.Fatalf("jobs holds %d, want %d", info.Ready, n)
		}
	})
}

// A dropped connection is no channel exception: nothing is reopened, and
// Done closes.
func TestDroppedConnectionClosesDoneWithoutReopening(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	r.declare(queuey.QueueConfig{Name: "jobs"})
	if err := r.conn.Close(); err != nil {
		t.Fatal(err)
	}
	<-r.b.Done()
	if err := r.b.Publish(t.Context(), testJob("jobs", "j", 0), 0, queuey.HoldRetry); !errors.Is(err, ErrPublisherClosed) {
		t.Fatalf("publish after the drop: %v", err)
	}
	if strings.Contains(r.logs.String(), "fresh one") {
		t.Errorf("a channel was reopened after the connection closed:\n%s", r.logs)
	}
}

// While the broker blocks publishing (connection.blocked), a publish whose
// wait for its confirm ends says so, with the broker's reason, besides
// that the job may have been enqueued; the block and the unblock are
// logged. membroker has no alarms: the notifications and the missing
// confirm are staged.
func TestPublishWhileTheBrokerBlocksSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var g *gatedChannel
		open := func() (Channel, error) {
			ch, err := conn.Channel()
			if err != nil {
				return nil, err
			}
			if g == nil { // the publishing channel: its confirms never come
				g = gated(ch, false)
				return g, nil
			}
			return ch, nil
		}
		blocked := make(chan amqp.Blocking, 1)
		var logs backendLogBuffer
		b, err := New(open, Options{Blocked: blocked, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			close(g.open)
			_ = b.Close()
		}()
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: "jobs"}); err != nil {
			t.Fatal(err)
		}
		publish := func() error {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			return b.Publish(ctx, testJob("jobs", "j", 0), 0, queuey.HoldRetry)
		}

		blocked <- amqp.Blocking{Active: true, Reason: "low on memory"}
		synctest.Wait()
		err = publish()
		if !errors.Is(err, queuey.ErrMaybeEnqueued) || !errors.Is(err, context.DeadlineExceeded) ||
			!errors.Is(err, ErrPublishingBlocked) || !strings.Contains(err.Error(), "low on memory") {
			t.Fatalf("a publish timing out while blocked: %v; want ErrMaybeEnqueued, DeadlineExceeded and ErrPublishingBlocked with the reason", err)
		}
		if !strings.Contains(logs.String(), `level=WARN msg="rabbitmq: the broker is blocking publishers: publishes wait until it unblocks" reason="low on memory"`) {
			t.Errorf("the block was not logged at WARN:\n%s", logs.String())
		}

		blocked <- amqp.Blocking{Active: false}
		synctest.Wait()
		if err := publish(); !errors.Is(err, queuey.ErrMaybeEnqueued) || errors.Is(err, ErrPublishingBlocked) {
			t.Fatalf("a publish timing out once unblocked: %v; want ErrMaybeEnqueued without ErrPublishingBlocked", err)
		}
		if !strings.Contains(logs.String(), `level=INFO msg="rabbitmq: the broker unblocked publishers"`) {
			t.Errorf("the unblock was not logged:\n%s", logs.String())
		}
	})
}

// A backend made by New is ready until its connection drops, and then
// never again: it does not reconnect.
func TestReadyOfABackendOnItsCallersConnection(t *testing.T) {
	r := newBackendRig(t, membroker.RabbitMQ40, Options{})
	if err := r.b.Ready(); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	r.broker.CloseConnection(r.conn, &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker shutdown", Server: true})
	<-r.b.Done()
	if err := r.b.Ready(); !errors.Is(err, ErrPublisherClosed) {
		t.Fatalf("Ready after the connection dropped: %v, want ErrPublisherClosed", err)
	}
	_ = r.b.Close()
	if err := r.b.Ready(); !errors.Is(err, ErrBackendClosed) {
		t.Fatalf("Ready after Close: %v, want ErrBackendClosed", err)
	}
}
