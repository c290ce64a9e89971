package rabbitmq

// Publishing: the backend's publishing channel, kept open across channel
// exceptions and reconnections, and Publish and DeadLetter on it.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The headers DeadLetter sets on every message it publishes.
const (
	// HeaderDeathReason is the dead-letter header carrying why the job was
	// dead-lettered (an AMQP long string), cut to MaxReason bytes.
	HeaderDeathReason = "x-death-reason"
	// HeaderOriginalQueue is the dead-letter header carrying the work queue
	// the job was dead-lettered from (an AMQP long string).
	HeaderOriginalQueue = "x-original-queue"
	// HeaderAttempts is the dead-letter header carrying how many attempts
	// were made: an AMQP signed 64-bit integer ('l'), an int64 in amqp091,
	// the type RabbitMQ itself uses for x-delivery-count.
	HeaderAttempts = "x-attempts"
)

// watchBlockedOf follows notes, a new connection's connection.blocked, on
// a goroutine of its own; a connection that goes unblocks what it blocked.
func (b *Backend) watchBlockedOf(notes <-chan amqp.Blocking) {
	go func() {
		b.watchBlocked(notes)
		b.blocked.Store(nil)
	}()
}

// watchBlocked follows the broker blocking and unblocking publishing until
// the notifications end (the connection closed) or the backend closes.
func (b *Backend) watchBlocked(notes <-chan amqp.Blocking) {
	for {
		select {
		case n, ok := <-notes:
			if !ok {
				return
			}
			if n.Active {
				reason := n.Reason
				if reason == "" {
					reason = "no reason given"
				}
				b.blocked.Store(&reason)
				b.logger.Warn("rabbitmq: the broker is blocking publishers: publishes wait until it unblocks", "reason", reason)
			} else {
				b.blocked.Store(nil)
				b.logger.Info("rabbitmq: the broker unblocked publishers")
			}
		case <-b.stopWatch:
			return
		}
	}
}

// whileBlocked adds to err that the broker is blocking publishers, if it
// is.
func (b *Backend) whileBlocked(err error) error {
	if reason := b.blocked.Load(); reason != nil {
		return fmt.Errorf("%w; %w: %s", err, ErrPublishingBlocked, *reason)
	}
	return err
}

// supervise watches the publishing channel: when the broker closes it over
// one message (a channel exception; the connection is still there), it
// opens a fresh one and watches that. Under a supervisor, when the
// connection has gone (or no fresh channel opens on it), it waits for the
// next connection. When Close was called, the supervision failed, or,
// unsupervised, the connection has gone or no fresh channel opens, it
// closes done.
func (b *Backend) supervise(p *publisher) {
	for {
		<-p.Done()
		cause := p.Err()
		b.pubMu.Lock()
		closing := b.closing
		b.pubMu.Unlock()
		var next *publisher
		switch {
		case closing: // Close closed it: open no other
		case channelException(cause):
			next = b.reopen(cause)
			if next == nil && b.sup != nil {
				// No fresh channel opens: the connection went too. The
				// supervisor brings another.
				next = b.reconnected(cause)
			}
		case b.sup != nil:
			next = b.reconnected(cause)
		}
		b.pubMu.Lock()
		if next != nil && b.closing {
			b.pubMu.Unlock()
			_ = next.Close()
			next = nil
			b.pubMu.Lock()
		}
		close(b.swapped)
		b.swapped = make(chan struct{})
		if next == nil {
			close(b.done)
			b.pubMu.Unlock()
			return
		}
		b.pub = next
		b.pubMu.Unlock()
		p = next
	}
}

// reconnected waits for the supervisor's next connection and opens the
// publishing channel on it; nil once the backend is closing or the
// supervision has failed.
func (b *Backend) reconnected(cause error) *publisher {
	var gen uint64
	for {
		var err error
		if gen, err = b.sup.await(b.closeCtx, gen); err != nil {
			return nil
		}
		ch, err := b.open()
		if err != nil {
			continue // gone again: await the next one
		}
		p, err := newPublisher(ch, b.logger)
		if err != nil {
			_ = ch.Close()
			continue
		}
		b.logger.Info("rabbitmq: publishing resumed on the new connection", "gen", gen, "cause", cause)
		return p
	}
}

// channelException reports whether err is the broker closing one channel
// (a soft error: 404, 406 and the like), not the whole connection.
func channelException(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Server && ae.Recover
}

// reopen opens a fresh publishing channel after the broker closed the last
// one with cause; nil if it cannot.
func (b *Backend) reopen(cause error) *publisher {
	ch, err := b.open()
	if err != nil {
		b.logger.Warn("rabbitmq: the broker closed the publishing channel, and no fresh one opens", "cause", cause, "error", err)
		return nil
	}
	p, err := newPublisher(ch, b.logger)
	if err != nil {
		_ = ch.Close()
		b.logger.Warn("rabbitmq: the broker closed the publishing channel, and no fresh one opens", "cause", cause, "error", err)
		return nil
	}
	b.logger.Warn("rabbitmq: the broker closed the publishing channel; publishing goes on on a fresh one", "cause", cause)
	return p
}

// checkSize refuses a message body of n bytes over MaxMessageSize.
func (b *Backend) checkSize(n int) error {
	if n > b.maxSize {
		return fmt.Errorf("%w: the message is %d bytes, over the %d of MaxMessageSize", queuey.ErrJobTooLarge, n, b.maxSize)
	}
	return nil
}

// publisher returns the publishing channel's publisher and a channel closed
// when it is replaced (or the backend can publish no more).
func (b *Backend) publisher() (*publisher, <-chan struct{}) {
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	return b.pub, b.swapped
}

// publish publishes msg to queue and waits for its confirm, refusing a body
// over MaxMessageSize before anything is sent. A publish that found the
// publishing channel already closed by the broker over another message, and
// so was never sent, waits for the fresh channel and goes out on it.
func (b *Backend) publish(ctx context.Context, queue string, msg amqp.Publishing) error {
	if err := b.checkSize(len(msg.Body)); err != nil {
		return fmt.Errorf("rabbitmq: publish to queue %q: %w", queue, err)
	}
	for {
		p, swapped := b.publisher()
		err := p.Publish(ctx, queue, msg)
		if errors.Is(err, queuey.ErrMaybeEnqueued) || (err != nil && ctx.Err() != nil) {
			return b.whileBlocked(err)
		}
		// A publish that found the channel closed was never sent: it waits
		// for the fresh channel, after a channel exception or, supervised,
		// a reconnection.
		if err == nil || !errors.Is(err, ErrPublisherClosed) || !(channelException(err) || b.sup != nil) {
			return err
		}
		select {
		case <-swapped:
		case <-b.done:
		case <-ctx.Done():
			if b.sup != nil {
				return fmt.Errorf("rabbitmq: publish to queue %q: %w; it was not sent: %w", queue, ErrDisconnected, ctx.Err())
			}
			return err
		}
		select {
		case <-b.done:
			return b.endedErr(err)
		default:
		}
	}
}

// endedErr is the error of a publish that found the backend unable to
// publish for good: err, or the supervised connection's failure.
func (b *Backend) endedErr(err error) error {
	if b.sup != nil {
		if _, _, supErr := b.sup.current(); supErr != nil && !errors.Is(supErr, ErrDisconnected) {
			return fmt.Errorf("%w (%w)", supErr, err)
		}
	}
	return err
}

// Publish publishes env to the work queue env.Queue, or with hold > 0
// through one of its hold queues, and returns once the broker has
// confirmed the publish.
//
// The message carries env.Encode() as its body, content type
// application/json, delivery mode persistent, priority env.Priority,
// message id env.ID, type env.Kind and timestamp env.EnqueuedAt, and never a
// per-message expiration: the hold queue's x-message-ttl alone decides
// when it returns.
//
// hold is rounded up to the retry granularity (queuey.HoldRetry) or the
// deferred granularity (queuey.HoldDeferred); see Topology.RetryTTL. A
// rounded hold of zero publishes straight to env.Queue, which need not have
// been declared through this backend but must exist (ErrReturned
// otherwise). A positive one needs env.Queue declared through this backend
// (queuey.ErrUnknownQueue otherwise) and at most MaxHoldTTL milliseconds
// (queuey.ErrDelayTooLong otherwise). With the hold ladder (the default) it
// goes to the first rung of its walk (docs/hold-ladder.md), at priority 0
// with its work queue, its own priority and what remains in headers; a
// consumer of any work queue with the ladder relays it on. With ClassicHolds its hold queue is declared on
// the hold channel immediately before every publish into it, never cached,
// so an idle hold queue that expired comes back; a refused hold-queue
// declaration (one that exists with other arguments) is logged at WARN and
// returned, wrapping the *amqp.Error.
//
// With the ladder, a hold, and a publish into a quorum work queue, first
// waits out what remains of Topology.HoldWarmup after this process first
// declared env.Queue, unless its warm markers existed then; ctx bounds
// that wait.
//
// A deferral is published at the queue's top priority (see
// queuey.QueueConfig.TopPriority), which it comes back to its queue with
// (the relay restores it; a classic hold queue keeps it). On a classic queue with x-max-priority that puts it
// ahead of everything still on the queue. On a quorum queue it is a
// priority in the high tier: RabbitMQ 4.0 to 4.2 serve two tiers 2:1 (high
// first, but one normal message for every two high ones when both wait),
// 4.3 serves its levels strictly. Either way "ahead of the backlog" means
// ahead of what is still on the queue, not of what consumers already hold.
func (b *Backend) Publish(ctx context.Context, env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	// The body is encoded into a pooled buffer: the client library has
	// written it out (membroker has copied it) by the time Publish returns.
	buf := bodyBufs.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= maxPooledBody {
			bodyBufs.Put(buf)
		}
	}()
	body, err := env.AppendEncoded((*buf)[:0])
	if err != nil {
		return fmt.Errorf("rabbitmq: publish job %q: %w", env.ID, err)
	}
	*buf = body
	var ttl int64
	switch kind {
	case queuey.HoldRetry:
		ttl, err = b.top.RetryTTL(hold)
	case queuey.HoldDeferred:
		ttl, err = b.top.DeferredTTL(hold)
	default:
		return fmt.Errorf("rabbitmq: publish job %q: unknown HoldKind %d", env.ID, int(kind))
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: publish job %q to queue %q: %w", env.ID, env.Queue, err)
	}
	msg := jobPublishing(env, body)
	if ttl == 0 {
		if err := checkShortName(env.Queue); err != nil {
			return err
		}
		if b.youngQuorum(env.Queue) {
			if err := b.awaitRipe(ctx, env.Queue); err != nil {
				return err
			}
		}
		return b.publish(ctx, env.Queue, msg)
	}
	if !b.isDeclared(env.Queue) {
		return fmt.Errorf("rabbitmq: hold job %q for queue %q: %w (a hold needs the queue declared through this backend)",
			env.ID, env.Queue, queuey.ErrUnknownQueue)
	}
	select {
	case <-b.done:
		p, _ := b.publisher()
		return p.Err() // no use declaring a hold queue nothing can be published to
	default:
	}
	if err := b.checkSize(len(body)); err != nil { // before declaring a hold queue for nothing
		return fmt.Errorf("rabbitmq: hold job %q for queue %q: %w", env.ID, env.Queue, err)
	}
	if !b.top.ClassicHolds {
		if err := b.awaitRipe(ctx, env.Queue); err != nil {
			return err
		}
		rung, after := b.top.rung(ttl)
		return b.publish(ctx, b.top.LadderQueue(rung), ladderPublishing(msg, env.Queue, env.Priority, after))
	}
	holdQueue, err := b.declareHold(ctx, env.Queue, ttl)
	if err != nil {
		return err
	}
	return b.publish(ctx, holdQueue, msg)
}

// jobPublishing is the message that carries env, encoded as body: a job's
// properties are copies of its envelope's, for operators' tools.
func jobPublishing(env queuey.Envelope, body []byte) amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Priority:     env.Priority,
		MessageId:    env.ID,
		Type:         env.Kind,
		Timestamp:    env.EnqueuedAt,
		Body:         body,
	}
}

// bodyBufs pools the buffers Publish encodes envelopes into.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledBody is the largest buffer bodyBufs keeps.
const maxPooledBody = 64 << 10

// MaxReason is the most bytes of a dead-letter reason DeadLetter sends: a
// longer one (a fatal error quoting a whole response body, say) is cut,
// ending in "…". Headers travel in one frame, and RabbitMQ closes the
// connection over a frame larger than frame_max (128 KiB by default).
const MaxReason = 4096

// DeadLetter publishes body, byte for byte, to queue's dead-letter queue
// with the headers x-death-reason (reason, cut to MaxReason bytes),
// x-original-queue (queue) and x-attempts (attempts, as an int64), the
// timestamp property set to now, persistent, and returns once the broker
// has confirmed it. queue must
// have been declared through this backend (queuey.ErrUnknownQueue
// otherwise). A dead-letter queue that does not exist (see
// SkipDeadLetterQueues) is an error wrapping ErrReturned.
func (b *Backend) DeadLetter(ctx context.Context, queue string, body []byte, reason string, attempts int) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if !b.isDeclared(queue) {
		return fmt.Errorf("rabbitmq: dead-letter to queue %q: %w (dead-lettering needs the queue declared through this backend)",
			queue, queuey.ErrUnknownQueue)
	}
	if !b.top.ClassicHolds && !b.skipDead { // a quorum dead-letter queue this process declared
		if err := b.awaitRipe(ctx, queue); err != nil {
			return err
		}
	}
	return b.publish(ctx, b.top.DeadQueue(queue), amqp.Publishing{
		Headers: amqp.Table{
			HeaderDeathReason:   cutReason(reason),
			HeaderOriginalQueue: queue,
			HeaderAttempts:      int64(attempts),
		},
		DeliveryMode: amqp.Persistent,
		Timestamp:    b.clock.Now(), // when it was dead-lettered: queuey dead show prints it
		Body:         body,
	})
}

// cutReason cuts reason to MaxReason bytes, at a character's start, ending
// in "…".
func cutReason(reason string) string {
	if len(reason) <= MaxReason {
		return reason
	}
	const ellipsis = "…"
	cut := MaxReason - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut] + ellipsis
}
