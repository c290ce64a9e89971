package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/queuey/queuey/queuey"
)

// enqueueWelcomes enqueues a welcome e-mail for each user with one
// EnqueueMany, and says what became of each job that was not confirmed.
func enqueueWelcomes(ctx context.Context, producer *queuey.Producer, users []int) error {
	jobs := make([]queuey.JobArgs, len(users))
	for i, id := range users {
		jobs[i] = Welcome{UserID: id}
	}
	results := producer.EnqueueMany(ctx, jobs) // one result per job, at its index
	for i, r := range results {
		switch {
		case errors.Is(r.Err, queuey.ErrMaybeEnqueued):
			fmt.Printf("user %d: maybe enqueued as %s (no confirm): %v\n", users[i], r.ID, r.Err)
		case r.Err != nil:
			fmt.Printf("user %d: not enqueued: %v\n", users[i], r.Err)
		}
	}
	return queuey.EnqueueManyErr(results) // nil when the broker confirmed every job
}
