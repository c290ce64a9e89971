package rabbitmq

import (
	"errors"
	"strings"
	"testing"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// manyArgs is a job for the queue Q; Pad makes it as large as wanted.
type manyArgs struct {
	Q   string `json:"-"`
	N   int    `json:"n"`
	Pad string `json:"pad,omitempty"`
}

func (manyArgs) Kind() string    { return "many" }
func (a manyArgs) Queue() string { return a.Q }

// EnqueueMany through the backend: each job's result kind, confirmed and
// refused (a queue that does not exist, a job too large), on membroker and
// live.
func TestEnqueueManyConfirmsAndRefuses(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		b, err := New(func() (Channel, error) { return env.channel(t), nil }, Options{MaxMessageSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		p := queuey.NewUndeclaredProducer(b, queuey.ProducerConfig{MaxInFlight: 16})
		jobs := make([]queuey.JobArgs, 200)
		for i := range jobs {
			jobs[i] = manyArgs{Q: q, N: i}
		}
		missing := env.missingQueue()
		jobs[50] = manyArgs{Q: missing, N: 50}
		jobs[150] = manyArgs{Q: q, N: 150, Pad: strings.Repeat("x", 5000)}
		res := p.EnqueueMany(t.Context(), jobs)
		for i, r := range res {
			switch i {
			case 50:
				if !errors.Is(r.Err, ErrReturned) || errors.Is(r.Err, queuey.ErrMaybeEnqueued) || r.ID != "" {
					t.Fatalf("job for %s: %+v", missing, r)
				}
			case 150:
				if !errors.Is(r.Err, queuey.ErrJobTooLarge) || r.ID != "" {
					t.Fatalf("a job too large: %+v", r)
				}
			default:
				if r.Err != nil || r.ID == "" {
					t.Fatalf("job %d: %+v", i, r)
				}
			}
		}
		if got := len(env.drain(t, q)); got != 198 {
			t.Fatalf("%s holds %d jobs, want 198", q, got)
		}
	})
}

// When the broker closes the publishing channel with jobs awaiting their
// confirms, those may have been enqueued (ErrMaybeEnqueued), and the rest
// are published on the backend's next channel and confirmed.
func TestEnqueueManyMaybeEnqueued(t *testing.T) {
	eachBroker(t, func(t *testing.T, env *pubEnv) {
		q := env.queue(t)
		var first *gatedChannel
		opened := 0
		b, err := New(func() (Channel, error) {
			opened++
			ch := env.channel(t)
			if opened == 1 {
				first = gated(ch, false) // holds every confirm
				return first, nil
			}
			return ch, nil
		}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		p := queuey.NewUndeclaredProducer(b, queuey.ProducerConfig{MaxInFlight: 4})
		jobs := make([]queuey.JobArgs, 10)
		for i := range jobs {
			jobs[i] = manyArgs{Q: q, N: i}
		}
		done := make(chan []queuey.EnqueueResult)
		go func() { done <- p.EnqueueMany(t.Context(), jobs) }()
		first.awaitPublished(4)
		// An invalid expiration is a channel exception: the broker closes
		// the channel, with the four confirms still held back.
		_ = first.Channel.PublishWithContext(t.Context(), "", q, false, false, amqp.Publishing{Expiration: "soon"})
		res := <-done
		var maybe, confirmed int
		for i, r := range res {
			switch {
			case r.Err == nil && r.ID != "":
				confirmed++
			case errors.Is(r.Err, queuey.ErrMaybeEnqueued) && r.ID != "":
				maybe++
			default:
				t.Fatalf("job %d: %+v", i, r)
			}
		}
		if maybe != 4 || confirmed != 6 {
			t.Fatalf("%d maybe enqueued and %d confirmed; want 4 and 6", maybe, confirmed)
		}
		if err := queuey.EnqueueManyErr(res); !errors.Is(err, queuey.ErrMaybeEnqueued) {
			t.Fatalf("EnqueueManyErr: %v", err)
		}
		// The broker had enqueued the four before the bad publish.
		if got := len(env.drain(t, q)); got != 10 {
			t.Fatalf("%s holds %d jobs, want 10", q, got)
		}
	})
}
