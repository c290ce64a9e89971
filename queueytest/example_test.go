package queueytest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
)

// CallAPI calls a rate-limited external API.
type CallAPI struct {
	URL string `json:"url"`
}

func (CallAPI) Kind() string  { return "call-api" }
func (CallAPI) Queue() string { return "api" }

// A producer schedules a call it already knows cannot happen yet: Defer
// holds it for 30 s, then it runs ahead of the backlog, at its first
// attempt, with no deferral counted (the producer scheduled it; nothing
// deferred it).
func Example_deferFromProducer() {
	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{}, queuey.QueueConfig{Name: "api", Prefetch: 1})
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error { return nil })
	h.Start()

	id, err := h.Producer.Defer(context.Background(), CallAPI{URL: "https://example.com/scheduled"}, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("held %d, pending %d\n", h.Held("api"), h.Pending("api"))

	h.Advance(30 * time.Second)
	h.WaitFor("the held job to run", func() bool { return len(h.Log.RunsOf(id)) == 1 })
	run := h.Log.RunsOf(id)[0]
	fmt.Printf("ran at attempt %d, deferrals %d, priority %d\n", run.Attempt, run.Deferrals, run.Priority)
	// Output:
	// held 1, pending 0
	// ran at attempt 1, deferrals 0, priority 10
}

// A handler answered 429 Too Many Requests with Retry-After: 30 defers:
// no attempt is spent, the retry policy is not consulted, and the job comes
// back after 30 s at the queue's top priority with its deferral counted.
func Example_rateLimitedDeferral() {
	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{}, queuey.QueueConfig{Name: "api", Prefetch: 1})
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error {
		if job.Deferrals == 0 {
			return queuey.Defer(30*time.Second, "429 Too Many Requests")
		}
		return nil
	})
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), CallAPI{URL: "https://example.com/limited"})
	h.WaitFor("the deferral to be held", func() bool { return h.Held("api") == 1 })
	h.Advance(29 * time.Second)
	fmt.Printf("after 29 s: held %d, runs %d\n", h.Held("api"), len(h.Log.RunsOf(id)))
	h.Advance(time.Second)
	h.WaitFor("the deferred job to run again", func() bool { return len(h.Log.RunsOf(id)) == 2 })
	for _, run := range h.Log.RunsOf(id) {
		fmt.Printf("attempt %d, deferrals %d, priority %d, err %v\n", run.Attempt, run.Deferrals, run.Priority, run.Err)
	}
	// Output:
	// after 29 s: held 1, runs 1
	// attempt 1, deferrals 0, priority 0, err queuey: deferred for 30s: 429 Too Many Requests
	// attempt 1, deferrals 1, priority 10, err <nil>
}

// errThrottled is what an API client returns for 429 Too Many Requests.
var errThrottled = errors.New("429 Too Many Requests")

// Middleware wraps every handler run: here one logs each run, and one turns
// the API client's throttling error into a 30 s deferral for every handler
// at once, instead of each handler checking for it.
func Example_middleware() {
	t := &exampleT{}
	defer t.done()
	logRuns := func(ctx context.Context, job queuey.JobContext, next func(context.Context, queuey.JobContext) error) error {
		err := next(ctx, job)
		fmt.Printf("%s attempt %d, deferrals %d: %v\n", job.Kind, job.Attempt, job.Deferrals, err)
		return err
	}
	deferThrottled := func(ctx context.Context, job queuey.JobContext, next func(context.Context, queuey.JobContext) error) error {
		err := next(ctx, job)
		if errors.Is(err, errThrottled) {
			return queuey.Defer(30*time.Second, err.Error())
		}
		return err
	}
	h := queueytest.New(t, queueytest.Options{Worker: queuey.WorkerConfig{Middleware: []queuey.Middleware{logRuns, deferThrottled}}},
		queuey.QueueConfig{Name: "api", Prefetch: 1})
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error {
		if job.Deferrals == 0 {
			return fmt.Errorf("calling %s: %w", job.Args.URL, errThrottled)
		}
		return nil
	})
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), CallAPI{URL: "https://example.com/limited"})
	h.WaitFor("the deferral to be held", func() bool { return h.Held("api") == 1 })
	h.Advance(30 * time.Second)
	h.WaitFor("the second run", func() bool { return len(h.Log.RunsOf(id)) == 2 })
	// Output:
	// call-api attempt 1, deferrals 0: queuey: deferred for 30s: calling https://example.com/limited: 429 Too Many Requests
	// call-api attempt 1, deferrals 1: <nil>
}

// exampleT stands in for *testing.T in a runnable example.
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

// A call that hangs is cut off at its queue's Timeout: the handler's
// context ends, the run is a failed attempt, and once the attempts are
// spent the job is dead-lettered as timed out, all in virtual time.
func Example_timeout() {
	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{}, queuey.QueueConfig{Name: "api", Prefetch: 1, Timeout: time.Minute,
		Retry: queuey.RetryPolicy{Base: time.Second, Cap: time.Second, MaxAttempts: 2, Jitter: queuey.NoJitter}})
	var started atomic.Int32 // runs whose handler has started, and so their deadline
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error {
		started.Add(1)
		<-ctx.Done() // the API never answers
		return ctx.Err()
	})
	h.Start()
	id, _ := h.Producer.Enqueue(context.Background(), CallAPI{URL: "https://example.com/hangs"})
	// Advance only once the handler runs: its deadline is on the clock
	// then. A delivery taken off the queue is not yet a handler running.
	h.WaitFor("the first run to start", func() bool { return started.Load() == 1 })
	h.Advance(time.Minute + time.Minute/128) // a deadline may be a 128th of the timeout late
	h.WaitFor("the retry to be held", func() bool { return h.Held("api") == 1 })
	h.Advance(time.Second)
	h.WaitFor("the second run to start", func() bool { return started.Load() == 2 })
	h.Advance(time.Minute + time.Minute/128)
	h.WaitFor("the dead letter", func() bool { return h.Dead("api") == 1 })
	for _, run := range h.Log.RunsOf(id) {
		fmt.Printf("attempt %d: %v, then %s %q\n", run.Attempt, run.Err, run.Action, run.Reason)
	}
	// Output:
	// attempt 1: context deadline exceeded, then retry ""
	// attempt 2: context deadline exceeded, then dead-letter "timed out"
}
