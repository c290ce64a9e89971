// Package consume is the core of a subscription to a queue: the channel
// it lives on now and that channel's generation, and the guard on settling
// its deliveries. It starts no goroutine and never waits: deliveries,
// channel losses and settlements go in, and what it sends the broker is a
// basic.ack or a basic.reject, at most once per delivery, and never for a
// delivery of a channel that is gone.
//
// What the subscription does when its channel ends (resume on a fresh
// one, or end) is decided by Follow, its second core.
//
// Package rabbitmq's consumer is a goroutine shell around both, which
// reads deliveries, follows the channel's end and resubscribes. The
// simulator and the property tests step the same cores on their one
// goroutine, so that settle-once, Stale, Generation and resubscription are
// under every invariant they check (docs/worker-core.md, "The consumer's
// core" and "Resubscription"); a test that breaks them on purpose does so
// in its own code, around the cores (internal/sabotage).
package consume

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Channel is what a subscription needs of an AMQP channel: rabbitmq.Channel
// has it.
type Channel interface {
	Qos(prefetchCount, prefetchSize int, global bool) error
	NotifyClose(c chan *amqp.Error) chan *amqp.Error
	Consume(queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error)
	Cancel(consumer string, noWait bool) error
	IsClosed() bool
	Close() error
}

// Sub is one subscription: a consumer tag on a queue, on one channel at a
// time. Its methods are safe for concurrent use: in production, the
// shell's goroutine resubscribes while handlers settle.
type Sub struct {
	queue    string
	tag      string
	prefetch int
	args     amqp.Table // basic.consume's arguments; never modified

	mu     sync.Mutex
	ch     Channel
	gen    uint64 // ch's number, from 1
	in     <-chan amqp.Delivery
	closes chan *amqp.Error
}

// Open subscribes to queue on ch as tag: Qos(prefetch, 0, false), a
// NotifyClose listener, and basic.consume with manual acknowledgements and
// args (nil for none; Resume sends them again). The channel is
// generation 1.
func Open(ch Channel, queue, tag string, prefetch int, args amqp.Table) (*Sub, error) {
	s := &Sub{queue: queue, tag: tag, prefetch: prefetch, args: args}
	if err := s.subscribe(ch); err != nil {
		return nil, err
	}
	return s, nil
}

// Resume subscribes again on ch, a fresh channel, after the current one
// was lost: every delivery of an earlier generation is stale from now on.
// It returns the new generation. On an error the subscription is left as
// it was, and ch is the caller's to close.
func (s *Sub) Resume(ch Channel) (uint64, error) {
	if err := s.subscribe(ch); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, nil
}

func (s *Sub) subscribe(ch Channel) error {
	if err := ch.Qos(s.prefetch, 0, false); err != nil {
		return fmt.Errorf("qos %d: %w", s.prefetch, err)
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	in, err := ch.Consume(s.queue, s.tag, false, false, false, false, s.args)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ch, s.in, s.closes = ch, in, closes
	s.gen++
	s.mu.Unlock()
	return nil
}

// Tag is the consumer tag.
func (s *Sub) Tag() string { return s.tag }

// Current returns the channel the subscription is on now, its
// generation, and that channel's deliveries and close notifications.
func (s *Sub) Current() (ch Channel, gen uint64, in <-chan amqp.Delivery, closes chan *amqp.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch, s.gen, s.in, s.closes
}

// Channel is the channel the subscription is on now.
func (s *Sub) Channel() Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// Take makes d, whose D was just received from the channel of generation
// gen, a delivery of this subscription, not yet settled. d may be a
// recycled one.
func (s *Sub) Take(d *Delivery, gen uint64) {
	d.sub, d.gen = s, gen
	d.done.Store(false)
}

// ErrSettled is the error of a second settlement of one delivery, which
// never reaches the broker.
var ErrSettled = errors.New("already settled")

// Delivery is a message a subscription received. The zero value is not
// usable: Sub.Take makes one.
type Delivery struct {
	D    amqp.Delivery
	sub  *Sub
	gen  uint64
	done atomic.Bool // settled, or a settlement was attempted
}

// Generation is the number of the subscription's channel the delivery came
// on: 1, then one more each time it resumed on a fresh channel.
func (d *Delivery) Generation() uint64 { return d.gen }

// Stale reports whether the delivery can no longer be settled: the
// channel it came on has closed, so the broker has requeued it. The worker
// asks before it publishes a job's successor, since a successor published
// then would run beside the requeued job.
func (d *Delivery) Stale() bool {
	s := d.sub
	s.mu.Lock()
	ch, gen := s.ch, s.gen
	s.mu.Unlock()
	return gen != d.gen || ch.IsClosed()
}

func (d *Delivery) Body() []byte      { return d.D.Body }
func (d *Delivery) Priority() uint8   { return d.D.Priority }
func (d *Delivery) Redelivered() bool { return d.D.Redelivered }

// Ack acknowledges the message (basic.ack, one delivery).
func (d *Delivery) Ack() error {
	return d.settle("ack", func() error { return d.D.Ack(false) })
}

// Requeue returns the message to its queue with basic.reject and requeue,
// never basic.nack: on RabbitMQ 4.3 only a reject counts toward a quorum
// queue's delivery limit (docs/rabbitmq-semantics.md §5.4).
func (d *Delivery) Requeue() error {
	return d.settle("requeue", func() error { return d.D.Reject(true) })
}

func (d *Delivery) settle(op string, send func() error) error {
	if !d.done.CompareAndSwap(false, true) {
		// A second settlement would close the channel with 406
		// PRECONDITION_FAILED (unknown delivery tag, docs/rabbitmq-semantics.md
		// §E6): refuse it here.
		return fmt.Errorf("rabbitmq: %s delivery %d on queue %q: %w", op, d.D.DeliveryTag, d.sub.queue, ErrSettled)
	}
	if err := send(); err != nil {
		return fmt.Errorf("rabbitmq: %s delivery %d on queue %q: %w", op, d.D.DeliveryTag, d.sub.queue, err)
	}
	return nil
}
