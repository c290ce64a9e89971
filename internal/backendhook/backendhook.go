// Package backendhook lets the simulator and the property tests reach
// what of package rabbitmq only they need, without exported names
// that would be promises to users. Package rabbitmq sets every hook when it
// is initialised; backend is always a *rabbitmq.Backend.
package backendhook

import (
	"context"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/schedcore"
	"github.com/queuey/queuey/queuey"
)

// SetClock gives backend the clock now and the wait sleep. Call it before
// the backend's first Declare.
//
// The backend reads the time, and waits, only for the hold ladder's
// warm-up (rabbitmq.Topology.HoldWarmup). The simulator runs on one
// goroutine and cannot block: its sleep returns at once with an error
// saying how long the backend would have waited, and the simulator
// carries out the wait itself on its clock, then asks again.
var SetClock func(backend any, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error)

// Subscribe subscribes to queue through backend as its Consume does (the
// same checks, a channel of its own, Qos and manual acknowledgements),
// without the goroutine shell: the caller reads the subscription's
// deliveries and settles them through its core. tag is the consumer tag,
// which the caller knows before the broker may deliver; empty, the backend
// generates one as Consume does. relay is the subscription to queue's
// relay queue (tag "-relay") when the backend declared it with a hold
// ladder, nil otherwise; the caller relays what arrives there with
// Backend.Relay. Backend.Close closes both subscriptions' channels.
var Subscribe func(backend any, ctx context.Context, queue, tag string, prefetch int) (work, relay *consume.Sub, err error)

// Scheduler is a rabbitmq.Scheduler's shell without Run's goroutine: the
// caller delivers its events one at a time, and each carries out, on the
// caller's goroutine, what the scheduler's core asks (publishes, enqueues
// and acknowledgements through the scheduler's backend and producer) as
// Run would. Time is the backend's clock (SetClock).
type Scheduler interface {
	// Declare declares the group's election queue, as Run does first.
	Declare(ctx context.Context) error
	// Queue is the election queue, and Prefetch the prefetch Run
	// subscribes to it with.
	Queue() string
	Prefetch() int
	// Start is the first event, after the subscription.
	Start(ctx context.Context)
	// Token is a token delivered on the subscription of generation gen.
	Token(ctx context.Context, gen uint64, d queuey.Delivery)
	// Lost says the subscription of generation gen, and those before it,
	// are gone.
	Lost(ctx context.Context, gen uint64)
	// Time is the time asked for with wake.
	Time(ctx context.Context)
	// Leading reports whether the process leads.
	Leading() bool
	// Rebind carries the process on with scheduler, a *rabbitmq.Scheduler
	// of the same jobs on the backend and producer of its new connection:
	// the core, and what it knows, stay.
	Rebind(scheduler any)
}

// StepScheduler returns scheduler's (a *rabbitmq.Scheduler) shell, its
// process named id in the tokens it publishes; wake(at) asks for a Time
// event at at, replacing any earlier request. wrap, if not nil, wraps its
// core: a test breaking it on purpose.
var StepScheduler func(scheduler any, id string, wake func(at time.Time), wrap func(schedcore.Stepper) schedcore.Stepper) Scheduler
