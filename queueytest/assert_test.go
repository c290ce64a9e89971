package queueytest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
)

// Run.Outcome names a handler's result as the worker reads it, wrapped or
// not.
func TestRunOutcome(t *testing.T) {
	job := queuey.JobContext{ID: "j", Kind: "call-api", Queue: "api", Attempt: 2, Deferrals: 1, Priority: 10}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{queuey.Defer(30*time.Second, "429"), "defer 30s"},
		{fmt.Errorf("calling: %w", queuey.Defer(1500*time.Millisecond, "")), "defer 1.5s"},
		{queuey.Fatal(errors.New("400 Bad Request")), "fatal"},
		{fmt.Errorf("calling: %w", queuey.Fatal(nil)), "fatal"},
		{&queuey.UnknownKindError{Kind: "other"}, "fatal"},
		{&queuey.PanicError{Value: "boom"}, "panic"},
		{errors.New("503 Service Unavailable"), "error"},
	} {
		got := queueytest.Run{JobContext: job, Err: tc.err}.Outcome()
		want := queueytest.Outcome{Attempt: 2, Deferrals: 1, Priority: 10, Result: tc.want}
		if got != want {
			t.Errorf("Outcome of a run that returned %v: %v, want %v", tc.err, got, want)
		}
	}
	if got, want := (queueytest.Outcome{Attempt: 1, Result: "defer 30s"}).String(), "attempt=1 deferrals=0 priority=0 defer 30s"; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
}

// OutcomesOf lists one job's runs, in order, and no other job's.
func TestOutcomesOf(t *testing.T) {
	queues := []queuey.QueueConfig{{Name: "api", Prefetch: 1, Retry: queuey.RetryPolicy{MaxAttempts: 3, Jitter: queuey.NoJitter}}}
	queueytest.Test(t, queueytest.Options{}, queues, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error {
			switch {
			case job.Args.URL != "flaky":
				return nil
			case job.Deferrals == 0:
				return queuey.Defer(10*time.Second, "429")
			case job.Attempt == 1:
				panic("boom")
			case job.Attempt == 2:
				return errors.New("503")
			}
			return nil
		})
		h.Start()
		flaky, err := h.Producer.Enqueue(t.Context(), CallAPI{URL: "flaky"})
		if err != nil {
			t.Fatal(err)
		}
		other, err := h.Producer.Enqueue(t.Context(), CallAPI{URL: "other"})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Minute)
		want := []queueytest.Outcome{
			{Attempt: 1, Result: "defer 10s"},
			{Attempt: 1, Deferrals: 1, Priority: 10, Result: "panic"},
			{Attempt: 2, Deferrals: 1, Result: "error"},
			{Attempt: 3, Deferrals: 1, Result: "ok"},
		}
		if got := h.Log.OutcomesOf(flaky); !slices.Equal(got, want) {
			t.Errorf("OutcomesOf(flaky):\n got %v\nwant %v", got, want)
		}
		if got, want := h.Log.OutcomesOf(other), []queueytest.Outcome{{Attempt: 1, Result: "ok"}}; !slices.Equal(got, want) {
			t.Errorf("OutcomesOf(other): %v, want %v", got, want)
		}
		if got := h.Log.OutcomesOf("no such job"); len(got) != 0 {
			t.Errorf("OutcomesOf of a job that never ran: %v, want none", got)
		}
	})
}
