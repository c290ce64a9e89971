// Package contract holds what queuey's core, its backends and its
// handlers agree on: queue definitions and retry policies, the errors a
// handler returns to say what its job comes to (Defer, Fatal), the actions
// a settled job takes, the dead-letter reasons, and the Backend seam with
// its Consumer and Delivery.
//
// It holds values and interfaces, with their validation and arithmetic,
// and no behaviour: the rules that settle a job live in the module's
// internal/settle, which package queuey and the simulator both run. It
// imports nothing of the module's but package envelope, a job's wire form.
//
// Users need not import it: package queuey gives every name here under
// the same name (queuey.QueueConfig is contract.QueueConfig).
package contract
