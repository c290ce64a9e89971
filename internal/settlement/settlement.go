// Package settlement carries package queuey's settlement rules (what a
// handler's result means for its job, and how the successor is published)
// to the simulator and the property tests, which must drive the worker's
// own code, without queuey exporting them to its users. Package queuey
// registers its functions at init; package workerrules hands them on.
//
// The types are generic so that this package imports nothing of queuey's:
// E is queuey.Envelope, A queuey.Action, Q queuey.QueueConfig and B
// queuey.Backend.
package settlement

import (
	"context"
	"fmt"
	"time"
)

// Decision says what to do with a delivered job. For every action but
// acknowledging it, the Successor is published (and confirmed) before the
// original is acknowledged, so a failure in between leaves the job on its
// queue, never lost.
type Decision[E, A any] struct {
	Action    A
	Successor E             // what to publish: the job with its next attempt, deferral count and priority
	Delay     time.Duration // retry and defer: the wait asked for, before rounding
	Reason    string        // defer: the handler's reason; dead letter: the x-death-reason header
	Err       error         // the handler's error, for logs
}

// Funcs are queuey's settlement functions.
type Funcs[E, A, Q, B any] struct {
	// Decide is what result means for env, run from queue q, with u a
	// uniform draw in [0, 1) for the retry jitter.
	Decide func(env E, result error, q Q, u float64) Decision[E, A]
	// Hold is how long dec's successor waits before it reaches the work
	// queue, before rounding.
	Hold func(dec Decision[E, A]) time.Duration
	// PublishSuccessor publishes dec's successor on backend and waits for
	// the broker's confirm. delivered is the body of the delivery dec
	// settles, which a dead letter falls back to. rerouted is the reason
	// when a retry or deferral no hold could take was dead-lettered
	// instead; empty otherwise.
	PublishSuccessor func(ctx context.Context, backend B, q Q, dec Decision[E, A], delivered []byte) (rerouted string, err error)
	// PublishMalformed dead-letters a malformed body of queue q verbatim.
	PublishMalformed func(ctx context.Context, backend B, q Q, body []byte) error
}

var registered any

// Register is called once, by package queuey's init.
func Register[E, A, Q, B any](f Funcs[E, A, Q, B]) { registered = f }

// Get returns what package queuey registered. It panics if its types are
// not queuey's, which the first test of any caller shows.
func Get[E, A, Q, B any]() Funcs[E, A, Q, B] {
	f, ok := registered.(Funcs[E, A, Q, B])
	if !ok {
		panic(fmt.Sprintf("settlement: queuey registered %T, not %T", registered, f))
	}
	return f
}
