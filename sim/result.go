package sim

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Result is what a run did. Everything in it is a deterministic function of
// the scenario: runs of the same scenario give equal Results.
type Result struct {
	Scenario  Scenario `json:"scenario"`
	TraceHash string   `json:"trace_hash"` // SHA-256 of the trace's binary form
	Events    uint64   `json:"events"`     // trace events
	Steps     uint64   `json:"steps"`      // virtual-clock timers fired
	Virtual   Duration `json:"virtual"`    // virtual time simulated

	Jobs         JobCounts      `json:"jobs"`
	DeadByReason map[string]int `json:"dead_by_reason"`
	// InFlight counts the jobs live at the end by where they are: "held"
	// (in a hold or wait queue), "queued" (on the work queue), "in-hand"
	// (delivered to a worker) or "waiting" (arrived while the broker was
	// unreachable, and not enqueued yet).
	InFlight map[string]int `json:"in_flight"`

	Attempts  Counter `json:"attempts"`  // attempts per job that ended
	Deferrals int     `json:"deferrals"` // deferrals in all
	// TimedOut counts handler runs past their queue's Timeout that ended
	// as timed out, and Abandoned those of them whose handler ignored its
	// context and was abandoned AbandonGrace later.
	TimedOut  int `json:"timed_out"`
	Abandoned int `json:"abandoned"`

	// AddedWait is each hold's release time minus the delay asked for: what
	// rounding to the granularity (and the broker's expiry) added.
	// RetryAddedWait counts retries' holds only (rounded to the retry
	// granularity), DeferredAddedWait deferrals' (the deferred granularity).
	AddedWait         Histogram `json:"added_wait"`
	RetryAddedWait    Histogram `json:"retry_added_wait"`
	DeferredAddedWait Histogram `json:"deferred_added_wait"`
	// DeferredWait is a deferred job's time from its release into the work
	// queue to its delivery; BacklogWait a new job's time from enqueue to
	// its first delivery.
	DeferredWait Histogram `json:"deferred_wait"`
	BacklogWait  Histogram `json:"backlog_wait"`
	// LateHolds counts holds released into their work queue more than a
	// second after they were due (their rounded TTL after they were
	// issued), LateDeferrals the deferrals among them, and LatestHold is
	// the latest release. Faults make them: a broker down, a worker gone
	// that would have relayed, a rung whose dead letters the broker
	// refused after a restart and sends again only
	// Timing.DeadLetterResend later (docs/hold-ladder.md).
	LateHolds     int      `json:"late_holds"`
	LateDeferrals int      `json:"late_deferrals"`
	LatestHold    Duration `json:"latest_hold"`

	HoldQueuesPeak    int     `json:"hold_queues_peak"`
	HoldQueuesMean    float64 `json:"hold_queues_mean"` // time-weighted
	HoldQueuesCreated int     `json:"hold_queues_created"`
	// HoldDeclarations counts queue.declare calls for hold queues: the
	// backend declares one before every hold, so this is holds per second
	// whatever the granularity; HoldQueuesCreated is what granularity
	// changes. Zero for a Legacy run, which declares no hold queues.
	HoldDeclarations      int     `json:"hold_declarations"`
	DeclarationsPerSecond float64 `json:"declarations_per_second"`
	// Relays counts the hold ladder's relays from a rung to the next: a
	// delivery from the relay queue and a publish, the ladder's price for a
	// fine granularity (a hold takes one rung per binary digit of its TTL
	// in granules). The relay back to the work queue is not counted.
	Relays          int     `json:"relays"`
	RelaysPerSecond float64 `json:"relays_per_second"`
	// QuorumQueues counts the quorum queues on the broker at the end of
	// the run, all made by the product's declarations: the work queues of
	// type quorum, the dead-letter queues and warm markers, and the
	// ladder's rungs, relay queue and warm marker, which LadderQueues
	// counts apart: one ladder serves every work queue. Quorum queues never
	// expire, so it is every one the run made; on a cluster each is a Raft
	// group with a member on every node. WorkQueues is how many work
	// queues they serve.
	QuorumQueues int `json:"quorum_queues"`
	LadderQueues int `json:"ladder_queues"`
	WorkQueues   int `json:"work_queues"`

	// Periodic is what the scheduler group did; nil without
	// Scenario.Periodic.
	Periodic *PeriodicResult `json:"periodic,omitempty"`

	ViolationCount        int         `json:"violation_count"`
	ViolationsByInvariant map[int]int `json:"violations_by_invariant"` // all of them, by invariant number
	Violations            []Violation `json:"violations"`              // the first Options.MaxViolations

	holdsNow  int
	holdSince time.Duration
	holdArea  float64
}

// JobCounts counts jobs by what became of them.
type JobCounts struct {
	Arrived      int `json:"arrived"` // malformed bodies included
	Succeeded    int `json:"succeeded"`
	DeadLettered int `json:"dead_lettered"`
	InFlight     int `json:"in_flight"`
	Duplicates   int `json:"duplicates"` // extra terminal states, explained by crashes
	// Lost counts confirmed jobs the broker dropped: a hold queue deleted by
	// its x-expires with them inside (invariant 6 reports each such queue).
	Lost                  int `json:"lost"`
	Poison                int `json:"poison"`
	Malformed             int `json:"malformed"`
	MalformedDeadLettered int `json:"malformed_dead_lettered"`
}

func newResult(s Scenario) *Result {
	return &Result{Scenario: s, DeadByReason: map[string]int{}, InFlight: map[string]int{}, ViolationsByInvariant: map[int]int{}}
}

// finish closes the books: in-flight jobs by location, conservation
// against the broker's own counts, and the time-weighted means.
func (r *runner) finish() *Result {
	res := r.res
	now := r.now()
	res.holdArea += float64(res.holdsNow) * float64(now-res.holdSince)
	res.holdSince = now
	if now > 0 {
		res.HoldQueuesMean = res.holdArea / float64(now)
		res.DeclarationsPerSecond = float64(res.HoldDeclarations) / now.Seconds()
		res.RelaysPerSecond = float64(res.Relays) / now.Seconds()
	}
	res.Virtual = Duration(now)
	res.WorkQueues = len(r.queues)
	for _, q := range r.broker.Queues() {
		if q.Type != "quorum" {
			continue
		}
		res.QuorumQueues++
		if q.Name == r.relayName || q.Name == r.top.LadderWarmQueue() || strings.HasPrefix(q.Name, r.rungPrefix) {
			res.LadderQueues++
		}
	}

	nums := make([]uint64, 0, r.jobs.len())
	r.jobs.each(func(n uint64, _ *job) { nums = append(nums, n) })
	sort.Slice(nums, func(a, b int) bool { return nums[a] < nums[b] })
	copies := 0
	waiting := map[uint64]bool{} // arrived while the producer was down, not enqueued yet
	for _, n := range r.waiting {
		waiting[n] = true
	}
	for n := range r.warming {
		waiting[n] = true // Enqueue waits for a young quorum queue's warm-up
	}
	for _, n := range nums {
		j := r.jobs.get(n)
		copies += max(j.copies, 0)
		if j.ended > 0 {
			continue
		}
		res.Jobs.InFlight++
		switch {
		case waiting[n]:
			res.InFlight["waiting"]++ // Enqueue waits for the broker
		case j.copies <= 0:
			r.violate(invConservation, j, "the job has not ended and no copy of it is anywhere")
		case len(j.holds) > 0:
			res.InFlight["held"]++
		case j.fresh > 0:
			res.InFlight["queued"]++
		default:
			res.InFlight["in-hand"]++
		}
	}
	// The broker's count of messages in work, hold and wait queues must be
	// the simulation's count of copies plus malformed bodies not yet
	// dead-lettered.
	onBroker := 0
	for _, qi := range r.broker.Queues() {
		switch r.classify(qi.Name).role {
		case roleWork, roleHold, roleWait, roleRelay:
			onBroker += qi.Ready + qi.Unacked + qi.DeadLettering
		}
	}
	pendingMalformed := 0
	for _, q := range r.queues {
		pendingMalformed += len(q.malformed)
	}
	if onBroker != copies+pendingMalformed {
		r.violate(invConservation, nil, fmtCount(onBroker, copies, pendingMalformed))
	}
	if r.per != nil {
		res.Periodic = r.checkTicks()
	}
	res.Events = r.rec.events
	res.Steps = r.steps
	res.TraceHash = r.rec.sum()
	return res
}

func fmtCount(onBroker, copies, malformed int) string {
	return "the broker holds " + itoa(onBroker) + " messages in work and hold queues; the simulation accounts for " +
		itoa(copies) + " job copies and " + itoa(malformed) + " malformed bodies"
}

func itoa(n int) string { return strconv.Itoa(n) }

// --- random draws -----------------------------------------------------------

// Draw streams: each kind of draw has its own, so that a job's outcomes do
// not depend on how many other draws happened first, and the same job
// meets the same fate at every granularity.
const (
	streamArrival uint64 = iota + 1
	streamMalformed
	streamPoison
	streamHandler
	streamRetryAfter
	streamResult
	streamJobResult
	streamJitter
	streamBroker       // seeds membroker's Timing
	streamBackoff      // reconnection backoff jitter, by process and attempt
	streamIgnore       // whether a run's handler ignores its context
	streamTokenLatency // how long a scheduler's token takes to reach its process
)

func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// draw returns a uniform number in [0, 1) determined by the seed, a, b and
// the stream.
func (r *runner) draw(a, b, stream uint64) float64 {
	h := splitmix(r.s.Seed)
	h = splitmix(h ^ a)
	h = splitmix(h ^ (b + 0x51_7c_c1_b7))
	h = splitmix(h ^ stream)
	return float64(h>>11) / (1 << 53)
}

func mathLog1m(u float64) float64 { return math.Log1p(-u) }

// draw maps a uniform u to the distribution.
func (d Dist) draw(u float64) time.Duration {
	switch d.Dist {
	case DistUniform:
		return d.Min.D() + time.Duration(u*float64(d.Max.D()-d.Min.D()))
	case DistExponential:
		return time.Duration(-math.Log1p(-u) * float64(d.Mean.D()))
	case DistPareto:
		// Scale x_m = mean·(α−1)/α; the inverse CDF is x_m·(1−u)^(−1/α).
		a := d.Alpha
		xm := float64(d.Mean.D()) * (a - 1) / a
		return time.Duration(xm * math.Pow(1-u, -1/a))
	}
	return d.Value.D()
}
