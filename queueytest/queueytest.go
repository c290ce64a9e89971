// Package queueytest runs queuey jobs in a test, in virtual time, on
// membroker: the in-memory model of RabbitMQ that the rabbitmq backend runs
// on unchanged. A handler test can then say what a deferral means on a real
// broker (held, not deliverable; then run at the right attempt, deferral
// count and priority) in milliseconds, with no broker.
//
// Test runs a harness inside a testing/synctest bubble, where the worker's
// goroutines, the broker's timers and the handlers all share the bubble's
// clock: Advance(d) returns once every job due by then has run and been
// settled, with no polling. New makes one on a mock clock instead, for a
// test that cannot run in a bubble; it waits for the worker with WaitFor.
package queueytest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/internal/jobopts"
	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// TB is the part of testing.TB the harness uses; *testing.T satisfies it.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// Harness is a producer and a worker for some queues, on a membroker
// broker driven by a mock clock (New) or a synctest bubble's clock (Test).
//
// What a test sees at a virtual instant is the same in every run when
// handlers run one at a time. With several running at once (a queue's
// Prefetch, 10 by default), which failing job draws which retry jitter,
// and the order of runs that end together, are the scheduler's: a test
// that counts the runs done by an instant sets its queues' Retry.Jitter to
// queuey.NoJitter, or Prefetch to 1.
type Harness struct {
	t        TB
	Broker   *membroker.Broker
	Clock    *clock.Mock // nil in Test's bubble, whose clock is the time package's
	Backend  *rabbitmq.Backend
	Producer *queuey.Producer
	Worker   *queuey.Worker
	Log      *RunLog
	topology rabbitmq.Topology
	queues   []string // the names of its queues
	configs  map[string]queuey.QueueConfig
	// stopTimeout is the worker's StopTimeout, defaults applied.
	stopTimeout time.Duration
	started     bool
	bubble      bool // inside Test's synctest bubble
}

// Options configures New. The zero value is ready to use.
type Options struct {
	// Version is the RabbitMQ profile. Defaults to membroker.RabbitMQ43.
	Version membroker.Version
	// Topology overrides the backend's suffixes and granularities. Its
	// HoldWarmup defaults to none here: the harness's broker is never
	// killed, so a young quorum queue loses nothing.
	Topology rabbitmq.Topology
	// Producer configures the producer; its Clock is always the harness's.
	Producer queuey.ProducerConfig
	// Worker configures the worker; its Clock is always the harness's. Its
	// Rand, the retry jitter's draws, defaults to a source with a fixed
	// seed, so that a run that fails draws the same jitter in every run of
	// the test, as long as handlers run one at a time (see Harness).
	Worker queuey.WorkerConfig
}

// New builds a harness for queues: a broker, a backend, a producer and a
// worker, with every queue declared. Register handlers with Handle, then
// Start the worker. Everything stops when the test ends: a handler still
// running a second (of real time) later has its context cancelled, as the
// harness moves the mock clock through the worker's StopTimeout.
func New(t TB, opts Options, queues ...queuey.QueueConfig) *Harness {
	t.Helper()
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newHarness(t, opts, clk, queues)
	h.Clock = clk
	return h
}

// Test runs fn with a harness for queues inside a testing/synctest bubble
// (see synctest.Test): the broker, the backend, the worker and the handlers
// run on the bubble's clock, which starts at midnight UTC, 2000-01-01, and
// moves only when every goroutine in the bubble is blocked. So Advance and
// Settle return once everything that can happen by then has happened, and
// a test needs no WaitFor.
//
// A handler that waits on something outside the bubble (a real network
// call, a channel made outside) is not durably blocked: Settle and Advance
// wait for it in real time, with the bubble's clock stopped, so its own
// timeouts never fire. A connection kept alive (net/http's default client
// does) leaves a goroutine reading it for ever, and the next Settle never
// returns. So give a handler a fake made inside fn (an http.RoundTripper
// that answers, say), or use New, whose mock clock lets real I/O run. Host
// name lookups are safe in a bubble: Test makes the net package's shared
// channels outside it first (see prepareNetOutsideBubbles).
//
// The worker stops, and everything closes, when fn returns; a
// goroutine a handler started and left blocked then fails the test, as
// synctest.Test fails for any goroutine of the bubble still blocked.
func Test(t *testing.T, opts Options, queues []queuey.QueueConfig, fn func(t *testing.T, h *Harness)) {
	t.Helper()
	prepareNetOutsideBubbles()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, opts, clock.New(), queues)
		h.bubble = true
		fn(t, h)
	})
}

// newHarness builds a harness whose broker, producer and worker run on clk.
func newHarness(t TB, opts Options, clk clock.Clock, queues []queuey.QueueConfig) *Harness {
	t.Helper()
	b := membroker.New(membroker.Config{Clock: clk, Version: opts.Version})
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if opts.Topology.HoldWarmup == 0 {
		opts.Topology.HoldWarmup = -1
	}
	backend, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{Topology: opts.Topology, ServerVersion: conn.ServerVersion()})
	if err != nil {
		t.Fatalf("queueytest: backend: %v", err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	ctx := context.Background()
	pcfg := opts.Producer
	pcfg.Clock = clk
	producer, err := queuey.NewProducer(ctx, backend, queues, pcfg)
	if err != nil {
		t.Fatalf("queueytest: producer: %v", err)
	}
	wcfg := opts.Worker
	wcfg.Clock = clk
	if wcfg.StopTimeout == 0 {
		wcfg.StopTimeout = queuey.DefaultStopTimeout
	}
	if wcfg.Rand == nil {
		// The worker draws one at a time, under its lock.
		wcfg.Rand = rand.New(rand.NewPCG(1, 2)).Float64
	}
	worker, err := queuey.NewWorker(ctx, backend, queues, wcfg)
	if err != nil {
		t.Fatalf("queueytest: worker: %v", err)
	}
	names := make([]string, len(queues))
	configs := make(map[string]queuey.QueueConfig, len(queues))
	for i, q := range queues {
		names[i] = q.Name
		configs[q.Name] = q
	}
	return &Harness{t: t, Broker: b, Backend: backend, Producer: producer, Worker: worker,
		Log: &RunLog{}, topology: opts.Topology.WithDefaults(), queues: names, configs: configs, stopTimeout: wcfg.StopTimeout}
}

// Handle registers fn for jobs of T's kind, recording every run in h.Log,
// a run that panics included, with a *queuey.PanicError (the panic then
// goes on to the worker). Call it before Start.
func Handle[T queuey.JobArgs](h *Harness, fn func(ctx context.Context, job *queuey.Job[T]) error) {
	h.t.Helper()
	if h.started {
		h.t.Fatal("queueytest: Handle called after Start")
	}
	err := queuey.Register(h.Worker, queuey.HandlerFunc[T](func(ctx context.Context, job *queuey.Job[T]) error {
		defer func() {
			if v := recover(); v != nil {
				h.Log.add(h.run(ctx, job.JobContext, &queuey.PanicError{Value: v, Stack: debug.Stack()}))
				panic(v)
			}
		}()
		err := fn(ctx, job)
		h.Log.add(h.run(ctx, job.JobContext, err))
		return err
	}))
	if err != nil {
		h.t.Fatalf("queueytest: %v", err)
	}
}

// Start runs the worker until the test ends.
func (h *Harness) Start() {
	h.t.Helper()
	if h.started {
		h.t.Fatal("queueytest: Start called twice")
	}
	h.started = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Worker.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := h.awaitStop(done); err != nil {
			h.t.Errorf("queueytest: worker: %v", err)
		}
	})
}

// awaitStop waits for the worker's Run to return after its context ended.
// Run waits up to StopTimeout for running handlers, and only then cancels
// their contexts. In Test's bubble that time passes on its own; New's mock
// clock moves only when told, so a handler still waiting on its context
// (or on a sleep of the mock clock) at the end of a test would hold its
// cleanup for ever. So once stopGrace of real time has passed, for
// handlers doing real work to finish as they would in production, the
// clock is moved on by StopTimeout every 10 ms until Run returns (a move
// made before Run starts its stop timer misses it; the next does not). A
// handler that ignores its cancelled context still holds Run up, as it
// would in production.
func (h *Harness) awaitStop(done <-chan error) error {
	if h.bubble {
		return <-done
	}
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			h.Clock.Add(h.stopTimeout)
		}
	}
}

// stopGrace is how long, in real time, a harness of New lets running
// handlers finish at the end of a test before it moves the mock clock
// through the worker's StopTimeout.
const stopGrace = time.Second

// Advance moves virtual time forward: hold queues expire, waits end. In
// Test's bubble it returns once everything due by then has happened: jobs
// released and run, their successors published and the deliveries
// settled. With New, the worker catches up in its own time (see WaitFor).
func (h *Harness) Advance(d time.Duration) {
	h.t.Helper()
	if d < 0 {
		h.t.Fatalf("queueytest: Advance(%v): time does not go back", d)
	}
	if !h.bubble {
		h.advanceMock(d)
		return
	}
	time.Sleep(d)
	synctest.Wait()
}

// advanceMock is Advance on the mock clock. It steps from one broker event
// to the next (membroker.Broker.NextEvent) and, at each, waits for the
// worker to relay what a rung of the hold ladder released, so that the
// next rung's TTL counts from that instant, as it would in real time,
// rather than from the end of a jump.
func (h *Harness) advanceMock(d time.Duration) {
	target := h.Clock.Now().Add(d)
	for {
		next, ok := h.Broker.NextEvent()
		if !ok || next.After(target) {
			h.Clock.Add(target.Sub(h.Clock.Now()))
			return
		}
		h.Clock.Add(max(next.Sub(h.Clock.Now()), 0))
		h.awaitRelays()
	}
}

// awaitRelays waits, up to 5 s of real time, until the ladder's relay
// queue is empty and nothing taken from it is unsettled: the workers have
// moved every job a rung released on.
func (h *Harness) awaitRelays() {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r, ok := h.Broker.Queue(h.topology.RelayQueue())
		if !ok || r.Ready+r.Unacked == 0 || len(r.Consumers) == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Settle returns once everything that can happen without time moving has
// happened: jobs enqueued so far delivered, run and settled. It works in
// Test's bubble only; with New, use WaitFor.
func (h *Harness) Settle() {
	h.t.Helper()
	if !h.bubble {
		h.t.Fatal("queueytest: Settle needs the harness of Test; with New, use WaitFor")
	}
	synctest.Wait()
}

// Pending counts a queue's jobs ready to be delivered. A queue that does
// not exist fails the test.
func (h *Harness) Pending(queue string) int {
	h.t.Helper()
	return h.queue(queue).Ready
}

// queue is the broker's queue name, failing the test if there is none.
func (h *Harness) queue(name string) membroker.QueueInfo {
	h.t.Helper()
	q, ok := h.Broker.Queue(name)
	if !ok {
		h.t.Fatalf("queueytest: no queue %q", name)
	}
	return q
}

// Held counts a queue's jobs waiting in its hold queues: its classic hold
// queues, or the jobs on the shared hold ladder (its rungs and relay
// queue) that return to queue.
func (h *Harness) Held(queue string) int {
	prefix := queue + h.topology.DeferredSuffix + "."
	ladder := h.topology.WithDefaults().Ladder + "."
	n := 0
	for _, q := range h.Broker.Queues() {
		switch {
		case strings.HasPrefix(q.Name, prefix):
			n += q.Ready
		case strings.HasPrefix(q.Name, ladder) && q.Name != h.topology.LadderWarmQueue():
			for _, hd := range h.Broker.ReadyHeaders(q.Name) {
				if hd[rabbitmq.HeaderQueue] == queue {
					n++
				}
			}
		}
	}
	return n
}

// Dead counts a queue's dead-lettered jobs. A queue without a dead-letter
// queue fails the test.
func (h *Harness) Dead(queue string) int {
	h.t.Helper()
	return h.queue(h.topology.DeadQueue(queue)).Ready
}

// WaitFor waits until cond holds, failing the test with what after a
// bounded wait (5 s of real time: the worker runs in goroutines). Virtual
// time does not move while it waits. In Test's bubble it settles once and
// fails at once if cond does not hold then.
func (h *Harness) WaitFor(what string, cond func() bool) {
	h.t.Helper()
	if h.bubble {
		synctest.Wait()
		if !cond() {
			h.t.Fatalf("queueytest: %s has not happened once everything settled (runs so far: %v)", what, h.Log.Runs())
		}
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("queueytest: timed out waiting for %s (runs so far: %v)", what, h.Log.Runs())
		}
		h.Log.waitChange(5 * time.Millisecond)
	}
}

// Run is one handler run.
type Run struct {
	queuey.JobContext
	Err error // what the handler returned
	// Action is what the worker does with the job next, decided by the
	// worker's own rules from Err (as a *queuey.TimeoutError when the
	// handler returned it after its queue's Timeout), the job's counters
	// and its queue's retry policy: acknowledge it, retry it, defer it or
	// dead-letter it. A handler abandoned for ignoring its timeout is
	// logged only when it returns, and then its Action is not what
	// happened: the worker had settled the job as timed out already.
	Action queuey.Action
	// Delay is a deferral's delay as the handler asked for it; Reason is
	// a dead letter's x-death-reason ("attempts exhausted", "timed out",
	// "fatal: …").
	Delay  time.Duration
	Reason string
}

// run is a Run of job with the handler's result err, with the worker's
// decision on it (internal/settle.Decide, the function the worker calls;
// its jitter draw is left out, since a Run does not give the retry's
// delay).
func (h *Harness) run(ctx context.Context, job queuey.JobContext, err error) Run {
	env := queuey.Envelope{ID: job.ID, Kind: job.Kind, Queue: job.Queue, Attempt: job.Attempt,
		Deferrals: job.Deferrals, Priority: job.Priority}
	// The job's own attempts (queuey.WithMaxAttempts), as its envelope
	// carried them: JobContext.MaxAttempts is the one in force.
	env = jobopts.Write(env, jobopts.Options{MaxAttempts: job.MaxAttempts})
	q := h.configs[job.Queue]
	result := err
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		// Past the queue's Timeout: the worker counts the run as timed out.
		result = &queuey.TimeoutError{Timeout: q.WithDefaults().Timeout, Err: err}
	}
	dec := settle.Decide(env, result, q, 0)
	r := Run{JobContext: job, Err: err, Action: dec.Action}
	switch dec.Action {
	case queuey.ActionDefer:
		r.Delay = dec.Delay
	case queuey.ActionDeadLetter:
		r.Reason = dec.Reason
	}
	return r
}

func (r Run) String() string {
	return fmt.Sprintf("%s#%s attempt=%d deferrals=%d priority=%d err=%v", r.Kind, r.ID, r.Attempt, r.Deferrals, r.Priority, r.Err)
}

// RunLog records handler runs in the order they ended. Runs that end at one
// virtual instant on several handler goroutines (a queue's Prefetch is 10
// by default) are in the order the scheduler ran them, which can differ
// between runs of a test. It is safe for concurrent use.
type RunLog struct {
	mu      sync.Mutex
	runs    []Run
	changed chan struct{}
}

func (l *RunLog) add(r Run) {
	l.mu.Lock()
	l.runs = append(l.runs, r)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	l.mu.Unlock()
}

// waitChange returns when a run is added or after d.
func (l *RunLog) waitChange(d time.Duration) {
	l.mu.Lock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	ch := l.changed
	l.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// Runs returns every run so far.
func (l *RunLog) Runs() []Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Run(nil), l.runs...)
}

// RunsOf returns the runs of one job.
func (l *RunLog) RunsOf(id string) []Run {
	var out []Run
	for _, r := range l.Runs() {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

// netPrepared makes prepareNetOutsideBubbles run once per test binary.
var netPrepared sync.Once

// prepareNetOutsideBubbles makes the net package create, outside any
// bubble, the channels it otherwise creates on first use: the semaphore
// that guards rereading /etc/resolv.conf, and the cgo resolver's thread
// limit. A channel made inside a synctest bubble belongs to it, and
// another bubble that sends on it crashes the whole test binary ("send on
// synctest channel from outside bubble", golang/go#80903, open on Go 1.26):
// so without this, the second Test whose handler resolves a host name
// kills every test of the binary. Both lookups are answered locally (the
// hosts file, the services table); the timeout only bounds a broken
// system resolver.
func prepareNetOutsideBubbles() {
	netPrepared.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _ = net.DefaultResolver.LookupHost(ctx, "localhost")
		_, _ = net.DefaultResolver.LookupPort(ctx, "tcp", "http")
	})
}
