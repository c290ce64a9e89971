package queuey

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// DefaultMaxInFlight is ProducerConfig.MaxInFlight's default.
const DefaultMaxInFlight = 128

// EnqueueResult is what became of one job of EnqueueMany.
type EnqueueResult struct {
	// ID is the job's ID when it was enqueued, or may have been (Err
	// wraps ErrMaybeEnqueued); "" when nothing was.
	ID string
	// Err is nil when the broker confirmed the job. An error wrapping
	// ErrMaybeEnqueued means it was sent but its confirm never came: it
	// may run. Any other error means it was refused or never sent, and
	// nothing was enqueued: Enqueue's errors, or ctx's when it ended
	// before the job's turn.
	Err error
}

// EnqueueMany enqueues each job as Enqueue does, with up to
// ProducerConfig.MaxInFlight of them awaiting the broker's confirms at
// once rather than one, and returns once every job's fate is known: one
// result per job, at its index. One job's failure neither stops nor hides
// another's. When ctx ends, the jobs not yet sent are not sent (their
// error wraps ctx's) and those awaiting their confirm may have been
// enqueued (ErrMaybeEnqueued).
//
// The jobs may reach their queues in any order, as jobs enqueued by
// several goroutines do. WithOptions gives a job of the batch its own
// options (an ID, a queue). EnqueueManyErr summarises the results.
func (p *Producer) EnqueueMany(ctx context.Context, jobs []JobArgs) []EnqueueResult {
	results := make([]EnqueueResult, len(jobs))
	slots := make(chan struct{}, p.cfg.MaxInFlight)
	var wg sync.WaitGroup
	for i, job := range jobs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if err := ctx.Err(); err != nil {
			results[i].Err = fmt.Errorf("queuey: job %d of %d not sent: %w", i+1, len(jobs), err)
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if job == nil {
				results[i].Err = fmt.Errorf("queuey: job %d of %d is nil", i+1, len(jobs))
				return
			}
			results[i].ID, results[i].Err = p.Enqueue(ctx, job)
		})
	}
	wg.Wait()
	return results
}

// EnqueueManyError is EnqueueManyErr's error: how many of a batch's jobs
// were not confirmed, and the first such job's error. It wraps
// ErrMaybeEnqueued when any job may have been enqueued without a
// confirm, and the first error besides.
type EnqueueManyError struct {
	Jobs    int // the batch's size
	Refused int // jobs certainly not enqueued
	Maybe   int // jobs that may have been (ErrMaybeEnqueued)
	First   error
}

func (e *EnqueueManyError) Error() string {
	return fmt.Sprintf("queuey: %d of %d jobs not enqueued, %d maybe enqueued; first: %v", e.Refused, e.Jobs, e.Maybe, e.First)
}

// Unwrap gives ErrMaybeEnqueued when some job may have been enqueued, and
// the first job's error.
func (e *EnqueueManyError) Unwrap() []error {
	if e.Maybe > 0 {
		return []error{ErrMaybeEnqueued, e.First}
	}
	return []error{e.First}
}

// EnqueueManyErr is nil when every result is confirmed, and otherwise an
// *EnqueueManyError counting the others.
func EnqueueManyErr(results []EnqueueResult) error {
	e := &EnqueueManyError{Jobs: len(results)}
	for _, r := range results {
		switch {
		case r.Err == nil:
			continue
		case errors.Is(r.Err, ErrMaybeEnqueued):
			e.Maybe++
		default:
			e.Refused++
		}
		if e.First == nil {
			e.First = r.Err
		}
	}
	if e.First == nil {
		return nil
	}
	return e
}
