package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/queuey/queuey/internal/redial"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/sabotage"
)

func dur(d time.Duration) Duration { return Duration(d) }

// mixed is a short scenario with every kind of outcome and fault: retries,
// fatal failures, deferrals, malformed bodies, a crash, a dropped
// connection, bursts and Poisson arrivals.
func mixed(queueType, profile string) Scenario {
	return Scenario{
		Name: "mixed", Seed: 7, Duration: dur(2 * time.Minute), Drain: dur(5 * time.Minute), Profile: profile,
		Queues: []Queue{{
			Type: queueType, Workers: 3, Prefetch: 5,
			Retry:    Retry{Base: dur(100 * time.Millisecond), Cap: dur(20 * time.Second), MaxAttempts: 4},
			Arrivals: []Arrival{{Process: ArrivalPoisson, Rate: 20}, {Process: ArrivalBurst, Every: dur(30 * time.Second), Size: 40}},
			Outcome: Outcome{
				Retryable: 0.3, Fatal: 0.02, RateLimited: 0.1, Malformed: 0.01,
				RetryAfter: Dist{Dist: DistUniform, Min: dur(time.Second), Max: dur(10 * time.Second)},
				Handler:    Dist{Dist: DistExponential, Mean: dur(100 * time.Millisecond)},
			},
		}},
		Faults: []Fault{
			{At: dur(20 * time.Second), Kind: FaultCrash, Worker: 1, Restart: dur(2 * time.Second)},
			{At: dur(40 * time.Second), Kind: FaultDrop, Worker: 2},
		},
	}
}

func run(t *testing.T, s Scenario, opts Options) (*Result, string) {
	t.Helper()
	var trace bytes.Buffer
	opts.Trace = &trace
	res, err := Run(context.Background(), s, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res, trace.String()
}

func requireNoViolations(t *testing.T, res *Result) {
	t.Helper()
	if res.ViolationCount != 0 {
		for _, v := range res.Violations {
			t.Errorf("seed %d: %s", res.Scenario.Seed, v)
		}
		t.Fatalf("%d invariant violations", res.ViolationCount)
	}
}

// TestRunIsDeterministic: the same scenario and seed give the same trace,
// byte for byte, and the same Result; another seed gives another trace.
func TestRunIsDeterministic(t *testing.T) {
	s := mixed("quorum", "RabbitMQ40")
	a, traceA := run(t, s, Options{})
	b, traceB := run(t, s, Options{})
	if traceA != traceB {
		t.Fatal("two runs of the same scenario wrote different traces")
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("two runs of the same scenario gave different results:\n%s\n%s", ja, jb)
	}
	if a.TraceHash == "" || a.Events == 0 || int(a.Events) != strings.Count(traceA, "\n") {
		t.Fatalf("trace hash %q over %d events, %d lines written", a.TraceHash, a.Events, strings.Count(traceA, "\n"))
	}
	s.Seed = 8
	c, _ := run(t, s, Options{})
	if c.TraceHash == a.TraceHash {
		t.Fatal("another seed gave the same trace")
	}
}

// droppedScenario is the scenario TestRunsAreDeterministic found: a worker
// whose connection drops while handlers are running, which then fail to
// settle at the instant a hold queue's x-expires lease ends. Whether a
// failed settlement reached the broker (and so brought it up to the clock,
// expiring the hold queue first) depended on whether the dropped backend's
// publisher goroutine had shut it down yet: about one run in a hundred
// traced the expiry earlier. Since hold queues keep a minute of margin
// (issue 11) their leases end well after these settlements; the drain
// is long enough for them to end at all, and the timing is exact, as it
// was when the scenario was found.
const droppedScenario = `{"seed":8,"duration":"30s","drain":"75s","profile":"RabbitMQ40","timing":{"exact":true},
 "topology":{"deferred_granularity":"1ns"},
 "queues":[
  {"name":"jobs","type":"quorum","retry":{"base":"10ms","cap":"40ms","max_attempts":2,"jitter":"full"},
   "workers":1,"prefetch":2,
   "arrivals":[{"process":"poisson","rate":3.4,"start":"300ms","end":"21.6s"},{"process":"burst","every":"600ms","size":11,"start":"1.8s","end":"14.7s"}],
   "outcome":{"retryable":0.6,"fatal":0.15,"rate_limited":0.05,"retry_after":{"dist":"exponential","mean":"6.5s"},"handler":{"dist":"constant","value":"1s"},"correlation":"attempt","malformed":0.01}},
  {"name":"other","type":"quorum","retry":{"base":"10ms","cap":"160ms","max_attempts":3,"jitter":"equal"},
   "workers":4,"prefetch":2,
   "arrivals":[{"process":"burst","every":"6.8s","size":1,"start":"200ms","end":"23.4s"},
    {"process":"replay","jobs":[{"at":"500ms","retry_after":"9.8s","handler":"2s"},{"at":"3.1s","outcomes":["fatal"],"retry_after":"8.5s","handler":"800ms"},{"at":"10s","outcomes":["retry"],"retry_after":"600ms","handler":"100ms"},{"at":"6.8s"}]}],
   "outcome":{"retryable":0.55,"fatal":0.2,"rate_limited":0.05,"retry_after":{"dist":"constant"},"handler":{"dist":"exponential","mean":"100ms"},"correlation":"job","poison":0.01}}],
 "faults":[{"at":"100ms","kind":"drop","queue":"jobs","restart":"4.8s"},{"at":"11.6s","kind":"drop","queue":"jobs","restart":"3.9s"}]}`

// TestDroppedConnectionIsDeterministic runs droppedScenario a hundred
// times: every trace must be the first one's. Before the simulator waited
// for a dropped backend to shut down, this failed ten times out of ten.
func TestDroppedConnectionIsDeterministic(t *testing.T) {
	s, err := Load(strings.NewReader(droppedScenario))
	if err != nil {
		t.Fatal(err)
	}
	_, first := run(t, s, Options{})
	if !strings.Contains(first, "settle-failed") || !strings.Contains(first, " relay ") {
		t.Fatal("the scenario no longer has a settlement failing after a drop, or no relay on the hold ladder")
	}
	for i := range 100 {
		if _, trace := run(t, s, Options{}); trace != first {
			t.Fatalf("run %d of the same scenario wrote a different trace", i+2)
		}
	}
}

// TestInvariantsHoldOnMixedScenarios runs the mixed scenario on both queue
// types and both broker profiles: no invariant is violated, and the run did
// exercise what it claims to (every outcome, both faults, every malformed
// body dead-lettered verbatim).
func TestInvariantsHoldOnMixedScenarios(t *testing.T) {
	for _, typ := range []string{"classic", "quorum"} {
		for _, profile := range []string{"RabbitMQ40", "RabbitMQ43"} {
			for _, holds := range []string{"quorum", "classic"} {
				t.Run(typ+"/"+profile+"/holds="+holds, func(t *testing.T) {
					s := mixed(typ, profile)
					s.Topology.HoldType = holds
					res, trace := run(t, s, Options{})
					requireNoViolations(t, res)
					j := res.Jobs
					if j.Arrived < 2000 || j.Succeeded == 0 || res.Deferrals == 0 {
						t.Fatalf("too little happened: %+v, %d deferrals", j, res.Deferrals)
					}
					if res.DeadByReason["fatal"] == 0 || res.DeadByReason["attempts exhausted"] == 0 {
						t.Fatalf("dead letters by reason: %v", res.DeadByReason)
					}
					if j.Malformed == 0 || j.MalformedDeadLettered != j.Malformed {
						t.Fatalf("%d malformed bodies, %d dead-lettered", j.Malformed, j.MalformedDeadLettered)
					}
					hold := " relay " // the ladder's hops
					if holds == "classic" {
						hold = " hold-expired "
					}
					for _, want := range []string{" crash ", " drop ", " restart ", " release ", hold} {
						if !strings.Contains(trace, want) {
							t.Errorf("the trace has no %q event", strings.TrimSpace(want))
						}
					}
					if j.InFlight != 0 {
						t.Errorf("%d jobs still in flight after the drain: %v", j.InFlight, res.InFlight)
					}
					if j.Succeeded+j.DeadLettered+j.InFlight+j.Malformed != j.Arrived {
						t.Errorf("jobs do not add up: %+v", j)
					}
				})
			}
		}
	}
}

// TestPoisonJobOnQuorumQueueReachesTheDeadQueue: a job whose handler kills
// its worker every time is dead-lettered by a quorum queue with
// delivery_limit after RabbitMQ 4's default limit of 20 returns (21
// deliveries), while the other jobs succeed; on a classic queue it keeps
// crashing workers and is still in flight at the end.
func TestPoisonJobOnQuorumQueueReachesTheDeadQueue(t *testing.T) {
	scenario := func(typ, profile string) Scenario {
		var jobs []ReplayJob
		for i := range 50 {
			jobs = append(jobs, ReplayJob{At: dur(time.Duration(i) * 100 * time.Millisecond), Handler: dur(10 * time.Millisecond)})
		}
		jobs = append(jobs, ReplayJob{At: dur(time.Second), Outcomes: []string{"crash"}, Handler: dur(50 * time.Millisecond)})
		return Scenario{
			Duration: dur(10 * time.Second), Drain: dur(2 * time.Minute), Profile: profile,
			Queues: []Queue{{Type: typ, Workers: 2, Prefetch: 1, Arrivals: []Arrival{{Process: ArrivalReplay, Jobs: jobs}}}},
		}
	}
	for _, profile := range []string{"RabbitMQ40", "RabbitMQ43"} {
		t.Run("quorum/"+profile, func(t *testing.T) {
			res, trace := run(t, scenario("quorum", profile), Options{})
			requireNoViolations(t, res)
			if res.DeadByReason["delivery_limit"] != 1 || res.Jobs.Succeeded != 50 {
				t.Fatalf("dead letters %v, %d succeeded", res.DeadByReason, res.Jobs.Succeeded)
			}
			poison := poisonJob(t, trace)
			if n := strings.Count(trace, "deliver job="+poison+" "); n != 21 {
				t.Fatalf("the poison job was delivered %d times, want 21", n)
			}
		})
	}
	// A classic queue has no delivery limit: the poison job goes back to
	// the head of the queue at every crash and starves the jobs behind it.
	t.Run("classic", func(t *testing.T) {
		res, trace := run(t, scenario("classic", "RabbitMQ40"), Options{})
		requireNoViolations(t, res)
		poison := poisonJob(t, trace)
		if res.DeadByReason["delivery_limit"] != 0 || res.Jobs.InFlight == 0 || strings.Count(trace, "deliver job="+poison+" ") < 100 {
			t.Fatalf("%+v, %d deliveries of the poison job", res.Jobs, strings.Count(trace, "deliver job="+poison+" "))
		}
	})
}

// poisonJob finds the number of the job whose handler crashes its worker.
func poisonJob(t *testing.T, trace string) string {
	t.Helper()
	m := regexp.MustCompile(`outcome job=(\d+) [^\n]* crash\n`).FindStringSubmatch(trace)
	if m == nil {
		t.Fatal("no crashing outcome in the trace")
	}
	return m[1]
}

// TestRefusedHoldDeclaration: while a hold queue exists with other
// arguments, holds into it are refused (406); the job goes back to its
// queue unacknowledged, is retried after the requeue delay without spending
// an attempt, and once the squatter is gone its deferral goes through.
func TestRefusedHoldDeclaration(t *testing.T) {
	res, trace := run(t, refusedHold(), Options{})
	requireNoViolations(t, res)
	if !strings.Contains(trace, "settle-failed job=1") || !strings.Contains(trace, "PRECONDITION_FAILED") {
		t.Fatalf("no refused hold in the trace:\n%s", trace)
	}
	if res.Jobs.Succeeded != 1 || res.Attempts.Counts()[1] != 1 {
		t.Fatalf("jobs %+v, attempts %v", res.Jobs, res.Attempts.Counts())
	}
}

// refusedHold is one job deferred for 7 s while the hold queue for 7 s
// exists with other arguments, for the first 5 s of the run.
func refusedHold() Scenario {
	return Scenario{
		Duration: dur(time.Minute), Drain: dur(time.Minute),
		Topology: Topology{HoldType: "classic"}, // the ladder declares no queue per hold
		Queues: []Queue{{Arrivals: []Arrival{{Process: ArrivalReplay, Jobs: []ReplayJob{
			{At: dur(time.Second), Outcomes: []string{"defer", "ok"}, RetryAfter: dur(7 * time.Second)},
		}}}}},
		Faults: []Fault{{At: 0, Kind: FaultRefuseHold, TTL: dur(7 * time.Second), For: dur(5 * time.Second)}},
	}
}

// TestNegativeControlLegacyTopology runs the topology queuey replaced (one
// shared wait queue with per-message expirations): a 1-second deferral
// queued behind a 60-second one is released only when the long one
// expires, and invariant 2 reports it with the job's trace. The same
// workload on hold queues breaks nothing.
func TestNegativeControlLegacyTopology(t *testing.T) {
	s := Scenario{
		Duration: dur(5 * time.Second), Drain: dur(2 * time.Minute),
		Timing: Timing{Exact: true}, // late by the long wait alone
		Queues: []Queue{{Arrivals: []Arrival{{Process: ArrivalReplay, Jobs: []ReplayJob{
			{At: 0, Outcomes: []string{"defer", "ok"}, RetryAfter: dur(time.Minute)},
			{At: dur(time.Second), Outcomes: []string{"defer", "ok"}, RetryAfter: dur(time.Second)},
		}}}}},
	}
	res, _ := run(t, s, Options{})
	requireNoViolations(t, res)

	s.Legacy = true
	res, _ = run(t, s, Options{})
	var found bool
	for _, v := range res.Violations {
		if v.Invariant == 2 && v.Job == 2 {
			found = true
			excerpt := strings.Join(v.Excerpt, "\n")
			for _, want := range []string{"hold job=2 queue=jobs.wait", "ttl=1s", "release job=2", "late=58s", "from=jobs.wait", "VIOLATION"} {
				if !strings.Contains(excerpt, want) {
					t.Errorf("excerpt lacks %q:\n%s", want, excerpt)
				}
			}
			t.Logf("the negative control's violation:\n%s", v)
		}
	}
	if !found {
		t.Fatalf("invariant 2 was not reported for the short wait stuck behind the long one: %v", res.Violations)
	}
	if res.ViolationsByInvariant[2] != res.ViolationCount || res.HoldDeclarations != 0 {
		t.Fatalf("by invariant %v of %d; %d hold declarations in a legacy run", res.ViolationsByInvariant, res.ViolationCount, res.HoldDeclarations)
	}
	quiet, _ := run(t, s, Options{NoExcerpts: true})
	if quiet.ViolationCount != res.ViolationCount || len(quiet.Violations[0].Excerpt) != 0 || quiet.TraceHash != res.TraceHash {
		t.Fatalf("NoExcerpts: %d violations, excerpt %q", quiet.ViolationCount, quiet.Violations[0].Excerpt)
	}
}

// settleTwice settles through the consumer's core, and sends a second
// settlement the core refuses to the broker anyway, past the core.
func settleTwice(core sabotage.Settler) sabotage.Settler { return unguarded{core} }

type unguarded struct{ sabotage.Settler }

func (u unguarded) Ack(d *consume.Delivery) error {
	if err := u.Settler.Ack(d); !errors.Is(err, consume.ErrSettled) {
		return err
	}
	return d.D.Ack(false)
}

func (u unguarded) Requeue(d *consume.Delivery) error {
	if err := u.Settler.Requeue(d); !errors.Is(err, consume.ErrSettled) {
		return err
	}
	return d.D.Reject(true)
}

// neverStale settles through the consumer's core but calls no delivery
// stale, so a worker publishes the successor of a job the broker has
// requeued with its channel.
func neverStale(core sabotage.Settler) sabotage.Settler { return staleBlind{core} }

type staleBlind struct{ sabotage.Settler }

func (staleBlind) Stale(*consume.Delivery) bool { return false }

// TestChecksHaveTeeth breaks queuey on purpose, one way at a time, and
// requires the invariant that forbids it to fire.
func TestChecksHaveTeeth(t *testing.T) {
	for _, c := range []struct {
		name string
		inv  int
		sab  sabotage.Set                        // a core wrapped by the test's own code
		core func(simCore) simCore               // the worker core, wrapped by the test's own code (mutations_test.go)
		dial func(redial.Stepper) redial.Stepper // the reconnection loop's core, likewise
		s    func() Scenario                     // the scenario, if not mixed's
	}{
		{"holds released early", 1, sabotage.Set{Backend: holdsEarly}, nil, nil, nil},
		{"holds shorter than their TTL", 2, sabotage.Set{Backend: holdsEarly}, nil, nil, nil},
		{"a deferral spends an attempt", 3, sabotage.Set{Backend: deferralSpendsAttempt}, nil, nil, nil},
		{"a deferral at priority 0", 4, sabotage.Set{Backend: deferralAtPriority0}, nil, nil, nil},
		{"a retry lost", 5, sabotage.Set{Backend: retryLost}, nil, nil, nil},
		{"a dead letter with the wrong reason", 8, sabotage.Set{Backend: wrongReason}, nil, nil, nil},
		{"more hold queues than the bound", 7, sabotage.Set{Channel: strayHolds}, nil, nil, func() Scenario {
			s := mixed("classic", "RabbitMQ40")
			s.Topology.HoldType = "classic" // the ladder's rungs are declared with the queue
			return s
		}},
		// The worker core's own settlement, as Worker.Run runs it. A
		// successor the broker refuses: acknowledged first, the job is
		// gone.
		{"the core acks before the successor is confirmed", 5, sabotage.Set{}, ackFirst, nil, refusedHold},
		{"the core settles a pre-drop delivery on the new connection", 5, sabotage.Set{}, settleStale, nil, nil},
		// The consumer's core, as rabbitmq.Backend.Consume runs it, its
		// guards bypassed by wrappers below.
		{"a second acknowledgement reaches the broker", 10, sabotage.Set{Settle: settleTwice}, ackTwice, nil, nil},
		{"a delivery whose channel closed is not stale", 5, sabotage.Set{Settle: neverStale}, nil, nil, nil},
		// The subscription's core, as rabbitmq's supervised consumer runs
		// it: a worker whose connection drops must consume again.
		{"a subscription does not resume after its connection drops", 13, sabotage.Set{Follow: neverResume}, nil, nil, nil},
		// The reconnection loop's core, as rabbitmq.Connect's supervisor
		// runs it.
		{"a process redials before its backoff is over", 9, sabotage.Set{}, nil, dialStorm, func() Scenario {
			s := mixed("classic", "RabbitMQ40")
			s.Faults = append(s.Faults, Fault{At: dur(30 * time.Second), Kind: FaultOutage, For: dur(10 * time.Second)})
			return s
		}},
		// The worker core without its timeout: the broker takes back the
		// delivery of a handler that outlasts its consumer timeout.
		{"the worker ignores its timeout (4.0, classic)", 11, sabotage.Set{}, ignoreTimeout, nil, func() Scenario { return longJobs("classic", "RabbitMQ40") }},
		{"the worker ignores its timeout (4.3, quorum)", 11, sabotage.Set{}, ignoreTimeout, nil, func() Scenario { return longJobs("quorum", "RabbitMQ43") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := mixed("classic", "RabbitMQ40")
			if c.s != nil {
				s = c.s()
			}
			res, _ := run(t, s, Options{Sabotage: c.sab, wrapCore: c.core, wrapDial: c.dial})
			for _, v := range res.Violations {
				if v.Invariant == c.inv {
					if len(v.Excerpt) == 0 {
						t.Fatalf("violation without an excerpt: %s", v)
					}
					return
				}
			}
			t.Fatalf("invariant %d did not fire; got %d violations: %v", c.inv, res.ViolationCount, res.Violations)
		})
	}
}

// The consumer's core refuses a second settlement: with a worker core that
// asks for every acknowledgement twice, no invariant fires, and each
// second acknowledgement is refused before it reaches the broker. Let
// through, it fails invariant 10 (TestChecksHaveTeeth).
func TestSettleOnceGuardHoldsUnderABrokenCore(t *testing.T) {
	res, trace := run(t, mixed("classic", "RabbitMQ40"), Options{wrapCore: ackTwice})
	requireNoViolations(t, res)
	if n := strings.Count(trace, "second ack: already settled"); n < 100 {
		t.Fatalf("%d second acknowledgements refused by the consumer's core, want every one of the run's", n)
	}
	if strings.Contains(trace, "second ack: the connection is gone") {
		t.Fatal("a second acknowledgement reached the broker")
	}
}

// millisecondHolds is issue 11's live workload in scenario form: holds of a
// few milliseconds at a 1 ms granularity, from retries (backoff 2 to 8 ms)
// and deferrals (3 ms), by two workers at prefetch 20.
func millisecondHolds() Scenario {
	return Scenario{
		Seed: 3, Duration: dur(4 * time.Second), Drain: dur(2 * time.Minute),
		Topology: Topology{RetryGranularity: dur(time.Millisecond), DeferredGranularity: dur(time.Millisecond), HoldType: "classic"},
		Queues: []Queue{{
			Workers: 2, Prefetch: 20,
			Retry:    Retry{Base: dur(2 * time.Millisecond), Cap: dur(8 * time.Millisecond), MaxAttempts: 10},
			Arrivals: []Arrival{{Process: ArrivalPoisson, Rate: 1000}},
			Outcome: Outcome{
				Retryable: 0.5, RateLimited: 0.1,
				RetryAfter: Dist{Dist: DistConstant, Value: dur(3 * time.Millisecond)},
				Handler:    Dist{Dist: DistExponential, Mean: dur(time.Millisecond)},
			},
		}},
	}
}

// TestOldHoldExpiryLosesJobsOnASloppyBroker is issue 11's mutation test.
// With seed 000's x-expires of 2 × TTL and the broker's measured latency
// and timer slack, hold queues of 1 and 2 ms are deleted with jobs inside:
// invariant 6 fires and the jobs are counted lost, as on the live broker.
// With the margin of a minute nothing is lost; with exact timing the old
// rule loses nothing either, which is how the simulator missed it.
func TestOldHoldExpiryLosesJobsOnASloppyBroker(t *testing.T) {
	s := millisecondHolds()
	res, trace := run(t, s, Options{Sabotage: sabotage.Set{Channel: oldExpires}})
	if res.Jobs.Lost == 0 || res.ViolationsByInvariant[6] == 0 {
		t.Fatalf("x-expires 2 × TTL on a sloppy broker: %d lost, %d invariant-6 violations; want both", res.Jobs.Lost, res.ViolationsByInvariant[6])
	}
	if !strings.Contains(trace, " lost job=") {
		t.Error("no lost job in the trace")
	}
	for k, n := range res.ViolationsByInvariant {
		if k != 6 && k != 5 {
			t.Errorf("%d violations of invariant %d, want only 6 (and 5 for what it lost)", n, k)
		}
	}
	t.Logf("x-expires 2 × TTL: %d of %d jobs lost, %d hold queues deleted with jobs inside", res.Jobs.Lost, res.Jobs.Arrived, res.ViolationsByInvariant[6])

	res, _ = run(t, s, Options{})
	requireNoViolations(t, res)
	if res.Jobs.Lost != 0 || res.Jobs.Succeeded+res.Jobs.DeadLettered != res.Jobs.Arrived {
		t.Fatalf("x-expires TTL + 60 s: jobs %+v, want every one ended and none lost", res.Jobs)
	}

	s.Timing = Timing{Exact: true}
	res, _ = run(t, s, Options{Sabotage: sabotage.Set{Channel: oldExpires}})
	requireNoViolations(t, res)
	if res.Jobs.Lost != 0 {
		t.Fatalf("x-expires 2 × TTL with exact timing lost %d jobs; the model used to hide the loss", res.Jobs.Lost)
	}
}

// TestDeferralComesBackAheadOfTheBacklog: on a classic priority queue a
// released deferral is delivered before the hundreds of jobs waiting, and
// its wait from release to delivery is far below theirs.
func TestDeferralComesBackAheadOfTheBacklog(t *testing.T) {
	var jobs []ReplayJob
	jobs = append(jobs, ReplayJob{At: 0, Outcomes: []string{"defer", "ok"}, RetryAfter: dur(2 * time.Second), Handler: dur(10 * time.Millisecond)})
	for i := range 400 {
		jobs = append(jobs, ReplayJob{At: dur(time.Second + time.Duration(i)*time.Millisecond), Handler: dur(10 * time.Millisecond)})
	}
	s := Scenario{
		Duration: dur(5 * time.Second), Drain: dur(time.Minute),
		Queues: []Queue{{Workers: 1, Prefetch: 1, Arrivals: []Arrival{{Process: ArrivalReplay, Jobs: jobs}}}},
	}
	res, _ := run(t, s, Options{})
	requireNoViolations(t, res)
	if res.DeferredWait.Count() != 1 || res.DeferredWait.Max() > 20*time.Millisecond || res.BacklogWait.Max() < time.Second {
		t.Fatalf("deferred wait %+v, backlog wait %+v", res.DeferredWait.Summary(), res.BacklogWait.Summary())
	}
}

// TestRefusedHoldsCountTowardTheQuorumDeliveryLimit: each refused hold
// returns the job with basic.reject, which a quorum queue counts (as a
// return on 4.0, a failed delivery on 4.3), so a hold refused for long
// enough ends in the dead-letter queue for delivery_limit after 21
// deliveries, and the checker's count of returns agrees with the broker's.
func TestRefusedHoldsCountTowardTheQuorumDeliveryLimit(t *testing.T) {
	for _, profile := range []string{"RabbitMQ40", "RabbitMQ43"} {
		t.Run(profile, func(t *testing.T) {
			s := Scenario{
				Duration: dur(time.Minute), Drain: dur(time.Minute), Profile: profile,
				Topology: Topology{HoldType: "classic"}, // the ladder declares no queue per hold
				Queues: []Queue{{Type: "quorum", Arrivals: []Arrival{{Process: ArrivalReplay, Jobs: []ReplayJob{
					{At: dur(time.Second), Outcomes: []string{"defer"}, RetryAfter: dur(7 * time.Second)},
				}}}}},
				Faults: []Fault{{At: 0, Kind: FaultRefuseHold, TTL: dur(7 * time.Second), For: dur(time.Minute)}},
			}
			res, trace := run(t, s, Options{})
			requireNoViolations(t, res)
			if res.DeadByReason["delivery_limit"] != 1 || strings.Count(trace, "deliver job=1 ") != 21 {
				t.Fatalf("dead letters %v after %d deliveries", res.DeadByReason, strings.Count(trace, "deliver job=1 "))
			}
		})
	}
}

// TestLivelockIsAnError: events that keep firing at one virtual instant
// have no next instant; Run says so instead of spinning. No scenario makes
// one any more (a deferral for 0 used to, until deferrals always went
// through a hold queue), so the test arms one itself.
func TestLivelockIsAnError(t *testing.T) {
	s := Scenario{Duration: dur(time.Second), Queues: []Queue{{Workers: 1, Prefetch: 1,
		Arrivals: []Arrival{{Process: ArrivalConstant, Rate: 1}}}}}.WithDefaults()
	r, err := newRunner(context.Background(), s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	var spin func()
	spin = func() { r.clk.AfterFunc(0, spin) }
	r.clk.AfterFunc(100*time.Millisecond, spin)
	if err := r.loop(); !errors.Is(err, ErrLivelock) {
		t.Fatalf("err = %v, want ErrLivelock", err)
	}
}

// TestCancelledRunReturnsTheContextsError: a run whose context ends
// returns its error, never a result computed with broker calls failing
// for the cancellation.
func TestCancelledRunReturnsTheContextsError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, err := Run(ctx, sizing(time.Hour), Options{Progress: func(done, total time.Duration) {
		if calls++; calls == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestZeroDelayDeferralWaitsOneGranule: a deferral for 0 goes through a
// hold queue for one deferred granule, as the worker publishes it, rather
// than straight back onto the work queue at its top priority, where a
// handler deferring every time would spin.
func TestZeroDelayDeferralWaitsOneGranule(t *testing.T) {
	s := Scenario{Duration: dur(time.Second), Drain: dur(10 * time.Second), Queues: []Queue{{Workers: 1, Prefetch: 2,
		Arrivals: []Arrival{{Process: ArrivalReplay, Jobs: []ReplayJob{{Outcomes: []string{"defer", "ok"}}}}},
		Outcome:  Outcome{RetryAfter: Dist{Dist: DistConstant}}}}}
	res, trace := run(t, s, Options{})
	requireNoViolations(t, res)
	if res.Jobs.Succeeded != 1 || res.Deferrals != 1 {
		t.Fatalf("%+v, %d deferrals", res.Jobs, res.Deferrals)
	}
	if !strings.Contains(trace, "hold job=1 queue=queuey.ladder.1000 ") || !strings.Contains(trace, "priority=10 ttl=1s") {
		t.Fatalf("the deferral for 0 did not wait one granule:\n%s", trace)
	}
}

// TestBrokerRestartAndOutage runs the mixed scenario through a broker
// restart (unreachable for 3 s) and an outage of 10 s, on both queue types
// and profiles: the producer and every worker reconnect after the backoff,
// jobs that arrive meanwhile go out when the producer is back, and no
// invariant breaks. The trace is the same on a second run.
func TestBrokerRestartAndOutage(t *testing.T) {
	for _, typ := range []string{"classic", "quorum"} {
		for _, profile := range []string{"RabbitMQ40", "RabbitMQ43"} {
			t.Run(typ+"/"+profile, func(t *testing.T) {
				s := mixed(typ, profile)
				s.Faults = append(s.Faults,
					Fault{At: dur(30 * time.Second), Kind: FaultRestart, Restart: dur(3 * time.Second)},
					Fault{At: dur(70 * time.Second), Kind: FaultOutage, For: dur(10 * time.Second)})
				res, trace := run(t, s, Options{})
				requireNoViolations(t, res)
				for _, want := range []string{"broker-down restart for 3s", "broker-down outage for 10s", "dial-failed", "broker-up", "restart producer"} {
					if !strings.Contains(trace, want) {
						t.Errorf("the trace lacks %q", want)
					}
				}
				if res.Jobs.InFlight != 0 || res.Jobs.Lost != 0 {
					t.Fatalf("jobs %+v at the end", res.Jobs)
				}
				again, _ := run(t, s, Options{})
				if again.TraceHash != res.TraceHash {
					t.Fatal("a second run wrote another trace")
				}
				t.Logf("jobs %+v; duplicates %d", res.Jobs, res.Jobs.Duplicates)
			})
		}
	}
}

// A deferral no hold queue can take (a Retry-After of 30 days, over
// MaxHoldTTL) is dead-lettered by the worker with "delay too long", as the
// job ran: the oracle follows the product there, with no violation.
func TestDeferralNoHoldCanTakeIsDeadLettered(t *testing.T) {
	s := Scenario{Duration: dur(time.Second), Drain: dur(10 * time.Second), Queues: []Queue{{Workers: 1, Prefetch: 1,
		Arrivals: []Arrival{{Process: ArrivalReplay, Jobs: []ReplayJob{{Outcomes: []string{"defer"}}, {Outcomes: []string{"ok"}}}}},
		Outcome:  Outcome{RetryAfter: Dist{Dist: DistConstant, Value: dur(30 * 24 * time.Hour)}}}}}
	res, trace := run(t, s, Options{})
	requireNoViolations(t, res)
	if res.Jobs.DeadLettered != 1 || res.Jobs.Succeeded != 1 || res.DeadByReason["delay too long"] != 1 || res.Deferrals != 0 {
		t.Fatalf("%+v, dead letters %v, %d deferrals\n%s", res.Jobs, res.DeadByReason, res.Deferrals, trace)
	}
}

// A handler longer than its queue's Timeout (10 minutes by default) is cut
// off there, and the run is a timed-out attempt: retried, then
// dead-lettered as timed out, with every invariant holding. The job ran
// no more than its attempts.
func TestHandlersPastTheTimeoutAreTimedOutAttempts(t *testing.T) {
	s, err := Load(strings.NewReader(`{"seed":1,"duration":"1m","drain":"1h",
 "queues":[{"name":"jobs","retry":{"base":"1s","cap":"1s","max_attempts":2},"workers":1,"prefetch":1,
  "arrivals":[{"process":"replay","jobs":[{"at":"0s","handler":"15m"},{"at":"1s","handler":"1s"}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res, trace := run(t, s, Options{})
	requireNoViolations(t, res)
	if n := strings.Count(trace, " timeout"); n != 2 {
		t.Fatalf("%d timed-out runs in the trace, want 2", n)
	}
	if !strings.Contains(trace, "dead-letter job=1 queue=jobs attempt=2 timed out") || res.Jobs.DeadLettered != 1 || res.Jobs.Succeeded != 1 {
		t.Fatalf("jobs %+v; the trace:\n%s", res.Jobs, trace)
	}
}

// longJobs is a workload of long jobs: heavy-tailed handler runs (Pareto,
// mean 10 s), a third of them past the 5 s Timeout, half of those from
// handlers that ignore their context and are abandoned; with a crash and
// a dropped connection.
func longJobs(queueType, profile string) Scenario {
	return Scenario{
		Name: "long jobs", Seed: 11, Duration: dur(2 * time.Minute), Drain: dur(30 * time.Minute), Profile: profile,
		Queues: []Queue{{
			Type: queueType, Workers: 3, Prefetch: 5, Timeout: dur(5 * time.Second),
			Retry:    Retry{Base: dur(time.Second), Cap: dur(10 * time.Second), MaxAttempts: 3},
			Arrivals: []Arrival{{Process: ArrivalPoisson, Rate: 5}},
			Outcome: Outcome{
				Retryable: 0.1, IgnoreContext: 0.5,
				Handler: Dist{Dist: DistPareto, Mean: dur(10 * time.Second), Alpha: 1.1},
			},
		}},
		Faults: []Fault{
			{At: dur(20 * time.Second), Kind: FaultCrash, Worker: 1, Restart: dur(2 * time.Second)},
			{At: dur(40 * time.Second), Kind: FaultDrop, Worker: 2},
		},
	}
}

// Handlers that run past their timeout, some ignoring their context, on
// both profiles and queue types: every job ends within its attempts, and
// no run repeats one the broker took back (invariant 11). The abandoned
// handlers' late returns are dropped.
func TestLongJobsRunNoMoreThanTheirAttempts(t *testing.T) {
	for _, profile := range []string{"RabbitMQ40", "RabbitMQ43"} {
		for _, typ := range []string{"classic", "quorum"} {
			t.Run(profile+"/"+typ, func(t *testing.T) {
				res, trace := run(t, longJobs(typ, profile), Options{})
				requireNoViolations(t, res)
				late := strings.Count(trace, "returned after it was abandoned")
				timedOut := strings.Count(trace, " timeout")
				if late == 0 || timedOut <= late {
					t.Fatalf("%d abandoned handlers returned, %d runs timed out: want both, more timed out", late, timedOut)
				}
				if !strings.Contains(trace, "timed out") {
					t.Fatal("no job dead-lettered as timed out")
				}
				t.Logf("%d runs timed out, %d of them abandoned; jobs %+v", timedOut, late, res.Jobs)
			})
		}
	}
}
