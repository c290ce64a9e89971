package queueytest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
)

// In Test's bubble a handler test reads like the story it tells, with no
// waiting: a deferral is held, runs when its time comes, at attempt 1 with
// one deferral and the top priority, ahead of the backlog a busy worker
// left on the queue.
func TestBubbleDeferralComesBackAheadOfTheBacklog(t *testing.T) {
	queueytest.Test(t, queueytest.Options{}, []queuey.QueueConfig{jobsQueue()}, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
			switch {
			case job.Args.Name == "limited" && job.Deferrals == 0:
				return queuey.Defer(10*time.Second, "429")
			case job.Args.Name == "backlog0":
				time.Sleep(20 * time.Second) // the worker (prefetch 1) is busy while the deferral returns
			}
			return nil
		})
		h.Start()
		id, err := h.Producer.Enqueue(t.Context(), Work{Name: "limited"})
		if err != nil {
			t.Fatal(err)
		}
		h.Settle()
		if h.Held("jobs") != 1 || len(h.Log.RunsOf(id)) != 1 {
			t.Fatalf("after the first run: held %d, runs %v", h.Held("jobs"), h.Log.RunsOf(id))
		}
		for _, name := range []string{"backlog0", "backlog1", "backlog2"} {
			if _, err := h.Producer.Enqueue(t.Context(), Work{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
		h.Advance(9 * time.Second)
		if h.Held("jobs") != 1 || h.Pending("jobs") != 2 {
			t.Fatalf("at 9 s: held %d, pending %d; want the deferral still held and backlog0 running", h.Held("jobs"), h.Pending("jobs"))
		}
		h.Advance(time.Second)
		if h.Held("jobs") != 0 || h.Pending("jobs") != 3 {
			t.Fatalf("at 10 s: held %d, pending %d; want the deferral released", h.Held("jobs"), h.Pending("jobs"))
		}
		h.Advance(10 * time.Second) // backlog0 ends; the rest run at once
		var names []string
		for _, r := range h.Log.Runs() {
			names = append(names, r.String())
		}
		runs := h.Log.Runs()
		if len(runs) != 5 || runs[2].ID != id || runs[2].Deferrals != 1 || runs[2].Attempt != 1 || runs[2].Priority != 10 {
			t.Fatalf("want the returning deferral third, attempt 1, deferral 1, priority 10, ahead of backlog1 and backlog2:\n%s", strings.Join(names, "\n"))
		}
		if h.Pending("jobs") != 0 {
			t.Fatalf("%d jobs left on the queue", h.Pending("jobs"))
		}
	})
}

// A retry waits its backoff in its hold queue: not a moment less, and
// Advance to the instant it is due finds it run and settled.
func TestBubbleRetryRunsExactlyWhenItsHoldEnds(t *testing.T) {
	q := jobsQueue()
	q.Retry = queuey.RetryPolicy{Base: 4 * time.Second, MaxAttempts: 3, Jitter: queuey.NoJitter}
	queueytest.Test(t, queueytest.Options{}, []queuey.QueueConfig{q}, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
			if job.Attempt == 1 {
				return context.DeadlineExceeded // retryable
			}
			return nil
		})
		h.Start()
		id, err := h.Producer.Enqueue(t.Context(), Work{})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(4*time.Second - time.Millisecond)
		if n := len(h.Log.RunsOf(id)); n != 1 {
			t.Fatalf("%d runs a millisecond before the retry is due, want 1", n)
		}
		h.Advance(time.Millisecond)
		runs := h.Log.RunsOf(id)
		if len(runs) != 2 || runs[1].Attempt != 2 || runs[1].Err != nil || h.Pending("jobs") != 0 || h.Held("jobs") != 0 {
			t.Fatalf("at 4 s: runs %v, pending %d, held %d; want the second attempt run and settled", runs, h.Pending("jobs"), h.Held("jobs"))
		}
	})
}

// With handlers one at a time, a test sees the same runs at the same
// instants every time it runs, the default retry jitter included: the
// harness draws it from a fixed seed.
func TestBubbleDefaultJitterIsRepeatable(t *testing.T) {
	trace := func() string {
		var out strings.Builder
		q := queuey.QueueConfig{Name: "jobs", Prefetch: 1, Retry: queuey.RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 4}}
		t.Run("run", func(t *testing.T) {
			queueytest.Test(t, queueytest.Options{}, []queuey.QueueConfig{q}, func(t *testing.T, h *queueytest.Harness) {
				queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
					if job.Attempt < 3 {
						return errors.New("flaky")
					}
					return nil
				})
				h.Start()
				for i := range 5 {
					if _, err := h.Producer.Enqueue(t.Context(), Work{Name: fmt.Sprint(i)}); err != nil {
						t.Fatal(err)
					}
				}
				for range 16 {
					h.Advance(250 * time.Millisecond)
					fmt.Fprintf(&out, "%d ", len(h.Log.Runs()))
				}
			})
		})
		return out.String()
	}
	first := trace()
	for range 3 {
		if again := trace(); again != first {
			t.Fatalf("runs done by each quarter second:\n%s\nthen\n%s", first, again)
		}
	}
}

// Misuse fails the test instead of passing silently.
func TestHarnessRefusesMisuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(h *queueytest.Harness)
		want string
	}{
		{"Handle after Start", func(h *queueytest.Harness) {
			h.Start()
			queueytest.Handle(h, func(context.Context, *queuey.Job[Work]) error { return nil })
		}, "Handle called after Start"},
		{"Advance backwards", func(h *queueytest.Harness) { h.Advance(-time.Second) }, "time does not go back"},
		{"Pending of a queue that does not exist", func(h *queueytest.Harness) { h.Pending("jbos") }, `no queue "jbos"`},
		{"Dead of a queue that does not exist", func(h *queueytest.Harness) { h.Dead("jbos") }, `no queue "jbos.dead"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := &exampleT{}
			defer ft.done()
			h := queueytest.New(ft, queueytest.Options{}, jobsQueue())
			failed := func() (msg any) {
				defer func() { msg = recover() }()
				tc.do(h)
				return nil
			}()
			if s, _ := failed.(string); !strings.Contains(s, tc.want) {
				t.Fatalf("%v; want the test failed with %q", failed, tc.want)
			}
		})
	}
}

// A handler's panic is in the log as a *queuey.PanicError, which
// errors.As finds.
func TestBubblePanicIsLoggedAsAPanicError(t *testing.T) {
	queueytest.Test(t, queueytest.Options{}, []queuey.QueueConfig{jobsQueue()}, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
			if job.Attempt == 1 {
				panic("nil map")
			}
			return nil
		})
		h.Start()
		if _, err := h.Producer.Enqueue(t.Context(), Work{}); err != nil {
			t.Fatal(err)
		}
		h.Settle()
		var pe *queuey.PanicError
		if runs := h.Log.Runs(); len(runs) == 0 || !errors.As(runs[0].Err, &pe) || pe.Value != "nil map" {
			t.Fatalf("runs %v; want the first a *queuey.PanicError", runs)
		}
	})
}
