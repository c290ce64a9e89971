package rabbitmq

import (
	"os"
	"testing"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Enqueueing 100 jobs from one goroutine on the live broker at AMQP_URL:
// one Enqueue after another (mode=one), then one EnqueueMany of the 100
// with the default MaxInFlight (mode=many). Issue 30 wants many at least 5
// times one's rate, side by side: run with -count and compare with
// benchstat (docs/performance.md).
func BenchmarkLiveEnqueue(b *testing.B) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		b.Skip("AMQP_URL not set: skipping a benchmark that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	admin, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	q := uniqueName("queuey-bench-enqueue")
	b.Cleanup(func() {
		for _, name := range []string{q, Topology{}.DeadQueue(q), Topology{}.WarmQueue(q)} {
			_, _ = admin.QueueDelete(name, false, false, false)
		}
	})
	backend, err := New(Channels(conn.Channel), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	p, err := queuey.NewProducer(b.Context(), backend, []queuey.QueueConfig{{Name: q}}, queuey.ProducerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 100
	jobs := make([]queuey.JobArgs, batch)
	for i := range jobs {
		jobs[i] = manyArgs{Q: q, N: i}
	}
	for _, mode := range []string{"one", "many"} {
		b.Run("mode="+mode, func(b *testing.B) {
			for b.Loop() {
				if mode == "one" {
					for _, j := range jobs {
						if _, err := p.Enqueue(b.Context(), j); err != nil {
							b.Fatal(err)
						}
					}
					continue
				}
				if err := queuey.EnqueueManyErr(p.EnqueueMany(b.Context(), jobs)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
			if _, err := admin.QueuePurge(q, false); err != nil {
				b.Fatal(err)
			}
		})
	}
}
