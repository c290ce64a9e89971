// Bulk enqueues 1,000 welcome e-mails with one EnqueueMany, up to 128 of
// them awaiting the broker's confirms at once, and says what became of
// each that was not confirmed.
//
//	AMQP_URL=amqp://guest:guest@localhost:5672/ go run ./examples/bulk
//
// It declares the queue "queuey-bulk" with its dead-letter queue and hold
// ladder, and leaves the jobs there (queuey delete queuey-bulk removes it).
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

// Welcome is a job: one welcome e-mail.
type Welcome struct {
	UserID int `json:"user_id"`
}

func (Welcome) Kind() string  { return "welcome" }
func (Welcome) Queue() string { return "queuey-bulk" }

func main() {
	if err := run(context.Background(), os.Getenv("AMQP_URL")); err != nil {
		slog.Error("bulk failed", "error", err)
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
	producer, err := queuey.NewProducer(ctx, backend, []queuey.QueueConfig{{Name: "queuey-bulk"}}, queuey.ProducerConfig{})
	if err != nil {
		return err
	}

	users := make([]int, 1000)
	for i := range users {
		users[i] = i + 1
	}
	if err := enqueueWelcomes(ctx, producer, users); err != nil {
		return err
	}
	fmt.Printf("enqueued %d welcome e-mails\n", len(users))
	return nil
}
