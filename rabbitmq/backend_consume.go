package rabbitmq

// Consuming: a work queue's subscription that survives reconnections, the
// relay of held jobs between ladder rungs, and the deliveries whose
// settlement is guarded against a lost channel.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/relay"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Consume opens a fresh channel, sets Qos(prefetch, 0, false) on it and
// consumes queue with manual acknowledgements under a generated consumer
// tag ("queuey-" and a per-backend counter). prefetch must be between 1 and
// 65535. The queue need not have been declared through this backend, but
// must exist. ctx bounds starting the subscription, not its life.
//
// The Consumer's Deliveries channel is unbuffered and yields each message
// once; settle each with Ack or Requeue (basic.reject with requeue, never
// basic.nack) exactly once: a second settlement is an error that never
// reaches the broker (where an unknown delivery tag would close the
// channel). The subscription ends:
//
//   - on Consumer.Cancel, the graceful stop: basic.cancel, then Deliveries
//     closes once what the broker had already sent has been read, and
//     deliveries received can still be settled until Close; Err is nil;
//   - on Consumer.Close or Backend.Close: the channel closes, so the broker
//     requeues every delivery not yet settled (a failed delivery, on a
//     quorum queue) and settling one afterwards fails; Err is nil;
//   - when the broker closes the channel or the connection (Err wraps the
//     *amqp.Error), or cancels the consumer because its queue was deleted
//     (Err says so). The channel stays open until Close, so deliveries
//     received before a broker cancel can still be settled.
//
// One goroutine per consumer forwards deliveries; it exits when Deliveries
// closes. Call Close in every case to release the channel.
func (b *Backend) Consume(ctx context.Context, queue string, prefetch int) (queuey.Consumer, error) {
	if err := b.checkConsume(queue, prefetch); err != nil {
		return nil, err
	}
	sub, err := b.subscribe(ctx, queue, "", prefetch)
	if err != nil {
		return nil, err
	}
	c := &consumer{
		b:       b,
		sub:     sub,
		queue:   queue,
		tag:     sub.Tag(),
		out:     make(chan queuey.Delivery),
		follow:  consume.Follow{Supervised: b.sup != nil},
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.ctx, c.cancelCtx = context.WithCancel(context.Background())
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = sub.Channel().Close()
		return nil, fmt.Errorf("rabbitmq: consume queue %q: %w", queue, ErrBackendClosed)
	}
	b.consumers[c] = struct{}{}
	b.mu.Unlock()
	b.logger.Debug("rabbitmq: consuming", "queue", queue, "consumer_tag", c.tag, "prefetch", prefetch)
	go c.forward()
	if !b.laddered(queue) {
		return c, nil
	}
	rc := &relayingConsumer{consumer: c}
	// The shared relay queue's jobs name their work queue. A ladder of
	// queue's own, from a release before the shared one, releases into its
	// own relay queue until its rungs are empty: its jobs name none, and
	// go back to queue.
	type relayQueue struct{ name, fallback string }
	relayQueues := []relayQueue{{b.top.RelayQueue(), ""}}
	if old := b.top.legacyRelayQueue(queue); b.queueExists(ctx, old) {
		relayQueues = append(relayQueues, relayQueue{old, queue})
	}
	for _, q := range relayQueues {
		relays, err := b.Consume(ctx, q.name, relay.Prefetch)
		if err != nil {
			_ = rc.closeRelays()
			_ = c.Close()
			return nil, fmt.Errorf("rabbitmq: consume queue %q: the relay queue %q: %w", queue, q.name, err)
		}
		rc.relays = append(rc.relays, relaySub{relays.(*consumer), q.fallback})
	}
	rc.ctx, rc.stop = context.WithCancel(context.Background())
	for _, r := range rc.relays {
		rc.wg.Add(1)
		go rc.run(r)
	}
	return rc, nil
}

// queueExists reports whether queue exists, by a passive declaration on
// a throwaway channel (a missing queue closes it). A channel that does not
// open counts as no.
func (b *Backend) queueExists(ctx context.Context, queue string) bool {
	ch, err := b.openChannel(ctx, "looking for queue "+strconv.Quote(queue))
	if err != nil {
		return false
	}
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return err == nil
}

// checkConsume checks Consume's arguments.
func (b *Backend) checkConsume(queue string, prefetch int) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if err := checkShortName(queue); err != nil {
		return err
	}
	if prefetch < 1 || prefetch > 65535 {
		return fmt.Errorf("rabbitmq: consume queue %q: prefetch %d is outside 1..65535", queue, prefetch)
	}
	return nil
}

// subscribe opens a fresh channel and subscribes to queue on it as tag,
// or a generated consumer tag if it is empty: the core (internal/consume)
// that Consume's goroutine shell drives, as the simulator drives it.
func (b *Backend) subscribe(ctx context.Context, queue, tag string, prefetch int) (*consume.Sub, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch, err := b.openChannel(ctx, "consuming queue "+strconv.Quote(queue))
	if err != nil {
		return nil, err
	}
	if tag == "" {
		tag = "queuey-" + strconv.FormatUint(b.tags.Add(1), 10)
	}
	sub, err := consume.Open(ch, queue, tag, prefetch, b.consumeArgs(queue))
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: consume queue %q: %w", queue, err)
	}
	return sub, nil
}

// laddered reports whether queue was declared through this backend with
// the hold ladder, whose relay queue its consumers relay.
func (b *Backend) laddered(queue string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.declared[queue]
	return ok && !b.top.ClassicHolds
}

// relayGrace bounds how long Close waits for relays in flight.
const relayGrace = 5 * time.Second

// relayingConsumer is a consumer of a work queue with the hold ladder: it
// also consumes the ladder's relay queue (and the work queue's own relay
// queue, left by an earlier release, while it exists) and relays what
// arrives there (Backend.Relay), jobs of every work queue alike, each
// delivery on a goroutine of its own, as many at once as relay.Prefetch
// lets the broker send.
type relayingConsumer struct {
	*consumer
	relays []relaySub
	ctx    context.Context // ends at Close: relays in flight give up
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// relaySub is a subscription to a relay queue, and the work queue a job
// from there goes to if it names none (Backend.Relay).
type relaySub struct {
	*consumer
	fallback string
}

// run relays until the relay subscription r ends.
func (c *relayingConsumer) run(r relaySub) {
	defer c.wg.Done()
	for d := range r.Deliveries() {
		d := d.(*consume.Delivery)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.relayOne(d, r.fallback)
		}()
	}
}

// relayOne relays d as the relay's core decides (relay.Run): publish the
// job on, then acknowledge d once the publish is confirmed, or return it
// to the relay queue after a pause, or drop it if its work queue is gone.
func (c *relayingConsumer) relayOne(d *consume.Delivery, fallback string) {
	relay.Run(relay.Core{}, d.Stale(), relayShell{c, d, fallback})
}

// relayShell is what relaying one delivery does here: on the consumer's
// goroutine for it, with its backend, on Options.Clock.
type relayShell struct {
	c        *relayingConsumer
	d        *consume.Delivery
	fallback string
}

func (r relayShell) Publish() error {
	return r.c.consumer.b.Relay(r.c.ctx, r.fallback, r.d.D)
}

func (r relayShell) Ack() {
	if err := r.d.Ack(); err != nil {
		// Its channel went after the publish: the broker requeues it, and
		// the job goes on twice (at least once, never lost).
		r.c.consumer.b.logger.Debug("rabbitmq: relayed job's acknowledgement failed", "queue", r.c.consumer.queue, "error", err)
	}
}

func (r relayShell) Requeue(delay time.Duration, why error) {
	b := r.c.consumer.b
	b.logger.Warn("rabbitmq: relaying a held job failed; it stays in the relay queue", "queue", r.c.consumer.queue, "error", why)
	_ = b.sleep(r.c.ctx, delay)
	_ = r.d.Requeue()
}

func (r relayShell) Drop(why error) {
	queue, ok := r.d.D.Headers[HeaderQueue].(string)
	if !ok {
		queue = r.fallback
	}
	r.c.consumer.b.logger.Warn("rabbitmq: a held job's work queue was deleted while it waited; the job is dropped with it",
		"job_id", r.d.D.MessageId, "queue", queue, "error", why)
	r.Ack()
}

// Cancel cancels every subscription; relays in flight finish.
func (c *relayingConsumer) Cancel() error {
	err := c.consumer.Cancel()
	for _, r := range c.relays {
		err = errors.Join(err, r.Cancel())
	}
	return err
}

// closeRelays closes the relay subscriptions.
func (c *relayingConsumer) closeRelays() error {
	var err error
	for _, r := range c.relays {
		err = errors.Join(err, r.Close())
	}
	return err
}

// Close cancels the relay subscription, lets the relays in flight finish
// for up to relayGrace (less if the backend is closing: a relay that gives
// up leaves its job in the relay queue, or, if its publish was sent, runs
// it twice), then closes both.
func (c *relayingConsumer) Close() error {
	for _, r := range c.relays {
		_ = r.Cancel()
	}
	err := c.consumer.Close()
	stop := context.AfterFunc(c.consumer.b.closeCtx, c.stop)
	defer stop()
	grace := time.AfterFunc(relayGrace, c.stop)
	defer grace.Stop()
	c.wg.Wait()
	c.stop()
	return errors.Join(err, c.closeRelays())
}

// consumer is one subscription, the goroutine shell around its core
// (internal/consume): the goroutine forwarding its deliveries, following
// its channel's end and, under supervision, resubscribing.
type consumer struct {
	b     *Backend
	sub   *consume.Sub
	queue string
	tag   string
	out   chan queuey.Delivery
	// ctx ends at Cancel or Close: a resubscription waiting for the
	// connection gives up.
	ctx       context.Context
	cancelCtx context.CancelFunc

	cancelled atomic.Bool   // Cancel or Close was called: the end is ours
	closing   chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
	done      chan struct{} // closed when forward has returned (after out)
	// follow decides how the subscription follows its channel's end.
	follow consume.Follower

	mu   sync.Mutex
	lost chan uint64 // made by Lost; receives gen when ch is lost
	err  error       // why out was closed; set before it is
}

// channel returns the consumer's current channel.
func (c *consumer) channel() consume.Channel { return c.sub.Channel() }

// Lost yields the generation of each channel the subscription loses
// before it resumes on a fresh one, which only a supervised backend's
// consumers do (see Connect): every delivery made on a lost channel can no
// longer be settled, since the broker has requeued it. The generation is
// sent before any delivery of the next one, and the subscription waits
// for it to be received. Without a call to Lost, nothing is sent.
func (c *consumer) Lost() <-chan uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost == nil {
		c.lost = make(chan uint64)
	}
	return c.lost
}

var _ queuey.Consumer = (*consumer)(nil)

// Deliveries yields the queue's messages; it is closed when the
// subscription ends.
func (c *consumer) Deliveries() <-chan queuey.Delivery { return c.out }

// Err reports why Deliveries was closed: nil after Cancel or Close (or
// Backend.Close); otherwise an error saying why, wrapping the broker's
// *amqp.Error when it closed the channel or the connection. It is nil
// while the subscription runs.
func (c *consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Cancel stops new deliveries (basic.cancel) and returns once the broker
// has confirmed it. Deliveries closes once what the broker had already
// sent has been read; deliveries received can still be settled until
// Close. Cancelling a consumer whose subscription has already ended is not
// an error.
func (c *consumer) Cancel() error {
	c.cancelled.Store(true)
	c.cancelCtx() // a resubscription waiting for the connection gives up: the end is ours
	select {
	case <-c.done:
		return nil
	default:
	}
	ch := c.channel()
	if err := ch.Cancel(c.tag, false); err != nil {
		if ch.IsClosed() {
			return nil // ended anyway; Err says why
		}
		return fmt.Errorf("rabbitmq: cancel consumer %s on queue %q: %w", c.tag, c.queue, err)
	}
	return nil
}

// Close closes the consumer's channel and returns once Deliveries is
// closed: the broker requeues every delivery not yet settled, and settling
// one afterwards fails. It is safe to call more than once and concurrently
// with receiving; later calls return nil.
func (c *consumer) Close() error {
	c.closeOnce.Do(func() {
		c.cancelled.Store(true)
		close(c.closing)
		c.cancelCtx()
		ch := c.channel()
		c.closeErr = ch.Close()
		<-c.done
		if fresh := c.channel(); fresh != ch {
			// A resubscription installed a fresh channel meanwhile: it
			// was cancelled, not closed.
			_ = fresh.Close()
		}
		c.b.mu.Lock()
		delete(c.b.consumers, c)
		c.b.mu.Unlock()
		c.b.logger.Debug("rabbitmq: consumer closed", "queue", c.queue, "consumer_tag", c.tag)
		if c.closeErr != nil {
			c.closeErr = fmt.Errorf("rabbitmq: close consumer %s on queue %q: %w", c.tag, c.queue, c.closeErr)
		}
	})
	return c.closeErr
}

// forward hands deliveries to out until the subscription ends, following
// its channel's end as the subscription's core decides (consume.Follow:
// resume on a fresh channel under supervision, end otherwise), then
// records why and closes out.
func (c *consumer) forward() {
	var buf [3]consume.FollowAction
	_, gen, _, _ := c.sub.Current()
	why := c.pump()
	acts := c.follow.Stopped(buf[:0], why, c.cancelled.Load(), c.channel().IsClosed(), gen)
	var err error
run:
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case consume.End:
			err = a.Err
			break run
		case consume.Lost:
			c.logLost(a.Gen, why)
			if !c.notifyLost(a.Gen) {
				break run // closed meanwhile: the end is ours
			}
		case consume.Reopen:
			acts = c.reopen(acts)
		case consume.CancelTag:
			_ = c.channel().Cancel(c.tag, false)
		case consume.Live:
			c.b.logger.Info("rabbitmq: consumer resumed", "queue", c.queue, "consumer_tag", c.tag, "gen", a.Gen)
			why = c.pump()
			acts = c.follow.Stopped(acts, why, c.cancelled.Load(), c.channel().IsClosed(), a.Gen)
		}
	}
	if err != nil {
		c.b.logger.Warn("rabbitmq: consumer ended by the broker", "queue", c.queue, "consumer_tag", c.tag, "error", err)
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.out)
	close(c.done)
}

// logLost logs the loss of the channel of generation gen, which why ended.
func (c *consumer) logLost(gen uint64, why error) {
	if ackTimedOut(why) {
		// The worker settles a job before the limit the backend asked
		// for: the broker's is lower (a consumer-timeout policy, or a
		// queue created before queuey set it).
		c.b.logger.Error("rabbitmq: the broker's consumer timeout closed a consumer's channel before the job's Timeout: "+
			"its jobs run again at the same attempt; raise the broker's limit (docs/consumer-timeout.md)",
			"queue", c.queue, "consumer_tag", c.tag, "gen", gen, "error", why.Error())
		return
	}
	c.b.logger.Warn("rabbitmq: consumer lost its channel: resuming on a fresh one",
		"queue", c.queue, "consumer_tag", c.tag, "gen", gen, "error", why.Error())
}

// notifyLost tells Lost's receiver that the channel of generation gen is
// lost; false if the consumer was closed first.
func (c *consumer) notifyLost(gen uint64) bool {
	c.mu.Lock()
	lost := c.lost
	c.mu.Unlock()
	if lost == nil {
		return true
	}
	select {
	case lost <- gen:
		return true
	case <-c.closing:
		return false
	}
}

// reopen carries out a Reopen: it consumes the queue again on a fresh
// channel, once the supervisor has a connection, and appends what the
// core says of the outcome.
func (c *consumer) reopen(acts []consume.FollowAction) []consume.FollowAction {
	if c.cancelled.Load() {
		return c.follow.OpenFailed(acts, nil, true)
	}
	ch, err := c.b.openChannel(c.ctx, "consuming queue "+strconv.Quote(c.queue))
	if err != nil {
		err = fmt.Errorf("rabbitmq: consumer %s on queue %q: resuming: %w", c.tag, c.queue, err)
		return c.follow.OpenFailed(acts, err, c.cancelled.Load())
	}
	gen, err := c.sub.Resume(ch)
	refused := channelException(err) // 404: the queue is gone; 403, 405
	if err != nil {
		_ = ch.Close()
		err = fmt.Errorf("rabbitmq: consumer %s on queue %q: resuming: %w", c.tag, c.queue, err)
	}
	return c.follow.Resumed(acts, gen, err, c.cancelled.Load(), refused)
}

// pump forwards deliveries and returns why it stopped: nil for our own
// Cancel or Close.
func (c *consumer) pump() error {
	_, gen, in, closes := c.sub.Current()
	for {
		select {
		case <-c.closing:
			return nil
		case e, ok := <-closes:
			return c.closedErr(e, ok)
		case d, ok := <-in:
			if !ok {
				return c.inClosed(closes)
			}
			cd := &consume.Delivery{D: d}
			c.sub.Take(cd, gen)
			select {
			case c.out <- cd:
			case <-c.closing:
				return nil // not handed out: requeued as the channel closes
			case e, ok := <-closes:
				return c.closedErr(e, ok)
			}
		}
	}
}

// inClosed tells why the delivery channel closed: our Cancel or Close; the
// channel or connection closed (amqp091 and membroker both mark the channel
// closed before they close its consumers, and hand the NotifyClose
// listener the broker's reason, if any, no later); or the broker cancelled
// the consumer.
func (c *consumer) inClosed(closes chan *amqp.Error) error {
	switch {
	case c.channel().IsClosed():
		e, ok := <-closes
		return c.closedErr(e, ok)
	case c.cancelled.Load():
		return nil
	}
	return fmt.Errorf("rabbitmq: consumer %s on queue %q cancelled by the broker "+
		"(was the queue deleted, or did a delivery outlast its consumer timeout? docs/consumer-timeout.md)", c.tag, c.queue)
}

// closedErr is the error for the channel's closing, e being what its
// NotifyClose listener received: the broker's reason, or nothing for a
// clean close.
func (c *consumer) closedErr(e *amqp.Error, ok bool) error {
	if ok && e != nil {
		return fmt.Errorf("rabbitmq: consumer %s on queue %q: channel closed by the broker: %w", c.tag, c.queue, e)
	}
	if c.cancelled.Load() {
		return nil
	}
	return fmt.Errorf("rabbitmq: consumer %s on queue %q: channel closed: %w", c.tag, c.queue, amqp.ErrClosed)
}
