// Command queuey is the operator's tool for a queuey deployment on
// RabbitMQ: its work queues listed with their counts; a queue's stats; its
// dead letters listed, shown, redriven to their queue, or purged; and a
// work queue deleted with everything beside it.
//
//	queuey queues
//	queuey stats QUEUE...
//	queuey dead ls QUEUE [--reason R] [--kind K] [--id ID,...] [--malformed] [--limit N]
//	queuey dead show QUEUE ID
//	queuey dead redrive QUEUE [filters] [--reset-attempts] [--dry-run] [--yes]
//	queuey dead purge QUEUE [--yes]
//	queuey delete QUEUE [--yes]
//	queuey ui [--listen ADDR] [--read-only]
//	queuey version (or queuey --version)
//
// It reaches the broker at $AMQP_URL (or --url), and its management HTTP
// API at $RABBITMQ_MANAGEMENT_URL (or --management-url) when set: queues,
// delete and ui need the API, since AMQP cannot list queues; stats uses it
// for hold queues and unacknowledged counts, and shows what AMQP alone
// can, with a note on stderr, when it is not set or fails. --json prints
// JSON for scripts instead of tables. Redrive, purge and delete ask for
// confirmation on a terminal, and need --yes otherwise; delete first says
// how many messages it would delete. Exit status 0 means done, nothing to
// list, redrive or purge included; 1 that the broker or its API failed or
// refused, a named queue or job does not exist, or the answer was no; 2 a
// bad command line or a missing setting. queuey ui serves the web
// dashboard (docs/dashboard.md) on 127.0.0.1:8080, or --listen: beyond
// loopback only with $QUEUEY_UI_PASSWORD set. Run queuey --help for every
// flag; docs/guide.md's "Operating queuey" walks through a dead-letter
// session, and docs/operating.md says what each command does to the
// queues.
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
