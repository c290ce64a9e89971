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

// Run.Outcome says what the worker does with a run's job, by the worker's
// own rules: each job here runs once, returning one result, wrapped or
// not, on a queue that allows two attempts.
func TestRunOutcome(t *testing.T) {
	results := []error{
		nil,
		queuey.Defer(30*time.Second, "429"),
		fmt.Errorf("calling: %w", queuey.Defer(1500*time.Millisecond, "")),
		queuey.Fatal(errors.New("400 Bad Request")),
		fmt.Errorf("calling: %w", queuey.Fatal(nil)),
		errors.New("503 Service Unavailable"),
	}
	want := []string{"ok", "defer 30s", "defer 1.5s", "dead-letter: fatal: 400 Bad Request", "dead-letter: fatal: fatal", "retry"}
	queues := []queuey.QueueConfig{{Name: "api", Prefetch: 1, Retry: queuey.RetryPolicy{MaxAttempts: 2, Jitter: queuey.NoJitter}}}
	queueytest.Test(t, queueytest.Options{}, queues, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error {
			var i int
			_, _ = fmt.Sscan(job.Args.URL, &i)
			if job.Attempt == 2 {
				return errors.New("503 again")
			}
			return results[i]
		})
		h.Start()
		ids := make([]string, len(results))
		for i := range results {
			id, err := h.Producer.Enqueue(t.Context(), CallAPI{URL: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = id
		}
		h.Settle()
		for i, id := range ids {
			got := h.Log.OutcomesOf(id)
			if len(got) == 0 || got[0] != (queueytest.Outcome{Attempt: 1, Result: want[i]}) {
				t.Errorf("a run that returned %v: %v, want attempt=1 ... %s", results[i], got, want[i])
			}
		}
		h.Advance(time.Hour) // the 503's retry: its second and last attempt
		if got := h.Log.OutcomesOf(ids[5]); len(got) != 2 || got[1].Result != "dead-letter: attempts exhausted" {
			t.Errorf("the retried job's runs: %v; want its second attempt dead-lettered", got)
		}
	})
	two := []queueytest.Outcome{{Attempt: 1, Result: "defer 30s"}, {Attempt: 1, Deferrals: 1, Priority: 10, Result: "ok"}}
	if got, want := fmt.Sprint(two), "[{attempt=1 deferrals=0 priority=0 defer 30s} {attempt=1 deferrals=1 priority=10 ok}]"; got != want {
		t.Errorf("a slice of outcomes prints %q, want %q", got, want)
	}
	if got, want := (queueytest.Outcome{Attempt: 1, Result: "defer 30s"}).String(), "{attempt=1 deferrals=0 priority=0 defer 30s}"; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
}

// A job's own attempts (queuey.WithMaxAttempts) decide its outcome in the
// log, as they do in the worker: one attempt where the queue allows five,
// and a bad option is refused and nothing is enqueued.
func TestRunOutcomeObeysTheJobsOwnAttempts(t *testing.T) {
	queues := []queuey.QueueConfig{{Name: "api", Prefetch: 1, Retry: queuey.RetryPolicy{MaxAttempts: 5, Jitter: queuey.NoJitter}}}
	queueytest.Test(t, queueytest.Options{}, queues, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error {
			if job.MaxAttempts != 1 {
				t.Errorf("JobContext.MaxAttempts %d, want the job's 1", job.MaxAttempts)
			}
			return errors.New("503")
		})
		h.Start()
		id, err := h.Producer.Enqueue(t.Context(), CallAPI{URL: "x"}, queuey.WithMaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Producer.Enqueue(t.Context(), CallAPI{URL: "y"}, queuey.WithMaxAttempts(0)); !errors.Is(err, queuey.ErrInvalidOption) {
			t.Fatalf("WithMaxAttempts(0): %v", err)
		}
		h.Settle()
		if got := h.Log.OutcomesOf(id); len(got) != 1 || got[0].Result != "dead-letter: attempts exhausted" {
			t.Errorf("runs %v, want one, dead-lettered", got)
		}
		if n := h.Dead("api"); n != 1 {
			t.Errorf("%d dead letters, want 1", n)
		}
	})
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
			{Attempt: 1, Deferrals: 1, Priority: 10, Result: "retry"}, // a panic
			{Attempt: 2, Deferrals: 1, Result: "retry"},
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

// A job's earlier failures reach its handler (JobContext.Errors) and the
// log: on its third attempt it sees the two before, oldest first, each
// with its attempt and error; a deferral adds none.
func TestAJobSeesItsEarlierErrors(t *testing.T) {
	queues := []queuey.QueueConfig{{Name: "api", Prefetch: 1, Retry: queuey.RetryPolicy{MaxAttempts: 3, Jitter: queuey.NoJitter}}}
	queueytest.Test(t, queueytest.Options{}, queues, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[CallAPI]) error {
			switch {
			case job.Attempt == 1 && job.Deferrals == 0:
				return queuey.Defer(time.Second, "429")
			case job.Attempt < 3:
				return fmt.Errorf("upstream 503 on attempt %d", job.Attempt)
			}
			return nil
		})
		h.Start()
		id, err := h.Producer.Enqueue(t.Context(), CallAPI{URL: "x"})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Minute)
		runs := h.Log.RunsOf(id)
		if len(runs) != 4 {
			t.Fatalf("%d runs, want 4", len(runs))
		}
		var got []string
		for _, e := range runs[3].Errors {
			got = append(got, fmt.Sprintf("%d: %s", e.Attempt, e.Error))
		}
		if want := []string{"1: upstream 503 on attempt 1", "2: upstream 503 on attempt 2"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("the third attempt saw %q, want %q", got, want)
		}
		if len(runs[1].Errors) != 0 {
			t.Fatalf("after a deferral the job saw %v, want no errors", runs[1].Errors)
		}
	})
}
