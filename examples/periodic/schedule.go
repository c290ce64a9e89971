package main

import (
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// newScheduler enqueues a Heartbeat every second. Start one in every
// process: they elect one leader through the broker, and each tick's job
// has the ID "heartbeat@<tick>", so a tick enqueued twice across a
// failover is recognisable.
func newScheduler(backend *rabbitmq.Backend, producer *queuey.Producer) (*rabbitmq.Scheduler, error) {
	return rabbitmq.NewScheduler(backend, producer, []rabbitmq.PeriodicJob{{
		Name:  "heartbeat",
		Every: time.Second, // ticks are multiples of Every since the Unix epoch
		Args:  func(tick time.Time) queuey.JobArgs { return Heartbeat{Tick: tick} },
	}}, rabbitmq.SchedulerOptions{Group: "examples"})
}
