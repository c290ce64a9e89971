package rabbitmq

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// optionsJob's own queue is optionsHome; the test sends it elsewhere with
// WithQueue.
type optionsJob struct{}

const optionsHome = "queuey-options-home"

func (optionsJob) Kind() string  { return "options" }
func (optionsJob) Queue() string { return optionsHome }

// A job's own options (its queue, ID, attempts and priority) hold through
// a deferral, a retry, a dead letter and a redrive, on membroker and live:
// the job runs on the queue it was sent to, under its ID, at its priority
// but for the deferral's round at the top, and is dead-lettered after its
// own two attempts where the queue allows ten; redriven with its attempts
// reset, it has two again. On a quorum queue, which takes no priority of
// the job's, the same holds at priority 0.
func TestJobOptionsSurviveDeferralRetryDeadLetterAndRedrive(t *testing.T) {
	for _, typ := range []queuey.QueueType{queuey.Classic, queuey.Quorum} {
		t.Run(typ.String(), func(t *testing.T) { testJobOptionsSurvive(t, typ) })
	}
}

func testJobOptionsSurvive(t *testing.T, typ queuey.QueueType) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		target := r.queue()
		top := r.b.Topology()
		r.queues = append(r.queues, optionsHome, top.DeadQueue(optionsHome))
		r.queues = append(r.queues, top.WarmQueue(optionsHome))
		fast := queuey.RetryPolicy{MaxAttempts: 10, Base: 100 * time.Millisecond, Cap: 100 * time.Millisecond, Jitter: queuey.NoJitter}
		queues := []queuey.QueueConfig{{Name: optionsHome}, {Name: target, Type: typ, Retry: fast}}
		p, err := queuey.NewProducer(t.Context(), r.b, queues, queuey.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := queuey.NewWorker(t.Context(), r.b, queues, queuey.WorkerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		runs := make(chan queuey.JobContext, 10)
		if err := queuey.Register(w, queuey.HandlerFunc[optionsJob](func(_ context.Context, j *queuey.Job[optionsJob]) error {
			runs <- j.JobContext
			switch len(runs) {
			case 1:
				return queuey.Defer(time.Millisecond, "429")
			case 4:
				return nil
			}
			return errors.New("vendor down")
		})); err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()

		var prio uint8 = 3
		if typ == queuey.Quorum {
			prio = 0
		}
		id, err := p.Enqueue(t.Context(), optionsJob{}, queuey.WithQueue(target), queuey.WithID("order-42"),
			queuey.WithMaxAttempts(2), queuey.WithPriority(prio))
		if err != nil || id != "order-42" {
			t.Fatalf("Enqueue: %q, %v", id, err)
		}
		dead := top.DeadQueue(target)
		// Two holds of a granule each, on a machine that may be busy: more
		// than eventually's 5 s.
		for deadline := time.Now().Add(30 * time.Second); r.ready(dead) != 1; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s, %s holds %d jobs, want 1", dead, r.ready(dead))
			}
		}
		insp, err := NewInspector(r.admin, InspectorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dls, err := insp.DeadLetters(t.Context(), target, DeadLetterFilter{}, 10)
		if err != nil || len(dls) != 1 {
			t.Fatalf("dead letters: %+v, %v", dls, err)
		}
		if dl := dls[0]; dl.ID != "order-42" || dl.Attempt != 2 || dl.Deferrals != 1 || dl.Reason != queuey.ReasonAttemptsExhausted {
			t.Fatalf("dead letter %+v", dl)
		}
		if rep, err := insp.Redrive(t.Context(), target, RedriveOptions{ResetAttempts: true}); err != nil || rep.Moved != 1 {
			t.Fatalf("redrive: %+v, %v", rep, err)
		}
		for deadline := time.Now().Add(30 * time.Second); len(runs) < 4; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s, %d runs, want the redriven job's, the 4th", len(runs))
			}
		}

		type run struct {
			attempt, deferrals int
			priority           uint8
		}
		want := []run{{1, 0, prio}, {1, 1, 10}, {2, 1, prio}, {1, 1, prio}}
		var got []run
		for range 4 {
			jc := <-runs
			if jc.ID != "order-42" || jc.Queue != target || jc.MaxAttempts != 2 {
				t.Errorf("run %d: ID %q queue %q max attempts %d", len(got)+1, jc.ID, jc.Queue, jc.MaxAttempts)
			}
			got = append(got, run{jc.Attempt, jc.Deferrals, jc.Priority})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("runs (attempt, deferrals, priority) %v, want %v", got, want)
		}
		if n := r.ready(optionsHome); n != 0 {
			t.Fatalf("%d jobs reached the type's own queue", n)
		}
	})
}

// A job whose own options are of the wrong shape (from another producer:
// queuey's refuses them) is malformed to the worker, which dead-letters it
// verbatim, and to the Inspector, which lists it so and redrives it only
// when asked for malformed bodies.
func TestJobWithBadOptionsIsMalformed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		body := []byte(`{"v":1,"id":"bad-1","kind":"inspect","queue":"jobs","payload":{"n":1},"attempt":1,` +
			`"enqueued_at":"2026-01-01T00:00:00Z","ext":{"queuey_max_attempts":0}}`)
		if _, err := queuey.DecodeEnvelope(body); err != nil {
			t.Fatalf("the wire format itself refuses it: %v", err)
		}
		ch := r.rawChannel(t)
		if err := ch.Publish("", "jobs", false, false, amqp.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
		runs, _ := r.work(t)
		if len(runs) != 0 {
			t.Fatalf("it ran: %v", runs)
		}
		dls, err := r.insp.DeadLetters(t.Context(), "jobs", DeadLetterFilter{Malformed: true}, 0)
		if err != nil || len(dls) != 1 {
			t.Fatalf("dead letters %+v, %v", dls, err)
		}
		dl := dls[0]
		if !dl.Malformed || dl.Reason != queuey.ReasonMalformed || string(dl.Body) != string(body) || !strings.Contains(dl.Err, "queuey_max_attempts") {
			t.Fatalf("dead letter %+v", dl)
		}
		if rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{}); err != nil || rep.Moved != 0 {
			t.Fatalf("a redrive without Malformed moved it: %+v, %v", rep, err)
		}
	})
}
