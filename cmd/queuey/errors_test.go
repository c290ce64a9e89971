package main

import (
	"context"
	"errors"
	amqp "github.com/rabbitmq/amqp091-go"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// callAPI is a job whose handler fails: an upstream that answers 503.
type callAPI struct{}

func (callAPI) Kind() string  { return "call-api" }
func (callAPI) Queue() string { return "api" }

// failThreeTimes enqueues a job into "api" through b and runs the real
// worker on it, with a handler that fails with "upstream 503", until the
// job has failed its three attempts and been dead-lettered. It returns the
// job's ID. b's topology sets the hold granularity; the backoff is 1 ms.
func failThreeTimes(t *testing.T, b *rabbitmq.Backend) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	queues := []queuey.QueueConfig{{Name: "api", Retry: queuey.RetryPolicy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 3}}}
	producer, err := queuey.NewProducer(ctx, b, queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := producer.Enqueue(ctx, callAPI{})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := queuey.NewWorker(ctx, b, queues, queuey.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	last := make(chan struct{})
	if err := queuey.Register(worker, queuey.HandlerFunc[callAPI](func(_ context.Context, job *queuey.Job[callAPI]) error {
		if job.Attempt == 3 {
			close(last)
		}
		return errors.New("upstream 503")
	})); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- worker.Run(ctx) }()
	<-last
	cancel() // Run settles the running job (its dead letter confirmed) before it returns
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return id
}

// runOnce runs a worker of "api" through b whose handler succeeds and
// sends each job's ID on ran; stop ends it.
func runOnce(t *testing.T, b *rabbitmq.Backend, ran chan<- string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	worker, err := queuey.NewWorker(ctx, b, []queuey.QueueConfig{{Name: "api", Retry: queuey.RetryPolicy{MaxAttempts: 3}}}, queuey.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := queuey.Register(worker, queuey.HandlerFunc[callAPI](func(_ context.Context, job *queuey.Job[callAPI]) error {
		select {
		case ran <- job.ID:
		default:
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- worker.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// A job that fails three times with "upstream 503" is dead-lettered with
// its three errors: dead show lists them with their attempts and times,
// dead ls puts the last one beside the reason, and the Inspector's
// DeadLetter carries them. The real worker settles it, on membroker, in a
// synctest bubble.
func TestADeadJobSaysWhyItFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &deployment{broker: membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ43})}
		b := d.backend(t, rabbitmq.Topology{HoldWarmup: -1})
		id := failThreeTimes(t, b)

		env := map[string]string{"AMQP_URL": memURL}
		code, stdout, stderr := d.runCLI(t, env, "", false, "dead", "show", "api", id)
		if code != 0 || strings.Count(stdout, ": upstream 503\n") != 3 ||
			!strings.Contains(stdout, "errors (the last 3 failed attempts, oldest first):\n  attempt 1 at ") ||
			!strings.Contains(stdout, "  attempt 3 at ") {
			t.Fatalf("dead show: exit %d\n%s%s", code, stdout, stderr)
		}
		code, stdout, stderr = d.runCLI(t, env, "", false, "dead", "ls", "api")
		if code != 0 || !strings.Contains(stdout, "attempts exhausted (last error: upstream 503)") {
			t.Fatalf("dead ls: exit %d\n%s%s", code, stdout, stderr)
		}
		code, stdout, stderr = d.runCLI(t, env, "", false, "dead", "show", "api", id, "--json")
		if code != 0 || !strings.Contains(stdout, `"errors": [`) || strings.Count(stdout, `"error": "upstream 503"`) != 6 { // the field, and the envelope's ext
			t.Fatalf("dead show --json: exit %d\n%s%s", code, stdout, stderr)
		}

		conn, err := d.broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		in, err := rabbitmq.NewInspector(conn.Channel, rabbitmq.InspectorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dls, err := in.DeadLetters(t.Context(), "api", rabbitmq.DeadLetterFilter{}, 0)
		if err != nil || len(dls) != 1 {
			t.Fatalf("%d dead letters, %v", len(dls), err)
		}
		errs := dls[0].Errors
		if len(errs) != 3 || errs[0].Attempt != 1 || errs[2].Attempt != 3 || errs[2].Error != "upstream 503" || !errs[0].At.Before(errs[2].At) {
			t.Fatalf("Inspector.DeadLetters: errors %+v", errs)
		}
	})
}

// scheduler delete removes a group's election queue once confirmed, and
// refuses while a scheduler consumes it or when it does not exist.
func TestSchedulerDelete(t *testing.T) {
	d := newDeployment(t)
	ch := d.channel(t)
	args := amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true, "x-delivery-limit": -1}
	if _, err := ch.QueueDeclare("queuey.scheduler.nightly", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "queuey.scheduler.nightly", false, false, amqp.Publishing{Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"AMQP_URL": memURL}
	if code, _, stderr := d.runCLI(t, env, "", false, "scheduler", "delete", "nightly"); code != exitUsage || !strings.Contains(stderr, "pass --yes") {
		t.Fatalf("without --yes: exit %d\n%s", code, stderr)
	}
	consumer := d.channel(t)
	if _, err := consumer.Consume("queuey.scheduler.nightly", "s1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := d.runCLI(t, env, "", false, "scheduler", "delete", "nightly", "--yes"); code != exitFail || !strings.Contains(stderr, "stop the schedulers of group") {
		t.Fatalf("while a scheduler runs: exit %d\n%s", code, stderr)
	}
	if err := consumer.Close(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := d.runCLI(t, env, "", false, "scheduler", "delete", "nightly", "--yes")
	if code != exitOK || stdout != "deleted queuey.scheduler.nightly and the 1 token in it\n" {
		t.Fatalf("scheduler delete: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, ok := d.broker.Queue("queuey.scheduler.nightly"); ok {
		t.Fatal("the election queue is still there")
	}
	if code, _, stderr := d.runCLI(t, env, "", false, "scheduler", "delete", "nightly", "--yes"); code != exitFail || !strings.Contains(stderr, "no such queue") {
		t.Fatalf("a group that does not exist: exit %d\n%s", code, stderr)
	}
}

// dead delete removes the dead letters it names, once confirmed, and no
// other; it needs --id.
func TestDeadDelete(t *testing.T) {
	d := newDeployment(t)
	env := map[string]string{"AMQP_URL": memURL}
	if code, _, stderr := d.runCLI(t, env, "", false, "dead", "delete", "jobs"); code != exitUsage || !strings.Contains(stderr, "needs --id") {
		t.Fatalf("without --id: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := d.runCLI(t, env, "", false, "dead", "delete", "jobs", "--id", "e-1"); code != exitUsage || !strings.Contains(stderr, "pass --yes") {
		t.Fatalf("without --yes: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr := d.runCLI(t, env, "", false, "dead", "delete", "jobs", "--id", "e-1,c-0", "--yes")
	if code != exitOK || stdout != "deleted 2 dead letters from jobs.dead\n" {
		t.Fatalf("dead delete: exit %d\n%s%s", code, stdout, stderr)
	}
	if q, _ := d.broker.Queue("jobs.dead"); q.Ready != 4 {
		t.Fatalf("%d dead letters left, want 4", q.Ready)
	}
	if code, _, stderr := d.runCLI(t, env, "", false, "dead", "delete", "jobs", "--id", "e-1", "--yes"); code != exitFail || !strings.Contains(stderr, "no dead letter with the job IDs e-1") {
		t.Fatalf("deleting it again: exit %d\n%s", code, stderr)
	}
}
