package membroker_test

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQ expires messages only at the head of a queue. In one shared wait
// queue with per-message expirations, a short wait published behind a long
// one is released only when the long one is: the reason queuey gives every
// delay its own hold queue.
func Example_headOnlyExpiry() {
	clk := clock.NewMock()
	b := membroker.New(membroker.Config{Clock: clk, Version: membroker.RabbitMQ40})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	_, _ = ch.QueueDeclare("work", true, false, false, false, nil)
	_, _ = ch.QueueDeclare("wait", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "work",
	})
	_ = ch.Publish("", "wait", false, false, amqp.Publishing{Body: []byte("long"), Expiration: "3000"})
	_ = ch.Publish("", "wait", false, false, amqp.Publishing{Body: []byte("short"), Expiration: "300"})

	count := func(at string) {
		wait, _ := b.Queue("wait")
		work, _ := b.Queue("work")
		fmt.Printf("%s: wait holds %d, work has %d\n", at, wait.Ready, work.Ready)
	}
	clk.Add(500 * time.Millisecond)
	count("after 0.5 s")
	clk.Add(2600 * time.Millisecond)
	count("after 3.1 s")
	for {
		d, ok, _ := ch.Get("work", true)
		if !ok {
			break
		}
		death := d.Headers["x-death"].([]any)[0].(amqp.Table)
		fmt.Printf("%s: %s after %s ms\n", d.Body, death["reason"], death["original-expiration"])
	}
	// Output:
	// after 0.5 s: wait holds 2, work has 0
	// after 3.1 s: wait holds 0, work has 2
	// long: expired after 3000 ms
	// short: expired after 300 ms
}

// A quorum queue counts returns in x-delivery-count and dead-letters a
// message returned more often than its delivery limit (20 unless the queue
// sets x-delivery-limit) with reason delivery_limit.
func Example_quorumDeliveryLimit() {
	b := membroker.New(membroker.Config{Clock: clock.NewMock(), Version: membroker.RabbitMQ40})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	_, _ = ch.QueueDeclare("jobs.dead", true, false, false, false, nil)
	_, _ = ch.QueueDeclare("jobs", true, false, false, false, amqp.Table{
		"x-queue-type":              "quorum",
		"x-delivery-limit":          2,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "jobs.dead",
	})
	_ = ch.Publish("", "jobs", false, false, amqp.Publishing{Body: []byte("poison")})

	for {
		d, ok, _ := ch.Get("jobs", false)
		if !ok {
			break
		}
		fmt.Printf("delivery: redelivered=%t x-delivery-count=%v\n", d.Redelivered, d.Headers["x-delivery-count"])
		_ = d.Reject(true) // the worker crashed on it again
	}
	d, _, _ := ch.Get("jobs.dead", true)
	fmt.Printf("dead-lettered %s: %s\n", d.Body, d.Headers["x-first-death-reason"])
	// Output:
	// delivery: redelivered=false x-delivery-count=<nil>
	// delivery: redelivered=true x-delivery-count=1
	// delivery: redelivered=true x-delivery-count=2
	// dead-lettered poison: delivery_limit
}
