package membroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	amqp "github.com/rabbitmq/amqp091-go"
)

func benchChannel(b *testing.B, args amqp.Table) (*Broker, *Channel) {
	b.Helper()
	br := New(Config{Clock: clock.NewMock(), Version: RabbitMQ40})
	conn, _ := br.Dial()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, args); err != nil {
		b.Fatal(err)
	}
	return br, ch
}

var benchMsg = amqp.Publishing{DeliveryMode: amqp.Persistent, Body: make([]byte, 256),
	Headers: amqp.Table{"attempt": int32(1)}}

// BenchmarkPublishGetAck is one message's whole life through the amqp-shaped
// API: publish, basic.get, ack.
func BenchmarkPublishGetAck(b *testing.B) {
	for _, kind := range []string{"classic", "quorum"} {
		b.Run(kind, func(b *testing.B) {
			_, ch := benchChannel(b, amqp.Table{"x-queue-type": kind})
			b.ReportAllocs()
			for b.Loop() {
				if err := ch.Publish("", "q", false, false, benchMsg); err != nil {
					b.Fatal(err)
				}
				d, ok, err := ch.Get("q", false)
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				_ = d.Ack(false)
			}
		})
	}
}

// BenchmarkPublishConsumeAck publishes to a queue with a consumer at
// prefetch 100 and acks each delivery, with confirms on.
func BenchmarkPublishConsumeAck(b *testing.B) {
	for _, kind := range []string{"classic", "quorum"} {
		b.Run(kind, func(b *testing.B) {
			br, ch := benchChannel(b, amqp.Table{"x-queue-type": kind})
			conn, _ := br.Dial()
			pub, _ := conn.Channel()
			_ = pub.Confirm(false)
			confirms := pub.NotifyPublish(make(chan amqp.Confirmation, 1))
			_ = ch.Qos(100, 0, false)
			deliveries, err := ch.Consume("q", "", false, false, false, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := pub.PublishWithContext(ctx, "", "q", false, false, benchMsg); err != nil {
					b.Fatal(err)
				}
				<-confirms
				d := <-deliveries
				_ = d.Ack(false)
			}
		})
	}
}

// stillClock is a clock that moves only when told and never fires timers:
// the benchmark below drives expiry by calling in, as a simulation does.
type stillClock struct {
	clock.Clock
	now time.Time
}

func (c *stillClock) Now() time.Time                               { return c.now }
func (c *stillClock) AfterFunc(time.Duration, func()) *clock.Timer { return nil }

// BenchmarkHoldQueueExpiry measures the cost per expired message of
// head-only TTL expiry with n messages spread over 10 hold queues (distinct
// TTLs, staggered publish times, so nearly every message has its own
// deadline), each dead-lettering into a work queue. The ns/msg figure
// should stay flat as n grows: expiry is a heap pop, not a scan.
func BenchmarkHoldQueueExpiry(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			var perMsg time.Duration
			for b.Loop() {
				b.StopTimer()
				clk := &stillClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
				br := New(Config{Clock: clk, Version: RabbitMQ40})
				conn, _ := br.Dial()
				ch, _ := conn.Channel()
				_, _ = ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-max-priority": 10})
				for h := range 10 {
					_, _ = ch.QueueDeclare(fmt.Sprintf("hold.%d", h), true, false, false, false, amqp.Table{
						"x-message-ttl": 1000 * (h + 1), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"})
				}
				for i := range n {
					clk.now = clk.now.Add(time.Microsecond)
					_ = ch.Publish("", fmt.Sprintf("hold.%d", i%10), false, false, benchMsg)
				}
				clk.now = clk.now.Add(time.Hour)
				start := time.Now()
				b.StartTimer()
				work, _ := br.Queue("work") // processes every due expiry
				b.StopTimer()
				perMsg += time.Since(start)
				if work.Ready != n {
					b.Fatalf("work has %d, want %d", work.Ready, n)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(perMsg.Nanoseconds())/float64(b.N)/float64(n), "ns/msg")
		})
	}
}

// BenchmarkLadderHop is one relay of the hold ladder as the broker sees
// it: a message expires from a quorum rung, is dead-lettered into the
// relay queue and delivered to a consumer at prefetch 100, which publishes
// it to the next rung (here the same one), awaits the confirm, and acks.
// It is the model's floor for a relay, with no worker code around it
// (docs/performance.md sets it against queuey-sim's default run).
func BenchmarkLadderHop(b *testing.B) {
	clk := &stillClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	br := New(Config{Clock: clk, Version: RabbitMQ43})
	conn, _ := br.Dial()
	ch, _ := conn.Channel()
	for _, q := range []struct {
		name string
		args amqp.Table
	}{
		{"relay", amqp.Table{"x-queue-type": "quorum"}},
		{"rung", amqp.Table{"x-queue-type": "quorum", "x-message-ttl": 1000,
			"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "relay", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}},
	} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			b.Fatal(err)
		}
	}
	_ = ch.Confirm(false)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	_ = ch.Qos(100, 0, false)
	deliveries, err := ch.Consume("relay", "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := ch.PublishWithContext(ctx, "", "rung", false, false, benchMsg); err != nil {
		b.Fatal(err)
	}
	<-confirms
	b.ReportAllocs()
	for b.Loop() {
		clk.now = clk.now.Add(2 * time.Second)
		_, _ = br.Queue("rung") // processes the due expiry
		d := <-deliveries
		if err := ch.PublishWithContext(ctx, "", "rung", false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, Headers: benchMsg.Headers, Body: d.Body}); err != nil {
			b.Fatal(err)
		}
		<-confirms
		_ = d.Ack(false)
	}
}
