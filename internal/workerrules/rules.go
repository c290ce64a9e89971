// Package workerrules gives the simulator and the property tests the rules
// queuey's worker core settles jobs by: queuey.DecodeEnvelope and
// queuey.Decide, as workercore.Rules. Package queuey cannot use this
// package (it would import itself), so it has its own three-line adapter
// of the same two functions (queuey/worker.go, workerRules); this one must
// stay the same.
package workerrules

import (
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey"
)

// Rules settles the jobs of the queues it lists, by queue index.
type Rules []queuey.QueueConfig

var _ workercore.Rules[queuey.Envelope, queuey.Decision] = Rules(nil)

// Decode is queuey.DecodeEnvelope.
func (Rules) Decode(_ int, body []byte) (queuey.Envelope, error) { return queuey.DecodeEnvelope(body) }

// Decide is queuey.Decide; anything but ActionAck has a successor to
// publish.
func (r Rules) Decide(q int, env queuey.Envelope, result error, u float64) (queuey.Decision, bool) {
	dec := queuey.Decide(env, result, r[q], u)
	return dec, dec.Action != queuey.ActionAck
}

// Core is the worker core on these rules, for deliveries of type M.
type Core[M workercore.Message] = workercore.Core[M, queuey.Envelope, queuey.Decision]

// Action is one of its actions.
type Action[M workercore.Message] = workercore.Action[M, queuey.Envelope, queuey.Decision]

// New returns a core for queues, with no live connection yet.
func New[M workercore.Message](queues []queuey.QueueConfig, cfg workercore.Config) *Core[M] {
	return workercore.New[M](workercore.Rules[queuey.Envelope, queuey.Decision](Rules(queues)), cfg)
}
