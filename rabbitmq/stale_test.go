package rabbitmq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ closes a consumer's channel with 406 PRECONDITION_FAILED when a
// delivery outlives consumer_timeout, and requeues the job. The handler's
// retry must then not be published beside it. At prefetch 1 the worker's
// one handler goroutine is the one still running, so the worker hears that
// the subscription ended only after that handler returns: the delivery
// itself must say that its channel has closed (delivery.Stale).
func TestWorkerDropsTheOutcomeOfAJobWhoseChannelClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			chans []*membroker.Channel
		)
		producer, worker := jobsDeployment(t, func() (Channel, error) {
			ch, err := conn.Channel()
			if err != nil {
				return nil, err
			}
			mu.Lock()
			chans = append(chans, ch)
			mu.Unlock()
			return ch, nil
		})
		release := make(chan struct{})
		err = queuey.Register(worker, queuey.HandlerFunc[slowJob](func(ctx context.Context, j *queuey.Job[slowJob]) error {
			<-release
			return errors.New("failed after its channel closed")
		}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := producer.Enqueue(t.Context(), slowJob{N: 1}); err != nil {
			t.Fatal(err)
		}
		declared := len(broker.Queues())
		mu.Lock()
		before := len(chans)
		mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- worker.Run(t.Context()) }()
		synctest.Wait() // the handler runs
		mu.Lock()
		opened := chans[before:]
		mu.Unlock()
		if len(opened) != 3 {
			t.Fatalf("Run opened %d channels, want the consumer's, the look for an old relay queue, and its relay's", len(opened))
		}
		broker.CloseChannel(opened[0], &amqp.Error{Code: amqp.PreconditionFailed,
			Reason: "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out", Server: true})
		synctest.Wait()
		close(release)
		if err := <-done; err == nil {
			t.Fatal("Run returned nil after the broker closed its consumer's channel")
		}
		if qs := broker.Queues(); len(qs) != declared {
			t.Fatalf("queues %v: a hold queue was declared for the retry of a job the broker requeued", qs)
		}
		held := 0
		for _, q := range broker.Queues() {
			held += q.Ready + q.Unacked
		}
		if q, _ := broker.Queue("jobs"); q.Ready != 1 || held != 1 {
			t.Fatalf("%d ready on jobs and %d messages in all, want the requeued job alone", q.Ready, held)
		}
	})
}
