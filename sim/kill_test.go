package sim

import (
	"testing"
	"time"
)

// liveFaultWorkload is the scenario of rabbitmq's live fault workloads
// (fault_workload_live_test.go), as near as the simulator's workload
// describes it: about 400 jobs a second for 12.5 s on two workers of
// prefetch 20, a handler of 20 ms, a quarter of the runs failing, a fifth
// rate limited for 300 ms, 100 ms granularities, and the fault a fifth of
// the way in.
func liveFaultWorkload(seed uint64, kind string) Scenario {
	return Scenario{
		Name: "live-fault-workload", Seed: seed, Duration: dur(12500 * time.Millisecond), Drain: dur(time.Minute),
		Topology: Topology{RetryGranularity: dur(100 * time.Millisecond), DeferredGranularity: dur(100 * time.Millisecond)},
		Queues: []Queue{{
			Workers: 2, Prefetch: 20,
			Retry:    Retry{Base: dur(50 * time.Millisecond), Cap: dur(400 * time.Millisecond), MaxAttempts: 6},
			Arrivals: []Arrival{{Process: ArrivalPoisson, Rate: 400}},
			Outcome: Outcome{
				Retryable: 0.25, RateLimited: 0.2,
				RetryAfter: Dist{Dist: DistConstant, Value: dur(300 * time.Millisecond)},
				Handler:    Dist{Dist: DistConstant, Value: dur(20 * time.Millisecond)},
			},
		}},
		Faults: []Fault{{At: dur(2500 * time.Millisecond), Kind: kind, Restart: dur(time.Second)}},
	}
}

// TestKillLosesUnwrittenDeadLetters: a kill -9 while retries and deferrals
// wait in classic hold queues loses the dead letters the work queue had not
// yet written, as on a live broker (docs/rabbitmq-semantics.md §13), and a
// restart loses none; with exact timing, which writes every arrival at
// once, the kill loses nothing either.
func TestKillLosesUnwrittenDeadLetters(t *testing.T) {
	lost := map[string]int{}
	for seed := range uint64(10) {
		for _, kind := range []string{FaultKill, FaultRestart, "exact " + FaultKill} {
			s := liveFaultWorkload(seed+1, kind)
			if kind == "exact "+FaultKill {
				s.Timing.Exact, s.Faults[0].Kind = true, FaultKill
			}
			res, _ := run(t, s, Options{})
			lost[kind] += res.Jobs.Lost
			requireNoViolations(t, res)
			if res.Jobs.InFlight != 0 {
				t.Errorf("seed %d, %s: %d jobs in flight at the end", seed+1, kind, res.Jobs.InFlight)
			}
		}
	}
	t.Logf("lost in 10 runs: %v", lost)
	if lost[FaultKill] == 0 {
		t.Error("ten kills lost no job: the model writes every dead letter at once, which RabbitMQ does not")
	}
	if lost[FaultRestart] != 0 || lost["exact "+FaultKill] != 0 {
		t.Errorf("a restart, or a kill with exact timing, lost jobs: %v", lost)
	}
}

// TestKillWithQuorumHolds: quorum holds release at least once, so a kill
// loses none of the dead letters that classic holds lose; but a quorum
// hold queue created less than QuorumRegister before the kill restarts
// empty (docs/rabbitmq-semantics.md §13.4): the holds the workload creates
// in its first second are 1.5 s old at the kill.
func TestKillWithQuorumHolds(t *testing.T) {
	for _, c := range []struct {
		at       time.Duration
		wantLost bool
	}{{2500 * time.Millisecond, true}, {8 * time.Second, false}} {
		s := liveFaultWorkload(1, FaultKill)
		s.Topology.HoldType = "quorum"
		s.Faults[0].At = dur(c.at)
		res, _ := run(t, s, Options{})
		requireNoViolations(t, res)
		t.Logf("kill at %s: jobs %+v", c.at, res.Jobs)
		if (res.Jobs.Lost > 0) != c.wantLost || res.Jobs.InFlight != 0 {
			t.Errorf("kill at %s with quorum holds: jobs %+v, want lost jobs: %t", c.at, res.Jobs, c.wantLost)
		}
	}
}
