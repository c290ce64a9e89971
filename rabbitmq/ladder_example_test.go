package rabbitmq

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
)

// ExampleBackend_Relay walks a 30 s deferral down the default hold ladder
// on membroker, relaying by hand what a consumer made by Consume relays on
// its own: 30 s is 16 + 8 + 4 + 2, so the job waits in four rungs, and
// comes back to its work queue at its priority after exactly 30 s.
func ExampleBackend_Relay() {
	clk := clock.NewMock()
	broker := membroker.New(membroker.Config{Clock: clk, Version: membroker.RabbitMQ40})
	conn, _ := broker.Dial()
	// No warm-up: membroker is never killed here.
	backend, err := New(Channels(conn.Channel), Options{Topology: Topology{HoldWarmup: -1}})
	if err != nil {
		panic(err)
	}
	defer backend.Close()
	ctx := context.Background()
	emails := queuey.QueueConfig{Name: "emails"}
	if err := backend.Declare(ctx, emails); err != nil {
		panic(err)
	}
	job := queuey.Envelope{ID: "rate-limited", Kind: "send_email", Queue: "emails", Payload: json.RawMessage(`null`),
		Attempt: 1, Priority: emails.TopPriority(), EnqueuedAt: clk.Now()}
	if err := backend.Publish(ctx, job, 30*time.Second, queuey.HoldDeferred); err != nil {
		panic(err)
	}
	relay := backend.Topology().RelayQueue()
	ch, _ := conn.Channel()
	start, last := clk.Now(), ""
	for {
		for _, q := range broker.Queues() {
			if q.Ready > 0 && q.Name != last { // where the job is, when it moves
				fmt.Printf("%3s %s\n", clk.Now().Sub(start), q.Name)
				last = q.Name
			}
		}
		if q, _ := broker.Queue("emails"); q.Ready > 0 {
			break
		}
		clk.Add(time.Second)
		if d, ok, _ := ch.Get(relay, false); ok {
			if err := backend.Relay(ctx, "emails", d); err != nil {
				panic(err)
			}
			_ = d.Ack(false)
		}
	}
	d, _, _ := ch.Get("emails", true)
	fmt.Println("back at priority", d.Priority)
	// Output:
	//  0s queuey.ladder.16000
	// 16s queuey.ladder.8000
	// 24s queuey.ladder.4000
	// 28s queuey.ladder.2000
	// 30s emails
	// back at priority 10
}
