// Options enqueues two receipts with their own options (an ID, attempts,
// a priority, and for a VIP another queue) and prints what was sent.
//
//	AMQP_URL=amqp://guest:guest@localhost:5672/ go run ./examples/options
//
// It declares the queues "queuey-receipts" and "queuey-receipts-vip" with
// their dead-letter queues and hold ladders, and leaves the jobs there
// (queuey delete removes them).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// Receipt is a job: one order's receipt.
type Receipt struct {
	Order int `json:"order"`
}

func (Receipt) Kind() string  { return "receipt" }
func (Receipt) Queue() string { return "queuey-receipts" }

func main() {
	if err := run(context.Background(), os.Getenv("AMQP_URL")); err != nil {
		slog.Error("options failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string) (err error) {
	if url == "" {
		return errors.New("AMQP_URL is not set: export AMQP_URL=amqp://guest:guest@localhost:5672/")
	}
	backend, err := rabbitmq.Connect(ctx, rabbitmq.ConnectOptions{URLs: []string{url}}, rabbitmq.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, backend.Close()) }()
	// WithPriority needs the queue declared by the producer, which knows
	// then that it has priorities (classic queues do, up to 10, unless
	// their QueueConfig says otherwise).
	queues := []queuey.QueueConfig{{Name: "queuey-receipts"}, {Name: "queuey-receipts-vip"}}
	producer, err := queuey.NewProducer(ctx, backend, queues, queuey.ProducerConfig{})
	if err != nil {
		return err
	}
	for _, order := range []struct {
		n   int
		vip bool
	}{{1001, false}, {1002, true}} {
		id, err := enqueueReceipt(ctx, producer, order.n, order.vip)
		if err != nil {
			return err
		}
		fmt.Printf("enqueued %s (VIP: %v)\n", id, order.vip)
	}
	return nil
}
