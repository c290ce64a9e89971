package sim

import (
	"fmt"
	"sync"
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
		// The drain waits out a rung's resend of the dead letters a restart
		// or kill had refused (Timing.DeadLetterResend, 180 s).
		Name: "live-fault-workload", Seed: seed, Duration: dur(12500 * time.Millisecond), Drain: dur(4 * time.Minute),
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

// TestRestartAndKillLoseWhatLiveLoses: with classic holds, a kill -9
// loses the dead letters the work queue had not yet written, and a
// restart the holds that expire into a work queue already stopped, as on a
// live broker (docs/rabbitmq-semantics.md §13); with exact timing, which
// writes every arrival at once and stops every queue at one instant,
// neither loses anything. Live, the same workload lost jobs in 4 of 20
// kills and 2 of 20 restarts.
func TestRestartAndKillLoseWhatLiveLoses(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	lost := map[string]int{}
	// Forty runs of their own each, at once: under the race detector this
	// test takes minutes run by run.
	t.Run("runs", func(t *testing.T) {
		for seed := range uint64(10) {
			for _, kind := range []string{FaultKill, FaultRestart} {
				for _, exact := range []bool{false, true} {
					t.Run(fmt.Sprintf("seed=%d/%s/exact=%t", seed+1, kind, exact), func(t *testing.T) {
						t.Parallel()
						s := liveFaultWorkload(seed+1, kind)
						s.Topology.HoldType = "classic"
						s.Timing.Exact = exact
						res, _ := run(t, s, Options{})
						requireNoViolations(t, res)
						if res.Jobs.InFlight != 0 {
							t.Errorf("seed %d, %s: %d jobs in flight at the end", seed+1, kind, res.Jobs.InFlight)
						}
						key := kind
						if exact {
							key = "exact " + kind
						}
						mu.Lock()
						lost[key] += res.Jobs.Lost
						mu.Unlock()
					})
				}
			}
		}
	})
	t.Logf("lost in 10 runs: %v", lost)
	if lost[FaultKill] == 0 || lost[FaultRestart] == 0 {
		t.Error("ten kills or ten restarts lost no job: the model is exact where RabbitMQ is not")
	}
	if lost["exact "+FaultKill] != 0 || lost["exact "+FaultRestart] != 0 {
		t.Errorf("exact timing lost jobs: %v", lost)
	}
}

// TestLadderLosesNothing: the default hold ladder, on the same workload
// on a fresh broker, loses nothing to a restart or a kill, wherever it
// lands: early, while the ladder is younger than QuorumRegister, or later,
// with holds on every rung. Its rungs release at least once, and no hold enters a rung before
// the warm-up (rabbitmq.Topology.HoldWarmup) is over.
func TestLadderLosesNothing(t *testing.T) {
	t.Parallel()
	for seed := range uint64(5) {
		for _, kind := range []string{FaultKill, FaultRestart} {
			for _, at := range []time.Duration{500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 8 * time.Second} {
				t.Run(fmt.Sprintf("seed=%d/%s/at=%s", seed+1, kind, at), func(t *testing.T) {
					t.Parallel()
					s := liveFaultWorkload(seed+1, kind)
					s.Topology.Fresh = true // the workers create the ladder: the hard case
					s.Faults[0].At = dur(at)
					res, _ := run(t, s, Options{})
					requireNoViolations(t, res)
					if res.Jobs.Lost != 0 || res.Jobs.InFlight != 0 {
						t.Errorf("seed %d, %s at %s: jobs %+v", seed+1, kind, at, res.Jobs)
					}
				})
			}
		}
	}
}

// TestLadderWarmupClosesTheYoungQueueWindow: without the warm-up, a kill
// 2.5 s into the run finds rungs younger than QuorumRegister with holds in
// them, and they restart empty (docs/rabbitmq-semantics.md §13.4), as
// quorum hold queues made on first use did live. With it, the same kill
// loses nothing.
func TestLadderWarmupClosesTheYoungQueueWindow(t *testing.T) {
	for _, c := range []struct {
		warmup   time.Duration
		wantLost bool
	}{{-1, true}, {0, false}} {
		s := liveFaultWorkload(1, FaultKill)
		s.Topology.Fresh = true
		s.Topology.HoldWarmup = dur(c.warmup)
		res, _ := run(t, s, Options{})
		requireNoViolations(t, res)
		t.Logf("warm-up %s: jobs %+v", c.warmup, res.Jobs)
		if (res.Jobs.Lost > 0) != c.wantLost || res.Jobs.InFlight != 0 {
			t.Errorf("warm-up %s: jobs %+v, want lost jobs: %t", c.warmup, res.Jobs, c.wantLost)
		}
	}
}
