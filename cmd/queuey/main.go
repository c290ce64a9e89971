// Command queuey is the operator's tool for a queuey deployment on
// RabbitMQ: queue stats, and the dead letters of a work queue listed,
// shown, redriven to their queue, or purged.
//
//	queuey stats QUEUE...
//	queuey dead ls QUEUE [--reason R] [--kind K] [--id ID,...] [--malformed] [--limit N]
//	queuey dead show QUEUE ID
//	queuey dead redrive QUEUE [filters] [--reset-attempts] [--dry-run] [--yes]
//	queuey dead purge QUEUE [--yes]
//
// It reaches the broker at $AMQP_URL (or --url), and its management HTTP
// API, for hold queues and unacknowledged counts, at
// $RABBITMQ_MANAGEMENT_URL (or --management-url) when set. --json prints
// JSON for scripts instead of tables. Redrive and purge ask for
// confirmation on a terminal, and need --yes otherwise. Run queuey --help
// for every flag; the README's "Operating queuey" walks through a
// dead-letter session, and docs/operating.md says what each command does to
// the queues.
//
// Install it with
//
//	go install github.com/queuey/queuey/cmd/queuey@latest
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/queuey/queuey/internal/redact"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a := &app{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv:      os.Getenv,
		interactive: term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stderr.Fd())),
		dial:        dialAMQP,
	}
	os.Exit(a.run(ctx, os.Args[1:]))
}

// dialTimeout bounds connecting to the broker.
const dialTimeout = 10 * time.Second

// dialAMQP connects to the broker at url.
func dialAMQP(_ context.Context, url string) (opener, func() error, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(dialTimeout)})
	if err != nil {
		// amqp091's parse errors quote the URL, password and all.
		return nil, nil, fmt.Errorf("cannot reach the broker at %s: %w", rabbitmq.Redact(url), redact.Err(err, url))
	}
	return func() (rabbitmq.InspectChannel, error) { return conn.Channel() }, conn.Close, nil
}
