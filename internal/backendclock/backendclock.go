// Package backendclock lets the simulator give a rabbitmq.Backend its
// virtual clock, without an exported option that only the simulator
// needs. Package rabbitmq sets Set when it is initialised.
//
// The backend reads the time, and waits, only for the hold ladder's
// warm-up (rabbitmq.Topology.HoldWarmup). The simulator runs on one
// goroutine and cannot block: its sleep returns at once with an error
// saying how long the backend would have waited, and the simulator
// carries out the wait itself on its clock, then asks again.
package backendclock

import (
	"context"
	"time"
)

// Set gives backend, a *rabbitmq.Backend, the clock now and the wait
// sleep. Call it before the backend's first Declare.
var Set func(backend any, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error)
