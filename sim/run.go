package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/execute"
	"github.com/queuey/queuey/internal/redial"
	"github.com/queuey/queuey/internal/relay"
	"github.com/queuey/queuey/internal/sabotage"
	"github.com/queuey/queuey/internal/schedcore"
	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Options configure a Run. The zero value is ready to use.
type Options struct {
	// Trace receives the text trace, one event per line. Defaults to nil:
	// the trace is only hashed (Result.TraceHash).
	Trace io.Writer
	// Progress, if set, is called now and then with the virtual time done
	// and the total, from the simulation's goroutine.
	Progress func(done, total time.Duration)
	// MaxViolations is how many violations Result keeps in full (all are
	// counted). Defaults to 20.
	MaxViolations int

	// NoExcerpts leaves Violation.Excerpt empty. Excerpts come from
	// replaying the run (see Run), which doubles its cost when anything is
	// violated: a run expected to violate an invariant on every hold, such
	// as a Legacy one, is better off without. Defaults to false.
	NoExcerpts bool

	// Sabotage breaks queuey on purpose, for the property tests that
	// prove a check fires (internal/sabotage). The zero value is queuey
	// as it is.
	Sabotage sabotage.Set

	// wrapCore, if set, wraps each worker process's core (the product's
	// settle.Core) before its executor drives it: a test's own code that
	// breaks the core on purpose. A wrapped core may settle a delivery
	// again after acknowledging it, so deliveries are then not reused.
	wrapCore func(execute.Core[*simDelivery]) execute.Core[*simDelivery]
	// wrapSched, if set, wraps each scheduler process's core likewise.
	wrapSched func(schedcore.Stepper) schedcore.Stepper
	// wrapDial, if set, wraps each process's reconnection loop's core
	// (internal/redial) likewise.
	wrapDial func(redial.Stepper) redial.Stepper
}

// keepsDeliveries says that a delivery may be settled again after its
// acknowledgement, so it must not be recycled then.
func (o Options) keepsDeliveries() bool { return o.wrapCore != nil }

// Start is the virtual instant every run starts at.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run simulates s (defaults applied) on membroker under a virtual clock,
// on one goroutine, and returns what happened. It runs the product: the
// real rabbitmq backend, and the worker core that queuey.Worker.Run drives
// (internal/workercore), which decodes, decides and settles every delivery;
// only the handlers are simulated. The same scenario gives the same Result and the same trace,
// byte for byte. Invariant violations are in the Result, not the error;
// the error is for a scenario that does not validate, ctx ending, or the
// simulation itself failing.
func Run(ctx context.Context, s Scenario, opts Options) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.WithDefaults()
	if opts.MaxViolations == 0 {
		opts.MaxViolations = 20
	}
	res, err := runOnce(ctx, s, opts, nil)
	if err != nil || len(res.Violations) == 0 || opts.NoExcerpts {
		return res, err
	}
	// Excerpts come from a second run watching the jobs concerned: the
	// simulation is deterministic, so it replays the same trace, and the
	// first run need not keep every job's history just in case.
	ex := &excerpter{jobs: map[uint64][]seqEvent{}}
	for _, v := range res.Violations {
		if v.Job != 0 {
			ex.jobs[v.Job] = nil
		}
		ex.until = max(ex.until, v.seq)
	}
	again, err := runOnce(ctx, s, Options{MaxViolations: opts.MaxViolations, Sabotage: opts.Sabotage, wrapCore: opts.wrapCore, wrapSched: opts.wrapSched, wrapDial: opts.wrapDial}, ex)
	if err != nil {
		return nil, err
	}
	if again.TraceHash != res.TraceHash {
		return nil, fmt.Errorf("sim: nondeterminism: replaying the run for its violations' excerpts gave trace %s, not %s",
			again.TraceHash, res.TraceHash)
	}
	for i := range res.Violations {
		res.Violations[i].Excerpt = ex.excerpt(res.Violations[i])
	}
	return res, nil
}

func runOnce(ctx context.Context, s Scenario, opts Options, ex *excerpter) (*Result, error) {
	r, err := newRunner(ctx, s, opts)
	if err != nil {
		return nil, err
	}
	r.ex = ex
	defer r.close()
	if err := r.loop(); err != nil {
		return nil, err
	}
	return r.finish(), nil
}

// runner is one simulation.
type runner struct {
	ctx context.Context // ends the run; checked between steps
	// bg is the context of every call into the product: never cancelled
	// (a call failing because ctx ended would change the trace rather than
	// stop the run), with the virtual now as its deadline, so that the
	// product never waits (virtualDeadline).
	bg     context.Context
	s      Scenario
	opts   Options
	clk    *Clock
	broker *membroker.Broker
	top    rabbitmq.Topology
	end    time.Time // arrivals stop
	stop   time.Time // the run stops
	queues []*simQueue
	fatal  error // the simulation itself broke
	steps  uint64

	// The runner's four jobs, each with its own state (the methods that
	// use each are in the file named after it).
	workload             // workload.go
	driver               // driver.go
	faultState           // faults.go
	oracle               // check.go, ledger.go, result.go
	per        *periodic // periodic.go: the scheduler group; nil without Scenario.Periodic
}

// workload is the state of the arrivals and of the producer that enqueues
// them.
type workload struct {
	jobArgs           simJob // the arguments of the job being enqueued
	nextJob           uint64
	producerConn      *membroker.Connection
	producerBack      *rabbitmq.Backend
	producer          *queuey.Producer
	producerDown      bool // its connection is gone: arrivals wait
	producerDial      redial.Stepper
	producerDialWatch dialWatch
	producerGen       uint64   // producer reconnection loops so far
	waiting           []uint64 // jobs that arrived while it was down, in order
	enqueuing         uint64   // the job it is enqueueing: the ID NewID gives
	configs           []queuey.QueueConfig
}

// driver is the state of the system under test's worker processes.
type driver struct {
	freeDels []*simDelivery           // settled, for reuse
	subs     map[string]*subscription // by consumer tag
	ready    []*subscription          // with deliveries to take, in the order they came
}

// faultState is what the injected faults leave behind.
type faultState struct {
	squatted map[string]bool // hold queue names a refuse-hold fault holds
	// unreachable is when the broker takes connections again after a
	// restart or an outage; restarting is set while it closes every
	// connection of queuey's, one after another (see bounced).
	unreachable time.Time
	restarting  bool
	adminConn   *membroker.Connection
	admin       *membroker.Channel // malformed bodies, refused holds, dead-letter audits
}

// oracle is the invariant checks' state: what is known of every job and
// queue, and the result and trace being built.
type oracle struct {
	byName      map[string]*simQueue // work, wait and dead queue names
	holdNames   map[string]queueRole // hold queue names seen, classified
	recentNames [4]recentName        // the names classified last
	recentNext  int
	// releaseSlack is how late after its TTL a hold may be released and
	// still be on time (invariant 2), beyond expiryResolution: the
	// broker's timer slack.
	releaseSlack time.Duration
	// relayName and rungPrefix are the hold ladder's relay queue and the
	// start of its rungs' names, made once: events name them all the time.
	relayName, rungPrefix string
	// bootSpan is the broker's Timing.BootSpan, and bootEnd when the
	// quorum queues have all started again after the last restart or
	// kill: a rung expires nothing before it has, so a hold due in between
	// may be released as late as bootEnd (invariant 2).
	bootSpan, bootEnd time.Duration

	jobs     jobTable
	freeJobs []*job // retired, for reuse

	rec *recorder
	res *Result

	// cur is the job whose settlement is being published, so that the
	// observer can attribute what the broker reports during the call.
	cur    settling
	curSet bool // cur describes a settlement in progress
	refuse bool // the settlement in progress is refused (procBackend)
	closed bool // the run is over (close)
	// relaying says that a relay publish is in progress, for relayJob
	// (nil for a message that is not a job of the run).
	relaying bool
	relayJob *job
	// relayShell is the relay under way (relayOne).
	relayShell simRelay
	relay      relay.Stepper // what the relay subscriptions' deliveries are stepped through
	// follow decides how the workers' subscriptions follow their
	// channels' end: the product's consume.Follow for a supervised
	// consumer, or a test's wrapper (sabotage.Set.Follow).
	follow  consume.Follower
	settler sabotage.Settler // how the workers settle their work deliveries: coreSettler, unless a test wraps it
	// warming are jobs whose Enqueue waits for the warm-up of their young
	// quorum work queue (rabbitmq.Topology.HoldWarmup).
	warming  map[uint64]struct{}
	auditDue bool       // something reached a dead-letter queue
	ex       *excerpter // set in a replay for excerpts
}

// settling is a settlement in progress.
type settling struct {
	j      *job
	dec    settle.Decision
	ttl    time.Duration // the hold's rounded TTL
	issued time.Duration
}

// simQueue is a work queue of the scenario with its workers.
type simQueue struct {
	idx       int
	spec      Queue
	cfg       queuey.QueueConfig
	top       uint8
	priority  bool // classic with x-max-priority: invariant 4 applies
	dead      string
	wait      string // legacy wait queue
	workers   []*worker
	holds     int // hold queues existing now
	holdBound int // invariant 7
	released  []uint64
	arrivals  []*arrivalState
	malformed map[uint64][]byte // bodies published, until audited
}

// worker is one worker process: its connection, backend and subscription.
type worker struct {
	q    *simQueue
	idx  int
	gen  int // bumped when the process dies
	up   bool
	conn *membroker.Connection
	back queuey.Backend
	rb   *rabbitmq.Backend
	sub  *subscription
	// relaySub is its subscription to the hold ladder's relay queue,
	// shared by every work queue; nil with classic holds.
	relaySub *subscription
	// core is the process's worker core: made when the process starts,
	// kept across its reconnections, gone when it dies.
	core execute.Core[*simDelivery]
	x    *execute.Executor[*simDelivery] // carries out core's actions
	lost []workercore.Gen                // channels lost that the core has yet to hear of
	// work and relayWork are the product's subscriptions (internal/consume)
	// to the queue and the ladder's relay queue: made when the process starts, kept
	// across its reconnections (each resumes on a fresh channel when its
	// core asks to, reopenWork and reopenRelay), gone when it dies. The
	// generation of a work subscription's channel is the core's.
	work, relayWork         *consume.Sub
	reopenWork, reopenRelay bool
	// dial is the process's reconnection loop (internal/redial, the code
	// rabbitmq.Connect runs), made when it reconnects; nil before.
	dial      redial.Stepper
	dialWatch dialWatch
	dials     uint64 // processes so far, which keys its jitter draws
	// restart is how long the process stays down after its next crash;
	// defaults to a second.
	restart time.Duration
	tags    int // subscriptions so far, for consumer tags
}

func (w *worker) restartAfter() time.Duration {
	if w.restart > 0 {
		return w.restart
	}
	return time.Second
}

func (s *subscription) release(n uint64) {
	for i, h := range s.held {
		if h == n {
			last := len(s.held) - 1
			s.held[i] = s.held[last]
			s.held = s.held[:last]
			return
		}
	}
}

// subscription is one channel generation of a worker's subscription: the
// product's consumer core (kept across reconnections, worker.work) on
// that channel, stepped. A resumed subscription is a new one, under the
// same consumer tag.
type subscription struct {
	core    *consume.Sub
	in      <-chan amqp.Delivery // core's deliveries on the channel of generation gen
	ch      consume.Channel      // core's channel
	w       *worker
	tag     string
	pending int            // deliveries the broker reported and the worker has yet to take
	back    queuey.Backend // the backend it came from, which publishes its jobs' successors
	held    []uint64       // numbers of the jobs in hand (a prefetch's worth), in no order
	dead    bool           // its channel or its process is gone
	gen     workercore.Gen
	relay   bool // a subscription to the relay queue: its deliveries are relayed, not run
	// closedByBroker: invariant 10 fired for it
	closedByBroker bool
}

// attach makes core, on its current channel, the subscription's.
func (s *subscription) attach(core *consume.Sub) {
	var gen uint64
	s.core = core
	s.ch, gen, s.in, _ = core.Current()
	s.gen = workercore.Gen(gen)
}

func newRunner(ctx context.Context, s Scenario, opts Options) (*runner, error) {
	version, _ := parseProfile(s.Profile)
	r := &runner{
		ctx: ctx, s: s, opts: opts,
		clk: NewClock(Start),
		top: s.Topology.rabbitmq().WithDefaults(),
		oracle: oracle{
			byName:    map[string]*simQueue{},
			holdNames: map[string]queueRole{},
			rec:       newRecorder(opts.Trace),
			res:       newResult(s),
		},
		faultState: faultState{squatted: map[string]bool{}},
		driver:     driver{subs: map[string]*subscription{}},
	}
	r.bg = virtualDeadline{context.Background(), r.clk}
	r.relay = relay.Core{}
	r.relayName, r.rungPrefix = r.top.RelayQueue(), r.top.Ladder+".ladder."
	r.follow = consume.Follow{Supervised: true}
	if wrap := opts.Sabotage.Follow; wrap != nil {
		r.follow = wrap(r.follow)
	}
	if wrap := opts.Sabotage.Relay; wrap != nil {
		r.relay = wrap(r.relay)
	}
	r.settler = coreSettler{}
	if wrap := opts.Sabotage.Settle; wrap != nil {
		r.settler = wrap(r.settler)
	}
	r.end = Start.Add(s.Duration.D())
	r.stop = r.end.Add(s.Drain.D())
	if s.Legacy {
		r.top.ClassicHolds = true // its holds go to the wait queue; the rest is as it was then
	}
	tm := s.Timing.membroker(s.Seed)
	if !slices.ContainsFunc(s.Faults, func(f Fault) bool { return f.Kind == FaultKill }) {
		// Only a Crash reads what reached disk. Following it costs a run
		// 5.8 % more time (BenchmarkSizingHour, six alternating rounds
		// against the build before it, p = 0.04) and changes nothing else.
		tm.ClassicSync, tm.QuorumRegister = 0, 0
	}
	r.broker = membroker.New(membroker.Config{Clock: r.clk, Version: version, Observer: r.observe, Timing: tm})
	// A hold is released on time if it reaches the work queue no later
	// than the broker's timer slack allows.
	if !s.Timing.Exact {
		r.releaseSlack = s.Timing.TimerSlack.D()
		r.bootSpan = s.Timing.BootSpan.D()
	}

	var configs []queuey.QueueConfig
	for i, spec := range s.Queues {
		cfg, _ := spec.config()
		q := &simQueue{
			idx: i, spec: spec, cfg: cfg, top: cfg.TopPriority(),
			priority:  cfg.Type == queuey.Classic && *cfg.MaxPriority > 0,
			dead:      r.top.DeadQueue(spec.Name),
			malformed: map[uint64][]byte{},
		}
		q.holdBound = holdBound(cfg, spec, r.top)
		r.queues = append(r.queues, q)
		r.byName[spec.Name] = q
		r.byName[q.dead] = q
		configs = append(configs, cfg)
		for k, a := range spec.Arrivals {
			q.arrivals = append(q.arrivals, &arrivalState{a: a, stream: uint64(i)<<16 | uint64(k)})
		}
	}
	r.configs = configs
	if !s.Topology.Fresh && !r.top.ClassicHolds && !s.Legacy {
		if err := r.deployBefore(); err != nil {
			return nil, err
		}
	}
	var err error
	r.adminConn, _ = r.broker.Dial()
	if r.admin, err = r.adminConn.Channel(); err != nil {
		return nil, fmt.Errorf("sim: admin channel: %w", err)
	}
	if err := r.connectProducer(); err != nil {
		return nil, err
	}
	for _, q := range r.queues {
		if s.Legacy {
			q.wait = q.spec.Name + ".wait"
			r.byName[q.wait] = q
			if _, err := r.admin.QueueDeclare(q.wait, true, false, false, false, amqp.Table{
				"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q.spec.Name,
			}); err != nil {
				return nil, fmt.Errorf("sim: declaring the legacy wait queue: %w", err)
			}
		}
		for k := 0; k < q.spec.Workers; k++ {
			w := &worker{q: q, idx: k}
			q.workers = append(q.workers, w)
			if err := r.startWorker(w); err != nil {
				return nil, err
			}
		}
		for _, a := range q.arrivals {
			r.scheduleArrival(q, a)
		}
	}
	if err := r.startPeriodic(); err != nil {
		return nil, err
	}
	for i := range s.Faults {
		f := s.Faults[i]
		r.clk.AfterFunc(f.At.D(), func() { r.fault(f) })
	}
	return r, nil
}

// deployBefore plays the deployment before the run: a backend declares
// the queues, the ladders' warm markers are declared as that deployment's
// first holds would have, once warm, and the broker restarts cleanly,
// which writes every quorum queue to disk (membroker.Broker.Restart).
func (r *runner) deployBefore() error {
	conn, err := r.broker.Dial()
	if err != nil {
		return err
	}
	b, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), r.backendOptions(conn))
	if err != nil {
		return fmt.Errorf("sim: the earlier deployment's backend: %w", err)
	}
	if err := b.Declare(r.bg, r.configs...); err != nil {
		return fmt.Errorf("sim: the earlier deployment's declaration: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	markers := []string{r.top.LadderWarmQueue()}
	for _, cfg := range r.configs {
		markers = append(markers, r.top.WarmQueue(cfg.Name))
	}
	for _, m := range markers {
		if _, err := ch.QueueDeclare(m, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			return fmt.Errorf("sim: the earlier deployment's warm marker: %w", err)
		}
	}
	_ = b.Close()
	_ = conn.Close()
	r.broker.Restart()
	r.broker.Started() // up a while before the run: every queue has started
	return nil
}

// holdBound is invariant 7's limit on a queue's hold queues at once: the
// number of distinct TTLs its retries can round to, ceil(cap /
// granularity) + 1 (the +1 for rounding to whole milliseconds), plus as
// many again for deferrals when the deferred granularity makes TTLs the
// retry granularity cannot, bounded by the largest Retry-After the outcome
// model can draw. An exponential Retry-After has no largest value; its
// bound counts TTLs up to 20 means.
//
// The ladder's bound is its number of rungs, whatever the delays.
func holdBound(cfg queuey.QueueConfig, spec Queue, top rabbitmq.Topology) int {
	if !top.ClassicHolds {
		return len(top.Rungs())
	}
	ceil := func(a, b time.Duration) int { return int((a + b - 1) / b) }
	retryG := max(top.RetryGranularity, time.Millisecond)
	n := ceil(cfg.Retry.Cap, retryG) + 1
	if spec.Outcome.RateLimited == 0 && !hasReplayDefer(spec) {
		return n
	}
	var maxDefer time.Duration
	switch d := spec.Outcome.RetryAfter; d.Dist {
	case DistConstant:
		maxDefer = d.Value.D()
	case DistUniform:
		maxDefer = d.Max.D()
	case DistExponential:
		maxDefer = 20 * d.Mean.D()
	}
	for _, a := range spec.Arrivals {
		for _, j := range a.Jobs {
			maxDefer = max(maxDefer, j.RetryAfter.D())
		}
	}
	deferG := max(top.DeferredGranularity, time.Millisecond)
	if deferG%retryG == 0 && maxDefer <= cfg.Retry.Cap {
		return n // every deferred TTL is a retry TTL too
	}
	return n + ceil(maxDefer, deferG) + 1
}

func hasReplayDefer(spec Queue) bool {
	for _, a := range spec.Arrivals {
		for _, j := range a.Jobs {
			for _, o := range j.Outcomes {
				if o == "defer" {
					return true
				}
			}
		}
	}
	return false
}

func (r *runner) failf(format string, args ...any) {
	if r.fatal == nil {
		r.fatal = fmt.Errorf("sim: "+format, args...)
	}
}

func (r *runner) now() time.Duration { return r.clk.Elapsed() }

// emit records an event in the trace.
func (r *runner) emit(e Event) {
	e.At = r.now()
	r.rec.record(&e)
	if r.ex != nil {
		r.ex.add(r.rec.events, e)
	}
}

// job returns the live job n, or nil.
func (r *runner) job(n uint64) *job { return r.jobs.get(n) }

// jobNumber parses a message id "j<n>".
func jobNumber(id string) uint64 {
	// The simulation names its jobs itself: at most 19 digits, no sign.
	if len(id) < 2 || len(id) > 20 || id[0] != 'j' {
		return 0
	}
	var n uint64
	for i := 1; i < len(id); i++ {
		c := id[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

func (r *runner) close() {
	r.closed = true
	r.rec.stop()
	for _, q := range r.queues {
		for _, w := range q.workers {
			if w.back != nil {
				_ = w.back.Close()
			}
		}
	}
	if r.producerBack != nil {
		_ = r.producerBack.Close()
	}
	if r.per != nil {
		for _, p := range r.per.procs {
			if p.rb != nil {
				_ = p.rb.Close()
			}
		}
	}
}
