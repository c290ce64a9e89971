// Package sabotage carries the deliberate bugs a test outside package sim
// injects into a simulation (sim.Options.Sabotage), to prove that a
// property notices them. Production code and queuey-sim never set one.
// A bug is either a Kind, which the simulator injects, or, better, a
// wrapper the test itself writes around one of the product's cores: the
// simulator drives the wrapped core where it would drive the product's,
// so the broken code lives in the test. Package sim's own tests inject
// more, through its unexported options.
package sabotage

import (
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/relay"
)

// Set is the deliberate bugs of one simulation. The zero value is the
// product as it is.
type Set struct {
	// Kind is a bug the simulator injects itself.
	Kind Kind
	// Relay, if set, wraps the relay's core (internal/relay) that the
	// workers' relay subscriptions drive.
	Relay func(relay.Stepper) relay.Stepper
	// Settle, if set, wraps how the simulated workers settle their work
	// queues' deliveries: through the consumer's core (internal/consume),
	// whose guards (settle once, Stale) a wrapper can bypass.
	Settle func(Settler) Settler
}

// Settler settles deliveries of a work queue and says which are stale.
// The simulator's own settles each through the consumer's core.
type Settler interface {
	Ack(d *consume.Delivery) error
	Requeue(d *consume.Delivery) error
	Stale(d *consume.Delivery) bool
}

// Kind is one deliberate bug.
type Kind int

const (
	// None is the product as it is.
	None Kind = iota
	// SchedulerWithoutSAC declares the periodic scheduler group's
	// election queue without single active consumer, so that every
	// process gets tokens and leads at once: ticks enqueued more than
	// once with no fault to explain it (sim's invariant 12).
	SchedulerWithoutSAC
)
