package queueytest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
)

// timeoutQueue times handlers out after a minute, with two attempts a
// second apart.
func timeoutQueue() queuey.QueueConfig {
	return queuey.QueueConfig{Name: "jobs", Prefetch: 1, Timeout: time.Minute,
		Retry: queuey.RetryPolicy{Base: time.Second, Cap: time.Second, MaxAttempts: 2, Jitter: queuey.NoJitter}}
}

// deadReason takes the oldest dead letter of jobs and returns its reason
// and attempts.
func deadReason(t *testing.T, h *queueytest.Harness) (string, int) {
	t.Helper()
	d, ok, err := brokerChannel(t, h).Get("jobs.dead", true)
	if err != nil || !ok {
		t.Fatalf("get jobs.dead: %v %v", ok, err)
	}
	reason, _ := d.Headers["x-death-reason"].(string)
	n, _ := asInt(d.Headers["x-attempts"])
	return reason, int(n)
}

// A handler that heeds its context is cut off at the queue's Timeout; the
// run counts as an attempt, and the last one dead-letters the job as timed
// out, in virtual time.
func TestAHandlerPastItsTimeoutIsRetriedThenDeadLettered(t *testing.T) {
	queueytest.Test(t, queueytest.Options{}, []queuey.QueueConfig{timeoutQueue()}, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
			<-ctx.Done() // a call that would take an hour
			return ctx.Err()
		})
		h.Start()
		id, err := h.Producer.Enqueue(t.Context(), Work{Name: "slow"})
		if err != nil {
			t.Fatal(err)
		}
		h.Settle()
		h.Advance(time.Minute - time.Millisecond)
		if runs := h.Log.RunsOf(id); len(runs) != 0 {
			t.Fatalf("the handler returned before its timeout: %v", runs)
		}
		h.Advance(time.Millisecond + time.Minute/128) // a handler's deadline is up to a 128th of its timeout late
		if runs := h.Log.RunsOf(id); len(runs) != 1 || !errors.Is(runs[0].Err, context.DeadlineExceeded) {
			t.Fatalf("after a minute: runs %v", runs)
		}
		h.Advance(time.Second + time.Minute + time.Minute/128) // the retry, and its own minute
		runs := h.Log.RunsOf(id)
		if len(runs) != 2 || h.Dead("jobs") != 1 {
			t.Fatalf("after the second attempt: %d runs, %d dead", len(runs), h.Dead("jobs"))
		}
		if runs[0].Action != queuey.ActionRetry || runs[1].Action != queuey.ActionDeadLetter || runs[1].Reason != queuey.ReasonTimedOut {
			t.Fatalf("the log says %s, then %s (%q)", runs[0].Action, runs[1].Action, runs[1].Reason)
		}
		if reason, attempts := deadReason(t, h); reason != queuey.ReasonTimedOut || attempts != 2 {
			t.Fatalf("dead letter: reason %q after %d attempts, want %q after 2", reason, attempts, queuey.ReasonTimedOut)
		}
	})
}

// A handler that ignores its context is abandoned AbandonGrace after its
// timeout: its job is settled as timed out without it, the queue goes on
// (at prefetch 1, the next job runs while it still hangs), and what it
// returns in the end is dropped. No job outlives its attempts.
func TestAHandlerThatIgnoresItsTimeoutIsAbandoned(t *testing.T) {
	queueytest.Test(t, queueytest.Options{}, []queuey.QueueConfig{timeoutQueue()}, func(t *testing.T, h *queueytest.Harness) {
		release := make(chan struct{})
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[Work]) error {
			if job.Args.Name == "hangs" {
				<-release // ignores ctx
				return errors.New("finished at last")
			}
			return nil
		})
		h.Start()
		hangs, _ := h.Producer.Enqueue(t.Context(), Work{Name: "hangs"})
		quick, _ := h.Producer.Enqueue(t.Context(), Work{Name: "quick"})
		h.Settle()
		h.Advance(time.Minute + queuey.AbandonGrace - time.Millisecond)
		if n := len(h.Log.RunsOf(quick)); n != 0 {
			t.Fatalf("the quick job ran %d times while the hanging one held the only slot", n)
		}
		h.Advance(time.Millisecond) // abandoned: the quick job runs, the hanging one is retried
		if n := len(h.Log.RunsOf(quick)); n != 1 {
			t.Fatalf("the quick job ran %d times once the hanging one was abandoned", n)
		}
		h.Advance(time.Second + time.Minute + queuey.AbandonGrace) // attempt 2, abandoned too
		if h.Dead("jobs") != 1 {
			t.Fatalf("%d dead letters after two abandoned attempts", h.Dead("jobs"))
		}
		if reason, attempts := deadReason(t, h); reason != queuey.ReasonTimedOut || attempts != 2 {
			t.Fatalf("dead letter: reason %q after %d attempts", reason, attempts)
		}
		close(release) // both handlers return; what they return is dropped
		h.Settle()
		if n := len(h.Log.RunsOf(hangs)); n != 2 {
			t.Fatalf("the hanging job's handler returned %d times, want its 2 attempts", n)
		}
		if h.Pending("jobs") != 0 || h.Dead("jobs") != 0 {
			t.Fatalf("after the late returns: %d pending, %d dead", h.Pending("jobs"), h.Dead("jobs"))
		}
	})
}
