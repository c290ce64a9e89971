package rabbitmq

// The publisher's watcher: the one goroutine that reads the channel's
// confirms, returns and close, and hands each waiting Publish its outcome.

import (
	"fmt"
	"strconv"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// watch is the goroutine that shuts the publisher down when its channel
// closes or Close is called: it waits for the channel's close notification
// (or stop), takes the dispatch token for good, so no Publish dispatches
// after it, completes the confirms already handed over and fails every
// publish still waiting. Until then it adopts orphans.
func (p *publisher) watch() {
	defer close(p.done)
	var cause *amqp.Error
	for open := true; open; {
		select {
		case e, ok := <-p.closes:
			cause, open = closeCause(e, ok), false
		case <-p.stop:
			open = false
		case <-p.orphaned:
			open, cause = p.adopt()
		}
	}
	p.disp <- struct{}{}
	if !p.confirmsClosed {
		p.drainConfirms()
	}
	p.shutdown(cause)
}

// adopt reads confirms and returns while publishes whose callers stopped
// waiting have confirms to come, completing whatever they belong to. Only
// a waiting Publish dispatches otherwise, and the client library hands
// confirms over from the connection's reader, which waits up to 5 s on a
// full buffer: with more than confirmBuffer orphaned confirms and no
// Publish waiting, that reader would stall, and every consumer on the
// connection with it (docs/reconnection.md, "Confirms nobody waits for").
// Publishes waiting while it holds the dispatch token get their outcomes
// from it.
// It watches for the end of the channel as the watcher does: open is false
// once the channel has closed (with cause, if the broker closed it) or
// Close was called.
func (p *publisher) adopt() (open bool, cause *amqp.Error) {
	select {
	case p.disp <- struct{}{}:
	case e, ok := <-p.closes:
		return false, closeCause(e, ok)
	case <-p.stop:
		return false, nil
	}
	defer func() { <-p.disp }()
	for !p.confirmsClosed && p.hasOrphans() {
		select {
		case r, ok := <-p.returns:
			if !ok {
				p.returns = nil // the channel is closing; the watcher reads why
				continue
			}
			p.recordReturn(r)
		case c, ok := <-p.confirms:
			if !ok {
				p.confirmsClosed = true // the channel is closing; the watcher reads why
				continue
			}
			p.dispatchConfirm(c, nil)
		case e, ok := <-p.closes:
			return false, closeCause(e, ok)
		case <-p.stop:
			return false, nil
		}
	}
	return true, nil
}

// closeCause is the broker's reason received from the close notification,
// if it sent one (ok): nil when the notification channel closed without.
func closeCause(e *amqp.Error, ok bool) *amqp.Error {
	if ok {
		return e
	}
	return nil
}

// drainReturns records every return already handed over, without waiting.
func (p *publisher) drainReturns() {
	for p.returns != nil {
		select {
		case r, ok := <-p.returns:
			if !ok {
				p.returns = nil
				return
			}
			p.recordReturn(r)
		default:
			return
		}
	}
}

// drainConfirms completes every confirm already handed over, without
// waiting: the client library hands over everything the broker sent before
// it closed the channel ahead of the close itself.
func (p *publisher) drainConfirms() {
	for {
		select {
		case c, ok := <-p.confirms:
			if !ok {
				p.confirmsClosed = true
				return
			}
			p.drainReturns()
			if w, err := p.complete(c); w != nil {
				p.send(w, err)
			}
		default:
			return
		}
	}
}

func (p *publisher) recordReturn(r amqp.Return) {
	id, _ := r.Headers[publishIDHeader].(string)
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		p.logger.Warn("rabbitmq: return for a message this publisher did not send",
			"queue", r.RoutingKey, "reply_code", r.ReplyCode, "reply_text", r.ReplyText)
		return
	}
	p.mu.Lock()
	w := p.pending[seq]
	if w != nil {
		w.returned = &ReturnError{Queue: r.RoutingKey, Code: r.ReplyCode, Text: r.ReplyText}
	}
	p.mu.Unlock()
	if w == nil {
		p.logger.Warn("rabbitmq: publish returned after its caller stopped waiting",
			"queue", r.RoutingKey, "publish_id", seq, "reply_code", r.ReplyCode, "reply_text", r.ReplyText)
	}
}

// complete takes c's waiter out of the table and returns it with its
// outcome, for the caller to hand over; nil if nobody waits for c.
func (p *publisher) complete(c amqp.Confirmation) (w *waiter, err error) {
	p.mu.Lock()
	w = p.pending[c.DeliveryTag]
	delete(p.pending, c.DeliveryTag)
	if w == nil && p.orphans > 0 {
		p.orphans--
	}
	p.mu.Unlock()
	if w == nil {
		if !c.Ack {
			p.logger.Warn("rabbitmq: publish nacked after its caller stopped waiting", "publish_id", c.DeliveryTag)
		}
		return nil, nil
	}
	switch {
	case !c.Ack:
		err = fmt.Errorf("%w: publish to queue %q (publish id %d): %w", ErrNacked, w.queue, c.DeliveryTag, queuey.ErrMaybeEnqueued)
	case w.returned != nil:
		err = w.returned
	}
	return w, err
}

// shutdown closes the publisher: every waiter in flight, and every later
// Publish, fails with an error wrapping ErrPublisherClosed and cause.
func (p *publisher) shutdown(cause *amqp.Error) {
	p.mu.Lock()
	switch {
	case cause != nil:
		p.err = fmt.Errorf("%w: channel closed by the broker: %w", ErrPublisherClosed, cause)
	case p.err == nil:
		p.err = fmt.Errorf("%w: channel closed", ErrPublisherClosed)
	}
	err := p.err
	inFlight := p.pending
	p.pending = nil
	p.mu.Unlock()

	if cause != nil {
		// WARN: a broker's restart or a dropped connection closes it too,
		// and nothing is for a person to do: the publishes in flight fail
		// with ErrMaybeEnqueued, and a backend publishes on a fresh
		// channel (or connection) next.
		p.logger.Warn("rabbitmq: publishing channel closed by the broker; publishes in flight fail as maybe enqueued",
			"error", cause, "in_flight", len(inFlight))
	} else {
		p.logger.Debug("rabbitmq: publishing channel closed", "in_flight", len(inFlight))
	}
	for _, w := range inFlight {
		p.send(w, fmt.Errorf("%w: publish to queue %q: %w", queuey.ErrMaybeEnqueued, w.queue, err))
	}
}

// send hands w its outcome. Each waiter is sent exactly one outcome into a
// buffer of one, so this never blocks; the default case only guards the
// sender against a bug.
func (p *publisher) send(w *waiter, err error) {
	select {
	case w.result <- err:
	default:
		p.logger.Error("rabbitmq: publisher bug: a waiter got two outcomes", "queue", w.queue)
	}
}
