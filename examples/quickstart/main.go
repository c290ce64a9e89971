// Quickstart enqueues four calls to an API, one of them for 2 s later, runs
// a worker until all four are done, and exits 0.
//
//	AMQP_URL=amqp://guest:guest@localhost:5672/ go run .
//
// It declares the queue "queuey-quickstart", its dead-letter queue and the
// hold ladder the virtual host's work queues share (queuey.ladder.*,
// queuey.relay), and deletes nothing (the queuey command's "queuey delete
// queuey-quickstart" deletes the queue's own). On a broker new to them, the
// first hold waits 5 s (rabbitmq.Topology.HoldWarmup).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// CallAPI is a job: a call to one endpoint of an API.
type CallAPI struct {
	Endpoint string `json:"endpoint"`
}

func (CallAPI) Kind() string  { return "call-api" }
func (CallAPI) Queue() string { return "queuey-quickstart" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := errors.New("AMQP_URL is not set: export AMQP_URL=amqp://guest:guest@localhost:5672/")
	if url := os.Getenv("AMQP_URL"); url != "" {
		err = run(ctx, rabbitmq.ConnectOptions{URLs: []string{url}}, slog.Default())
	}
	if err != nil {
		slog.Error("quickstart failed", "error", err)
		os.Exit(1)
	}
}

// run enqueues the jobs, then runs a worker until they are all done (nil)
// or ctx ends (an error).
func run(ctx context.Context, copts rabbitmq.ConnectOptions, log *slog.Logger) (err error) {
	start := time.Now()
	// A backend that owns its connection and keeps it up: one URL per node of
	// a cluster, tried in turn, with exponential backoff and full jitter; an
	// error if none answers within 20 s (ConnectOptions.FirstConnectTimeout).
	backend, err := rabbitmq.Connect(ctx, copts, rabbitmq.Options{Logger: log})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, backend.Close()) }()
	queues := []queuey.QueueConfig{{Name: "queuey-quickstart"}} // classic, x-max-priority 10, retry defaults

	// Enqueue now, EnqueueAfter a delay (back of the queue), Defer a delay (ahead of the backlog).
	producer, err := queuey.NewProducer(ctx, backend, queues, queuey.ProducerConfig{})
	if err != nil {
		return err
	}
	for _, endpoint := range []string{"/ok", "/flaky", "/limited"} {
		if _, err := producer.Enqueue(ctx, CallAPI{Endpoint: endpoint}); err != nil {
			return err
		}
	}
	if _, err := producer.EnqueueAfter(ctx, CallAPI{Endpoint: "/later"}, 2*time.Second); err != nil {
		return err
	}

	worker, err := queuey.NewWorker(ctx, backend, queues, queuey.WorkerConfig{Logger: log})
	if err != nil {
		return err
	}
	ctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	var done atomic.Int32
	err = queuey.Register(worker, queuey.HandlerFunc[CallAPI](func(ctx context.Context, job *queuey.Job[CallAPI]) error {
		if job.EnqueuedAt.Before(start) {
			return nil // left by an earlier run that was interrupted: acknowledged, not counted
		}
		// Stands in for the call: /flaky fails once, /limited is rate-limited once.
		switch {
		case job.Args.Endpoint == "/flaky" && job.Attempt == 1:
			return errors.New("503 Service Unavailable") // retried after a backoff, with jitter
		case job.Args.Endpoint == "/limited" && job.Deferrals == 0:
			return queuey.Defer(2*time.Second, "429 Too Many Requests") // no attempt spent; back ahead of the backlog
		}
		log.Info("job done", "endpoint", job.Args.Endpoint, "attempt", job.Attempt, "deferrals", job.Deferrals)
		if done.Add(1) == 4 {
			stopWorker() // Run still acknowledges this job before it returns
		}
		return nil // acknowledged
	}))
	if err != nil {
		return err
	}
	if err := worker.Run(ctx); err != nil { // until ctx is done (graceful), across dropped connections
		return err
	}
	if n := done.Load(); n < 4 {
		return fmt.Errorf("stopped with %d of 4 jobs done", n)
	}
	log.Info("all 4 jobs done", "took", time.Since(start).Round(time.Millisecond))
	return nil
}
