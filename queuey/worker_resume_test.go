package queuey_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey/queuey/queuey"
)

// resumeJob is the job of TestRunTakesANewerChannelBeforeLost.
type resumeJob struct {
	N int `json:"n"`
}

func (resumeJob) Kind() string  { return "resume" }
func (resumeJob) Queue() string { return "jobs" }

// resumeBackend is a Backend with one resuming consumer the test feeds by
// hand, recording what the worker publishes.
type resumeBackend struct {
	c         *resumeConsumer
	mu        sync.Mutex
	published int
}

func (*resumeBackend) Declare(context.Context, ...queuey.QueueConfig) error { return nil }
func (b *resumeBackend) Publish(context.Context, queuey.Envelope, time.Duration, queuey.HoldKind) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.published++
	return nil
}
func (b *resumeBackend) DeadLetter(context.Context, string, []byte, string, int) error {
	return b.Publish(context.Background(), queuey.Envelope{}, 0, 0)
}
func (b *resumeBackend) Consume(context.Context, string, int) (queuey.Consumer, error) {
	return b.c, nil
}
func (*resumeBackend) Close() error { return nil }

// resumeConsumer resumes as a supervised rabbitmq consumer does: its
// deliveries say which channel they came on, and Lost says which one
// went.
type resumeConsumer struct {
	deliveries chan queuey.Delivery
	lost       chan uint64
	cancel     sync.Once
}

func (c *resumeConsumer) Deliveries() <-chan queuey.Delivery { return c.deliveries }
func (c *resumeConsumer) Lost() <-chan uint64                { return c.lost }
func (*resumeConsumer) Err() error                           { return nil }
func (c *resumeConsumer) Cancel() error {
	c.cancel.Do(func() { close(c.deliveries) })
	return nil
}
func (*resumeConsumer) Close() error { return nil }

type resumeDelivery struct {
	body    []byte
	gen     uint64
	mu      sync.Mutex
	settled string
}

func (d *resumeDelivery) Body() []byte       { return d.body }
func (*resumeDelivery) Priority() uint8      { return 0 }
func (*resumeDelivery) Redelivered() bool    { return false }
func (d *resumeDelivery) Generation() uint64 { return d.gen }
func (d *resumeDelivery) Ack() error         { return d.settle("acked") }
func (d *resumeDelivery) Requeue() error     { return d.settle("requeued") }
func (d *resumeDelivery) settle(how string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settled += how
	return nil
}
func (d *resumeDelivery) state() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settled
}

func resumeBody(t *testing.T, n int) []byte {
	t.Helper()
	env := queuey.Envelope{Version: queuey.EnvelopeVersion, ID: fmt.Sprintf("%032x", n), Kind: "resume", Queue: "jobs",
		Payload: fmt.Appendf(nil, `{"n":%d}`, n), Attempt: 1, EnqueuedAt: time.Unix(1, 0).UTC()}
	body, err := env.AppendEncoded(nil)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// A delivery of the consumer's next channel can reach a handler before the
// worker has read Lost: Run's handlers take deliveries straight from the
// consumer. It must then take the old channel as lost itself: the new
// delivery is handled and acknowledged, and the outcome of a handler still
// running from the old channel is dropped, with nothing published for it.
// Lost, read later, changes nothing.
func TestRunTakesANewerChannelBeforeLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &resumeConsumer{deliveries: make(chan queuey.Delivery, 4), lost: make(chan uint64)}
		b := &resumeBackend{c: c}
		queues := []queuey.QueueConfig{{Name: "jobs", Prefetch: 2}}
		w, err := queuey.NewWorker(t.Context(), b, queues, queuey.WorkerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		err = queuey.Register(w, queuey.HandlerFunc[resumeJob](func(_ context.Context, j *queuey.Job[resumeJob]) error {
			if j.Args.N == 1 {
				<-release
				return errors.New("failed after its channel went: a retry would be a duplicate")
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()

		old := &resumeDelivery{body: resumeBody(t, 1), gen: 1}
		c.deliveries <- old
		synctest.Wait() // job 1's handler runs
		newer := &resumeDelivery{body: resumeBody(t, 2), gen: 2}
		c.deliveries <- newer
		synctest.Wait()
		if got := newer.state(); got != "acked" {
			t.Fatalf("the delivery of channel 2, before Lost: %q, want acked", got)
		}
		close(release)
		synctest.Wait()
		c.lost <- 1
		synctest.Wait()
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := old.state(); got != "" {
			t.Fatalf("the delivery of the lost channel 1 was %s; want it left to the broker", got)
		}
		if b.published != 0 {
			t.Fatalf("%d successors published for a delivery of a lost channel", b.published)
		}
	})
}
