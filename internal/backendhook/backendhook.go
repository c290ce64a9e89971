// Package backendhook lets the simulator and the property tests reach two
// things of a rabbitmq.Backend that only they need, without exported names
// that would be promises to users. Package rabbitmq sets both when it is
// initialised; backend is always a *rabbitmq.Backend.
package backendhook

import (
	"context"
	"time"

	"github.com/queuey/queuey/internal/consume"
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
