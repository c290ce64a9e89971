package properties

import (
	"time"

	"pgregory.net/rapid"

	"github.com/queuey/queuey/sim"
)

// Bounds on generated scenarios. They keep one run to a few milliseconds,
// so that a thousand checks fit in about a minute of wall time on two
// cores, and make a failure shrink to something a person can read.
const (
	maxDuration    = 30 * time.Second // virtual time during which jobs arrive
	maxDrain       = 2 * time.Minute  // virtual time after arrivals stop
	maxRate        = 20               // jobs per virtual second, per arrival process (bursts on average)
	maxBurst       = 20               // jobs per burst
	maxReplayJobs  = 8                // jobs per replay list
	maxQueues      = 2                // work queues per scenario
	maxArrivals    = 2                // arrival processes per queue
	maxFaults      = 3                // injected faults per scenario
	maxRetryAfter  = 30 * time.Second // longest constant or uniform Retry-After
	maxHandlerTime = 2 * time.Second  // longest constant or uniform handler run
	tick           = 100 * time.Millisecond
)

// ticks is a sim.Duration of n ticks.
func ticks(n int) sim.Duration { return sim.Duration(time.Duration(n) * tick) }

// durationTicks draws a duration in [0, max] in whole ticks; it shrinks
// towards zero.
func durationTicks(t *rapid.T, label string, limit time.Duration) sim.Duration {
	return ticks(rapid.IntRange(0, int(limit/tick)).Draw(t, label))
}

// fraction draws a rate in [0, steps×percent %] in multiples of percent
// %; it shrinks towards zero, and its steps keep a shrunk scenario
// readable.
func fraction(t *rapid.T, label string, percent, steps int) float64 {
	return float64(rapid.IntRange(0, steps).Draw(t, label)*percent) / 100
}

// granularities are the hold rounding steps drawn for a topology: 0 is the
// default (1 s), 1 ns counts as a millisecond, and 7 ms is deliberately
// not a divisor of the others.
var granularities = []sim.Duration{0, sim.Duration(time.Nanosecond), sim.Duration(time.Millisecond),
	sim.Duration(7 * time.Millisecond), sim.Duration(100 * time.Millisecond), sim.Duration(250 * time.Millisecond),
	sim.Duration(time.Second), sim.Duration(3 * time.Second)}

// scenarioGen draws a whole sim.Scenario field by field, so that rapid
// shrinks a failure to a small scenario (fewer queues, arrivals, faults
// and outcomes, shorter times, simpler distributions) rather than only to
// another seed.
func scenarioGen() *rapid.Generator[sim.Scenario] {
	return rapid.Custom(func(t *rapid.T) sim.Scenario {
		dur := rapid.IntRange(1, int(maxDuration/tick)).Draw(t, "duration_ticks")
		s := sim.Scenario{
			Seed:     rapid.Uint64Min(1).Draw(t, "seed"),
			Duration: ticks(dur),
			Drain:    durationTicks(t, "drain", maxDrain),
			Profile:  rapid.SampledFrom([]string{"RabbitMQ40", "RabbitMQ43"}).Draw(t, "profile"),
			Topology: sim.Topology{
				RetryGranularity:    rapid.SampledFrom(granularities).Draw(t, "retry_granularity"),
				DeferredGranularity: rapid.SampledFrom(granularities).Draw(t, "deferred_granularity"),
				HoldType:            rapid.SampledFrom([]string{"classic", "quorum"}).Draw(t, "hold_type"),
			},
		}
		nq := rapid.IntRange(1, maxQueues).Draw(t, "queues")
		for i := range nq {
			s.Queues = append(s.Queues, queueGen(t, i, dur))
		}
		nf := rapid.IntRange(0, maxFaults).Draw(t, "faults")
		for range nf {
			s.Faults = append(s.Faults, faultGen(t, s, dur))
		}
		// The broker's timing: exact, the measured defaults, or looser
		// (drawn last, so that the regressions kept before it replay).
		switch rapid.IntRange(0, 2).Draw(t, "timing") {
		case 1:
			s.Timing = sim.Timing{Exact: true}
		case 2:
			s.Timing = sim.Timing{
				Latency:    sim.Duration(rapid.Int64Range(1, int64(10*time.Millisecond)).Draw(t, "latency_ns")),
				TimerSlack: sim.Duration(rapid.Int64Range(1, int64(5*time.Millisecond)).Draw(t, "timer_slack_ns")),
			}
		}
		// A fresh broker, where the workers create the ladder, or one an
		// earlier deployment left (drawn last, as timing is).
		s.Topology.Fresh = rapid.Bool().Draw(t, "fresh")
		// Long jobs (drawn last, as timing is): a handler timeout, handlers
		// that ignore their context, and heavy-tailed runs.
		for i := range s.Queues {
			longJobsGen(t, &s.Queues[i])
		}
		// A periodic scheduler group, and faults that hit its processes
		// (drawn last, as timing is).
		if rapid.Bool().Draw(t, "periodic") {
			periodicGen(t, &s, dur)
		}
		return s
	})
}

// everies are the schedules' intervals drawn: from one a second, more than
// the processes' Refresh can follow, to one a minute, longer than most
// runs.
var everies = []sim.Duration{sim.Duration(time.Second), sim.Duration(2 * time.Second), sim.Duration(3 * time.Second),
	sim.Duration(7 * time.Second), sim.Duration(10 * time.Second), sim.Duration(time.Minute)}

// periodicGen gives s a scheduler group of 1 to 4 processes with one or
// two schedules, and up to two crashes or drops of its processes; dur is
// the scenario's duration in ticks.
func periodicGen(t *rapid.T, s *sim.Scenario, dur int) {
	p := &sim.Periodic{
		Processes: rapid.IntRange(1, 4).Draw(t, "sched_processes"),
		Refresh: rapid.SampledFrom([]sim.Duration{0, sim.Duration(time.Second), sim.Duration(5 * time.Second),
			sim.Duration(20 * time.Second)}).Draw(t, "sched_refresh"), // 0: the default, 1 min
	}
	for i := range rapid.IntRange(1, 2).Draw(t, "schedules") {
		every := rapid.SampledFrom(everies).Draw(t, "sched_every")
		offset := sim.Duration(time.Duration(rapid.IntRange(0, int(every.D()/time.Second)-1).Draw(t, "sched_offset_s")) * time.Second)
		p.Schedules = append(p.Schedules, sim.Schedule{Name: []string{"a", "b"}[i], Every: every, Offset: offset})
	}
	s.Periodic = p
	for range rapid.IntRange(0, 2).Draw(t, "sched_faults") {
		s.Faults = append(s.Faults, sim.Fault{
			At:        ticks(rapid.IntRange(0, dur+int(s.Drain.D()/tick)).Draw(t, "sched_fault_at_ticks")),
			Kind:      rapid.SampledFrom([]string{sim.FaultCrash, sim.FaultDrop}).Draw(t, "sched_fault_kind"),
			Scheduler: true,
			Worker:    rapid.IntRange(0, p.Processes-1).Draw(t, "sched_fault_process"),
			Restart:   durationTicks(t, "sched_fault_restart", 10*time.Second), // 0: the default, 1 s
		})
	}
}

// queueNames names the generated queues: the first keeps the default.
var queueNames = []string{"jobs", "other"}

func queueGen(t *rapid.T, i, dur int) sim.Queue {
	q := sim.Queue{
		Name:     queueNames[i],
		Type:     rapid.SampledFrom([]string{"classic", "quorum"}).Draw(t, "type"),
		Workers:  rapid.IntRange(1, 4).Draw(t, "workers"),
		Prefetch: rapid.IntRange(1, 10).Draw(t, "prefetch"),
	}
	if q.Type == "classic" {
		// nil is the default, 10; 0 declares a plain queue (deferrals come
		// back FIFO); 255 is the largest RabbitMQ allows.
		switch rapid.IntRange(0, 4).Draw(t, "max_priority") {
		case 1:
			q.MaxPriority = new(0)
		case 2:
			q.MaxPriority = new(1)
		case 3:
			q.MaxPriority = new(5)
		case 4:
			q.MaxPriority = new(255)
		}
	}
	base := rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Millisecond, 100 * time.Millisecond,
		250 * time.Millisecond, 2 * time.Second}).Draw(t, "retry_base")
	q.Retry = sim.Retry{
		Base:        sim.Duration(base),
		Cap:         sim.Duration(base * time.Duration(rapid.SampledFrom([]int{1, 4, 16, 64}).Draw(t, "retry_cap_factor"))),
		MaxAttempts: rapid.SampledFrom([]int{3, 1, 2, 5, 10, -1}).Draw(t, "max_attempts"),
		Jitter:      rapid.SampledFrom([]string{"full", "equal", "none"}).Draw(t, "jitter"),
	}
	na := rapid.IntRange(1, maxArrivals).Draw(t, "arrivals")
	for range na {
		q.Arrivals = append(q.Arrivals, arrivalGen(t, dur))
	}
	q.Outcome = sim.Outcome{
		Retryable:   fraction(t, "retryable", 5, 12),   // up to 0.6
		Fatal:       fraction(t, "fatal", 5, 4),        // up to 0.2
		RateLimited: fraction(t, "rate_limited", 5, 4), // up to 0.2: the three sum to at most 1
		Poison:      fraction(t, "poison", 1, 2),
		Malformed:   fraction(t, "malformed", 1, 2),
		RetryAfter:  distGen(t, "retry_after", maxRetryAfter),
		Handler:     distGen(t, "handler", maxHandlerTime),
		Correlation: rapid.SampledFrom([]string{sim.PerAttempt, sim.PerJob}).Draw(t, "correlation"),
	}
	return q
}

// longJobsGen draws q's handler timeout (the default, 10 minutes, or
// shorter than some runs), the fraction of runs whose handler ignores its
// context, and perhaps a heavy-tailed (Pareto) handler in place of the
// one drawn before.
func longJobsGen(t *rapid.T, q *sim.Queue) {
	q.Timeout = rapid.SampledFrom([]sim.Duration{0, ticks(5), ticks(10), ticks(20)}).Draw(t, "timeout")
	q.Outcome.IgnoreContext = fraction(t, "ignore_context", 25, 4)
	if rapid.Bool().Draw(t, "pareto") {
		q.Outcome.Handler = sim.Dist{Dist: sim.DistPareto,
			Mean:  ticks(rapid.IntRange(1, 20).Draw(t, "pareto_mean_ticks")),
			Alpha: rapid.SampledFrom([]float64{1.1, 1.5, 2.5}).Draw(t, "pareto_alpha")}
	}
}

// arrivalGen draws one arrival process; dur is the scenario's duration in
// ticks.
func arrivalGen(t *rapid.T, dur int) sim.Arrival {
	a := sim.Arrival{Process: rapid.SampledFrom([]string{sim.ArrivalReplay, sim.ArrivalConstant, sim.ArrivalPoisson, sim.ArrivalBurst}).Draw(t, "process")}
	switch a.Process {
	case sim.ArrivalConstant, sim.ArrivalPoisson:
		a.Rate = float64(rapid.IntRange(1, maxRate*10).Draw(t, "rate_tenths")) / 10
	case sim.ArrivalBurst:
		every := rapid.IntRange(1, 100).Draw(t, "every_ticks")
		a.Size = rapid.IntRange(1, maxBurst).Draw(t, "size")
		// At most maxRate jobs a second on average: a burst of size jobs
		// comes at most every size/maxRate seconds.
		a.Every = ticks(max(every, (a.Size*int(time.Second/tick)+maxRate-1)/maxRate))
	case sim.ArrivalReplay:
		n := rapid.IntRange(1, maxReplayJobs).Draw(t, "replay_jobs")
		for range n {
			a.Jobs = append(a.Jobs, replayJobGen(t, dur))
		}
		return a
	}
	// Start and End bound the process; 0 leaves the default (the start of
	// the run, and its duration).
	start := rapid.IntRange(0, dur).Draw(t, "start_ticks")
	a.Start = ticks(start)
	if end := rapid.IntRange(0, dur).Draw(t, "end_ticks"); end >= start {
		a.End = ticks(end)
	}
	return a
}

// replayOutcomes are what a replayed job's runs can do.
var replayOutcomes = []string{"ok", "retry", "defer", "fatal", "crash"}

func replayJobGen(t *rapid.T, dur int) sim.ReplayJob {
	return sim.ReplayJob{
		At:         ticks(rapid.IntRange(0, dur-1).Draw(t, "at_ticks")),
		Outcomes:   rapid.SliceOfN(rapid.SampledFrom(replayOutcomes), 0, 4).Draw(t, "outcomes"),
		RetryAfter: durationTicks(t, "replay_retry_after", maxRetryAfter),
		Handler:    durationTicks(t, "replay_handler", maxHandlerTime),
	}
}

// distGen draws a distribution of durations whose values stay, but for
// the exponential's tail, within max.
func distGen(t *rapid.T, label string, limit time.Duration) sim.Dist {
	switch rapid.SampledFrom([]string{sim.DistConstant, sim.DistUniform, sim.DistExponential}).Draw(t, label+"_dist") {
	case sim.DistUniform:
		lo := durationTicks(t, label+"_min", limit)
		hi := durationTicks(t, label+"_max", limit)
		return sim.Dist{Dist: sim.DistUniform, Min: min(lo, hi), Max: max(lo, hi)}
	case sim.DistExponential:
		return sim.Dist{Dist: sim.DistExponential, Mean: ticks(rapid.IntRange(1, int(limit/tick/4)+1).Draw(t, label+"_mean_ticks"))}
	}
	return sim.Dist{Dist: sim.DistConstant, Value: durationTicks(t, label+"_value", limit)}
}

// faultGen draws a fault on one of s's queues, at some point of the run
// (dur ticks of arrivals, then the drain).
func faultGen(t *rapid.T, s sim.Scenario, dur int) sim.Fault {
	qi := rapid.IntRange(0, len(s.Queues)-1).Draw(t, "fault_queue")
	q := s.Queues[qi]
	f := sim.Fault{
		At: ticks(rapid.IntRange(0, dur+int(s.Drain.D()/tick)).Draw(t, "fault_at_ticks")),
		Kind: rapid.SampledFrom([]string{sim.FaultCrash, sim.FaultDrop, sim.FaultRefuseHold, sim.FaultRestart, sim.FaultKill, sim.FaultOutage}).
			Draw(t, "fault_kind"),
		Queue: q.Name,
	}
	switch f.Kind {
	case sim.FaultCrash, sim.FaultDrop:
		f.Worker = rapid.IntRange(0, q.Workers-1).Draw(t, "fault_worker")
		f.Restart = durationTicks(t, "fault_restart", 5*time.Second) // 0: the default, 1 s
	case sim.FaultRefuseHold:
		f.TTL = ticks(rapid.IntRange(1, int(maxRetryAfter/tick)).Draw(t, "fault_ttl_ticks"))
		f.For = durationTicks(t, "fault_for", time.Minute) // 0: the default, 1 min
	case sim.FaultRestart, sim.FaultKill:
		f.Restart = durationTicks(t, "fault_restart", 10*time.Second) // how long the broker is unreachable; 0: 1 s
	case sim.FaultOutage:
		f.For = durationTicks(t, "fault_for", 30*time.Second) // 0: the default, 1 min
	}
	return f
}
