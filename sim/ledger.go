// The ledger: what the simulation knows of each live job, which the
// invariant checks (check.go) read and update.

package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/queuey/queuey/queuey"
)

// job is what the simulation knows of one job while it is live.
type job struct {
	n        uint64
	q        *simQueue
	runs     int // handler runs started
	failures int // retryable failures: attempts spent
	poison   bool
	replay   *ReplayJob
	copies   int // messages of it in work or hold queues (ready or unacked)
	fresh    int // copies on the work queue never delivered from there
	ended    int // times it reached a terminal state
	explain  int // requeues after crashes and drops, which may explain a duplicate
	requeues int // requeues the worker asked for (a successor it could not publish)
	// The last run's attempt and deferrals, and how many runs repeated
	// the one before (invariant 11).
	ran                     bool
	lastAttempt, lastDefers int
	repeats                 int
	returns                 int // returns that count toward a quorum delivery limit
	state                   string
	expect                  []expectation // successors issued, oldest first
	holds                   []pendingHold
	deadWant                []deadWant
	// delivered are expectations met by deliveries the broker made and
	// the worker has yet to decode.
	delivered []expectation
	enqueued  time.Duration
}

// expectation is a successor the job should next be delivered as.
type expectation struct {
	attempt, deferrals int
	priority           uint8
	notBefore          time.Duration
	deferred           bool
	released           time.Duration // when it reached the work queue; 0 until then (a hold is never 0 long)
}

// pendingHold is a copy of the job waiting in a hold or wait queue.
type pendingHold struct {
	// queue is the hold or wait queue it waits in; for the hold ladder,
	// the ladder's relay queue, which stands for the whole ladder.
	queue string
	hops  int // rungs it has moved on to since the first (the ladder)
	// rungAt and rung are when it entered the rung it is in and that
	// rung's TTL (the ladder).
	rungAt, rung time.Duration
	at           time.Duration
	ttl          time.Duration
	delay        time.Duration
	kind         queuey.HoldKind
	// held says that its rung's dead letter was refused after a restart
	// or kill and waits for the rung's resend (membroker.Timing
	// .DeadLetterResend): its release from the rung comes late, as the
	// broker's does.
	held bool
}

// deadWant is a dead letter queuey published for the job.
type deadWant struct {
	reason   string
	attempts int
}

// end1 records that j reached a terminal state.
func (r *runner) end1(j *job, state, reason string) {
	j.ended++
	if j.ended > 1 {
		r.res.Jobs.Duplicates++
		if j.ended-1 > j.explain {
			r.violate(invConservation, j, fmt.Sprintf("job ended %d times (%s after %s) with only %d crash requeues to explain it", j.ended, state, j.state, j.explain))
		}
		return
	}
	j.state = state
	switch state {
	case "succeeded":
		r.res.Jobs.Succeeded++
		r.res.Attempts.Add(j.failures + 1)
	case "dead-lettered":
		r.res.Jobs.DeadLettered++
		r.res.DeadByReason[deadKey(reason)]++
		r.res.Attempts.Add(j.failures + 1)
	case "lost":
		r.res.Jobs.Lost++
	}
}

// deadKey groups "fatal: <error>" reasons under "fatal".
func deadKey(reason string) string {
	if strings.HasPrefix(reason, "fatal: ") {
		return "fatal"
	}
	return reason
}

// retire forgets a job that has ended and has no copy left.
func (r *runner) retire(j *job) {
	if j.ended > 0 && j.copies == 0 && len(j.deadWant) == 0 && len(j.holds) == 0 && len(j.delivered) == 0 {
		r.jobs.remove(j.n)
		if len(r.freeJobs) < 1024 {
			expect, holds, delivered := j.expect[:0], j.holds[:0], j.delivered[:0]
			*j = job{expect: expect, holds: holds, delivered: delivered}
			r.freeJobs = append(r.freeJobs, j)
		}
	}
}

// newJob returns a zeroed job, reusing a retired one's memory.
func (r *runner) newJob() *job {
	if n := len(r.freeJobs); n > 0 {
		j := r.freeJobs[n-1]
		r.freeJobs = r.freeJobs[:n-1]
		return j
	}
	return &job{expect: make([]expectation, 0, 2)}
}
