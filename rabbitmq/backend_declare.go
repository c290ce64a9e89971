package rabbitmq

// Declaring: work queues with their dead-letter queues and hold ladders,
// the warm-up before a young quorum queue is trusted, and classic hold
// queues declared on demand.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// redeclare declares every queue declared through the backend on conn, a
// new connection, before it is in use: a queue that vanished with the
// broker's restart (a transient one, or all of them after a node was
// reset) is back before anything is published or consumed. So are the
// queues kept with keepDeclared (a scheduler's election queue). A refusal
// ends the supervision: another declaration of the queue exists, and
// going on with it could break what the queue's arguments promise (an
// election queue re-created without single active consumer would let
// every scheduler of the group lead).
func (b *Backend) redeclare(conn Conn) error {
	b.mu.Lock()
	queues := make([]queuey.QueueConfig, 0, len(b.declared))
	for _, q := range b.declared {
		queues = append(queues, q)
	}
	kept := slices.Sorted(maps.Keys(b.kept))
	args := make(map[string]amqp.Table, len(kept))
	for name, k := range b.kept {
		args[name] = k.args
	}
	b.mu.Unlock()
	slices.SortFunc(queues, func(x, y queuey.QueueConfig) int { return strings.Compare(x.Name, y.Name) })
	if len(queues) > 0 && !b.top.ClassicHolds {
		if _, err := b.declareLadder(conn.Channel); err != nil {
			return err
		}
	}
	for _, q := range queues {
		if _, err := b.declareOn(conn.Channel, q); err != nil {
			return err
		}
	}
	for _, name := range kept {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare(name, true, false, false, false, args[name])
		_ = ch.Close()
		if err != nil {
			b.logger.Warn("rabbitmq: queue declaration refused", "queue", name, "error", err)
			return fmt.Errorf("rabbitmq: declare queue %q: %w", name, err)
		}
	}
	return nil
}

// keptQueue is a queue keepDeclared keeps: its arguments, and how many
// users keep it.
type keptQueue struct {
	args  amqp.Table
	users int
}

// keepDeclared records that queue, which is not a work queue, was
// declared with args, so that redeclare declares it again after a
// reconnection: a queue deleted meanwhile (by an operator, or with a
// reset node) would otherwise leave its consumers unable to resume. Each
// call is undone by one forgetDeclared.
func (b *Backend) keepDeclared(queue string, args amqp.Table) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kept == nil {
		b.kept = map[string]*keptQueue{}
	}
	k := b.kept[queue]
	if k == nil {
		k = &keptQueue{}
		b.kept[queue] = k
	}
	k.args = args
	k.users++
}

// forgetDeclared undoes one keepDeclared, once its user no longer consumes
// queue; the queue is no longer declared again when no user keeps it.
func (b *Backend) forgetDeclared(queue string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := b.kept[queue]; k != nil {
		if k.users--; k.users <= 0 {
			delete(b.kept, queue)
		}
	}
}

// Declare declares each queue (its defaults filled in by WithDefaults) and
// remembers it for Publish with a hold and for DeadLetter.
//
// Every config is checked first (QueueConfig.Validate, and
// Topology.CheckQueueName, so that a name too long for its hold or
// dead-letter queues never reaches the client library): if any is invalid,
// nothing is declared. With the hold ladder, its queues, shared by every
// work queue, are declared first (LadderQueues, the warm marker aside).
// Then each queue is declared on a throwaway channel of its own: the work
// queue q, durable, with WorkQueueArgs; and its dead-letter queue,
// durable, unless SkipDeadLetterQueues. A queue the broker refuses (an existing queue with
// other arguments: PRECONDITION_FAILED) is logged at WARN and reported in
// the returned error, which names it and wraps the *amqp.Error; the
// remaining queues are still declared, and the backend's other operations
// keep working. Declare stops at the first channel it cannot open (the
// connection is gone). Declaring a queue again replaces what is remembered
// about it once the broker has accepted the new declaration.
//
// ctx is checked between declarations; a declaration itself cannot be
// interrupted.
func (b *Backend) Declare(ctx context.Context, queues ...queuey.QueueConfig) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	configs := make([]queuey.QueueConfig, len(queues))
	for i, q := range queues {
		q = q.WithDefaults()
		if err := q.Validate(); err != nil {
			return err
		}
		if err := b.top.CheckQueueName(q.Name); err != nil {
			return err
		}
		if _, err := b.top.RetryTTL(q.Retry.Cap); err != nil {
			// Every retry that reached the cap would be refused.
			return fmt.Errorf("rabbitmq: queue %q: retry cap: %w", q.Name, err)
		}
		configs[i] = q
	}
	if len(configs) > 0 && !b.top.ClassicHolds {
		if _, err := b.declareLadder(func() (Channel, error) {
			return b.openChannel(ctx, "declaring the hold ladder")
		}); err != nil {
			return err
		}
	}
	var errs []error
	for _, q := range configs {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		refused, err := b.declare(ctx, q)
		if err != nil && !refused {
			return errors.Join(append(errs, err)...)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.mu.Lock()
		b.declared[q.Name] = q
		_, known := b.ripe[q.Name]
		b.mu.Unlock()
		if !known && !b.top.ClassicHolds {
			b.startWarmup(ctx, q.Name)
		}
	}
	return errors.Join(errs...)
}

// WarmupError is the error of a publish whose context's deadline comes
// before its queue's hold ladder has warmed up (Topology.HoldWarmup): a
// hold, a dead letter, or a job for a quorum work queue would wait until
// Ready, on Options.Clock, and the backend fails at once rather than wait
// in vain. It matches context.DeadlineExceeded. Only the first process to
// use a queue on a broker waits (docs/hold-ladder.md, "The warm-up").
type WarmupError struct {
	Queue string    // the work queue
	Ready time.Time // when its ladder is old enough to hold jobs
}

func (e *WarmupError) Error() string {
	return fmt.Sprintf("rabbitmq: queue %q: its hold ladder is new and takes no job until %s, after the context's deadline (Topology.HoldWarmup)",
		e.Queue, e.Ready.Format(time.RFC3339Nano))
}

// Unwrap returns context.DeadlineExceeded.
func (e *WarmupError) Unwrap() error { return context.DeadlineExceeded }

// sleep waits for d on Options.Clock, or for ctx's end.
func (b *Backend) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-b.clock.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startWarmup sets when queue and the ladder, just declared by this
// process for the first time, are old enough to hold jobs: now, if both
// warm markers exist (some process saw them HoldWarmup old before), or
// after HoldWarmup.
func (b *Backend) startWarmup(ctx context.Context, queue string) {
	ripe, warm := b.clock.Now().Add(max(b.top.HoldWarmup, 0)), false
	if b.top.HoldWarmup > 0 && b.queueExists(ctx, b.top.LadderWarmQueue()) && b.queueExists(ctx, b.top.WarmQueue(queue)) {
		ripe, warm = b.clock.Now(), true
	}
	b.mu.Lock()
	if _, ok := b.ripe[queue]; !ok {
		b.ripe[queue], b.warm[queue] = ripe, warm
	}
	b.mu.Unlock()
}

// youngQuorum reports whether queue is a quorum work queue this process
// declared, with the ladder, and may still be in its warm-up: a quorum
// queue forgets what it holds on a kill -9 as young as a rung does.
func (b *Backend) youngQuorum(queue string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cfg, ok := b.declared[queue]
	return ok && cfg.Type == queuey.Quorum && !b.warm[queue] && !b.top.ClassicHolds
}

// awaitRipe waits until queue and the ladder are HoldWarmup old
// (Topology.HoldWarmup), on Options.Clock, or fails at once with a
// *WarmupError if ctx's deadline comes before that; then, the first time,
// it declares the ladder's warm marker and queue's, so that later
// processes need not wait.
func (b *Backend) awaitRipe(ctx context.Context, queue string) error {
	b.mu.Lock()
	ripe, warm := b.ripe[queue], b.warm[queue]
	b.mu.Unlock()
	if wait := ripe.Sub(b.clock.Now()); wait > 0 {
		if dl, ok := ctx.Deadline(); ok && dl.Before(ripe) {
			return &WarmupError{Queue: queue, Ready: ripe}
		}
		b.mu.Lock()
		first := !b.waitLogged[queue]
		b.waitLogged[queue] = true
		b.mu.Unlock()
		if first {
			b.logger.Info("rabbitmq: the queue or the hold ladder is new on this broker: holds, dead letters and jobs of a quorum queue wait until both are old enough to survive a crash "+
				"(Topology.HoldWarmup; only the first process to use the queue on a broker waits)",
				"queue", queue, "wait", wait.String())
		}
		if err := b.sleep(ctx, wait); err != nil {
			return fmt.Errorf("rabbitmq: hold for queue %q: waiting %s for it and the hold ladder to be old enough to survive a crash: %w", queue, wait, err)
		}
	}
	if warm || b.top.HoldWarmup <= 0 {
		return nil
	}
	// The ladder's marker first: the queue's says both were warm.
	for _, marker := range []string{b.top.LadderWarmQueue(), b.top.WarmQueue(queue)} {
		ch, err := b.openChannel(ctx, "declaring the warm marker "+strconv.Quote(marker))
		if err == nil {
			_, err = ch.QueueDeclare(marker, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			_ = ch.Close()
		}
		if err != nil {
			// The hold goes on; the next one tries again.
			b.logger.Warn("rabbitmq: declaring a warm marker failed", "queue", queue, "hold_queue", marker, "error", err)
			return nil
		}
	}
	b.mu.Lock()
	b.warm[queue] = true
	b.mu.Unlock()
	return nil
}

// declare declares one queue and its dead-letter queue on a throwaway
// channel. refused reports whether the broker refused a declaration (as
// opposed to the channel not opening).
func (b *Backend) declare(ctx context.Context, q queuey.QueueConfig) (refused bool, err error) {
	return b.declareOn(func() (Channel, error) {
		return b.openChannel(ctx, "declaring queue "+strconv.Quote(q.Name))
	}, q)
}

// declareOn is declare on a throwaway channel open returns.
func (b *Backend) declareOn(open func() (Channel, error), q queuey.QueueConfig) (refused bool, err error) {
	ch, err := open()
	if err != nil {
		return false, err
	}
	defer func() { _ = ch.Close() }()

	dead := b.top.DeadQueue(q.Name)
	args := b.workQueueDeclareArgs(q)
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, args); err != nil {
		if !inequivalentAckTimeout(err) {
			b.logger.Warn("rabbitmq: queue declaration refused", "queue", q.Name, "type", q.Type.String(), "error", err)
			return true, fmt.Errorf("rabbitmq: declare queue %q (%s): %w", q.Name, q.Type, err)
		}
		// Created with another x-consumer-timeout (by queuey on
		// RabbitMQ 4.0): the consumer argument overrides it on 4.3, so
		// use the queue as it is. The refusal closed the channel.
		if ch, err = b.keepQueue(open, ch, q.Name); err != nil {
			return true, fmt.Errorf("rabbitmq: declare queue %q (%s): %w", q.Name, q.Type, err)
		}
	}
	b.logger.Debug("rabbitmq: declared queue", "queue", q.Name, "type", q.Type.String(), "max_priority", int(*q.MaxPriority))
	if b.skipDead {
		return false, nil
	}
	if _, err := ch.QueueDeclare(dead, true, false, false, false, b.top.deadQueueArgs()); err != nil {
		if otherType(err) {
			// Declared with the other hold queues by another process (or
			// before a switch): use it as it is. The refusal closed the
			// channel, so look on a fresh one.
			kept := b.keepDeadQueue(open, q.Name, dead, err)
			if kept == nil {
				return false, nil
			}
			err = errors.Join(err, fmt.Errorf("declaring it as the other hold queues would: %w", kept))
		}
		b.logger.Warn("rabbitmq: dead-letter queue declaration refused", "queue", q.Name, "dead_queue", dead, "error", err)
		return true, fmt.Errorf("rabbitmq: declare dead-letter queue %q of queue %q: %w", dead, q.Name, err)
	}
	b.logger.Debug("rabbitmq: declared dead-letter queue", "queue", q.Name, "dead_queue", dead)
	return false, nil
}

// keepQueue checks on a fresh channel that queue exists after a
// declaration refused only over x-consumer-timeout, and returns that
// channel; old, closed by the refusal, is closed again harmlessly.
func (b *Backend) keepQueue(open func() (Channel, error), old Channel, queue string) (Channel, error) {
	_ = old.Close()
	ch, err := open()
	if err != nil {
		return old, err
	}
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		return ch, err
	}
	b.logger.Debug("rabbitmq: queue kept with its own x-consumer-timeout", "queue", queue)
	return ch, nil
}

// declareLadder declares the shared ladder's relay queue and rungs on a
// throwaway channel open returns, the relay queue first: a rung
// dead-letters into it. refused reports whether the broker refused a
// declaration (as opposed to the channel not opening).
func (b *Backend) declareLadder(open func() (Channel, error)) (refused bool, err error) {
	ch, err := open()
	if err != nil {
		return false, err
	}
	defer func() { _ = ch.Close() }()
	relay := b.top.RelayQueue()
	if _, err := ch.QueueDeclare(relay, true, false, false, false, relayQueueArgs()); err != nil {
		b.logger.Warn("rabbitmq: relay queue declaration refused", "hold_queue", relay, "error", err)
		return true, fmt.Errorf("rabbitmq: declare the hold ladder's relay queue %q: %w", relay, err)
	}
	for _, ttl := range b.top.Rungs() {
		name := b.top.LadderQueue(ttl)
		if _, err := ch.QueueDeclare(name, true, false, false, false, ladderQueueArgs(ttl, b.top)); err != nil {
			if ae, ok := errors.AsType[*amqp.Error](err); ok && ae.Code == amqp.InternalError {
				// Seen on RabbitMQ 4.0.5 once its supervisor of
				// dead-letter workers has stopped: only a restart of the
				// node brings it back, and with it the rungs' releases.
				b.logger.Error("rabbitmq: ladder queue declaration failed inside the broker: restart the node (docs/hold-ladder.md, \"Deleting a ladder\")",
					"hold_queue", name, "error", err)
				return true, fmt.Errorf("rabbitmq: declare ladder queue %q: %w (the node's dead-letter workers may be stopped: "+
					"restart it; see \"Deleting a ladder\" in docs/hold-ladder.md)", name, err)
			}
			b.logger.Warn("rabbitmq: ladder queue declaration refused", "hold_queue", name, "ttl_ms", ttl, "error", err)
			return true, fmt.Errorf("rabbitmq: declare ladder queue %q: %w", name, err)
		}
	}
	b.logger.Debug("rabbitmq: declared hold ladder", "hold_queue", relay)
	return false, nil
}

// otherType reports whether err is RabbitMQ refusing a declaration because
// the queue exists with another x-queue-type.
func otherType(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed && strings.Contains(ae.Reason, "inequivalent arg 'x-queue-type'")
}

// keepDeadQueue declares dead again on a fresh channel, as the other
// HoldType would, after its declaration was refused (refusal) because it
// has the other type, and logs that it is used as it is. It returns nil if
// the broker accepted that.
func (b *Backend) keepDeadQueue(open func() (Channel, error), queue, dead string, refusal error) error {
	ch, err := open()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	other := b.top
	other.ClassicHolds = !b.top.ClassicHolds
	if _, err := ch.QueueDeclare(dead, true, false, false, false, other.deadQueueArgs()); err != nil {
		return err
	}
	b.logger.Warn("rabbitmq: the dead-letter queue exists with another queue type than this process's hold queues give it; using it as it is",
		"queue", queue, "dead_queue", dead, "classic_holds", b.top.ClassicHolds, "refusal", refusal.Error())
	return nil
}

// holdKey names a classic hold queue: its work queue and TTL in milliseconds.
type holdKey struct {
	queue string
	ttl   int64
}

// maxHoldDecls bounds Backend.holdArgs.
const maxHoldDecls = 4096

// holdDecl is a hold queue's name and declaration arguments, both pure
// functions of its holdKey, cached so a hold builds neither again.
type holdDecl struct {
	name string
	args amqp.Table
}

// declareHold declares queue's hold queue for ttl milliseconds on the hold
// channel, opening a fresh one if there is none or it closed, and returns
// its name.
func (b *Backend) declareHold(ctx context.Context, queue string, ttl int64) (string, error) {
	select {
	case b.holdLock <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-b.holdLock }()
	if err := b.checkOpen(); err != nil {
		return "", err
	}
	key := holdKey{queue, ttl}
	decl, ok := b.holdArgs[key]
	if !ok {
		if len(b.holdArgs) >= maxHoldDecls {
			clear(b.holdArgs)
		}
		decl.name, decl.args = b.top.HoldQueue(queue, ttl), holdQueueArgs(queue, ttl)
		b.holdArgs[key] = decl
	}
	name, args := decl.name, decl.args
	if b.hold == nil || b.hold.IsClosed() {
		ch, err := b.openChannel(ctx, "hold queue declarations")
		if err != nil {
			return "", fmt.Errorf("rabbitmq: hold queue %q: %w", name, err)
		}
		b.hold = ch
	}
	if _, err := b.hold.QueueDeclare(name, true, false, false, false, args); err != nil {
		// A refusal has closed the channel; a failure of the connection
		// has too. Either way the next hold starts on a fresh one.
		_ = b.hold.Close()
		b.hold = nil
		if !connectionGone(err) { // else the caller's failure to settle says it
			b.logger.Warn("rabbitmq: hold queue declaration refused",
				"queue", queue, "hold_queue", name, "ttl_ms", ttl, "error", err)
		}
		if declaredByOlderBuild(err, ttl) {
			return "", fmt.Errorf("rabbitmq: declare hold queue %q of queue %q: it exists with x-expires %d ms (2 × TTL), "+
				"declared by a process running an older queuey, whose rule loses jobs at small TTLs; this build declares %d ms. "+
				"Upgrade every process that holds jobs for %q (the old hold queue then expires on its own once idle) or delete %q while it is empty "+
				"(see \"Hold-queue expiry\" in the rabbitmq package documentation): %w",
				name, queue, 2*ttl, holdExpires(ttl), queue, name, err)
		}
		return "", fmt.Errorf("rabbitmq: declare hold queue %q of queue %q: %w", name, queue, err)
	}
	if b.logger.Enabled(ctx, slog.LevelDebug) { // on every hold: build no attributes in vain
		b.logger.DebugContext(ctx, "rabbitmq: declared hold queue", "queue", queue, "hold_queue", name, "ttl_ms", ttl)
	}
	return name, nil
}

// declaredByOlderBuild reports whether err is RabbitMQ refusing the
// declaration of a hold queue for ttl ms because it exists with the x-expires
// older queuey builds gave it, 2 × TTL (holdExpires differs from that only
// under a minute).
func declaredByOlderBuild(err error, ttl int64) bool {
	old := strconv.FormatInt(2*ttl, 10)
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed &&
		strings.Contains(ae.Reason, "inequivalent arg 'x-expires'") &&
		(strings.HasSuffix(ae.Reason, "current is '"+old+"'") || // same type (rabbit_misc:equivalence_fail/4, val/1, v4.0.5)
			strings.Contains(ae.Reason, "current is the value '"+old+"'")) // another type
}
