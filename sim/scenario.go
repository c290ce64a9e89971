package sim

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/rabbitmq"
)

// Duration is a time.Duration written as a Go duration string ("30s",
// "1h30m", "250ms") in scenario files.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string. A bare number is refused: its
// unit would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: want a string such as \"30s\" or \"1h30m\"", s)
	}
	*d = Duration(v)
	return nil
}

// Scenario is one simulated workload: queues with their arrivals, handler
// outcomes and workers, a broker profile, a topology and faults. The zero
// value of each optional field means its documented default; Validate
// checks a scenario and names the field at fault. Scenario files are JSON
// with these field names (see Load); cmd/queuey-sim also reads YAML.
type Scenario struct {
	// Name labels the scenario in reports. Optional.
	Name string `json:"name,omitempty"`
	// Seed drives every random draw. The same scenario and seed give the
	// same run, event for event. Defaults to 1.
	Seed uint64 `json:"seed,omitempty"`
	// Duration is how long jobs arrive, in virtual time. Required.
	Duration Duration `json:"duration"`
	// Drain is how long the simulation goes on after arrivals stop, so that
	// held jobs can come back and finish. Jobs still in flight at the end
	// are reported with where they are. Defaults to 0.
	Drain Duration `json:"drain,omitempty"`
	// Profile is the RabbitMQ release membroker models: "RabbitMQ40"
	// (4.0 to 4.2, verified against a live 4.0.5) or "RabbitMQ43"
	// (verified against a live 4.3.6). Defaults to membroker's default, the
	// zero membroker.Version (RabbitMQ43), which queueytest uses too.
	Profile string `json:"profile,omitempty"`
	// Topology sets the hold-queue granularities.
	Topology Topology `json:"topology,omitzero"`
	// Timing is how loose the simulated broker's timing is. Each field
	// documents its default, measured on a live RabbitMQ 4.0.5.
	Timing Timing `json:"timing,omitzero"`
	// Legacy runs the topology queuey replaced, one shared wait queue per
	// work queue with a per-message expiration, instead of hold queues: the
	// negative control whose head-of-line blocking invariant 2 must catch.
	Legacy bool `json:"legacy,omitempty"`
	// Queues are the work queues. At least one.
	Queues []Queue `json:"queues"`
	// Faults happen at given virtual times. Optional.
	Faults []Fault `json:"faults,omitempty"`
	// Periodic runs processes of a periodic-job scheduler group
	// (rabbitmq.Scheduler) alongside the queues' workload. Optional: nil
	// runs none.
	Periodic *Periodic `json:"periodic,omitempty"`
}

// Periodic is a group of scheduler processes (rabbitmq.Scheduler), each on
// a connection of its own, enqueueing its schedules' ticks into a queue
// nothing consumes; invariant 12 checks the ticks.
type Periodic struct {
	// Processes in the group. Defaults to 3.
	Processes int `json:"processes,omitempty"`
	// Refresh is the scheduler's rabbitmq.SchedulerOptions.Refresh, within
	// 1s..10m. Defaults to its default, one minute.
	Refresh Duration `json:"refresh,omitempty"`
	// Queue is the classic queue the ticks' jobs go to. Defaults to
	// "periodic"; it must not be one of Queues.
	Queue string `json:"queue,omitempty"`
	// Schedules are the group's periodic jobs. At least one.
	Schedules []Schedule `json:"schedules"`
}

// Schedule is one periodic job (rabbitmq.PeriodicJob).
type Schedule struct {
	// Name of the schedule, unique. Required.
	Name string `json:"name"`
	// Every is its interval: whole seconds, at least one. Required.
	Every Duration `json:"every"`
	// Offset shifts its ticks past each multiple of Every: whole seconds,
	// less than Every. Defaults to 0.
	Offset Duration `json:"offset,omitempty"`
}

// Topology is the hold-queue rounding (see rabbitmq.Topology).
type Topology struct {
	// RetryGranularity rounds retry delays. Defaults to 1s.
	RetryGranularity Duration `json:"retry_granularity,omitempty"`
	// DeferredGranularity rounds deferrals. Defaults to 1s.
	DeferredGranularity Duration `json:"deferred_granularity,omitempty"`
	// HoldType is the hold queues' type: "quorum" (the default), the
	// ladder of quorum queues, or "classic", one classic queue per TTL
	// (rabbitmq.Topology.ClassicHolds).
	HoldType string `json:"hold_type,omitempty"`
	// HoldWarmup is how long a worker waits after declaring its queue
	// before its first hold into the ladder (rabbitmq.Topology.HoldWarmup):
	// the product's default, 5s, when unset; negative for none.
	HoldWarmup Duration `json:"hold_warmup,omitempty"`
	// Fresh starts the run on a broker without the queues: the workers
	// create them, and with the ladder their first holds wait for its
	// warm-up. Defaults to false: an earlier deployment declared them, its
	// ladder warmed up, and the broker has restarted cleanly since, so
	// every quorum queue is on disk and no hold waits.
	Fresh bool `json:"fresh,omitempty"`
}

// rabbitmq is the backend's topology for t, defaults not filled in.
func (t Topology) rabbitmq() rabbitmq.Topology {
	top := rabbitmq.Topology{RetryGranularity: t.RetryGranularity.D(), DeferredGranularity: t.DeferredGranularity.D()}
	top.ClassicHolds = t.HoldType == "classic"
	top.HoldWarmup = t.HoldWarmup.D()
	return top
}

// Timing is the broker's latency and timer slack (membroker.Timing), drawn
// from the scenario's seed. A model exact where the broker is sloppy hides
// real losses: with exact timing a hold queue whose x-expires leaves one
// TTL of margin never loses a job, while a live broker loses one in seven
// at a 1 ms TTL (docs/hold-queue-expiry.md).
type Timing struct {
	// Exact turns latency and slack off: publishes land at the instant of
	// the call and timers fire on time. Defaults to false.
	Exact bool `json:"exact,omitempty"`
	// Latency is the most a message published right after a declaration
	// lands into the x-expires lease that declaration renewed: the broker
	// takes the declaration, replies, and the publish crosses back.
	// Defaults to DefaultLatency.
	Latency Duration `json:"latency,omitempty"`
	// TimerSlack is the most a queue's expiry timers fire late. Defaults
	// to DefaultTimerSlack.
	TimerSlack Duration `json:"timer_slack,omitempty"`
	// QuorumTick is how often a quorum queue checks its x-expires.
	// Defaults to 5s, RabbitMQ 4's quorum_tick_interval.
	QuorumTick Duration `json:"quorum_tick,omitempty"`
	// ClassicSync is how long a classic queue stays idle before it writes
	// to disk the dead letters it took, which a kill loses until then.
	// Defaults to DefaultClassicSync.
	ClassicSync Duration `json:"classic_sync,omitempty"`
	// QuorumRegister is how long a new quorum queue takes to be recorded
	// on disk: a kill before then restarts it empty. Defaults to
	// DefaultQuorumRegister.
	QuorumRegister Duration `json:"quorum_register,omitempty"`
	// StopSpan is how far apart a restart stops the classic queues: a
	// hold's job due after its work queue stopped, and before the hold
	// did, is lost. Defaults to DefaultStopSpan.
	StopSpan Duration `json:"stop_span,omitempty"`
	// BootSpan is how far apart a restart or kill starts the quorum
	// queues again: a rung whose dead letters go out before the ladder's
	// relay queue has started has them refused, and sends them, and every
	// one after them, only DeadLetterResend later. Defaults to
	// DefaultBootSpan40 with the RabbitMQ40 profile, and to none (every
	// queue at once) with RabbitMQ43.
	BootSpan Duration `json:"boot_span,omitempty"`
	// DeadLetterResend is how long a quorum queue waits before it sends a
	// refused dead letter again (RabbitMQ's
	// dead_letter_worker_publisher_confirm_timeout). Defaults to
	// DefaultDeadLetterResend.
	DeadLetterResend Duration `json:"dead_letter_resend,omitempty"`
}

// The broker timing a scenario gets by default, from the live RabbitMQ
// 4.0.5 on this project's 2-core machine (rabbitmq's
// TestLiveHoldReleaseTiming; docs/hold-queue-expiry.md, "Measured on this
// machine"). A hold queue's declaration took 0.3–0.5 ms at the median and up
// to 4.1 ms at p99 under 2,000 persistent publishes a second: the gap
// between the broker renewing a lease and the next publish landing is about
// that round trip, so DefaultLatency is its loaded p99. A hold came back
// 1.8–2.4 ms after its TTL at the median, path included, never early:
// DefaultTimerSlack is that median, an upper estimate of the timer's own
// lateness.
const (
	DefaultLatency    = 4 * time.Millisecond
	DefaultTimerSlack = 2 * time.Millisecond
)

// What a kill -9 loses, by default, from RabbitMQ 4.0.5's and 4.3.6's
// source and the live probe rabbitmq.TestLiveRestartHoldProbe
// (docs/rabbitmq-semantics.md §13): an idle classic queue hibernates, and
// writes the dead letters it holds, after at least 1 s; a new quorum
// queue's name reaches disk about 1 s after its creation, at most 3 s,
// and the model takes the longest.
const (
	DefaultClassicSync    = time.Second
	DefaultQuorumRegister = 3 * time.Second
)

// DefaultStopSpan is how far apart a restart stops the classic queues, by
// default. RabbitMQ stops them all at once, so the span is the spread of
// their stops, fitted to the live probe (docs/rabbitmq-semantics.md §13.1):
// its ten restarts of 4.0.5 lost 14 of 81,651 held messages while about
// 2,000 a second came due, and two stops drawn independently over a span s
// are s/6 apart on average, so s ≈ 1.4 / 2,000 × 6 ≈ 4 ms. On queuey's own
// live fault workload (TestLiveFaultBrokerRestartUnderLoad) 20 restarts of
// 4.0.5 and 4.3.6 lost 6 jobs, in 2 of them; the simulator's copy of it
// (sim's liveFaultWorkload), over 30 seeds, loses 10 in 8.
const DefaultStopSpan = 4 * time.Millisecond

// What a restart or a kill does to the hold ladder's releases, by default
// (docs/rabbitmq-semantics.md §13.7, docs/hold-ladder.md "Holds a fault
// makes late"). RabbitMQ's dead_letter_worker_publisher_confirm_timeout is
// 180 s. Live, the fault workload had a rung's releases refused and sent 3
// minutes late after every 4.0.5 restart and kill with holds on the rungs
// (and twice before any hold: 12 of 19 runs), and after none of 4.3.6's
// 20: the RabbitMQ40 profile starts its quorum queues over
// DefaultBootSpan40, in a drawn order, and RabbitMQ43 all at once. The span is not measured (a node
// recovers its queues within its boot, a few seconds here); the order is
// what decides, and sim.TestLateHoldsAfterAFaultAsLive holds the result
// to the live figures.
const (
	DefaultBootSpan40       = 2 * time.Second
	DefaultDeadLetterResend = 180 * time.Second
)

// membroker returns the timing membroker models for t (defaults applied),
// its draws seeded from seed.
func (t Timing) membroker(seed uint64) membroker.Timing {
	if t.Exact {
		return membroker.Timing{}
	}
	return membroker.Timing{
		Latency: t.Latency.D(), TimerSlack: t.TimerSlack.D(), QuorumTick: t.QuorumTick.D(),
		ClassicSync: t.ClassicSync.D(), QuorumRegister: t.QuorumRegister.D(), StopSpan: t.StopSpan.D(),
		BootSpan: t.BootSpan.D(), DeadLetterResend: t.DeadLetterResend.D(),
		Seed: splitmix(seed ^ streamBroker),
	}
}

// Queue is one work queue with its workload.
type Queue struct {
	// Name of the work queue. Defaults to "jobs" for the first queue;
	// required for the others, and unique.
	Name string `json:"name,omitempty"`
	// Type is "classic" (default) or "quorum".
	Type string `json:"type,omitempty"`
	// MaxPriority is a classic queue's x-max-priority; 0 declares a plain
	// queue. Defaults to 10.
	MaxPriority *int `json:"max_priority,omitempty"`
	// Retry is the queue's retry policy.
	Retry Retry `json:"retry,omitzero"`
	// Workers consuming the queue, each on its own connection. Defaults
	// to 4.
	Workers int `json:"workers,omitempty"`
	// Prefetch per worker, which is also how many handlers a worker runs
	// at once. Defaults to 10.
	Prefetch int `json:"prefetch,omitempty"`
	// Timeout is the queue's handler timeout (queuey.QueueConfig.Timeout).
	// Defaults to queuey's, 10 minutes.
	Timeout Duration `json:"timeout,omitempty"`
	// Arrivals are the processes enqueueing jobs. At least one.
	Arrivals []Arrival `json:"arrivals"`
	// Outcome says what each handler run does.
	Outcome Outcome `json:"outcome,omitzero"`
}

// Retry is a queuey.RetryPolicy in scenario form.
type Retry struct {
	// Base backoff before the second attempt. Defaults to 1s.
	Base Duration `json:"base,omitempty"`
	// Cap on any delay. Defaults to 5m.
	Cap Duration `json:"cap,omitempty"`
	// MaxAttempts in all; -1 retries forever. Defaults to 10.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Jitter is "full" (default), "equal" or "none".
	Jitter string `json:"jitter,omitempty"`
}

// Arrival processes.
const (
	ArrivalConstant = "constant" // Rate jobs per second, evenly spaced
	ArrivalPoisson  = "poisson"  // Rate jobs per second on average, exponential gaps
	ArrivalBurst    = "burst"    // Size jobs at once, every Every
	ArrivalReplay   = "replay"   // the jobs listed in Jobs, at their offsets
)

// Arrival is one process enqueueing jobs between Start and End.
type Arrival struct {
	// Process is "constant", "poisson", "burst" or "replay". Required.
	Process string `json:"process"`
	// Rate in jobs per virtual second (constant, poisson).
	Rate float64 `json:"rate,omitempty"`
	// Every and Size make a burst of Size jobs every Every (burst).
	Every Duration `json:"every,omitempty"`
	Size  int      `json:"size,omitempty"`
	// Start and End bound the process in virtual time; End defaults to the
	// scenario's Duration.
	Start Duration `json:"start,omitempty"`
	End   Duration `json:"end,omitempty"`
	// Jobs are replayed arrivals (replay), in any order.
	Jobs []ReplayJob `json:"jobs,omitempty"`
}

// ReplayJob is one recorded arrival with what its handler runs did.
type ReplayJob struct {
	// At is the arrival's offset from the start of the run.
	At Duration `json:"at"`
	// Outcomes are the results of successive runs: "ok", "retry", "fatal",
	// "defer" (with RetryAfter) or "crash" (the worker dies). The last one
	// repeats for any further run. Empty means "ok".
	Outcomes []string `json:"outcomes,omitempty"`
	// RetryAfter is the deferral's delay for each "defer". Defaults to the
	// queue's Outcome.RetryAfter draw.
	RetryAfter Duration `json:"retry_after,omitempty"`
	// Handler is how long each run takes. Defaults to the queue's
	// Outcome.Handler draw.
	Handler Duration `json:"handler,omitempty"`
}

// Correlation of failures.
const (
	PerAttempt = "attempt" // every run draws afresh
	PerJob     = "job"     // a job's first draw decides all its runs: a failing job keeps failing
)

// Outcome is the handler model: each run's result and duration, drawn from
// the seeded source. Rates are fractions of runs (or of jobs, for Poison
// and Malformed) and must sum to at most 1 with success taking the rest.
type Outcome struct {
	// Retryable fraction of runs that fail with an ordinary error.
	Retryable float64 `json:"retryable,omitempty"`
	// Fatal fraction of runs that fail with queuey.Fatal.
	Fatal float64 `json:"fatal,omitempty"`
	// RateLimited fraction of runs answered with a Retry-After: queuey.Defer
	// with a RetryAfter draw. Always drawn per run.
	RateLimited float64 `json:"rate_limited,omitempty"`
	// RetryAfter is the deferral delay. Defaults to constant 30s.
	RetryAfter Dist `json:"retry_after,omitzero"`
	// Handler is how long a run takes. Defaults to constant 0.
	Handler Dist `json:"handler,omitzero"`
	// Correlation is "attempt" (default) or "job".
	Correlation string `json:"correlation,omitempty"`
	// Poison fraction of jobs whose handler kills the worker process on
	// every run, with its unacknowledged deliveries.
	Poison float64 `json:"poison,omitempty"`
	// Malformed fraction of arrivals published as bodies that are not a
	// queuey envelope.
	Malformed float64 `json:"malformed,omitempty"`
	// IgnoreContext fraction of runs whose handler ignores its context: a
	// run longer than the queue's Timeout goes on for its whole drawn
	// duration, and the worker abandons it (queuey.AbandonGrace after the
	// timeout). The other handlers return at the timeout. Drawn per run.
	IgnoreContext float64 `json:"ignore_context,omitempty"`
}

// Distributions.
const (
	DistConstant    = "constant"    // always Value
	DistUniform     = "uniform"     // uniform in [Min, Max]
	DistExponential = "exponential" // exponential with mean Mean
	// DistPareto is heavy-tailed: Pareto with mean Mean and shape Alpha
	// (default 1.5; it must exceed 1 for the mean to exist). Most runs are
	// short, and a few are many times the mean: the long jobs a handler
	// timeout is for.
	DistPareto = "pareto"
)

// Dist is a distribution of durations.
type Dist struct {
	// Dist is "constant" (default), "uniform", "exponential" or "pareto".
	Dist  string   `json:"dist,omitempty"`
	Value Duration `json:"value,omitempty"`
	Min   Duration `json:"min,omitempty"`
	Max   Duration `json:"max,omitempty"`
	Mean  Duration `json:"mean,omitempty"`
	Alpha float64  `json:"alpha,omitempty"`
}

// Fault kinds.
const (
	// FaultCrash kills a worker process: its running handlers vanish and
	// the broker requeues its unacknowledged deliveries. It restarts after
	// Restart. With Scheduler, it kills a scheduler process instead.
	FaultCrash = "crash"
	// FaultDrop closes a worker's connection from the broker's side: its
	// running handlers finish but cannot settle, and the worker reconnects
	// after Restart.
	FaultDrop = "drop"
	// FaultRefuseHold makes the hold queue for TTL exist with other
	// arguments from At for For, so that every hold into it is refused
	// (406 PRECONDITION_FAILED) and the job goes back to its queue.
	FaultRefuseHold = "refuse-hold"
	// FaultRestart restarts the broker (membroker's Broker.Restart): every
	// connection closes, durable queues keep their persistent messages,
	// unacknowledged deliveries go back to their queues, and the broker is
	// unreachable for Restart. The producer and every worker reconnect
	// with rabbitmq.Backoff's defaults, their dials failing until then.
	FaultRestart = "restart"
	// FaultKill kills the broker's node with SIGKILL and starts it again
	// (membroker's Broker.Crash): as FaultRestart, except that what had
	// not reached disk is lost, as Timing's ClassicSync and QuorumRegister
	// model it: a dead letter a classic queue had not yet written, and
	// every message of a quorum queue created moments before.
	FaultKill = "kill"
	// FaultOutage makes the broker unreachable for For: the producer's and
	// the workers' connections drop, and their dials fail until it ends.
	// The broker keeps everything. Jobs that arrive meanwhile wait for the
	// producer to reconnect, as Enqueue does.
	FaultOutage = "outage"
)

// Fault is one injected failure.
type Fault struct {
	// At is when it happens. Required.
	At Duration `json:"at"`
	// Kind is "crash", "drop", "refuse-hold", "restart", "kill" or
	// "outage".
	// Required.
	Kind string `json:"kind"`
	// Queue names the work queue; defaults to the first.
	Queue string `json:"queue,omitempty"`
	// Worker is the index of the worker (crash, drop). Defaults to 0.
	Worker int `json:"worker,omitempty"`
	// Scheduler makes a crash or drop hit the scheduler process of index
	// Worker (Periodic) rather than a worker of Queue. A crashed process
	// starts afresh, knowing nothing; a dropped one reconnects and goes
	// on. Defaults to false.
	Scheduler bool `json:"scheduler,omitempty"`
	// Restart is how long a crashed or dropped worker stays down, or a
	// restarting or killed broker unreachable. Defaults to 1s.
	Restart Duration `json:"restart,omitempty"`
	// TTL is the hold the refusal hits (refuse-hold), before rounding.
	TTL Duration `json:"ttl,omitempty"`
	// For is how long the refusal (refuse-hold) or the outage lasts.
	// Defaults to 1m.
	For Duration `json:"for,omitempty"`
}
