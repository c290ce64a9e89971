package membroker

import (
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Connection is a client connection to a Broker, with the methods of
// *amqp.Connection that a job library needs. It is safe for concurrent use.
type Connection struct {
	b       *Broker
	id      uint64
	closed  bool
	chanSeq uint16

	channels []*Channel
	closeL   []chan *amqp.Error

	// out holds what the broker has sent this connection but could not yet
	// hand to a Go channel without blocking, in order. Like amqp091's
	// reader goroutine, one listener without room holds up everything
	// behind it on the same connection.
	out []outItem
}

// ServerVersion is the release the broker models, as RabbitMQ reports it in
// connection.start's server properties (amqp091's
// Connection.Properties["version"]): "4.0.5" for RabbitMQ40, "4.3.6" for
// RabbitMQ43, the releases the conformance suite holds each profile to.
func (c *Connection) ServerVersion() string {
	if c.b.version == RabbitMQ40 {
		return "4.0.5"
	}
	return "4.3.6"
}

// Channel opens a channel, as (*amqp.Connection).Channel does. It returns
// amqp.ErrClosed on a closed connection.
func (c *Connection) Channel() (*Channel, error) {
	b := c.b
	b.lock()
	defer b.unlock()
	if c.closed {
		return nil, amqp.ErrClosed
	}
	c.chanSeq++
	ch := &Channel{b: b, conn: c, id: c.chanSeq}
	c.channels = append(c.channels, ch)
	return ch, nil
}

// Close closes the connection and its channels: unacknowledged deliveries
// are requeued, exclusive queues deleted, and every listener channel closed
// without an error sent. Closing a closed connection returns amqp.ErrClosed,
// as amqp091 does.
func (c *Connection) Close() error {
	b := c.b
	b.lock()
	defer b.unlock()
	if c.closed {
		return amqp.ErrClosed
	}
	c.teardown(nil)
	return nil
}

// IsClosed reports whether the connection is closed.
func (c *Connection) IsClosed() bool {
	b := c.b
	b.lock()
	defer b.unlock()
	return c.closed
}

// NotifyClose registers a listener that receives the *amqp.Error of a
// connection closed by the broker (see Broker.CloseConnection) and is closed
// when the connection closes. On a closed connection it is closed at once.
func (c *Connection) NotifyClose(receiver chan *amqp.Error) chan *amqp.Error {
	b := c.b
	b.lock()
	defer b.unlock()
	if c.closed {
		safeClose(receiver)
		return receiver
	}
	c.closeL = append(c.closeL, receiver)
	return receiver
}

// teardown closes the connection: err is nil for a client close, the
// broker's reason otherwise. Every channel closes with the same error, as
// amqp091 broadcasts a connection exception to all channels.
func (c *Connection) teardown(err *amqp.Error) {
	if c.closed {
		return
	}
	c.closed = true
	c.b.reap = true
	for _, ch := range slices.Clone(c.channels) {
		ch.teardown(err)
	}
	b := c.b
	for _, name := range b.queueNames() {
		if q := b.queues[name]; q.exclusive && q.owner == c {
			b.deleteQueue(q, "exclusive")
		}
	}
	for _, l := range c.closeL {
		if err != nil {
			c.send(outItem{kind: outError, errc: l, err: err})
		}
		c.send(outItem{kind: outCloseError, errc: l})
	}
	c.closeL = nil
}

type outKind uint8

const (
	outDelivery outKind = iota
	outConfirm
	outReturn
	outCancel
	outError
	outCloseDeliveries
	outCloseConfirm
	outCloseReturn
	outCloseCancel
	outCloseError
)

// outItem is one pending hand-over to a Go channel, or the closing of one.
type outItem struct {
	kind    outKind
	cons    *consumer
	d       amqp.Delivery
	confirm chan amqp.Confirmation
	conf    amqp.Confirmation
	ret     chan amqp.Return
	r       *amqp.Return // rare: kept out of line so deliveries copy less
	cancel  chan string
	tag     string
	errc    chan *amqp.Error
	err     *amqp.Error
}

// send hands it over now if nothing is waiting ahead of it and its channel
// has room, and queues it otherwise. It never blocks.
func (c *Connection) send(it outItem) { c.sendItem(&it) }

// sendItem is send for an item the caller built in place.
func (c *Connection) sendItem(it *outItem) {
	if len(c.out) == 0 && trySend(it) {
		return
	}
	if it.kind == outDelivery {
		it.cons.pending++
	}
	c.out = append(c.out, *it)
	c.b.queued++
}

func (c *Connection) flush() {
	i := 0
	for ; i < len(c.out); i++ {
		it := &c.out[i]
		if !trySend(it) {
			break
		}
		if it.kind == outDelivery {
			it.cons.pending--
		}
	}
	if i > 0 {
		c.b.queued -= i
		n := copy(c.out, c.out[i:])
		clear(c.out[n:])
		c.out = c.out[:n]
	}
}

// dropDeliveries discards deliveries to cons not yet handed over: its channel
// is closing and the messages have been requeued.
func (c *Connection) dropDeliveries(cons *consumer) {
	kept := c.out[:0]
	for _, it := range c.out {
		if it.kind == outDelivery && it.cons == cons {
			continue
		}
		kept = append(kept, it)
	}
	clear(c.out[len(kept):])
	c.b.queued -= len(c.out) - len(kept)
	c.out = kept
	cons.pending = 0
}

func trySend(it *outItem) bool {
	switch it.kind {
	case outDelivery:
		select {
		case it.cons.deliveries <- it.d:
			return true
		default:
			return false
		}
	case outConfirm:
		select {
		case it.confirm <- it.conf:
			return true
		default:
			return false
		}
	case outReturn:
		select {
		case it.ret <- *it.r:
			return true
		default:
			return false
		}
	case outCancel:
		select {
		case it.cancel <- it.tag:
			return true
		default:
			return false
		}
	case outError:
		select {
		case it.errc <- it.err:
			return true
		default:
			return false
		}
	case outCloseDeliveries:
		safeClose(it.cons.deliveries)
	case outCloseConfirm:
		safeClose(it.confirm)
	case outCloseReturn:
		safeClose(it.ret)
	case outCloseCancel:
		safeClose(it.cancel)
	case outCloseError:
		safeClose(it.errc)
	}
	return true
}

// safeClose closes a listener channel, tolerating one the caller registered
// twice (amqp091 would panic; a broker model should not take the test down).
func safeClose[T any](c chan T) {
	defer func() { _ = recover() }()
	close(c)
}
