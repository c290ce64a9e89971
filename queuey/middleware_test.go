package queuey_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey/queuey/queuey"
)

// Middleware runs around every handler run, the first outermost, sees the
// job's description and the handler's result, and can change the result;
// a panic passes up through it and still ends as a retry.
func TestMiddlewareWrapsEveryHandlerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls []string
		record := func(name string) queuey.Middleware {
			return func(ctx context.Context, job queuey.JobContext, next func(context.Context, queuey.JobContext) error) error {
				calls = append(calls, name+" in "+job.Kind)
				err := next(ctx, job)
				calls = append(calls, name+" out")
				return err
			}
		}
		// The inner one turns a handler's error into a deferral.
		deferErrors := func(ctx context.Context, job queuey.JobContext, next func(context.Context, queuey.JobContext) error) error {
			if err := next(ctx, job); err != nil && job.Deferrals == 0 {
				return queuey.Defer(time.Second, "middleware: "+err.Error())
			}
			return nil
		}
		runs := 0
		b := newBubble(t, queuey.WorkerConfig{Middleware: []queuey.Middleware{record("outer"), record("inner"), deferErrors}},
			func(ctx context.Context, job *queuey.Job[tick]) error {
				runs++
				calls = append(calls, "handler")
				if job.Deferrals == 0 {
					return errors.New("rate limited")
				}
				return nil
			})
		ctx, cancel := context.WithCancel(t.Context())
		done := b.run(ctx)
		b.enqueue()
		time.Sleep(2 * time.Second) // the deferral's hold of 1 s, and back
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := []string{"outer in tick", "inner in tick", "handler", "inner out", "outer out"}
		if runs != 2 || !slices.Equal(calls[:5], want) || !slices.Equal(calls[5:], want) {
			t.Fatalf("runs %d, calls %q; want two runs of %q", runs, calls, want)
		}
		if ready, unacked := b.counts("jobs"); ready != 0 || unacked != 0 {
			t.Errorf("ready %d, unacked %d; want the job done", ready, unacked)
		}
	})
}

func TestMiddlewareSeesAPanicThatStillBecomesARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen any
		observe := func(ctx context.Context, job queuey.JobContext, next func(context.Context, queuey.JobContext) error) error {
			defer func() {
				if v := recover(); v != nil {
					seen = v
					panic(v) // passed on: the worker turns it into a *PanicError
				}
			}()
			return next(ctx, job)
		}
		attempts := 0
		b := newBubble(t, queuey.WorkerConfig{Middleware: []queuey.Middleware{observe}},
			func(ctx context.Context, job *queuey.Job[tick]) error {
				attempts = job.Attempt
				if job.Attempt == 1 {
					panic("boom")
				}
				return nil
			})
		ctx, cancel := context.WithCancel(t.Context())
		done := b.run(ctx)
		b.enqueue()
		time.Sleep(5 * time.Second) // the retry's backoff
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if seen != "boom" || attempts != 2 {
			t.Fatalf("middleware saw %v; last attempt %d; want the panic seen and the job retried", seen, attempts)
		}
	})
}

func TestNewWorkerRefusesANilMiddleware(t *testing.T) {
	_, err := queuey.NewWorker(t.Context(), nil, nil, queuey.WorkerConfig{Middleware: []queuey.Middleware{nil}})
	if err == nil || !strings.Contains(err.Error(), "Middleware[0] is nil") {
		t.Fatalf("NewWorker with a nil middleware: %v", err)
	}
}

// A negative StopTimeout or RequeueDelay is refused up front; before, the
// RequeueDelay reached the worker core and panicked inside Run.
func TestNewWorkerRefusesNegativeDurations(t *testing.T) {
	for _, tc := range []struct {
		cfg  queuey.WorkerConfig
		want string
	}{
		{queuey.WorkerConfig{StopTimeout: -time.Second}, "StopTimeout is negative: -1s"},
		{queuey.WorkerConfig{RequeueDelay: -time.Millisecond}, "RequeueDelay is negative: -1ms"},
	} {
		_, err := queuey.NewWorker(t.Context(), nil, nil, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewWorker(%+v): %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}
