// Package settle holds the rules a worker settles jobs by: what a
// handler's result means for its job (Decide), how long its successor
// waits (Hold), and publishing that successor, or a malformed body, before
// the delivery may be acknowledged (PublishSuccessor, PublishMalformed).
// Rules hands Decide to the worker core (internal/workercore).
//
// Package queuey's Worker, the simulator and the property tests all settle
// through this package: there is one implementation of each rule. It is
// internal so that none of it is a promise to users.
package settle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/queuey/queuey/internal/jobopts"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

// Decision says what to do with a delivered job. For every action but
// contract.ActionAck, the Successor is published (and confirmed) before
// the original is acknowledged, so a failure in between leaves the job on
// its queue, never lost.
type Decision struct {
	Action    contract.Action
	Successor envelope.Envelope // what to publish: the job with its next attempt, deferral count and priority
	Delay     time.Duration     // retry and defer: the wait asked for, before rounding
	Reason    string            // defer: the handler's reason; dead letter: the x-death-reason header
	Err       error             // the handler's error, for logs
}

// Hold is how long the successor waits before it reaches the work queue,
// before the backend rounds it up to a granularity: Delay, except that a
// deferral always waits in a hold queue, so one of zero or less asks for
// the shortest hold (one deferred granule, once rounded). Published
// straight onto the queue at its top priority, a job whose handler defers
// it every time would run in a hot loop, ahead of everything else there.
func Hold(d Decision) time.Duration {
	if d.Action == contract.ActionDefer {
		return max(d.Delay, time.Nanosecond)
	}
	return d.Delay
}

// Decide is what a handler's result means for the job that ran, as a pure
// function of the delivered envelope, the result, the queue's definition
// and u, a uniform random number in [0, 1) for the retry jitter. The worker
// and the simulator both call it, so the same inputs always settle a job
// the same way.
//
//   - nil: contract.ActionAck.
//   - a *DeferError: contract.ActionDefer after its delay, at the queue's top priority, the
//     deferral counted, the attempt and the retry policy untouched.
//   - a *FatalError or *UnknownKindError: contract.ActionDeadLetter now.
//   - anything else, a *PanicError and a *TimeoutError included: Retry
//     after the policy's backoff at the job's own priority (0 unless set) with the attempt counted, or
//     contract.ActionDeadLetter when that was the last attempt, with
//     ReasonTimedOut if it timed out and ReasonAttemptsExhausted otherwise.
//
// The job's own options (package jobopts) override the queue's: its
// maximum attempts, and the priority a retry goes back at. Options of the
// wrong shape are ignored here; the worker's decoder (Rules.Decode) has
// refused such an envelope before it ran.
func Decide(env envelope.Envelope, result error, q contract.QueueConfig, u float64) Decision {
	q = q.WithDefaults()
	if result == nil {
		return Decision{Action: contract.ActionAck}
	}
	opts, _ := jobopts.Read(env)
	next := env
	// errors.AsType, unlike errors.As, does not make its target escape: no
	// allocation per settled job.
	if deferErr, ok := errors.AsType[*contract.DeferError](result); ok {
		next.Deferrals++
		next.Priority = q.TopPriority()
		return Decision{Action: contract.ActionDefer, Successor: next, Delay: max(deferErr.Delay, 0), Reason: deferErr.Reason, Err: result}
	}
	if fatalErr, ok := errors.AsType[*contract.FatalError](result); ok {
		next.Priority = 0
		return Decision{Action: contract.ActionDeadLetter, Successor: next, Reason: "fatal: " + fatalErr.Text(), Err: result}
	}
	switch {
	case isUnknownKind(result):
		next.Priority = 0
		return Decision{Action: contract.ActionDeadLetter, Successor: next, Reason: contract.ReasonUnknownKind, Err: result}
	case opts.Policy(q).Exhausted(env.Attempt):
		next.Priority = 0
		reason := contract.ReasonAttemptsExhausted
		if _, ok := errors.AsType[*contract.TimeoutError](result); ok {
			reason = contract.ReasonTimedOut
		}
		return Decision{Action: contract.ActionDeadLetter, Successor: next, Reason: reason, Err: result}
	}
	next.Attempt++
	next.Priority = opts.QueuePriority(q) // a deferral's priority lasts one round
	return Decision{Action: contract.ActionRetry, Successor: next, Delay: q.Retry.Delay(next.Attempt, u), Err: result}
}

func isUnknownKind(err error) bool {
	_, ok := errors.AsType[*contract.UnknownKindError](err)
	return ok
}

// PublishSuccessor carries out dec on backend for a job of queue q, the
// first half of settling a delivery: a retry goes to a hold queue for
// dec.Delay rounded to the retry granularity, a deferral for dec.Delay
// rounded to the deferred granularity, and a dead letter to q's
// dead-letter queue with dec.Reason and the attempts made. It returns once
// the broker has confirmed the successor; contract.ActionAck publishes nothing. The
// hold is Hold(dec): a deferral always goes through a hold queue.
//
// A successor the backend refuses as too large (contract.ErrJobTooLarge)
// while it carries its failed attempts (contract.ExtErrors) is published
// again without them. A retry or deferral that no publish could ever take
// is dead-lettered instead, as the job ran: one whose delay the backend refuses as too long
// (contract.ErrDelayTooLong) with contract.ReasonDelayTooLong, and one whose successor it
// refuses as too large (contract.ErrJobTooLarge) with contract.ReasonJobTooLarge. delivered
// is the body of the delivery dec settles: see deadLetter. rerouted is
// the reason when it dead-lettered a retry or deferral, empty otherwise.
//
// Only after it returns a nil error may the delivery be acknowledged. On
// an error the delivery must stay unacknowledged and go back to its queue,
// so the job is never lost (at worst it runs again). The worker and the
// simulator both settle through it.
func PublishSuccessor(ctx context.Context, backend contract.Backend, q contract.QueueConfig, dec Decision, delivered []byte) (rerouted string, err error) {
	switch dec.Action {
	case contract.ActionAck:
		return "", nil
	case contract.ActionDefer, contract.ActionRetry:
		kind := contract.HoldRetry
		if dec.Action == contract.ActionDefer {
			kind = contract.HoldDeferred
		}
		err := backend.Publish(ctx, dec.Successor, Hold(dec), kind)
		if bare := WithoutErrors(dec.Successor); errors.Is(err, contract.ErrJobTooLarge) && len(bare.Ext) != len(dec.Successor.Ext) {
			// Its error history made it too large: it goes on without.
			dec.Successor = bare
			err = backend.Publish(ctx, dec.Successor, Hold(dec), kind)
		}
		var reason string
		switch {
		case errors.Is(err, contract.ErrDelayTooLong):
			reason = contract.ReasonDelayTooLong
		case errors.Is(err, contract.ErrJobTooLarge):
			reason = contract.ReasonJobTooLarge
		default:
			return "", err
		}
		// Returned to its queue, the job would run and fail the same way
		// again and again, a RequeueDelay apart. It is dead-lettered with
		// its attempts and deferrals as they were when it ran, at priority
		// 0 and without the due stamp of the hold it did not get.
		env := WithoutDueStamp(dec.Successor)
		env.Priority = 0
		if dec.Action == contract.ActionDefer {
			env.Deferrals--
		} else {
			env.Attempt--
		}
		if err := deadLetter(ctx, backend, q, env, reason, delivered); err != nil {
			return "", err
		}
		return reason, nil
	case contract.ActionDeadLetter:
		return "", deadLetter(ctx, backend, q, dec.Successor, dec.Reason, delivered)
	}
	return "", fmt.Errorf("queuey: unknown action %v", dec.Action)
}

// deadLetter publishes env to q's dead-letter queue with reason. Should
// the backend refuse it as too large (contract.ErrJobTooLarge), the delivered body
// goes verbatim instead, which the broker has taken once: Encode writes
// every field and nine fractional digits of enqueued_at, so a job another
// producer wrote more tersely, just under the limit, can grow past it.
// Without the fallback such a job would go back to its queue and run again
// every RequeueDelay.
func deadLetter(ctx context.Context, backend contract.Backend, q contract.QueueConfig, env envelope.Envelope, reason string, delivered []byte) error {
	body, err := env.Encode()
	if err != nil {
		return err
	}
	err = backend.DeadLetter(ctx, q.Name, body, reason, env.Attempt)
	if errors.Is(err, contract.ErrJobTooLarge) && delivered != nil {
		return backend.DeadLetter(ctx, q.Name, delivered, reason, env.Attempt)
	}
	return err
}

// PublishMalformed dead-letters body, a delivery of queue q that is not a
// valid envelope, verbatim with the reason contract.ReasonMalformed and zero
// attempts, and returns once the broker has confirmed it. As with
// PublishSuccessor, acknowledge the delivery only after it returns nil.
func PublishMalformed(ctx context.Context, backend contract.Backend, q contract.QueueConfig, body []byte) error {
	return backend.DeadLetter(ctx, q.Name, body, contract.ReasonMalformed, 0)
}

// StampDue returns env with contract.ExtDueAt set to due, its Ext copied (the
// original job's map is shared with its successor).
func StampDue(env envelope.Envelope, due time.Time) envelope.Envelope {
	ext := make(map[string]json.RawMessage, len(env.Ext)+1)
	maps.Copy(ext, env.Ext)
	b, _ := json.Marshal(due.UTC().Format(time.RFC3339Nano)) // a string: cannot fail
	ext[contract.ExtDueAt] = b
	env.Ext = ext
	return env
}

// WithoutDueStamp returns env without contract.ExtDueAt, its Ext copied if it had
// one (the map may be shared with the job that ran).
func WithoutDueStamp(env envelope.Envelope) envelope.Envelope {
	if _, ok := env.Ext[contract.ExtDueAt]; ok {
		ext := maps.Clone(env.Ext)
		delete(ext, contract.ExtDueAt)
		env.Ext = ext
	}
	return env
}

// Rules settles the jobs of the queues it lists, by queue index: the
// workercore.Rules of queuey's envelopes and decisions.
type Rules []contract.QueueConfig

var _ workercore.Rules[envelope.Envelope, Decision] = Rules(nil)

// Decode is envelope.Decode, and refuses a job whose own options (package
// jobopts) are of the wrong shape: it is malformed too.
func (Rules) Decode(_ int, body []byte) (envelope.Envelope, error) {
	env, err := envelope.Decode(body)
	if err != nil {
		return env, err
	}
	if _, err := jobopts.Read(env); err != nil {
		return envelope.Envelope{}, err
	}
	return env, nil
}

// Timeout is queue q's handler timeout (contract.QueueConfig.Timeout).
func (r Rules) Timeout(q int) time.Duration { return r[q].WithDefaults().Timeout }

// Decide is the package's Decide for queue q; anything but ActionAck has
// a successor to publish.
func (r Rules) Decide(q int, env envelope.Envelope, result error, u float64) (Decision, bool) {
	dec := Decide(env, result, r[q], u)
	return dec, dec.Action != contract.ActionAck
}

// Core is the worker core on these rules, for deliveries of type M.
type Core[M workercore.Message] = workercore.Core[M, envelope.Envelope, Decision]

// Action is one of its actions.
type Action[M workercore.Message] = workercore.Action[M, envelope.Envelope, Decision]

// New returns a core for queues, with no live connection yet.
func New[M workercore.Message](queues []contract.QueueConfig, cfg workercore.Config) *Core[M] {
	return workercore.New[M](workercore.Rules[envelope.Envelope, Decision](Rules(queues)), cfg)
}
