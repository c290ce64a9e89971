package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// publishIDHeader is the header the publisher adds to every message it
// publishes: the publish's confirm sequence number on its channel, in
// decimal. A basic.return carries no sequence number, so this is how a
// returned message is matched to the publish waiting for it. Consumers see
// it too; it is unique per publishing channel, not globally.
const publishIDHeader = "x-queuey-publish-id"

// Buffer sizes of the publisher's confirm and return listeners. The
// Publish calls waiting for their confirms drain both (and the watcher
// does, while confirms nobody waits for are due), so they only absorb
// bursts; they matter for membroker, which never blocks and holds back
// what does not fit until the next call into the broker.
const (
	confirmBuffer = 4096
	returnBuffer  = 1024
)

var (
	// ErrReturned is matched (with errors.Is) by the error of a publish the
	// broker returned as unroutable; errors.As with a *ReturnError gives the
	// reply code and text. With the default exchange, 312 NO_ROUTE means the
	// queue does not exist.
	ErrReturned = errors.New("rabbitmq: publish returned by the broker")
	// ErrNacked is wrapped by the error of a publish the broker negatively
	// confirmed (basic.nack): it failed to take responsibility for the
	// message, which may or may not have been enqueued (the error wraps
	// queuey.ErrMaybeEnqueued too).
	ErrNacked = errors.New("rabbitmq: publish nacked by the broker")
	// ErrPublisherClosed is wrapped by the error of every publish in flight
	// when the publisher or its channel closes, and of every later publish.
	// When the broker closed the channel or connection, the error also wraps
	// its *amqp.Error (match it with errors.As). The error of a publish
	// that was in flight wraps queuey.ErrMaybeEnqueued as well; that of one
	// the publisher never sent does not.
	ErrPublisherClosed = errors.New("rabbitmq: publisher closed")
)

// ReturnError is the error of a publish the broker returned (basic.return):
// a mandatory publish that reached no queue. It matches ErrReturned.
type ReturnError struct {
	Queue string // the routing key the message was published with
	Code  uint16 // the reply code, amqp.NoRoute (312) for a missing queue
	Text  string // the reply text, "NO_ROUTE" for a missing queue
}

func (e *ReturnError) Error() string {
	if e.Code == amqp.NoRoute {
		return fmt.Sprintf("rabbitmq: publish to queue %q returned: %d %s (the queue does not exist)", e.Queue, e.Code, e.Text)
	}
	return fmt.Sprintf("rabbitmq: publish to queue %q returned: %d %s", e.Queue, e.Code, e.Text)
}

// Is reports whether target is ErrReturned.
func (e *ReturnError) Is(target error) bool { return target == ErrReturned }

// publisher publishes messages on one channel in confirm mode and waits for
// each one's confirmation, as the backend does for every enqueue, retry,
// deferral and dead-letter. Every publish goes to the default exchange with
// the queue name as routing key and is mandatory, so a message that reaches
// no queue is an error (ErrReturned), never a silent success.
//
// Publishes pipeline: a Publish holds the publisher's lock only to take a
// sequence number and write the message, never while it waits for the
// confirm, so concurrent Publish calls have many messages in flight on the
// one channel. The waiting calls take turns at dispatching: one at a time
// reads the confirms and returns, matching confirms to publishes by
// sequence number and returns by the publishIDHeader each message carries,
// until its own outcome is known. No goroutine stands between the client
// library and the callers, so a confirm that is already there (as on
// membroker) completes its publish without a thread handoff. Only while
// publishes whose callers gave up have confirms to come does the watcher
// goroutine take the turn (adopt), so that those confirms are read even
// if nobody publishes.
//
// The publisher owns its channel: nothing else may publish on it (that would
// shift the sequence numbers) or declare on it (a refused declaration closes
// the channel). It is safe for concurrent use. When the channel closes, the
// publisher is closed for good (Done is closed, Err says why): reconnection
// is the caller's business, and a publisher does not follow amqp091's
// automatic recovery onto a recovered channel.
type publisher struct {
	ch     Channel
	logger *slog.Logger

	// lock serialises GetNextPublishSeqNo, registering the waiter and the
	// publish itself, so sequence numbers and the waiter table agree. It is
	// a channel rather than a sync.Mutex so that a Publish queued behind a
	// write the broker is holding up (a memory alarm blocks publishers)
	// still honours its ctx.
	lock         chan struct{}
	headers      amqp.Table // guarded by lock: each publish's headers, reused
	extraHeaders bool       // guarded by lock: headers holds more than the publish id
	// wireFailed, guarded by lock, says a write of this publisher's failed
	// on the wire. The client library's buffered writer keeps its first
	// error and refuses every later write with it, writing nothing, so a
	// publish that fails after that never left the client.
	wireFailed bool

	// waiters pools the waiters of finished publishes. It is the
	// publisher's own, not the package's: a waiter's channel belongs to the
	// synctest bubble it was made in, if any, and must not reach a
	// publisher outside it.
	waiters sync.Pool

	mu      sync.Mutex
	pending map[uint64]*waiter // by sequence number
	// orphans counts the publishes whose callers stopped waiting (their
	// ctx ended) and whose confirms are still to come.
	orphans int
	err     error // once non-nil, the publisher is closed; wraps ErrPublisherClosed

	// disp is the dispatch token: whoever holds it is the only reader of
	// confirms and returns. A Publish waiting for its confirm takes it and
	// dispatches until its own outcome is known, so a confirm that has
	// already arrived (membroker hands confirms over before Publish
	// returns) completes on the caller's goroutine with no handoff. The
	// watcher takes it while orphans' confirms are due (adopt), and for
	// good when the channel closes.
	disp           chan struct{}
	confirmsClosed bool // guarded by disp: the confirm listener has closed
	confirms       chan amqp.Confirmation
	returns        chan amqp.Return
	closes         chan *amqp.Error
	orphaned       chan struct{} // wakes the watcher to adopt orphans

	closeOnce sync.Once
	closeErr  error
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the watcher has shut the publisher down
}

// waiter is one Publish waiting for its confirm. result has room for the one
// outcome ever sent, so whoever dispatches never blocks on it.
type waiter struct {
	queue    string
	result   chan error
	returned *ReturnError // set by the dispatching Publish when a return arrives
}

// newPublisher puts ch in confirm mode, registers its confirm, return and
// close listeners and starts the watcher goroutine, which shuts the
// publisher down when the channel closes. The publisher takes
// ownership of ch: Close closes it. A nil logger discards.
func newPublisher(ch Channel, logger *slog.Logger) (*publisher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("rabbitmq: publisher: putting the channel in confirm mode: %w", err)
	}
	p := &publisher{
		ch:       ch,
		logger:   logger,
		lock:     make(chan struct{}, 1),
		headers:  make(amqp.Table, 4),
		disp:     make(chan struct{}, 1),
		pending:  make(map[uint64]*waiter),
		orphaned: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	p.closes = ch.NotifyClose(make(chan *amqp.Error, 1))
	p.returns = ch.NotifyReturn(make(chan amqp.Return, returnBuffer))
	p.confirms = ch.NotifyPublish(make(chan amqp.Confirmation, confirmBuffer))
	go p.watch()
	return p, nil
}

// Publish publishes msg to queue through the default exchange, mandatory,
// and blocks until the broker confirms it, ctx is done, or the channel
// closes. It returns nil once the broker has taken responsibility for the
// message (a persistent message on a durable queue: once persisted).
// Otherwise the error matches ErrReturned (no such queue), ErrNacked, or
// ErrPublisherClosed (wrapping the broker's *amqp.Error when it closed the
// channel or connection). When the message was sent and its outcome never
// came (nacked, or the channel closed while Publish waited), the error
// also matches queuey.ErrMaybeEnqueued: the message may have been enqueued.
//
// msg's headers are copied, with publishIDHeader added; the caller's table
// is not modified.
//
// If ctx is done before the message is written, Publish returns ctx.Err()
// and nothing is published. If ctx is done while Publish waits for the
// confirm, it returns an error that wraps both queuey.ErrMaybeEnqueued and
// ctx.Err(): the message may still be delivered, since a message on the
// wire cannot be withdrawn. (When the outcome is already
// known at that moment, a return or the confirm arriving together with the
// cancellation, Publish returns that instead.) A return or nack that arrives
// after its caller stopped waiting is logged at WARN. A Publish queued
// behind a write the client library is blocked in (RabbitMQ blocks
// publishing connections during a memory or disk alarm) honours ctx; the
// write itself does not.
func (p *publisher) Publish(ctx context.Context, queue string, msg amqp.Publishing) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, _ := p.waiters.Get().(*waiter)
	if w == nil {
		w = &waiter{result: make(chan error, 1)}
	}
	w.queue = queue

	// Uncontended, the lock is taken without a select over ctx.
	select {
	case p.lock <- struct{}{}:
	default:
		select {
		case p.lock <- struct{}{}:
		case <-ctx.Done():
			p.recycle(w)
			return ctx.Err()
		}
	}
	seq := p.ch.GetNextPublishSeqNo()
	// The headers table is the publisher's own, reused under the lock: the
	// client library encodes it onto the wire (membroker copies it) before
	// PublishWithContext returns and keeps no reference.
	headers := p.headers
	if p.extraHeaders || len(msg.Headers) > 0 {
		// Only the publish id is left from a publish without headers.
		clear(headers)
		maps.Copy(headers, msg.Headers)
		p.extraHeaders = len(msg.Headers) > 0
	}
	headers[publishIDHeader] = strconv.FormatUint(seq, 10)
	msg.Headers = headers
	if err := p.register(seq, w); err != nil {
		<-p.lock
		p.recycle(w)
		return err
	}
	if err := p.ch.PublishWithContext(ctx, "", queue, true, false, msg); err != nil {
		sentNothing := p.wireFailed
		p.wireFailed = p.wireFailed || wireError(err)
		withdrawn, _ := p.withdraw(seq, w, false)
		<-p.lock
		if !withdrawn {
			<-w.result // the watcher failed it as the channel closed
		}
		p.recycle(w)
		return p.publishFailed(ctx, queue, err, sentNothing)
	}
	<-p.lock
	return p.await(ctx, seq, w)
}

// await waits for w's outcome, dispatching confirms and returns while it
// holds the dispatch token, and recycles w.
func (p *publisher) await(ctx context.Context, seq uint64, w *waiter) error {
	disp := p.disp // nil once the confirm listener has closed: then only wait
	for {
		// The common cases first, each without a select over every case:
		// the outcome is in (len of a buffered channel takes no lock), or
		// the dispatch token is free.
		if len(w.result) > 0 {
			err := <-w.result
			p.recycle(w)
			return err
		}
		if disp != nil {
			select {
			case disp <- struct{}{}:
				if done, err := p.dispatchHeld(ctx, w, &disp); done {
					return err
				}
				if ctx.Err() != nil {
					return p.abandon(ctx, seq, w)
				}
				continue
			default:
			}
		}
		select {
		case err := <-w.result:
			p.recycle(w)
			return err
		case <-ctx.Done():
			return p.abandon(ctx, seq, w)
		case disp <- struct{}{}:
			if done, err := p.dispatchHeld(ctx, w, &disp); done {
				return err
			}
			if ctx.Err() != nil {
				return p.abandon(ctx, seq, w)
			}
		}
	}
}

// dispatchHeld dispatches for w with the dispatch token the caller has
// just taken, and gives the token back. done says w's outcome is err (and
// w has been recycled); otherwise the caller keeps waiting, with *disp set
// to nil if the confirm listener has closed.
func (p *publisher) dispatchHeld(ctx context.Context, w *waiter, disp *chan struct{}) (done bool, err error) {
	if p.confirmsClosed {
		// The channel is closing: the watcher fails w shortly.
		<-p.disp
		*disp = nil
		return false, nil
	}
	err, done = p.dispatchFor(ctx, w)
	<-p.disp
	if done {
		p.recycle(w)
	}
	return done, err
}

// abandon stops waiting for w because ctx is done: it returns the outcome if
// one is already known, ctx's error otherwise.
func (p *publisher) abandon(ctx context.Context, seq uint64, w *waiter) error {
	withdrawn, returned := p.withdraw(seq, w, true)
	if !withdrawn {
		// A dispatcher or the watcher took the waiter first: its outcome
		// is on the way.
		err := <-w.result
		p.recycle(w)
		return err
	}
	queue := w.queue
	p.recycle(w)
	select {
	case p.orphaned <- struct{}{}: // the watcher dispatches its confirm if no Publish does
	default: // it is told already
	}
	if returned != nil {
		return returned // final already: the message reached no queue
	}
	return fmt.Errorf("%w: publish to queue %q: stopped waiting for its confirm: %w", queuey.ErrMaybeEnqueued, queue, ctx.Err())
}

// dispatchFor reads confirms and returns, completing whichever publishes
// they belong to, until w has its outcome (done), ctx ends or the confirm
// listener closes. The caller holds the dispatch token.
//
// The broker sends a publish's basic.return before its basic.ack, and the
// client library hands them to the two Go channels in that order, but a
// select with both ready may pick the confirm first. So before completing
// any confirm it drains the returns already handed over: a return is
// always recorded before the confirm of its publish completes.
func (p *publisher) dispatchFor(ctx context.Context, w *waiter) (err error, done bool) {
	for {
		// What has arrived already is taken without a select: len of a
		// buffered channel takes no lock, and the holder of the dispatch
		// token is the only reader of confirms and returns. A return the
		// client library handed over before a confirm is already counted
		// in len(p.returns) once that confirm is received.
		if len(w.result) > 0 {
			return <-w.result, true
		}
		if len(p.returns) > 0 {
			p.recordReturn(<-p.returns)
			continue
		}
		if len(p.confirms) > 0 {
			if err, done := p.dispatchConfirm(<-p.confirms, w); done {
				return err, true
			}
			continue
		}
		select {
		case r, ok := <-p.returns:
			if !ok {
				p.returns = nil // the channel is closing; the watcher will say so
				continue
			}
			p.recordReturn(r)
		case c, ok := <-p.confirms:
			if !ok {
				p.confirmsClosed = true
				return nil, false
			}
			if err, done := p.dispatchConfirm(c, w); done {
				return err, true
			}
		case <-ctx.Done():
			return nil, false
		}
	}
}

// dispatchConfirm records the returns handed over before c, then completes
// c's publish: done says it was w's, with outcome err, which is returned
// rather than sent.
func (p *publisher) dispatchConfirm(c amqp.Confirmation, w *waiter) (err error, done bool) {
	if len(p.returns) > 0 {
		p.drainReturns()
	}
	target, err := p.complete(c)
	switch target {
	case nil:
		return nil, false
	case w:
		return err, true
	}
	p.send(target, err)
	return nil, false
}

// Close closes the publisher and its channel and waits for the watcher to
// shut it down. Publishes still waiting for their confirm fail with
// ErrPublisherClosed unless the confirm arrives while the channel closes,
// and so do later ones; to have every publish confirmed, let the Publish
// calls return before calling Close. It returns the error of closing the
// channel (nil if the broker had closed it already); calling it again
// returns the same.
func (p *publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		if p.err == nil {
			p.err = ErrPublisherClosed
		}
		p.mu.Unlock()
		p.closeErr = p.ch.Close()
		close(p.stop)
	})
	<-p.done
	return p.closeErr
}

// Done is closed when the publisher has closed, by Close or because its
// channel closed under it.
func (p *publisher) Done() <-chan struct{} { return p.done }

// Err returns nil while the publisher is open, and afterwards the error its
// publishes fail with: it wraps ErrPublisherClosed and, when the broker
// closed the channel or connection, the *amqp.Error.
func (p *publisher) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *publisher) register(seq uint64, w *waiter) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.pending[seq] = w
	return nil
}

// withdraw removes w from the waiter table and reports whether it was still
// there, with the return recorded against it, if any; if it was not, the
// dispatching Publish or the watcher has taken it and sends its outcome.
// sent says the message went out, so its confirm is still to come: it is
// counted among the orphans.
func (p *publisher) withdraw(seq uint64, w *waiter, sent bool) (ok bool, returned *ReturnError) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending[seq] != w {
		return false, nil
	}
	delete(p.pending, seq)
	if sent {
		p.orphans++
	}
	return true, w.returned
}

// hasOrphans reports whether a publish whose caller stopped waiting still
// has its confirm to come.
func (p *publisher) hasOrphans() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.orphans > 0
}

// recycle returns a waiter nobody references any more to the pool.
func (p *publisher) recycle(w *waiter) {
	w.queue, w.returned = "", nil
	p.waiters.Put(w)
}

// connectionGone reports whether err came from the connection, not from a
// refusal: the client library's closed connection or channel, a failed
// write, the broker shutting the connection down (320 CONNECTION_FORCED),
// or a supervised backend waiting to reconnect.
func connectionGone(err error) bool {
	if ae, ok := errors.AsType[*amqp.Error](err); ok && ae.Code == amqp.ConnectionForced {
		return true
	}
	return errors.Is(err, amqp.ErrClosed) || errors.Is(err, ErrDisconnected) || wireError(err)
}

// wireError reports whether err is a write that failed on the wire: the
// broker died, or the network under it.
func wireError(err error) bool {
	_, ok := errors.AsType[*net.OpError](err)
	return ok || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// publishFailed turns the client library's refusal to publish into
// Publish's error. When it refused because the channel is closed, the
// close notification is on its way to the watcher, so it waits for the
// watcher to shut the publisher down, within ctx, to return the broker's
// reason. sentNothing says an earlier write had already failed on the
// wire, so this one wrote nothing.
func (p *publisher) publishFailed(ctx context.Context, queue string, err error, sentNothing bool) error {
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return ctxErr
	}
	if errors.Is(err, amqp.ErrClosed) || p.ch.IsClosed() {
		select {
		case <-p.done:
			return p.Err()
		case <-ctx.Done():
			return fmt.Errorf("%w: publish to queue %q: %w", ErrPublisherClosed, queue, err)
		}
	}
	if wireError(err) {
		if sentNothing {
			// Seen live: during a restart, eleven publishes in 40 ms
			// failed this way, none of them enqueued, while the client
			// library took the dead connection down.
			return fmt.Errorf("%w: publish to queue %q: not sent: the connection had already failed: %w",
				ErrPublisherClosed, queue, err)
		}
		// The first write to fail on the wire (seen live with a kill -9 of
		// the node: "write: connection reset by peer"). It cannot have
		// written this message whole, but another channel's flush on the
		// same connection may have sent it before the failure: the
		// connection's writer is shared, and flushed by whoever writes.
		return fmt.Errorf("%w: publish to queue %q: the connection failed while the message was being written: %w",
			queuey.ErrMaybeEnqueued, queue, err)
	}
	return fmt.Errorf("rabbitmq: publish to queue %q: %w", queue, err)
}
