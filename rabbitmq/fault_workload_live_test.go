package rabbitmq

// Live faults under load: a producer enqueues 5,000 jobs while two
// workers process them, with retries and deferrals in flight, all on
// supervised connections (Connect); mid-run the broker drops every
// connection, restarts its application, or is killed with SIGKILL and
// started again. No confirmed job may be lost, every one must end
// (processed or dead-lettered), duplicates are counted and printed, and the
// workers must be consuming again within the backoff cap plus 5 s of the
// broker being back.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

type faultJob struct{ N int }

func (faultJob) Kind() string    { return "fault-job" }
func (j faultJob) Queue() string { return faultQueue }

// faultQueue is the queue of the running fault test (one at a time).
var faultQueue string

const (
	faultJobs    = 5000
	faultWorkers = 2
)

var faultBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// command runs the command that the environment variable env names (its
// words split on spaces), with args and without AMQP_URL or AMQP_URL_43 in its
// environment, which would make scripts/rabbitmq leave the broker alone.
// It may run on any goroutine.
func command(env string, args ...string) error {
	cmd := envCommand(env, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// envCommand is the command that env names, with args, without AMQP_URL
// or AMQP_URL_43 in its environment (command says why).
func envCommand(env string, args ...string) *exec.Cmd {
	argv := append(strings.Fields(os.Getenv(env)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AMQP_URL=") && !strings.HasPrefix(kv, "AMQP_URL_43=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}

func TestLiveFaultCloseAllConnectionsUnderLoad(t *testing.T) {
	runFaultWorkload(t, false, 6*time.Second, func() error {
		return command("QUEUEY_RABBITMQCTL", "close_all_connections", "queuey fault test")
	})
}

// faultRuns is how many runs each restart and kill workload makes:
// QUEUEY_FAULT_RUNS, 1 by default.
func faultRuns() int {
	if n, err := strconv.Atoi(os.Getenv("QUEUEY_FAULT_RUNS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// faultTimes are when, into the run, the fault of run i starts, in turn:
// within its first second, while every queue is younger than Ra's
// registration and the hold ladder warms up (HoldWarmup, 5 s), and after,
// with holds on the rungs and in the relay queue.
var faultTimes = []time.Duration{40 * time.Millisecond, 6 * time.Second, 900 * time.Millisecond, 7500 * time.Millisecond, 9 * time.Second}

// forFaultRuns runs workload faultRuns times, each as a subtest with its
// fault time.
func forFaultRuns(t *testing.T, workload func(t *testing.T, at time.Duration)) {
	for i := range faultRuns() {
		at := faultTimes[i%len(faultTimes)]
		t.Run(fmt.Sprintf("run=%d/at=%s", i+1, at), func(t *testing.T) { workload(t, at) })
	}
}

func TestLiveFaultBrokerRestartUnderLoad(t *testing.T) {
	forFaultRuns(t, func(t *testing.T, at time.Duration) {
		runFaultWorkload(t, true, at, func() error {
			if err := command("QUEUEY_RABBITMQCTL", "stop_app"); err != nil {
				return err
			}
			return command("QUEUEY_RABBITMQCTL", "start_app")
		})
	})
}

func TestLiveFaultKillNineUnderLoad(t *testing.T) {
	if os.Getenv("QUEUEY_RABBITMQ_SCRIPT") == "" {
		t.Skip("QUEUEY_RABBITMQ_SCRIPT not set: skipping a fault test that kills the broker (see .ci/run)")
	}
	forFaultRuns(t, func(t *testing.T, at time.Duration) {
		runFaultWorkload(t, true, at, func() error {
			if err := command("QUEUEY_RABBITMQ_SCRIPT", "kill"); err != nil {
				return err
			}
			return command("QUEUEY_RABBITMQ_SCRIPT", "start")
		})
	})
}

// faultFleet is the fault workloads' processes: a producer and
// faultWorkers workers, each on a supervised connection of its own, the
// workers running faultTally.handle.
type faultFleet struct {
	producer *queuey.Producer
	tally    *faultTally
	cancel   context.CancelFunc
	runErrs  chan error

	mu          sync.Mutex
	reconnected []time.Time // every worker's Connected after its first
}

// startFaultFleet connects the producer and the workers to urls (tried in
// turn) and starts the workers.
func startFaultFleet(t *testing.T, urls []string, opts Options, queues []queuey.QueueConfig) *faultFleet {
	t.Helper()
	f := &faultFleet{
		tally:   &faultTally{succeeded: map[int]int{}, last: map[int]string{}, outcome: map[int]string{}, deferredAt: map[int]time.Time{}, start: time.Now()},
		runErrs: make(chan error, faultWorkers),
	}
	connect := func(name string) *Backend {
		b, err := Connect(t.Context(), ConnectOptions{
			URLs: urls, Backoff: faultBackoff,
			OnState: func(e ConnEvent) {
				if e.State == StateConnected && e.Gen > 1 && strings.HasPrefix(name, "worker") {
					f.mu.Lock()
					f.reconnected = append(f.reconnected, time.Now())
					f.mu.Unlock()
				}
			},
		}, opts)
		if err != nil {
			t.Fatalf("%s: Connect: %v", name, err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	var err error
	if f.producer, err = queuey.NewProducer(t.Context(), connect("producer"), queues, queuey.ProducerConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	f.cancel = cancel
	t.Cleanup(cancel)
	for i := range faultWorkers {
		w, err := queuey.NewWorker(t.Context(), connect(fmt.Sprintf("worker %d", i)), queues, queuey.WorkerConfig{StopTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := queuey.Register(w, queuey.HandlerFunc[faultJob](f.tally.handle)); err != nil {
			t.Fatal(err)
		}
		go func() { f.runErrs <- w.Run(ctx) }()
	}
	return f
}

// stop stops the workers and reports what their Runs returned.
func (f *faultFleet) stop(t *testing.T) {
	t.Helper()
	f.cancel()
	for range faultWorkers {
		if err := <-f.runErrs; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// reconnections is when the workers connected again, so far.
func (f *faultFleet) reconnections() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reconnected)
}

// handle is the workload's handler: work that takes a while, so that jobs
// are in hand when the fault comes (about ten at the producer's rate); a
// quarter of the jobs fail twice, and a fifth are rate limited once.
func (f *faultTally) handle(ctx context.Context, j *queuey.Job[faultJob]) error {
	n := j.Args.N
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	switch {
	case n%4 == 0 && j.Attempt <= 2: // fails twice, then succeeds
		f.run(n, j, "failed")
		return errors.New("flaky service")
	case n%5 == 0 && j.Deferrals == 0: // rate limited once
		f.run(n, j, "deferred")
		return queuey.Defer(faultDeferral, "rate limited")
	}
	f.run(n, j, "ok")
	return nil
}

// faultDeferral is the workload's rate-limit deferral. A deferral comes
// back at its queue's top priority, ahead of the backlog, so the time from
// its run to the next, less faultDeferral, is how late its hold released
// it (plus a publish and a delivery): the figure docs/hold-ladder.md gives
// for holds a fault interrupts. A retry waits behind the backlog too, so
// its gap says nothing of its hold.
const faultDeferral = 300 * time.Millisecond

// faultTally is what the handlers saw.
type faultTally struct {
	mu        sync.Mutex
	succeeded map[int]int    // handler successes by job
	last      map[int]string // each job's last run: attempt, deferrals, outcome, when
	outcome   map[int]string // each job's last outcome: ok, failed or deferred
	runs      int
	lastRun   time.Time
	start     time.Time
	// deferredAt is when each job's deferral was asked for; late, how late
	// each deferral came back (its gap less faultDeferral), and lateAt when
	// each came back, in the order they did.
	deferredAt map[int]time.Time
	late       []time.Duration
	lateAt     []time.Time
}

func (f *faultTally) run(n int, j *queuey.Job[faultJob], outcome string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs++
	f.lastRun = time.Now()
	if outcome == "deferred" {
		f.deferredAt[n] = f.lastRun
	} else if at, ok := f.deferredAt[n]; ok && j.Deferrals == 1 {
		f.late = append(f.late, f.lastRun.Sub(at)-faultDeferral)
		f.lateAt = append(f.lateAt, f.lastRun)
		delete(f.deferredAt, n)
	}
	if outcome == "ok" {
		f.succeeded[n]++
	}
	f.outcome[n] = outcome
	f.last[n] = fmt.Sprintf("attempt %d, %d deferrals, %s at %s", j.Attempt, j.Deferrals, outcome, f.lastRun.Sub(f.start).Round(time.Millisecond))
}

// runFaultWorkload runs the workload, starts fault at into the run,
// beside the enqueueing and the workers, and checks the outcome.
//
// restarts says the fault restarts the broker. Then a job whose successor
// was waiting in a classic hold queue may be lost: RabbitMQ dead-letters
// from a classic queue at most once, without a confirm
// (rabbit_dead_letter:publish/5 delivers "stateless", v4.0.5), so a hold
// that expires while its work queue is stopping or not yet recovered
// drops the job. Such losses are counted and printed
// (docs/reconnection.md); any other loss fails the test.
func runFaultWorkload(t *testing.T, restarts bool, at time.Duration, fault func() error) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	if os.Getenv("QUEUEY_RABBITMQCTL") == "" {
		t.Skip("QUEUEY_RABBITMQCTL not set: skipping a fault test that needs rabbitmqctl (see .ci/run)")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	faultQueue = "queuey-fault-" + hex.EncodeToString(rnd[:])
	opts := Options{Topology: Topology{RetryGranularity: 100 * time.Millisecond, DeferredGranularity: 100 * time.Millisecond}}
	queues := []queuey.QueueConfig{{
		Name: faultQueue, Prefetch: 20,
		Retry: queuey.RetryPolicy{Base: 50 * time.Millisecond, Cap: 400 * time.Millisecond, MaxAttempts: 6},
	}}
	var back time.Time      // when fault returned: the broker is back
	var backAt atomic.Int64 // back, for the cleanup, which may run before the fault returns
	t.Cleanup(func() {
		// Deleting the rungs while their dead-letter workers start, just
		// after a boot, can stop RabbitMQ 4.0.5's supervisor of those
		// workers until the node restarts (docs/hold-ladder.md, "Deleting
		// a ladder"): leave them dlxWorkerStart after the broker is back.
		if at := backAt.Load(); at != 0 {
			time.Sleep(time.Until(time.Unix(0, at).Add(dlxWorkerStart)))
		}
		deleteFaultQueues(t, url, opts.Topology.WithDefaults())
	})

	fleet := startFaultFleet(t, []string{url}, opts, queues)
	producer, tally := fleet.producer, fleet.tally

	// Enqueue, the fault starting at at and running
	// beside the producer and the workers.
	confirmed := map[int]bool{}
	var maybe []int
	faultDone := make(chan error, 1)
	start := time.Now()
	faultAt := 0 // the job being enqueued then
	var enqueuing atomic.Int64
	time.AfterFunc(at, func() {
		faultAt = int(enqueuing.Load())
		err := fault()
		back = time.Now()
		backAt.Store(back.UnixNano())
		faultDone <- err
	})
	for n := 1; n <= faultJobs; n++ {
		enqueuing.Store(int64(n))
		ectx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		_, err := producer.Enqueue(ectx, faultJob{N: n})
		cancel()
		switch {
		case err == nil:
			confirmed[n] = true
		case errors.Is(err, queuey.ErrMaybeEnqueued):
			maybe = append(maybe, n)
		default:
			t.Fatalf("enqueue %d: %v", n, err)
		}
	}
	t.Logf("enqueued %d jobs in %s: %d confirmed, %d maybe (unconfirmed when the connection dropped)",
		faultJobs, time.Since(start).Round(time.Millisecond), len(confirmed), len(maybe))
	if err := <-faultDone; err != nil {
		t.Fatalf("the fault: %v", err)
	}
	t.Logf("the fault ended %s into the run: the broker is back", back.Sub(start).Round(time.Millisecond))

	// Wait until every confirmed job has ended, or nothing has run for 15 s.
	var lostInHolds []string
	for {
		tally.mu.Lock()
		var missing, held []string
		for n := range confirmed {
			if tally.succeeded[n] == 0 {
				last := tally.last[n]
				if last == "" {
					last = "never ran"
				}
				m := fmt.Sprintf("job %d (last run: %s)", n, last)
				if o := tally.outcome[n]; o == "failed" || o == "deferred" {
					held = append(held, m) // its successor went to a hold queue
				}
				missing = append(missing, m)
			}
		}
		idle := time.Since(tally.lastRun)
		tally.mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if idle > faultIdle(opts.Topology, restarts) {
			depths := faultQueueDepths(t, url, opts.Topology.WithDefaults())
			if !restarts || len(held) < len(missing) || !opts.Topology.ClassicHolds {
				t.Fatalf("%d confirmed jobs have not ended, last handler run %s ago, the fault ended at %s: %s\nqueues: %s",
					len(missing), idle.Round(time.Second), back.Sub(tally.start).Round(time.Millisecond),
					strings.Join(missing, "; "), depths)
			}
			t.Logf("%d jobs whose successors were in a classic hold queue across the restart were lost: %s\nqueues: %s",
				len(held), strings.Join(held, "; "), depths)
			lostInHolds = held
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A fault late in the run may find every job done: the workers must
	// still be seen consuming again before they are stopped.
	for deadline := back.Add(faultBackoff.Max + 5*time.Second); len(fleet.reconnections()) < faultWorkers && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	fleet.stop(t)

	tally.mu.Lock()
	defer tally.mu.Unlock()
	lost := 0
	for n := range confirmed {
		if tally.succeeded[n] == 0 {
			lost++ // only in classic hold queues across a restart: the wait above fails on any other
		}
	}
	duplicates, maybeRan := 0, 0
	for n, k := range tally.succeeded {
		duplicates += k - 1
		if !confirmed[n] {
			maybeRan++
		}
	}
	dead := countFaultDeadLetters(t, url)
	connected := fleet.reconnections()
	var recovery time.Duration
	for _, at := range connected {
		recovery = max(recovery, at.Sub(back))
	}
	reconnections := len(connected)
	t.Logf("RESULT %s (hold ladder: %t, fault %s into the run, at job %d): %d jobs, %d confirmed, %d maybe-enqueued (%d of them ran), %d lost (%d of them in classic hold queues across the restart), %d dead-lettered, %d duplicates, %d handler runs, "+
		"workers reconnected %d times, the last %s after the broker was back; %s",
		t.Name(), !opts.Topology.ClassicHolds, at, faultAt, faultJobs, len(confirmed), len(maybe), maybeRan, lost, len(lostInHolds), dead, duplicates, tally.runs, reconnections, recovery.Round(time.Millisecond),
		lateDeferrals(tally.late, tally.lateAt, back))
	if dead != 0 {
		t.Errorf("%d jobs were dead-lettered; none should be", dead)
	}
	if reconnections < faultWorkers {
		t.Errorf("the workers reconnected %d times; each should have at least once", reconnections)
	}
	if limit := faultBackoff.Max + 5*time.Second; recovery > limit {
		t.Errorf("a worker reconnected %s after the broker was back, over the backoff cap plus 5 s (%s)", recovery, limit)
	}
}

// faultIdle is how long the fault workloads wait for a job while nothing
// runs before they call the jobs still missing lost: 15 s; after a restart
// with the ladder, 200 s, since a quorum rung whose dead letter the restart
// left unconfirmed sends it again only after
// dead_letter_worker_publisher_confirm_timeout, 180 s by default
// (docs/rabbitmq-semantics.md §13.1), or QUEUEY_DLX_CONFIRM_TIMEOUT if the
// broker was configured with another.
func faultIdle(top Topology, restarts bool) time.Duration {
	if !restarts || top.ClassicHolds {
		return 15 * time.Second
	}
	if d, err := time.ParseDuration(os.Getenv("QUEUEY_DLX_CONFIRM_TIMEOUT")); err == nil {
		return d + 20*time.Second
	}
	return 200 * time.Second
}

// faultQueueDepths says how many messages (ready and unacknowledged) each of
// the fault queue's queues holds.
func faultQueueDepths(t *testing.T, url string, top Topology) string {
	conn, err := amqp.Dial(url)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer conn.Close()
	names := []string{faultQueue, top.DeadQueue(faultQueue)}
	for ttl := int64(100); ttl <= 400; ttl += 100 {
		names = append(names, top.HoldQueue(faultQueue, ttl))
	}
	names = append(names, top.LadderQueues()...)
	var parts []string
	for _, name := range names {
		ch, err := conn.Channel()
		if err != nil {
			return err.Error()
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			parts = append(parts, name+": "+err.Error())
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %d messages, %d consumers", name, q.Messages, q.Consumers))
		_ = ch.Close()
	}
	return strings.Join(parts, "; ")
}

// countFaultDeadLetters is how many messages wait on the fault queue's
// dead-letter queue.
func countFaultDeadLetters(t *testing.T, url string) int {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(faultQueue+".dead", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("the dead-letter queue: %v", err)
	}
	return q.Messages
}

// dlxWorkerStart is how long after a broker is back the fault workloads
// wait before they delete their ladders: the dead-letter workers of the
// rungs start as the queues recover, within a second or two of the boot.
const dlxWorkerStart = 10 * time.Second

// deleteFaultQueues deletes the fault queue, its dead-letter queue, the
// classic hold queues its retries and deferrals used and its ladder, so that
// runs leave no quorum queue behind to slow the next restart.
func deleteFaultQueues(t *testing.T, url string, top Topology) {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Errorf("cleanup: dial: %v", err)
		return
	}
	defer conn.Close()
	names := []string{faultQueue, top.DeadQueue(faultQueue)}
	for ttl := int64(100); ttl <= 400; ttl += 100 {
		names = append(names, top.HoldQueue(faultQueue, ttl))
	}
	names = append(names, top.WarmQueue(faultQueue)) // the shared ladder stays
	for _, name := range names {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.Close()
	}
}

// lateDeferrals sums up how late the workload's deferrals came back: how
// many came back, how many over a second late, the largest lateness, and
// of the late ones how many came back after the broker was (back).
func lateDeferrals(late []time.Duration, at []time.Time, back time.Time) string {
	n, after := 0, 0
	var most time.Duration
	for i, l := range late {
		most = max(most, l)
		if l > time.Second {
			n++
			if at[i].After(back) {
				after++
			}
		}
	}
	return fmt.Sprintf("deferrals back %d, over 1 s late %d (%d of them after the broker was back), the latest %s late",
		len(late), n, after, most.Round(time.Millisecond))
}
