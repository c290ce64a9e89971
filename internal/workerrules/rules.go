// Package workerrules gives the simulator and the property tests the rules
// queuey's worker settles jobs by: queuey's own decode, decide and publish
// functions, which queuey does not export (it registers them with
// internal/settlement). Package queuey cannot use this package (it would
// import itself), so it has its own three-line adapter of the same two
// functions as Rules (queuey/worker.go, workerRules); this one must stay
// the same.
package workerrules

import (
	"context"
	"time"

	"github.com/queuey/queuey/internal/settlement"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey"
)

// Decision is queuey's decision for a job whose handler returned.
type Decision = settlement.Decision[queuey.Envelope, queuey.Action]

// funcs are queuey's, registered at its init (which runs before this
// package's).
var funcs = settlement.Get[queuey.Envelope, queuey.Action, queuey.QueueConfig, queuey.Backend]()

// Decide is what result means for env, run from queue q, with u a uniform
// draw in [0, 1) for the retry jitter.
func Decide(env queuey.Envelope, result error, q queuey.QueueConfig, u float64) Decision {
	return funcs.Decide(env, result, q, u)
}

// Hold is how long dec's successor waits before it reaches the work
// queue, before the backend rounds it: dec.Delay, and never zero for a
// deferral.
func Hold(dec Decision) time.Duration { return funcs.Hold(dec) }

// PublishSuccessor publishes dec's successor on backend (a retry or
// deferral through its hold queue, a dead letter to q's dead-letter queue)
// and returns once the broker has confirmed it; only then may the delivery
// be acknowledged. delivered is the delivery's body. rerouted is the
// dead-letter reason when a retry or deferral no hold could take was
// dead-lettered instead (queuey.ReasonDelayTooLong,
// queuey.ReasonJobTooLarge).
func PublishSuccessor(ctx context.Context, backend queuey.Backend, q queuey.QueueConfig, dec Decision, delivered []byte) (rerouted string, err error) {
	return funcs.PublishSuccessor(ctx, backend, q, dec, delivered)
}

// PublishMalformed dead-letters body, a delivery of q that is not an
// envelope, verbatim, and returns once the broker has confirmed it.
func PublishMalformed(ctx context.Context, backend queuey.Backend, q queuey.QueueConfig, body []byte) error {
	return funcs.PublishMalformed(ctx, backend, q, body)
}

// Rules settles the jobs of the queues it lists, by queue index.
type Rules []queuey.QueueConfig

var _ workercore.Rules[queuey.Envelope, Decision] = Rules(nil)

// Decode is queuey.DecodeEnvelope.
func (Rules) Decode(_ int, body []byte) (queuey.Envelope, error) { return queuey.DecodeEnvelope(body) }

// Decide is the package's Decide; anything but ActionAck has a successor
// to publish.
func (r Rules) Decide(q int, env queuey.Envelope, result error, u float64) (Decision, bool) {
	dec := Decide(env, result, r[q], u)
	return dec, dec.Action != queuey.ActionAck
}

// Core is the worker core on these rules, for deliveries of type M.
type Core[M workercore.Message] = workercore.Core[M, queuey.Envelope, Decision]

// Action is one of its actions.
type Action[M workercore.Message] = workercore.Action[M, queuey.Envelope, Decision]

// New returns a core for queues, with no live connection yet.
func New[M workercore.Message](queues []queuey.QueueConfig, cfg workercore.Config) *Core[M] {
	return workercore.New[M](workercore.Rules[queuey.Envelope, Decision](Rules(queues)), cfg)
}
