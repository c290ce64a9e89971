package rabbitmq_test

import (
	"context"
	"fmt"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// A supervised backend reconnects on its own. Here it dials membroker
// through a Dialer; against RabbitMQ, leave Dial unset and list each node's
// URL.
func ExampleConnect() {
	ctx := context.Background()
	broker := membroker.New(membroker.Config{})
	var last *membroker.Connection
	reconnected := make(chan struct{})
	backend, err := rabbitmq.Connect(ctx, rabbitmq.ConnectOptions{
		URLs: []string{"amqp://app:secret@node-1:5672/"},
		Dial: func(ctx context.Context, url string) (rabbitmq.Conn, error) {
			c, err := broker.Dial()
			if err != nil {
				return nil, err
			}
			last = c
			return rabbitmq.AdaptConn[*membroker.Channel](c), nil
		},
		OnState: func(e rabbitmq.ConnEvent) {
			fmt.Println(e.State, e.URL, e.Gen)
			if e.State == rabbitmq.StateConnected && e.Gen == 2 {
				close(reconnected)
			}
		},
		Rand: func() float64 { return 0 }, // no jitter, for a stable output
	}, rabbitmq.Options{})
	if err != nil {
		panic(err)
	}
	defer backend.Close()
	if err := backend.Declare(ctx, queuey.QueueConfig{Name: "api"}); err != nil {
		panic(err)
	}

	broker.CloseConnection(last, &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED", Server: true})
	<-reconnected
	q, _ := broker.Queue("api")
	fmt.Println("api still declared:", q.Name == "api")
	// Output:
	// connecting amqp://app:xxxxx@node-1:5672/ 0
	// connected amqp://app:xxxxx@node-1:5672/ 1
	// disconnected  1
	// connecting amqp://app:xxxxx@node-1:5672/ 0
	// connected amqp://app:xxxxx@node-1:5672/ 2
	// api still declared: true
	// closed  2
}
