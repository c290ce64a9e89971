package sim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// legacyBackend is the topology queuey replaced, kept as the simulator's
// negative control: every hold goes to one shared wait queue per work
// queue with a per-message expiration, which RabbitMQ only honours at the
// head of the queue, so a short wait queued behind a long one is released
// late. Everything else is the real backend.
type legacyBackend struct {
	*rabbitmq.Backend
	ch       rabbitmq.Channel // in confirm mode, for the wait queue only
	confirms chan amqp.Confirmation
	wait     string
	top      rabbitmq.Topology
}

func newLegacyBackend(rb *rabbitmq.Backend, open func() (rabbitmq.Channel, error), wait string, top rabbitmq.Topology) (*legacyBackend, error) {
	ch, err := open()
	if err != nil {
		return nil, fmt.Errorf("sim: legacy publisher channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("sim: legacy publisher channel: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	return &legacyBackend{Backend: rb, ch: ch, confirms: confirms, wait: wait, top: top}, nil
}

// Publish sends a held job to the wait queue with its rounded delay as the
// message's expiration.
func (b *legacyBackend) Publish(ctx context.Context, env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) error {
	if hold <= 0 {
		return b.Backend.Publish(ctx, env, hold, kind)
	}
	ttl, err := b.top.RetryTTL(hold)
	if kind == queuey.HoldDeferred {
		ttl, err = b.top.DeferredTTL(hold)
	}
	if err != nil {
		return err
	}
	body, err := env.Encode()
	if err != nil {
		return err
	}
	err = b.ch.PublishWithContext(ctx, "", b.wait, false, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, Priority: env.Priority,
		MessageId: env.ID, Type: env.Kind, Timestamp: env.EnqueuedAt, Body: body,
		Expiration: strconv.FormatInt(ttl, 10),
	})
	if err != nil {
		return err
	}
	// membroker confirms before PublishWithContext returns.
	select {
	case c, ok := <-b.confirms:
		if !ok || !c.Ack {
			return fmt.Errorf("sim: legacy hold of job %q not confirmed", env.ID)
		}
		return nil
	default:
		return fmt.Errorf("sim: legacy hold of job %q: no confirm", env.ID)
	}
}

// Close closes the wait-queue publisher and the backend.
func (b *legacyBackend) Close() error {
	_ = b.ch.Close()
	return b.Backend.Close()
}
