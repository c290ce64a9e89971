// Package sabotage carries the deliberate bugs a test outside package sim
// injects into a simulation (sim.Options.Sabotage), to prove that a
// property notices them. Production code and queuey-sim never set one.
// A bug is a wrapper the test itself writes around one of the product's
// cores or of a channel: the simulator drives the wrapped one where it
// would drive the product's, so the broken code lives in the test.
// Package sim's own tests inject more, through its unexported options.
package sabotage

import (
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/relay"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// Set is the deliberate bugs of one simulation. The zero value is the
// product as it is.
type Set struct {
	// Relay, if set, wraps the relay's core (internal/relay) that the
	// workers' relay subscriptions drive.
	Relay func(relay.Stepper) relay.Stepper
	// Follow, if set, wraps the core (internal/consume) that decides how
	// the workers' subscriptions follow the end of their channels: resume
	// on the next connection, or end.
	Follow func(consume.Follower) consume.Follower
	// Settle, if set, wraps how the simulated workers settle their work
	// queues' deliveries: through the consumer's core (internal/consume),
	// whose guards (settle once, Stale) a wrapper can bypass.
	Settle func(Settler) Settler
	// Channel, if set, wraps every channel the simulated processes'
	// backends open (workers, producer, scheduler group), so that a test
	// can change what they declare or publish.
	Channel func(rabbitmq.Channel) rabbitmq.Channel
	// Backend, if set, wraps the backend the workers' executors publish
	// successors and dead letters through.
	Backend func(queuey.Backend) queuey.Backend
}

// Settler settles deliveries of a work queue and says which are stale.
// The simulator's own settles each through the consumer's core.
type Settler interface {
	Ack(d *consume.Delivery) error
	Requeue(d *consume.Delivery) error
	Stale(d *consume.Delivery) bool
}
