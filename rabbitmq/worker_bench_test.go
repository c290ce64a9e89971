package rabbitmq

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queuey/queueyotel"
	amqp "github.com/rabbitmq/amqp091-go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkConsume measures worker throughput for no-op jobs at prefetch 1,
// 10 and 100. Each run declares a durable classic queue with a fresh name
// as queuey declares it (x-max-priority 10, with its dead-letter queue),
// fills it with b.N queuey envelopes through a Producer on a connection of
// its own, then times consuming all of them on another connection. Both
// queues are deleted at the end. ns/op is the wall time per consumed
// message, so the ratio of two implementations' ns/op is the inverse ratio
// of their rates.
//
//	impl=queuey  queuey's Worker on this package's Backend, with a handler
//	             that returns nil; the timer stops at the b.N-th handler
//	             call. The worker must have acknowledged every job: once it
//	             has stopped, the queue must be empty.
//	impl=queuey+otel  the same with queueyotel's Observer on OpenTelemetry's
//	             SDK (every span sampled, no exporter): the cost of
//	             metrics and traces.
//	impl=raw     the reference: a channel with Qos(prefetch, 0, false),
//	             Consume, and for d := range deliveries { d.Ack(false) }
//	             until b.N acks. The same code runs on a live channel
//	             (amqp091) and on a membroker one.
//
// Both time opening the consuming channel, Qos and basic.consume (a few
// round trips, amortised over b.N). The live broker is AMQP_URL; without
// it, broker=live is skipped. membroker runs on the real clock. Compare
// with benchstat, e.g. -col /impl.
func BenchmarkConsume(b *testing.B) {
	b.Run("broker=membroker", func(b *testing.B) {
		mem := membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})
		benchConsume(b, func(b *testing.B) (func() (Channel, error), consumeAdmin) {
			conn, err := mem.Dial()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = conn.Close() })
			admin, err := conn.Channel()
			if err != nil {
				b.Fatal(err)
			}
			return Channels(conn.Channel), admin
		})
	})
	b.Run("broker=live", func(b *testing.B) {
		url := os.Getenv("AMQP_URL")
		if url == "" {
			b.Skip("AMQP_URL not set: skipping the live-broker benchmarks (scripts/rabbitmq start)")
		}
		benchConsume(b, func(b *testing.B) (func() (Channel, error), consumeAdmin) {
			conn, err := amqp.Dial(url)
			if err != nil {
				b.Fatalf("dial %s: %v", url, err)
			}
			b.Cleanup(func() { _ = conn.Close() })
			admin, err := conn.Channel()
			if err != nil {
				b.Fatal(err)
			}
			return Channels(conn.Channel), admin
		})
	})
}

// consumeAdmin is a channel for inspecting and deleting queues.
type consumeAdmin interface {
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
}

// consumeDial opens a fresh connection, closed when the benchmark ends,
// and returns how to open channels on it and an admin channel on it.
type consumeDial func(b *testing.B) (channels func() (Channel, error), admin consumeAdmin)

// consumeBenchQueue is the queue of consumeBenchJob: a fresh name per run,
// set before anything reads it. Benchmarks run one at a time.
var consumeBenchQueue string

// consumeBenchJob is the no-op job the consume benchmarks run.
type consumeBenchJob struct {
	Seq int64 `json:"seq"`
}

func (consumeBenchJob) Kind() string  { return "bench-noop" }
func (consumeBenchJob) Queue() string { return consumeBenchQueue }

func benchConsume(b *testing.B, dial consumeDial) {
	impls := []struct {
		name    string
		consume func(b *testing.B, channels func() (Channel, error), queues []queuey.QueueConfig)
	}{
		{"queuey", consumeWithWorker},
		{"queuey+otel", consumeWithObservedWorker},
		{"raw", consumeRaw},
	}
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			for _, prefetch := range []int{1, 10, 100} {
				b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) {
					queues, admin := consumeSetup(b, dial, prefetch)
					channels, _ := dial(b)
					impl.consume(b, channels, queues)
					if b.Failed() {
						return
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
					consumeCheckEmpty(b, admin, queues[0].Name)
				})
			}
		})
	}
}

// consumeSetup declares a fresh queue (deleted at the end, with its
// dead-letter queue and warm marker) and fills it with b.N envelopes. It
// returns the queue definition and an admin channel.
func consumeSetup(b *testing.B, dial consumeDial, prefetch int) ([]queuey.QueueConfig, consumeAdmin) {
	channels, admin := dial(b)
	q := uniqueName("queuey-bench-consume")
	consumeBenchQueue = q
	b.Cleanup(func() {
		_, _ = admin.QueueDelete(q, false, false, false)
		_, _ = admin.QueueDelete(Topology{}.DeadQueue(q), false, false, false)
		_, _ = admin.QueueDelete(Topology{}.WarmQueue(q), false, false, false) // the shared ladder stays
	})
	backend, err := New(channels, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	queues := []queuey.QueueConfig{{Name: q, Prefetch: prefetch}}
	producer, err := queuey.NewProducer(context.Background(), backend, queues, queuey.ProducerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	// 64 publishers, so the pipelined confirms make filling quick.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, err := producer.Enqueue(context.Background(), consumeBenchJob{Seq: i}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	if info, err := admin.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || info.Messages != b.N {
		b.Fatalf("filled %s: %d messages, err %v; want %d", q, info.Messages, err, b.N)
	}
	return queues, admin
}

// consumeWithWorker runs a Worker with a no-op handler until it has been
// called b.N times, then stops it.
func consumeWithWorker(b *testing.B, channels func() (Channel, error), queues []queuey.QueueConfig) {
	consumeWith(b, channels, queues, queuey.WorkerConfig{})
}

// consumeWithObservedWorker is consumeWithWorker with queueyotel's
// Observer on OpenTelemetry's SDK: a meter provider with a manual reader
// and a tracer provider that samples every span, with no exporter.
func consumeWithObservedWorker(b *testing.B, channels func() (Channel, error), queues []queuey.QueueConfig) {
	obs, err := queueyotel.New(queueyotel.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		TracerProvider: sdktrace.NewTracerProvider(),
	})
	if err != nil {
		b.Fatal(err)
	}
	consumeWith(b, channels, queues, queuey.WorkerConfig{Observer: obs})
}

func consumeWith(b *testing.B, channels func() (Channel, error), queues []queuey.QueueConfig, cfg queuey.WorkerConfig) {
	backend, err := New(channels, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	w, err := queuey.NewWorker(context.Background(), backend, queues, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var calls atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	err = queuey.Register(w, queuey.HandlerFunc[consumeBenchJob](func(context.Context, *queuey.Job[consumeBenchJob]) error {
		if calls.Add(1) == n {
			close(done)
		}
		return nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)

	b.ReportAllocs()
	b.ResetTimer()
	go func() { ran <- w.Run(ctx) }()
	select {
	case <-done:
		b.StopTimer()
	case err := <-ran:
		b.Fatalf("worker stopped after %d of %d jobs: %v", calls.Load(), b.N, err)
	}
	cancel()
	if err := <-ran; err != nil {
		b.Fatalf("worker: %v", err)
	}
	if got := calls.Load(); got != n {
		b.Fatalf("handler called %d times for %d jobs", got, n)
	}
}

// consumeRaw is the reference loop: Qos, Consume, ack each delivery.
func consumeRaw(b *testing.B, channels func() (Channel, error), queues []queuey.QueueConfig) {
	b.ReportAllocs()
	b.ResetTimer()
	ch, err := channels()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Qos(queues[0].Prefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := ch.Consume(queues[0].Name, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	acked := 0
	for d := range deliveries {
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
		if acked++; acked == b.N {
			break
		}
	}
	b.StopTimer()
	if acked != b.N {
		b.Fatalf("deliveries closed after %d of %d messages", acked, b.N)
	}
}

// consumeCheckEmpty fails the benchmark unless queue and its dead-letter
// queue are empty once no consumer is left on queue (closing the
// consumer's channel returns whatever it had not acknowledged).
func consumeCheckEmpty(b *testing.B, admin consumeAdmin, queue string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := admin.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			b.Fatalf("inspect %s: %v", queue, err)
		}
		if info.Consumers == 0 {
			if info.Messages != 0 {
				b.Fatalf("%s: %d messages left after consuming %d: not all acknowledged", queue, info.Messages, b.N)
			}
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: still %d consumers after the consumer stopped", queue, info.Consumers)
		}
		time.Sleep(time.Millisecond)
	}
	dead := Topology{}.DeadQueue(queue)
	if info, err := admin.QueueDeclarePassive(dead, true, false, false, false, nil); err != nil || info.Messages != 0 {
		b.Fatalf("%s: %d messages, err %v: want it empty", dead, info.Messages, err)
	}
}
