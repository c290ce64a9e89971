package queuey

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// JobArgs is implemented by a job's argument type: a struct, encoded as
// JSON, whose value methods name the job's kind and the queue it runs on.
//
//	type CallAPI struct{ URL string `json:"url"` }
//	func (CallAPI) Kind() string  { return "call-api" }
//	func (CallAPI) Queue() string { return "api" }
type JobArgs interface {
	Kind() string
	Queue() string
}

// JobContext describes the run of a job a handler is in.
type JobContext struct {
	ID         string
	Kind       string
	Queue      string
	Attempt    int       // 1 on the first run; deferrals do not count
	Deferrals  int       // how often a handler deferred it; a producer's Defer does not count
	Priority   uint8     // the AMQP priority the delivery arrived with
	EnqueuedAt time.Time // when the producer first enqueued it
	// MaxAttempts is how many attempts the job has in all: its own
	// (WithMaxAttempts), else its queue's RetryPolicy.MaxAttempts; -1
	// means it retries for ever. Attempt == MaxAttempts is its last.
	MaxAttempts int
	// Errors are the job's latest failed attempts before this one, oldest
	// first (ExtErrors: at most MaxAttemptErrors, each its attempt, when it
	// ended and its error); nil on a first attempt, or for a job that
	// failed only before queuey kept them.
	Errors []AttemptError
}

// Job is a decoded job handed to a Handler.
type Job[T JobArgs] struct {
	Args T
	JobContext
}

// Handler runs jobs of one kind. Its error says what happens next: nil
// acknowledges the job; Defer waits without spending an attempt; Fatal
// dead-letters it now; anything else retries by the queue's policy. A
// panic is recovered and retried like an error.
type Handler[T JobArgs] interface {
	Handle(ctx context.Context, job *Job[T]) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc[T JobArgs] func(ctx context.Context, job *Job[T]) error

// Handle calls f.
func (f HandlerFunc[T]) Handle(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// erasedHandler is a Handler with its type parameter erased: it decodes
// the payload itself.
type erasedHandler struct {
	queue string
	run   func(ctx context.Context, payload json.RawMessage, jc JobContext) error
}

func erase[T JobArgs](h Handler[T]) erasedHandler {
	var zero T
	return erasedHandler{
		queue: zero.Queue(),
		run: func(ctx context.Context, payload json.RawMessage, jc JobContext) error {
			job := &Job[T]{JobContext: jc}
			if err := json.Unmarshal(payload, &job.Args); err != nil {
				// Retrying cannot make a payload decode.
				return Fatal(fmt.Errorf("decoding %s payload: %w", jc.Kind, err))
			}
			return h.Handle(ctx, job)
		},
	}
}
