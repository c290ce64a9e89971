// Periodic runs a scheduler and a worker in one process until the worker
// has run three ticks of a job enqueued every second, then stops.
//
//	AMQP_URL=amqp://guest:guest@localhost:5672/ go run ./examples/periodic
//
// It declares the queue "queuey-periodic" with its dead-letter queue and
// hold ladder, and the election queue "queuey.scheduler.examples".
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// Heartbeat is the periodic job: its tick.
type Heartbeat struct {
	Tick time.Time `json:"tick"`
}

func (Heartbeat) Kind() string  { return "heartbeat" }
func (Heartbeat) Queue() string { return "queuey-periodic" }

func main() {
	if err := run(context.Background(), os.Getenv("AMQP_URL")); err != nil {
		slog.Error("periodic failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string) (err error) {
	if url == "" {
		return errors.New("AMQP_URL is not set: export AMQP_URL=amqp://guest:guest@localhost:5672/")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	backend, err := rabbitmq.Connect(ctx, rabbitmq.ConnectOptions{URLs: []string{url}}, rabbitmq.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, backend.Close()) }()
	queues := []queuey.QueueConfig{{Name: "queuey-periodic"}}
	producer, err := queuey.NewProducer(ctx, backend, queues, queuey.ProducerConfig{})
	if err != nil {
		return err
	}
	worker, err := queuey.NewWorker(ctx, backend, queues, queuey.WorkerConfig{})
	if err != nil {
		return err
	}
	ran := make(chan string, 100)
	if err := queuey.Register(worker, queuey.HandlerFunc[Heartbeat](func(_ context.Context, job *queuey.Job[Heartbeat]) error {
		ran <- job.ID
		return nil
	})); err != nil {
		return err
	}
	sched, err := newScheduler(backend, producer)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, 2)
	go func() { errs <- worker.Run(runCtx) }()
	go func() { errs <- sched.Run(runCtx) }()
	for n := 0; n < 3; {
		select {
		case id := <-ran:
			n++
			fmt.Println("ran", id)
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stop()
	return errors.Join(<-errs, <-errs)
}
