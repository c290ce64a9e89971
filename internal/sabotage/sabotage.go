// Package sabotage names the deliberate bugs a test outside package sim
// can inject into a simulation (sim.Options.Sabotage), to prove that a
// property notices them. Production code and queuey-sim never set one.
// Package sim's own tests inject more, through its unexported options.
package sabotage

// Kind is one deliberate bug.
type Kind int

const (
	// None is the product as it is.
	None Kind = iota
	// WorkerIgnoresTimeout runs every handler without its queue's
	// timeout: the worker neither ends its context nor abandons it, so a
	// handler that outlasts the broker's consumer timeout has its job
	// taken back and run again (sim's invariant 11).
	WorkerIgnoresTimeout
	// SchedulerWithoutSAC declares the periodic scheduler group's
	// election queue without single active consumer, so that every
	// process gets tokens and leads at once: ticks enqueued more than
	// once with no fault to explain it (sim's invariant 12).
	SchedulerWithoutSAC
)
