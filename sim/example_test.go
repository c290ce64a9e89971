package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/queuey/queuey/sim"
)

// A deferral comes back after its Retry-After and no attempt is spent; the
// same job retried waits its backoff rounded up to the retry granularity.
// The run checks every invariant as it goes. The simulated broker is as
// sloppy as a live one (Scenario.Timing): each hold comes back a little
// after its TTL, up to the broker's timer slack, and a hold walks the
// default hold ladder: its 22 rungs are the hold queues, declared with the
// work queue, and 30 s is 16 + 8 + 4 + 2 s, three relays.
func ExampleRun() {
	s := sim.Scenario{
		Duration: sim.Duration(time.Second),
		Drain:    sim.Duration(time.Minute),
		Queues: []sim.Queue{{
			Retry: sim.Retry{Base: sim.Duration(2 * time.Second), Jitter: "none"},
			Arrivals: []sim.Arrival{{Process: sim.ArrivalReplay, Jobs: []sim.ReplayJob{
				{At: 0, Outcomes: []string{"defer", "retry", "ok"}, RetryAfter: sim.Duration(30 * time.Second)},
			}}},
		}},
	}
	res, err := sim.Run(context.Background(), s, sim.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("succeeded %d, attempts %v, deferrals %d, violations %d\n",
		res.Jobs.Succeeded, res.Attempts.Counts(), res.Deferrals, res.ViolationCount)
	fmt.Printf("hold queues created %d, added wait max %s\n", res.HoldQueuesCreated, res.AddedWait.Max())
	// Output:
	// succeeded 1, attempts [0 0 1], deferrals 1, violations 0
	// hold queues created 22, added wait max 6.269137ms
}

// The negative control: with one shared wait queue and per-message
// expirations, a 1-second deferral queued behind a 60-second one is
// released only when the long one expires, and invariant 2 says so.
func ExampleScenario_legacy() {
	s := sim.Scenario{
		Duration: sim.Duration(5 * time.Second),
		Drain:    sim.Duration(2 * time.Minute),
		Legacy:   true,
		Timing:   sim.Timing{Exact: true}, // no broker latency: the 58 s are all head-of-line blocking
		Queues: []sim.Queue{{Arrivals: []sim.Arrival{{Process: sim.ArrivalReplay, Jobs: []sim.ReplayJob{
			{At: 0, Outcomes: []string{"defer", "ok"}, RetryAfter: sim.Duration(time.Minute)},
			{At: sim.Duration(time.Second), Outcomes: []string{"defer", "ok"}, RetryAfter: sim.Duration(time.Second)},
		}}}}},
	}
	res, err := sim.Run(context.Background(), s, sim.Options{NoExcerpts: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range res.Violations {
		fmt.Printf("invariant %d (%s), job %d: %s\n", v.Invariant, v.Name, v.Job, v.Detail)
	}
	// Output:
	// invariant 2 (never stuck behind a longer wait), job 2: held in jobs.wait at 0000001.000000s for 1s, released 58s after it was due
}
