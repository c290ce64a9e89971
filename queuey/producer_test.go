package queuey

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// failingBackend declares anything and fails every publish with err.
type failingBackend struct{ err error }

func (failingBackend) Declare(context.Context, ...QueueConfig) error { return nil }
func (b failingBackend) Publish(context.Context, Envelope, time.Duration, HoldKind) error {
	return b.err
}
func (b failingBackend) DeadLetter(context.Context, string, []byte, string, int) error { return b.err }
func (failingBackend) Consume(context.Context, string, int) (Consumer, error) {
	return nil, errors.New("no consuming here")
}
func (failingBackend) Close() error { return nil }

type producerJob struct{}

func (producerJob) Kind() string  { return "producer-job" }
func (producerJob) Queue() string { return "jobs" }

// A publish that may have been enqueued returns the job's ID with the error,
// so the caller knows what may run; any other failure returns no ID.
func TestEnqueueReturnsTheIDOfAJobThatMayHaveBeenEnqueued(t *testing.T) {
	for _, tc := range []struct {
		err    error
		wantID bool
	}{
		{fmt.Errorf("%w: stopped waiting for its confirm: %w", ErrMaybeEnqueued, context.DeadlineExceeded), true},
		{fmt.Errorf("publish: %w", ErrJobTooLarge), false},
		{errors.New("returned: no such queue"), false},
	} {
		p, err := NewProducer(t.Context(), failingBackend{tc.err}, []QueueConfig{{Name: "jobs"}}, ProducerConfig{NewID: func() string { return "the-id" }})
		if err != nil {
			t.Fatal(err)
		}
		for name, enqueue := range map[string]func() (string, error){
			"Enqueue":      func() (string, error) { return p.Enqueue(t.Context(), producerJob{}) },
			"EnqueueAfter": func() (string, error) { return p.EnqueueAfter(t.Context(), producerJob{}, time.Second) },
			"Defer":        func() (string, error) { return p.Defer(t.Context(), producerJob{}, time.Second) },
		} {
			id, err := enqueue()
			if !errors.Is(err, tc.err) {
				t.Fatalf("%s with %v: error %v", name, tc.err, err)
			}
			if got := id == "the-id"; got != tc.wantID {
				t.Errorf("%s with %v: ID %q", name, tc.err, id)
			}
		}
	}
}

// recordingBackend remembers what it was asked to declare.
type recordingBackend struct {
	failingBackend
	declared []QueueConfig
}

func (b *recordingBackend) Declare(_ context.Context, qs ...QueueConfig) error {
	b.declared = append(b.declared, qs...)
	return nil
}

// NewProducer and NewWorker declare the queues with their defaults filled
// in, and leave the caller's slice as it was.
func TestDeclaringLeavesTheCallersQueuesAlone(t *testing.T) {
	queues := []QueueConfig{{Name: "a"}, {Name: "b", Prefetch: 3}}
	orig := fmt.Sprintf("%+v", queues)
	b := &recordingBackend{}
	if _, err := NewProducer(t.Context(), b, queues, ProducerConfig{}); err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(t.Context(), b, queues, WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%+v", queues); got != orig {
		t.Fatalf("the caller's queues became %s, were %s", got, orig)
	}
	want := []QueueConfig{queues[0].WithDefaults(), queues[1].WithDefaults()}
	if diff := cmp.Diff(want, b.declared[:2]); diff != "" {
		t.Errorf("declared (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, w.queues); diff != "" {
		t.Errorf("the worker's queues (-want +got):\n%s", diff)
	}
}
