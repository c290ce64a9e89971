package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
)

// SendEmail is the job of these examples.
type SendEmail struct {
	To string `json:"to"`
}

func (SendEmail) Kind() string  { return "send-email" }
func (SendEmail) Queue() string { return "emails" }

// emails is the queue of these examples: retries after 1 s, then 2 s, with
// no jitter, and three attempts in all.
var emails = queuey.QueueConfig{Name: "emails", Prefetch: 1,
	Retry: queuey.RetryPolicy{Base: time.Second, MaxAttempts: 3, Jitter: queuey.NoJitter}}

// A job enqueued runs once and is acknowledged. These examples run on
// membroker, the in-memory RabbitMQ, with queueytest's virtual clock; on
// RabbitMQ the backend comes from rabbitmq.Connect instead.
func Example() {
	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{}, emails)
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[SendEmail]) error {
		fmt.Printf("sending to %s, attempt %d\n", job.Args.To, job.Attempt)
		return nil
	})
	h.Start()
	id, err := h.Producer.Enqueue(context.Background(), SendEmail{To: "a@example.com"})
	if err != nil {
		fmt.Println(err)
		return
	}
	h.WaitFor("the job to run", func() bool { return len(h.Log.RunsOf(id)) == 1 })
	h.WaitFor("the job to be acknowledged", func() bool { return h.Pending("emails") == 0 })
	fmt.Printf("pending %d, held %d, dead %d\n", h.Pending("emails"), h.Held("emails"), h.Dead("emails"))
	// Output:
	// sending to a@example.com, attempt 1
	// pending 0, held 0, dead 0
}

// A handler's error retries the job after the policy's backoff, never
// earlier: here 1 s before the second attempt and 2 s before the third.
func Example_retry() {
	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{}, emails)
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[SendEmail]) error {
		if job.Attempt < 3 {
			return errors.New("SMTP timeout")
		}
		return nil
	})
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), SendEmail{To: "a@example.com"})
	runs := func() int { return len(h.Log.RunsOf(id)) }
	h.WaitFor("the first attempt's retry to be held", func() bool { return h.Held("emails") == 1 })
	h.Advance(999 * time.Millisecond)
	fmt.Printf("after 0.999 s: %d run\n", runs())
	h.Advance(time.Millisecond)
	h.WaitFor("the second attempt's retry to be held", func() bool { return runs() == 2 && h.Held("emails") == 1 })
	h.Advance(2 * time.Second)
	h.WaitFor("the third attempt", func() bool { return runs() == 3 })
	for _, run := range h.Log.RunsOf(id) {
		fmt.Printf("attempt %d: %v\n", run.Attempt, run.Err)
	}
	// Output:
	// after 0.999 s: 1 run
	// attempt 1: SMTP timeout
	// attempt 2: SMTP timeout
	// attempt 3: <nil>
}

// A rate-limited handler defers its job: no attempt is spent, and the job
// comes back after the delay at the queue's top priority, ahead of the
// backlog.
func Example_defer() {
	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{}, emails)
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[SendEmail]) error {
		if job.Deferrals == 0 {
			return queuey.Defer(30*time.Second, "429 Too Many Requests")
		}
		return nil
	})
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), SendEmail{To: "a@example.com"})
	h.WaitFor("the deferral to be held", func() bool { return h.Held("emails") == 1 })
	h.Advance(30 * time.Second)
	h.WaitFor("the second run", func() bool { return len(h.Log.RunsOf(id)) == 2 })
	for _, run := range h.Log.RunsOf(id) {
		fmt.Printf("attempt %d, deferrals %d, priority %d\n", run.Attempt, run.Deferrals, run.Priority)
	}
	// Output:
	// attempt 1, deferrals 0, priority 0
	// attempt 1, deferrals 1, priority 10
}

// A fatal error dead-letters the job at once, and so does the last attempt
// of one that keeps failing; the dead-letter queue says why.
func Example_deadLetter() {
	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{}, emails)
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[SendEmail]) error {
		if job.Args.To == "bounced@example.com" {
			return queuey.Fatal(errors.New("550 mailbox unavailable"))
		}
		return errors.New("SMTP timeout")
	})
	h.Start()
	bounced, _ := h.Producer.Enqueue(context.Background(), SendEmail{To: "bounced@example.com"})
	h.WaitFor("the bounce to be dead-lettered", func() bool { return h.Dead("emails") == 1 })
	fmt.Printf("%s: %d run, then dead-lettered\n", "bounced", len(h.Log.RunsOf(bounced)))

	flaky, _ := h.Producer.Enqueue(context.Background(), SendEmail{To: "slow@example.com"})
	h.WaitFor("the first retry to be held", func() bool { return h.Held("emails") == 1 })
	h.Advance(time.Second)
	h.WaitFor("the second retry to be held", func() bool { return len(h.Log.RunsOf(flaky)) == 2 && h.Held("emails") == 1 })
	h.Advance(2 * time.Second)
	h.WaitFor("the last attempt to be dead-lettered", func() bool { return h.Dead("emails") == 2 })
	fmt.Printf("%s: %d runs, then dead-lettered\n", "flaky", len(h.Log.RunsOf(flaky)))
	// Output:
	// bounced: 1 run, then dead-lettered
	// flaky: 3 runs, then dead-lettered
}

// exampleT is the queueytest.TB of a runnable example: a failure panics.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                        {}
func (*exampleT) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (*exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (*exampleT) Errorf(format string, a ...any) { fmt.Printf(format+"\n", a...) }
func (t *exampleT) Cleanup(f func())             { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
