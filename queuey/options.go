package queuey

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/queuey/queuey/internal/jobopts"
	"github.com/queuey/queuey/queuey/envelope"
)

// ErrInvalidOption is matched by the error of an enqueue whose options
// the job or its queue cannot honour: a queue name or ID that no message
// can carry, attempts below 1 (but -1), a priority its queue has no room
// for or that the producer cannot check (a queue it did not declare),
// WithPriority with Defer, or the zero EnqueueOption. Nothing was sent.
var ErrInvalidOption = errors.New("queuey: invalid enqueue option")

// EnqueueOption is one of a job's own options, given when it is enqueued:
// WithQueue, WithID, WithMaxAttempts or WithPriority. Those that change
// how the job is settled travel in its envelope's extension fields
// (ExtMaxAttempts, ExtPriority), through holds, retries, deferrals, dead
// letters and redrives. A later option of the same kind wins.
type EnqueueOption struct {
	kind  optionKind
	text  string
	count int
}

type optionKind uint8

const (
	optQueue optionKind = iota + 1
	optID
	optMaxAttempts
	optPriority
)

// WithQueue sends the job to queue instead of its type's Queue(). The
// job's retries, deferrals and dead letters stay with that queue. A worker
// that consumes it runs the job with the handler registered for its kind;
// Register asks that worker to consume the type's own queue too, as it
// does of every worker. EnqueueAfter and Defer need the queue declared by the producer, as they
// do for a type's own queue.
func WithQueue(queue string) EnqueueOption { return EnqueueOption{kind: optQueue, text: queue} }

// WithID gives the job id instead of a fresh random one: an idempotency
// key, say. queuey does not deduplicate, since RabbitMQ cannot: two jobs
// enqueued with one ID both run, and a handler that must not act twice
// checks the ID (JobContext.ID) against its own store. The ID is 1 to 255
// bytes of UTF-8.
func WithID(id string) EnqueueOption { return EnqueueOption{kind: optID, text: id} }

// WithMaxAttempts gives the job n attempts in all instead of its queue's
// RetryPolicy.MaxAttempts: at least 1, or -1 to retry for ever. The
// queue's backoff still sets the waits between them. A redrive that
// resets attempts gives the job n again.
func WithMaxAttempts(n int) EnqueueOption { return EnqueueOption{kind: optMaxAttempts, count: n} }

// WithPriority publishes the job at priority p instead of 0, and its
// retries and redrives too: the broker hands out higher priorities first.
// Its queue must be a classic queue with priorities, declared by the
// producer, and p below the queue's MaxPriority, which deferrals keep to
// themselves so that they still come back ahead of every other job. A
// quorum queue is refused: RabbitMQ 4.0 to 4.2 have two tiers there, and
// deferrals use the upper one. Defer refuses it too, since a deferral
// always goes at the top priority.
func WithPriority(p uint8) EnqueueOption { return EnqueueOption{kind: optPriority, count: int(p)} }

// WithOptions returns args with opts attached, for EnqueueMany, whose jobs
// each take their own: an ID per job, say. The result is a JobArgs whose
// Kind and Queue are args'. Options given to Enqueue, EnqueueAfter or
// Defer as well are applied after these.
func WithOptions(args JobArgs, opts ...EnqueueOption) JobArgs {
	if o, ok := args.(optioned); ok {
		return optioned{JobArgs: o.JobArgs, opts: slices.Concat(o.opts, opts)}
	}
	return optioned{JobArgs: args, opts: slices.Clone(opts)}
}

// optioned is a job's arguments with its options, from WithOptions.
type optioned struct {
	JobArgs
	opts []EnqueueOption
}

// MarshalJSON encodes the arguments alone.
func (o optioned) MarshalJSON() ([]byte, error) { return json.Marshal(o.JobArgs) }

// enqueueOptions are a job's options once applied.
type enqueueOptions struct {
	queue, id   string // "": the type's queue, a fresh ID
	maxAttempts int    // 0: the queue's
	priority    uint8
	prioritySet bool
}

// applyOptions unwraps args and applies its options, then opts, refusing
// any that no message can carry.
func applyOptions(args JobArgs, opts []EnqueueOption) (JobArgs, enqueueOptions, error) {
	var o enqueueOptions
	if w, ok := args.(optioned); ok {
		args = w.JobArgs
		if err := o.apply(w.opts); err != nil {
			return nil, o, err
		}
	}
	return args, o, o.apply(opts)
}

func (o *enqueueOptions) apply(opts []EnqueueOption) error {
	for _, opt := range opts {
		switch opt.kind {
		case optQueue:
			if err := checkName("WithQueue", opt.text); err != nil {
				return err
			}
			o.queue = opt.text
		case optID:
			if err := checkName("WithID", opt.text); err != nil {
				return err
			}
			o.id = opt.text
		case optMaxAttempts:
			if opt.count < 1 && opt.count != -1 {
				return fmt.Errorf("%w: WithMaxAttempts(%d): must be at least 1, or -1 to retry for ever", ErrInvalidOption, opt.count)
			}
			o.maxAttempts = opt.count
		case optPriority:
			o.priority, o.prioritySet = uint8(opt.count), true
		default:
			return fmt.Errorf("%w: the zero EnqueueOption; make one with WithQueue, WithID, WithMaxAttempts or WithPriority", ErrInvalidOption)
		}
	}
	return nil
}

// checkName refuses a queue name or ID that an AMQP short string cannot
// carry.
func checkName(option, value string) error {
	switch {
	case value == "":
		return fmt.Errorf("%w: %s(\"\"): must not be empty", ErrInvalidOption, option)
	case len(value) > envelope.MaxString:
		return fmt.Errorf("%w: %s: %d bytes, over the %d an AMQP short string carries", ErrInvalidOption, option, len(value), envelope.MaxString)
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: %s(%q): not valid UTF-8", ErrInvalidOption, option, value)
	}
	return nil
}

// checkPriority refuses a priority that queue q cannot honour for a job
// enqueued by mode; declared is false when the producer does not know q,
// and q is then only its name.
func (o enqueueOptions) checkPriority(q QueueConfig, declared bool, mode enqueueMode) error {
	if !o.prioritySet {
		return nil
	}
	switch {
	case mode == enqueueDeferred:
		return fmt.Errorf("%w: WithPriority with Defer: a deferral goes at its queue's top priority", ErrInvalidOption)
	case o.priority == 0:
		return nil // the default, which every queue takes
	case !declared:
		return fmt.Errorf("%w: WithPriority(%d): queue %q was not declared by this producer, which cannot tell whether it has priorities", ErrInvalidOption, o.priority, q.Name)
	case q.Type == Quorum:
		return fmt.Errorf("%w: WithPriority(%d): %q is a quorum queue, whose upper priority tier carries deferrals", ErrInvalidOption, o.priority, q.Name)
	case *q.MaxPriority == 0:
		return fmt.Errorf("%w: WithPriority(%d): %q is declared without priorities (MaxPriority 0)", ErrInvalidOption, o.priority, q.Name)
	case o.priority >= *q.MaxPriority:
		return fmt.Errorf("%w: WithPriority(%d): %q takes 0 to %d; its MaxPriority, %d, is kept for deferrals", ErrInvalidOption, o.priority, q.Name, *q.MaxPriority-1, *q.MaxPriority)
	}
	return nil
}

// envelopeOptions are the options the envelope carries.
func (o enqueueOptions) envelopeOptions() jobopts.Options {
	return jobopts.Options{MaxAttempts: o.maxAttempts, Priority: o.priority}
}
