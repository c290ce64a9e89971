package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkEnqueue measures enqueue throughput with publisher confirms:
// 256-byte persistent messages to a durable classic queue, every publish
// mandatory and waited for, from 1, 8 and 64 goroutines sharing one
// publishing channel. ns/op is the wall time per confirmed message, so the
// ratio of two implementations' ns/op is the inverse ratio of their rates.
//
//	impl=queuey  the publisher: pipelined, correlated by sequence number
//	impl=raw     the reference. On the live broker, amqp091's own
//	             pipelining: PublishWithDeferredConfirm, then Wait, per
//	             goroutine. On membroker, where a DeferredConfirmation
//	             cannot be built, the least code that pipelines through
//	             NotifyPublish (a map of sequence numbers, no returns).
//	impl=mutex   one publish in flight (seed 000's design): lock, publish,
//	             wait for the confirm, unlock.
//
// Compare with benchstat, e.g. -col /impl. The live broker is AMQP_URL;
// without it, broker=live is skipped. On membroker the queue is purged
// every 16384 messages so memory stays flat.
func BenchmarkEnqueue(b *testing.B) {
	b.Run("broker=membroker", func(b *testing.B) {
		mem := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
		conn, _ := mem.Dial()
		benchEnqueue(b, func(b *testing.B) (benchChannel, func(queue string) error) {
			ch, err := conn.Channel()
			if err != nil {
				b.Fatal(err)
			}
			return ch, func(q string) error { _, err := ch.QueuePurge(q, false); return err }
		})
	})
	b.Run("broker=live", func(b *testing.B) {
		url := os.Getenv("AMQP_URL")
		if url == "" {
			b.Skip("AMQP_URL not set: skipping the live-broker benchmarks (scripts/rabbitmq start)")
		}
		conn, err := amqp.Dial(url)
		if err != nil {
			b.Fatalf("dial %s: %v", url, err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		benchEnqueue(b, func(b *testing.B) (benchChannel, func(queue string) error) {
			ch, err := conn.Channel()
			if err != nil {
				b.Fatal(err)
			}
			return ch, nil
		})
	})
}

// benchChannel is a Channel that can also delete queues.
type benchChannel interface {
	Channel
	QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
}

// An enqueuer publishes one message to queue and waits for its confirm.
type enqueuer interface {
	enqueue(ctx context.Context, queue string) error
}

var benchBody = make([]byte, 256)

func benchPublishing() amqp.Publishing {
	return amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: benchBody}
}

func benchEnqueue(b *testing.B, channel func(b *testing.B) (benchChannel, func(queue string) error)) {
	impls := []struct {
		name string
		new  func(b *testing.B, ch Channel) enqueuer
	}{
		{"queuey", newQueueyEnqueuer},
		{"raw", newRawEnqueuer},
		{"mutex", newMutexEnqueuer},
	}
	// The implementations take turns at each goroutine count, so that a
	// broker slowing down over a run (or a busy machine) does not favour
	// one of them; the names still read impl=…/goroutines=….
	for _, g := range []int{1, 8, 64} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("impl=%s/goroutines=%d", impl.name, g), func(b *testing.B) {
				admin, purge := channel(b)
				q := uniqueName("queuey-bench")
				if _, err := admin.QueueDeclare(q, true, false, false, false, nil); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					_, _ = admin.QueueDelete(q, false, false, false)
					_ = admin.Close()
				})
				pubCh, _ := channel(b)
				e := impl.new(b, pubCh)
				runEnqueue(b, g, e, q, purge)
			})
		}
	}
}

// runEnqueue has g goroutines enqueue b.N messages between them.
func runEnqueue(b *testing.B, g int, e enqueuer, q string, purge func(string) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range g {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := e.enqueue(ctx, q); err != nil {
					b.Error(err)
					return
				}
				if purge != nil && i%16384 == 0 {
					if err := purge(q); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

type queueyEnqueuer struct{ p *publisher }

func newQueueyEnqueuer(b *testing.B, ch Channel) enqueuer {
	p, err := newPublisher(ch, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return queueyEnqueuer{p}
}

func (e queueyEnqueuer) enqueue(ctx context.Context, q string) error {
	return e.p.Publish(ctx, q, benchPublishing())
}

// newRawEnqueuer is amqp091's DeferredConfirmation on a live channel, and
// the minimal NotifyPublish pipeline on anything else.
func newRawEnqueuer(b *testing.B, ch Channel) enqueuer {
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ch.Close() })
	if live, ok := ch.(*amqp.Channel); ok {
		return deferredEnqueuer{live}
	}
	e := &notifyEnqueuer{ch: ch, pending: map[uint64]chan bool{}}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, confirmBuffer))
	go func() {
		for c := range confirms {
			e.mu.Lock()
			w := e.pending[c.DeliveryTag]
			delete(e.pending, c.DeliveryTag)
			e.mu.Unlock()
			w <- c.Ack
		}
	}()
	return e
}

type deferredEnqueuer struct{ ch *amqp.Channel }

func (e deferredEnqueuer) enqueue(ctx context.Context, q string) error {
	dc, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, benchPublishing())
	if err != nil {
		return err
	}
	if !dc.Wait() {
		return errors.New("nacked")
	}
	return nil
}

type notifyEnqueuer struct {
	ch      Channel
	mu      sync.Mutex
	pending map[uint64]chan bool
}

func (e *notifyEnqueuer) enqueue(ctx context.Context, q string) error {
	done := make(chan bool, 1)
	e.mu.Lock()
	seq := e.ch.GetNextPublishSeqNo()
	e.pending[seq] = done
	err := e.ch.PublishWithContext(ctx, "", q, true, false, benchPublishing())
	if err != nil {
		delete(e.pending, seq)
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if !<-done {
		return errors.New("nacked")
	}
	return nil
}

// mutexEnqueuer has one publish in flight: the lock is held until the
// confirm arrives.
type mutexEnqueuer struct {
	mu       sync.Mutex
	ch       Channel
	confirms chan amqp.Confirmation
}

func newMutexEnqueuer(b *testing.B, ch Channel) enqueuer {
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ch.Close() })
	return &mutexEnqueuer{ch: ch, confirms: ch.NotifyPublish(make(chan amqp.Confirmation, 1))}
}

func (e *mutexEnqueuer) enqueue(ctx context.Context, q string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.ch.PublishWithContext(ctx, "", q, true, false, benchPublishing()); err != nil {
		return err
	}
	c, ok := <-e.confirms
	if !ok || !c.Ack {
		return errors.New("not confirmed")
	}
	return nil
}
