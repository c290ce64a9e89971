package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestLateHoldsAfterAFaultAsLive runs the live fault workload's copy with
// the default hold ladder, a restart or a kill 6 s or 7.5 s in (when holds
// are on the rungs) and the broker back 10 s later, as the live runs of
// 2026-12-06 were (docs/hold-ladder.md, "Holds a fault makes late"), and
// checks that the simulator's holds come back as late as the live
// broker's, within a factor of two:
//
//   - RabbitMQ 4.0.5 sent a stalled rung's refused releases again after
//     the 180 s resend, after most restarts and kills with holds on the
//     rungs: the latest deferral 176 to 199 s late; 47 to 1,000
//     deferrals over a second late after a restart, 182 to 536 after a
//     kill (a kill held back the rung's later releases too). The profile
//     must stall at least once, and each stalled run must be within half
//     the least and twice the most of those.
//   - RabbitMQ 4.3.6 never stalled (20 runs): in the runs with holds on
//     the rungs the latest deferral was 5.1 to 16.5 s late, 15 to 78 over
//     a second late. The profile must keep every run within half the
//     least and twice the most.
func TestLateHoldsAfterAFaultAsLive(t *testing.T) {
	t.Parallel()
	type want struct {
		stalls               bool          // some run waits out the resend
		latestMin, latestMax time.Duration // a compared run's latest hold
		deferrals            [2]int        // its late deferrals, least and most
	}
	wants := map[string]map[string]want{
		"RabbitMQ40": {
			FaultRestart: {stalls: true, latestMin: 176 * time.Second / 2, latestMax: 2 * 199 * time.Second, deferrals: [2]int{47 / 2, 2 * 1000}},
			FaultKill:    {stalls: true, latestMin: 176 * time.Second / 2, latestMax: 2 * 199 * time.Second, deferrals: [2]int{182 / 2, 2 * 536}},
		},
		"RabbitMQ43": {
			FaultRestart: {latestMin: 5100 * time.Millisecond / 2, latestMax: 2 * 16500 * time.Millisecond, deferrals: [2]int{15 / 2, 2 * 78}},
			FaultKill:    {latestMin: 5100 * time.Millisecond / 2, latestMax: 2 * 16500 * time.Millisecond, deferrals: [2]int{15 / 2, 2 * 78}},
		},
	}
	for profile, kinds := range wants {
		stalled := 0
		for kind, w := range kinds {
			for i, at := range []time.Duration{6 * time.Second, 7500 * time.Millisecond} {
				s := liveFaultWorkload(uint64(i+1), kind)
				s.Profile = profile
				s.Topology.Fresh = true // the live runs' queues are new
				s.Faults[0].At, s.Faults[0].Restart = dur(at), dur(10*time.Second)
				res, _ := run(t, s, Options{})
				requireNoViolations(t, res)
				name := fmt.Sprintf("%s, %s at %s", profile, kind, at)
				t.Logf("%s: %d holds late, %d of them deferrals, the latest %s", name, res.LateHolds, res.LateDeferrals, res.LatestHold.D())
				if res.Jobs.Lost != 0 || res.Jobs.InFlight != 0 {
					t.Errorf("%s: jobs %+v", name, res.Jobs)
				}
				latest := res.LatestHold.D()
				if latest >= DefaultDeadLetterResend {
					stalled++
				} else if w.stalls {
					continue // a run that did not stall: only stalled ones are compared
				}
				if latest < w.latestMin || latest > w.latestMax {
					t.Errorf("%s: the latest hold %s late, want %s to %s", name, latest, w.latestMin, w.latestMax)
				}
				if n := res.LateDeferrals; n < w.deferrals[0] || n > w.deferrals[1] {
					t.Errorf("%s: %d deferrals late, want %d to %d", name, n, w.deferrals[0], w.deferrals[1])
				}
			}
		}
		if want := kinds[FaultKill].stalls; (stalled > 0) != want {
			t.Errorf("%s: %d of 4 runs waited out the resend; want stalls: %t", profile, stalled, want)
		}
	}
}
