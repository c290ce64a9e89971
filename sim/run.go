package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/queuey/queuey/internal/redial"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/internal/workerrules"
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

	mutate mutation // tests only: break queuey on purpose to prove a check fires
}

// mutation is a deliberate bug the tests inject to show that an invariant
// check catches it.
type mutation int

const (
	mutNone            mutation = iota
	mutEarly                    // holds are published for a quarter of the decided delay
	mutSpendAttempt             // a deferral's successor counts an attempt
	mutDeferPriority0           // a deferral comes back at priority 0
	mutLoseRetry                // a retry's successor is never published
	mutWrongReason              // a dead letter is published with another reason
	mutHoldBound                // the hold-queue bound is taken as 1
	mutHoldExpires2TTL          // hold queues are declared with seed 000's x-expires, 2 × TTL
	mutAckFirst                 // the worker core acknowledges before the successor is confirmed
	mutSettleStale              // the worker core settles a delivery whose connection is gone
)

// coreMutation is the worker core's deliberate bug for m, if it is one.
func (m mutation) coreMutation() workercore.Mutation {
	switch m {
	case mutAckFirst:
		return workercore.MutAckFirst
	case mutSettleStale:
		return workercore.MutSettleStale
	}
	return workercore.MutNone
}

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
	again, err := runOnce(ctx, s, Options{MaxViolations: opts.MaxViolations, mutate: opts.mutate}, ex)
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

// excerptLen is how many trace events an excerpt shows.
const excerptLen = 24

// excerpter collects, in a replay, the events of the jobs some violations
// concern, and the latest events overall.
type excerpter struct {
	jobs   map[uint64][]seqEvent
	recent []seqEvent // ring of the latest excerptLen events
	next   int
	until  uint64                // the last violation's event number: nothing later is needed
	at     map[uint64][]seqEvent // by violation event number, for violations without a job
}

type seqEvent struct {
	seq uint64
	e   Event
}

func (x *excerpter) add(seq uint64, e Event) {
	if seq > x.until {
		return
	}
	if evs, ok := x.jobs[e.Job]; ok && e.Job != 0 {
		x.jobs[e.Job] = append(evs, seqEvent{seq, e})
	}
	if len(x.recent) < excerptLen {
		x.recent = append(x.recent, seqEvent{seq, e})
	} else {
		x.recent[x.next] = seqEvent{seq, e}
		x.next = (x.next + 1) % excerptLen
	}
	if e.Kind == EvViolation && e.Job == 0 {
		if x.at == nil {
			x.at = map[uint64][]seqEvent{}
		}
		snap := append(append([]seqEvent(nil), x.recent[x.next:]...), x.recent[:x.next]...)
		x.at[seq] = snap
	}
}

// excerpt is the trace that shows v: the job's events up to and including
// the violation, or for a violation that concerns no job, the events just
// before it.
func (x *excerpter) excerpt(v Violation) []string {
	evs := x.at[v.seq]
	if v.Job != 0 {
		evs = nil
		for _, se := range x.jobs[v.Job] {
			if se.seq <= v.seq {
				evs = append(evs, se)
			}
		}
	}
	if len(evs) > excerptLen {
		evs = evs[len(evs)-excerptLen:]
	}
	out := make([]string, len(evs))
	for i, se := range evs {
		out[i] = se.e.String()
	}
	return out
}

// runner is one simulation.
type runner struct {
	ctx context.Context // ends the run; checked between steps
	// bg is the context of every broker call: membroker never blocks, and
	// a call failing because ctx ended would change the trace rather than
	// stop the run.
	bg     context.Context
	s      Scenario
	opts   Options
	clk    *Clock
	broker *membroker.Broker
	top    rabbitmq.Topology
	end    time.Time // arrivals stop
	stop   time.Time // the run stops

	queues      []*simQueue
	byName      map[string]*simQueue // work, wait and dead queue names
	holdNames   map[string]queueRole // hold queue names seen, classified
	recentNames [4]recentName        // the names classified last
	recentNext  int
	jobArgs     simJob // the arguments of the job being enqueued
	// releaseSlack is how late after its TTL a hold may be released and
	// still be on time (invariant 2), beyond expiryResolution: the
	// broker's timer slack.
	releaseSlack time.Duration
	squatted     map[string]bool // hold queue names a refuse-hold fault holds

	producerConn *membroker.Connection
	producerBack *rabbitmq.Backend
	producer     *queuey.Producer
	producerDown bool // its connection is gone: arrivals wait
	producerDial *redial.Core
	producerGen  uint64   // producer reconnection loops so far
	waiting      []uint64 // jobs that arrived while it was down, in order
	enqueuing    uint64   // the job it is enqueueing: the ID NewID gives
	configs      []queuey.QueueConfig
	adminConn    *membroker.Connection
	admin        *membroker.Channel // malformed bodies, refused holds, dead-letter audits

	// unreachable is when the broker takes connections again after a
	// restart or an outage; restarting is set while it closes every
	// connection of queuey's, one after another (see bounced).
	unreachable time.Time
	restarting  bool

	jobs    jobTable
	nextJob uint64

	rec *recorder
	res *Result

	// cur is the job whose settlement is being published, so that the
	// observer can attribute what the broker reports during the call.
	cur    settling
	curSet bool // cur describes a settlement in progress

	fatal error // the simulation itself broke
	steps uint64

	freeJobs []*job                   // retired, for reuse
	freeDels []*simDelivery           // settled, for reuse
	subs     map[string]*subscription // by consumer tag
	ready    []*subscription          // with deliveries to take, in the order they came
	auditDue bool                     // something reached a dead-letter queue
	ex       *excerpter               // set in a replay for excerpts
}

// settling is a settlement in progress.
type settling struct {
	j      *job
	dec    queuey.Decision
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
	audit     <-chan amqp.Delivery
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
	// core is the process's worker core: made when the process starts,
	// kept across its reconnections, gone when it dies.
	core    *workerrules.Core[*simDelivery]
	connGen workercore.Gen // connections so far: the core's generation of the current one
	// dial is the process's reconnection loop (internal/redial, the code
	// rabbitmq.Connect runs), made when it reconnects; nil before.
	dial  *redial.Core
	dials uint64 // processes so far, which keys its jitter draws
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

// subscription is one Consume of a worker.
type subscription struct {
	in      <-chan amqp.Delivery
	w       *worker
	tag     string
	pending int            // deliveries the broker reported and the worker has yet to take
	back    queuey.Backend // the backend it came from, which settles its deliveries
	ch      *membroker.Channel
	held    []uint64 // numbers of the jobs in hand (a prefetch's worth), in no order
	dead    bool     // its process crashed: its handlers vanished
	gen     workercore.Gen
}

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
	returns  int // returns that count toward a quorum delivery limit
	state    string
	expect   []expectation // successors issued, oldest first
	holds    []pendingHold
	deadWant []deadWant
	// delivered are expectations met by deliveries the broker made and
	// the worker has yet to decode.
	delivered []expectation
	hist      []Event // the job's latest events, for excerpts
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
	queue string
	at    time.Duration
	ttl   time.Duration
	delay time.Duration
	kind  queuey.HoldKind
}

// deadWant is a dead letter queuey published for the job.
type deadWant struct {
	reason   string
	attempts int
}

func newRunner(ctx context.Context, s Scenario, opts Options) (*runner, error) {
	version, _ := parseProfile(s.Profile)
	r := &runner{
		ctx: ctx, bg: context.Background(), s: s, opts: opts,
		clk:       NewClock(Start),
		top:       rabbitmq.Topology{RetryGranularity: s.Topology.RetryGranularity.D(), DeferredGranularity: s.Topology.DeferredGranularity.D()}.WithDefaults(),
		byName:    map[string]*simQueue{},
		holdNames: map[string]queueRole{},
		squatted:  map[string]bool{},
		subs:      map[string]*subscription{},
		rec:       newRecorder(opts.Trace),
		res:       newResult(s),
	}
	r.end = Start.Add(s.Duration.D())
	r.stop = r.end.Add(s.Drain.D())
	r.broker = membroker.New(membroker.Config{Clock: r.clk, Version: version, Observer: r.observe, Timing: s.Timing.membroker(s.Seed)})
	// A hold is released on time if it reaches the work queue no later
	// than the broker's timer slack allows.
	if !s.Timing.Exact {
		r.releaseSlack = s.Timing.TimerSlack.D()
	}

	var err error
	r.adminConn, _ = r.broker.Dial()
	if r.admin, err = r.adminConn.Channel(); err != nil {
		return nil, fmt.Errorf("sim: admin channel: %w", err)
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
		if opts.mutate == mutHoldBound {
			q.holdBound = 1
		}
		r.queues = append(r.queues, q)
		r.byName[spec.Name] = q
		r.byName[q.dead] = q
		configs = append(configs, cfg)
		for k, a := range spec.Arrivals {
			q.arrivals = append(q.arrivals, &arrivalState{a: a, stream: uint64(i)<<16 | uint64(k)})
		}
	}
	r.configs = configs
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
		if err := r.auditQueue(q); err != nil {
			return nil, err
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
	for i := range s.Faults {
		f := s.Faults[i]
		r.clk.AfterFunc(f.At.D(), func() { r.fault(f) })
	}
	return r, nil
}

// connectProducer connects the producer: a backend on a connection of its
// own, and a Producer on it, which declares the queues.
func (r *runner) connectProducer() error {
	conn, err := r.broker.Dial()
	if err != nil {
		return fmt.Errorf("sim: producer connection: %w", err)
	}
	r.producerConn = conn
	if r.producerBack, err = rabbitmq.New(r.channels(conn), rabbitmq.Options{Topology: r.top}); err != nil {
		return fmt.Errorf("sim: producer backend: %w", err)
	}
	r.producer, err = queuey.NewProducer(r.bg, r.producerBack, r.configs, queuey.ProducerConfig{
		Clock: r.clk,
		NewID: func() string {
			var buf [24]byte
			return string(strconv.AppendUint(append(buf[:0], 'j'), r.enqueuing, 10))
		},
	})
	if err != nil {
		return fmt.Errorf("sim: declaring the queues: %w", err)
	}
	r.producerDown = false
	return nil
}

// auditQueue consumes q's dead-letter queue on the admin channel.
func (r *runner) auditQueue(q *simQueue) error {
	audit, err := r.admin.Consume(q.dead, "audit-"+q.spec.Name, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("sim: auditing %s: %w", q.dead, err)
	}
	q.audit = audit
	return nil
}

// holdBound is invariant 7's limit on a queue's hold queues at once: the
// number of distinct TTLs its retries can round to, ceil(cap /
// granularity) + 1 (the +1 for rounding to whole milliseconds), plus as
// many again for deferrals when the deferred granularity makes TTLs the
// retry granularity cannot, bounded by the largest Retry-After the outcome
// model can draw. An exponential Retry-After has no largest value; its
// bound counts TTLs up to 20 means.
func holdBound(cfg queuey.QueueConfig, spec Queue, top rabbitmq.Topology) int {
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

// channels opens the channels of a backend on conn: membroker's own, or
// under mutHoldExpires2TTL, ones that declare hold queues with 2 × TTL.
func (r *runner) channels(conn *membroker.Connection) func() (rabbitmq.Channel, error) {
	open := rabbitmq.Channels(conn.Channel)
	if r.opts.mutate != mutHoldExpires2TTL {
		return open
	}
	return func() (rabbitmq.Channel, error) {
		ch, err := open()
		return oldExpiresChannel{ch}, err
	}
}

// oldExpiresChannel declares hold queues with seed 000's x-expires, twice
// the TTL, whatever the backend asks: the rule issue 11 replaced.
type oldExpiresChannel struct{ rabbitmq.Channel }

func (c oldExpiresChannel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	if ttl, ok := args["x-message-ttl"].(int64); ok && args["x-expires"] != nil {
		args = maps.Clone(args)
		args["x-expires"] = 2 * ttl
	}
	return c.Channel.QueueDeclare(name, durable, autoDelete, exclusive, noWait, args)
}

// startWorker connects a worker and subscribes it to its queue.
func (r *runner) startWorker(w *worker) error {
	conn, err := r.broker.Dial()
	if err != nil {
		return err
	}
	w.conn = conn
	open := r.channels(conn)
	w.rb, err = rabbitmq.New(open, rabbitmq.Options{Topology: r.top})
	if err != nil {
		return fmt.Errorf("sim: worker backend: %w", err)
	}
	// The worker's backend has declared nothing; it learns the queue as a
	// worker process does, by declaring it (an equivalent redeclaration).
	if err := w.rb.Declare(r.bg, w.q.cfg); err != nil {
		return fmt.Errorf("sim: worker declare: %w", err)
	}
	w.back = w.rb
	if r.s.Legacy {
		lb, err := newLegacyBackend(w.rb, open, w.q.wait, r.top)
		if err != nil {
			return err
		}
		w.back = lb
	}
	// The subscription is what rabbitmq.Backend.Consume sets up (a channel
	// of its own, Qos(prefetch), manual acknowledgements, settled with
	// basic.ack or basic.reject with requeue), read here without the
	// backend's forwarding goroutine: membroker hands deliveries over before
	// its calls return, so the simulation takes them straight off the
	// channel, on its one goroutine, without a thread handoff per message.
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("sim: worker channel: %w", err)
	}
	if err := ch.Qos(w.q.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("sim: worker qos: %w", err)
	}
	w.tags++
	tag := fmt.Sprintf("%s-w%d-%d", w.q.spec.Name, w.idx, w.tags)
	if w.core == nil {
		w.core = workerrules.New[*simDelivery]([]queuey.QueueConfig{w.q.cfg},
			workercore.Config{RequeueDelay: queuey.DefaultRequeueDelay, Mutate: r.opts.mutate.coreMutation()})
	}
	w.connGen++
	w.core.ConnectionUp(w.connGen)
	sub := &subscription{w: w, tag: tag, back: w.back, ch: ch, gen: w.connGen}
	r.subs[tag] = sub // before Consume, which may deliver at once
	in, err := ch.Consume(w.q.spec.Name, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("sim: worker consume: %w", err)
	}
	sub.in = in
	w.sub = sub
	w.up = true
	return nil
}

// stopWorker releases a worker's backend; its connection is already gone.
func (r *runner) stopWorker(w *worker) {
	w.up = false
	w.core, w.connGen = nil, 0 // the process, and its core, died
	if w.sub != nil {
		w.sub.dead = true
		w.sub = nil
	}
	_ = w.back.Close()
}

// ErrLivelock is wrapped by Run's error when virtual time stops moving:
// 131,072 events at one instant. The scenario, not the simulator, is at
// fault: a job deferred for 0 on every run by a handler that takes no time
// has no next instant.
var ErrLivelock = errors.New("sim: livelock")

// maxStepsAtOneInstant is how many events may fire without virtual time
// moving before Run gives up: a job deferred for 0 by a handler that takes
// no time would otherwise spin at one instant for ever.
const maxStepsAtOneInstant = 1 << 17

// loop fires events in virtual-time order until the run's end.
func (r *runner) loop() error {
	total := r.stop.Sub(Start)
	var lastAt time.Duration
	still := 0
	for r.fatal == nil {
		at, ok := r.clk.Next()
		if !ok || at.After(r.stop) {
			break
		}
		r.clk.Step()
		r.pump()
		r.steps++
		if now := r.clk.Elapsed(); now != lastAt {
			lastAt, still = now, 0
		} else if still++; still > maxStepsAtOneInstant {
			return fmt.Errorf("%w: %d events fired at virtual time %s without time moving (a handler that takes no time deferring for 0?)",
				ErrLivelock, still, appendVirtual(nil, now))
		}
		if r.steps&0x3ff == 0 {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			if r.opts.Progress != nil && r.steps&0xffff == 0 {
				r.opts.Progress(r.clk.Now().Sub(Start), total)
			}
		}
	}
	if r.fatal != nil {
		return r.fatal
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if r.clk.Now().Before(r.stop) {
		r.clk.RunUntil(r.stop)
	}
	if r.opts.Progress != nil {
		r.opts.Progress(total, total)
	}
	return nil
}

// pump takes every delivery the broker has handed to a worker and drains
// the dead-letter audits. membroker never blocks and hands over what it
// delivers before its call returns, so taking what is on the channels now
// is deterministic.
func (r *runner) pump() {
	for len(r.ready) > 0 || r.auditDue {
		// Taking a delivery can make more ready: the loop reads the
		// length afresh, and the slice keeps its storage.
		for i := 0; i < len(r.ready); i++ {
			sub := r.ready[i]
			r.ready[i] = nil
			for sub.pending > 0 {
				sub.pending--
				sd := r.newDelivery()
				if !receiveNow(&sd.d, sub.in) {
					r.recycle(sd)
					if sub.dead || sub.ch.IsClosed() {
						sub.pending = 0 // the broker took them back with the channel
						break
					}
					r.failf("consumer %s: a delivery the broker reported is not on its channel", sub.tag)
					return
				}
				r.begin(sub.w, sub, sd)
			}
		}
		r.ready = r.ready[:0]
		if r.auditDue {
			r.auditDue = false
			for _, q := range r.queues {
				r.audit(q)
			}
		}
	}
}

// simDelivery is a delivery in a worker's hands: it settles as the
// backend's consumer does, and carries its handler run's state.
type simDelivery struct {
	d   amqp.Delivery
	r   *runner
	w   *worker
	sub *subscription
	j   *job
	n   uint64
	env queuey.Envelope
	out outcome
	gen int           // the worker process's generation it was delivered in
	id  workercore.ID // its name in the worker's core
	run int           // the handler run it is, from 0
}

func (d *simDelivery) Body() []byte      { return d.d.Body }
func (d *simDelivery) Priority() uint8   { return d.d.Priority }
func (d *simDelivery) Redelivered() bool { return d.d.Redelivered }
func (d *simDelivery) Ack() error        { return d.d.Ack(false) }
func (d *simDelivery) Requeue() error    { return d.d.Reject(true) }

func (r *runner) newDelivery() *simDelivery {
	if n := len(r.freeDels); n > 0 {
		d := r.freeDels[n-1]
		r.freeDels = r.freeDels[:n-1]
		return d
	}
	return new(simDelivery)
}

// recycle takes back a delivery that has been settled and is referred to
// by nothing any more.
func (r *runner) recycle(d queuey.Delivery) {
	if sd, ok := d.(*simDelivery); ok && len(r.freeDels) < 1024 {
		r.broker.Reuse(&sd.d) // its header table and body, for a later delivery
		*sd = simDelivery{}
		r.freeDels = append(r.freeDels, sd)
	}
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

// --- arrivals ---------------------------------------------------------------

type arrivalState struct {
	r      *runner
	q      *simQueue
	a      Arrival
	stream uint64
	k      uint64 // arrivals so far
	order  []int  // replay: jobs by arrival time
}

func (r *runner) scheduleArrival(q *simQueue, st *arrivalState) {
	a := st.a
	var at time.Duration
	switch a.Process {
	case ArrivalConstant:
		at = a.Start.D() + time.Duration(float64(st.k)*float64(time.Second)/a.Rate)
	case ArrivalPoisson:
		if st.k == 0 {
			at = a.Start.D()
		}
		gap := time.Duration(-mathLog1m(r.draw(st.stream, st.k, streamArrival)) / a.Rate * float64(time.Second))
		if st.k == 0 {
			at += gap
		} else {
			at = r.now() + gap
		}
	case ArrivalBurst:
		at = a.Start.D() + time.Duration(st.k)*a.Every.D()
	case ArrivalReplay:
		if st.order == nil {
			st.order = sortedReplay(a.Jobs)
		}
		if st.k >= uint64(len(st.order)) {
			return
		}
		at = a.Jobs[st.order[st.k]].At.D()
	}
	if at >= a.End.D() || at >= r.s.Duration.D() {
		return
	}
	st.r, st.q = r, q
	r.clk.afterFire(at-r.now(), st)
}

// fire is the arrival process's next arrival (or burst).
func (st *arrivalState) fire() {
	r, q, a := st.r, st.q, st.a
	k := st.k
	st.k++
	switch a.Process {
	case ArrivalBurst:
		for range a.Size {
			r.arrive(q, nil)
		}
	case ArrivalReplay:
		r.arrive(q, &a.Jobs[st.order[k]])
	default:
		r.arrive(q, nil)
	}
	r.scheduleArrival(q, st)
}

// simJob is the payload of every simulated job.
type simJob struct {
	queue string
	N     uint64 `json:"n"`
}

func (j simJob) Kind() string  { return "sim" }
func (j simJob) Queue() string { return j.queue }

func (r *runner) arrive(q *simQueue, rj *ReplayJob) {
	r.nextJob++
	n := r.nextJob
	r.res.Jobs.Arrived++
	if rj == nil && r.draw(n, 0, streamMalformed) < q.spec.Outcome.Malformed {
		body := []byte("not a queuey envelope #" + strconv.FormatUint(n, 10))
		q.malformed[n] = body
		r.res.Jobs.Malformed++
		r.emit(Event{Kind: EvMalformed, Job: n, Queue: q.spec.Name, Worker: -1})
		if err := r.admin.Publish("", q.spec.Name, false, false, amqp.Publishing{MessageId: "m" + strconv.FormatUint(n, 10), Body: body, DeliveryMode: amqp.Persistent}); err != nil {
			r.failf("publishing a malformed body: %v", err)
		}
		return
	}
	j := r.newJob()
	j.n, j.q, j.replay, j.state, j.enqueued = n, q, rj, "arriving", r.now()
	j.poison = rj == nil && r.draw(n, 0, streamPoison) < q.spec.Outcome.Poison
	if j.poison {
		r.res.Jobs.Poison++
	}
	r.jobs.put(n, j)
	j.expect = append(j.expect, expectation{attempt: 1, notBefore: r.now()})
	r.emit(Event{Kind: EvArrive, Job: n, Queue: q.spec.Name, Worker: -1})
	if r.producerDown {
		// Enqueue waits for the connection: the job goes out when the
		// producer is back.
		r.waiting = append(r.waiting, n)
		return
	}
	r.enqueue(q, n)
}

// enqueue publishes job n through the producer.
func (r *runner) enqueue(q *simQueue, n uint64) {
	r.enqueuing = n
	r.jobArgs = simJob{queue: q.spec.Name, N: n} // by pointer: no copy put in an interface
	if _, err := r.producer.Enqueue(r.bg, &r.jobArgs); err != nil {
		r.failf("enqueue job %d: %v", n, err)
	}
}

// --- handlers ---------------------------------------------------------------

// outcome is what one handler run does.
type outcome struct {
	result   error
	label    string
	duration time.Duration
	crash    bool
}

var errRetryable = errors.New("simulated retryable failure")

func (r *runner) outcomeOf(j *job, run int) outcome {
	o := j.q.spec.Outcome
	n, k := j.n, uint64(run)
	dur := o.Handler.draw(r.draw(n, k, streamHandler))
	retryAfter := func() time.Duration { return o.RetryAfter.draw(r.draw(n, k, streamRetryAfter)) }
	if j.poison {
		return outcome{label: "crash (poison)", duration: dur, crash: true}
	}
	if j.replay != nil {
		rj := j.replay
		label := "ok"
		if len(rj.Outcomes) > 0 {
			label = rj.Outcomes[min(run, len(rj.Outcomes)-1)]
		}
		if rj.Handler > 0 {
			dur = rj.Handler.D()
		}
		switch label {
		case "retry":
			return outcome{result: errRetryable, label: "retry", duration: dur}
		case "fatal":
			return outcome{result: queuey.Fatal(errors.New("simulated fatal failure")), label: "fatal", duration: dur}
		case "defer":
			d := rj.RetryAfter.D()
			if d == 0 {
				d = retryAfter()
			}
			return outcome{result: queuey.Defer(d, "rate limited"), label: "defer " + d.String(), duration: dur}
		case "crash":
			return outcome{label: "crash", duration: dur, crash: true}
		}
		return outcome{label: "ok", duration: dur}
	}
	u := r.draw(n, k, streamResult)
	if u < o.RateLimited {
		d := retryAfter()
		return outcome{result: queuey.Defer(d, "rate limited"), label: "defer " + d.String(), duration: dur}
	}
	if o.Correlation == PerJob {
		u = o.RateLimited + r.draw(n, 0, streamJobResult)*(1-o.RateLimited)
	}
	switch {
	case u < o.RateLimited+o.Retryable:
		return outcome{result: errRetryable, label: "retry", duration: dur}
	case u < o.RateLimited+o.Retryable+o.Fatal:
		return outcome{result: queuey.Fatal(errors.New("simulated fatal failure")), label: "fatal", duration: dur}
	}
	return outcome{label: "ok", duration: dur}
}

// simAction is one of a worker core's actions.
type simAction = workerrules.Action[*simDelivery]

// begin hands a delivery to its worker's core: the product's own
// settlement logic (internal/workercore) decides everything from here, and
// exec carries out what it says.
func (r *runner) begin(w *worker, sub *subscription, d *simDelivery) {
	d.r, d.w, d.sub, d.gen = r, w, sub, w.gen
	var buf [2]simAction
	r.exec(w, w.core.Deliver(buf[:0], 0, sub.gen, d))
}

// exec carries out a worker core's actions, the simulation's shell: a
// handler runs for its drawn duration on the virtual clock, publishes and
// acknowledgements go to the broker at once, and every step is traced and
// checked.
func (r *runner) exec(w *worker, acts []simAction) {
	for i := range acts {
		a := &acts[i]
		switch a.Kind {
		case workercore.RunHandler:
			r.runHandler(w, a)
		case workercore.Publish:
			if a.Malformed {
				r.publishMalformed(w, a)
			} else {
				r.publish(w, a)
			}
		case workercore.Ack:
			r.ack(w, a)
		case workercore.Requeue:
			r.requeue(w, a)
		case workercore.StartTimer:
			// The core ignores a timer whose delivery it has forgotten;
			// a process that died took its core with it.
			gen, id := w.gen, a.ID
			r.clk.AfterFunc(a.Delay, func() {
				if w.gen == gen {
					var buf [2]simAction
					r.exec(w, w.core.TimerFired(buf[:0], id))
				}
			})
		case workercore.Drop:
			d := a.Msg
			r.emit(Event{Kind: EvSettleFailed, Job: d.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "its connection is gone: outcome dropped"})
			r.recycle(d)
		}
	}
}

// runHandler starts a job's handler: its outcome is drawn, and it
// completes after its drawn duration.
func (r *runner) runHandler(w *worker, a *simAction) {
	d, env := a.Msg, a.Job
	n := jobNumber(env.ID)
	j := r.job(n)
	if j == nil {
		r.failf("delivered job %q is not live", env.ID)
		return
	}
	r.emit(Event{Kind: EvDeliver, Job: n, Queue: w.q.spec.Name, Worker: w.idx, Attempt: env.Attempt, Deferrals: env.Deferrals, Priority: d.Priority()})
	r.checkDelivered(j, env, d)
	d.sub.held = append(d.sub.held, n)
	d.run = j.runs
	j.runs++
	d.j, d.n, d.env, d.id = j, n, env, a.ID
	d.out = r.outcomeOf(j, d.run)
	r.clk.afterFire(d.out.duration, d)
}

// fire is the end of a delivery's handler run.
func (d *simDelivery) fire() { d.r.complete(d) }

// complete reports a handler's result to its worker's core, unless the
// process died meanwhile (its core with it) or the handler crashes it.
func (r *runner) complete(d *simDelivery) {
	w := d.w
	if w.gen != d.gen {
		return // the process died with its handlers
	}
	r.emit(Event{Kind: EvOutcome, Job: d.n, Queue: w.q.spec.Name, Worker: w.idx, Attempt: d.env.Attempt, Deferrals: d.env.Deferrals, Detail: d.out.label})
	if d.out.crash {
		r.crash(w, "poison job "+strconv.FormatUint(d.n, 10))
		return
	}
	var buf [2]simAction
	r.exec(w, w.core.HandlerDone(buf[:0], d.id, d.out.result, r.draw(d.n, uint64(d.run+1), streamJitter)))
}

// publish publishes the successor the core decided, with the bookkeeping
// the invariants need around the call, and reports the broker's answer to
// the core.
func (r *runner) publish(w *worker, a *simAction) {
	d, env, dec := a.Msg, a.Job, a.Decision
	q := w.q
	if d.sub != w.sub {
		// The core must drop the outcome of a delivery whose connection
		// went: the broker has requeued it, so a successor would be a
		// second copy of the job.
		r.violate(5, r.job(d.n), fmt.Sprintf("job %d: its worker published a successor for a delivery of a connection that is gone", d.n))
		return
	}
	j := d.j
	r.checkDecision(j, env, d.out, dec)
	cur := settling{j: j, dec: dec, issued: r.now()}
	switch dec.Action {
	case queuey.ActionRetry:
		ttl, _ := r.top.RetryTTL(dec.Delay)
		cur.ttl = time.Duration(ttl) * time.Millisecond
	case queuey.ActionDefer:
		ttl, _ := r.top.DeferredTTL(dec.Hold())
		cur.ttl = time.Duration(ttl) * time.Millisecond
	}
	if cur.ttl > 0 && !r.s.Legacy {
		r.res.HoldDeclarations++ // the backend declares the hold queue before every hold
	}
	held := dec.Action == queuey.ActionRetry || dec.Action == queuey.ActionDefer
	if held {
		// Expected before the publish: a successor with no delay goes
		// straight to the work queue and may be delivered during the call.
		j.expect = append(j.expect, expectation{
			attempt: dec.Successor.Attempt, deferrals: dec.Successor.Deferrals, priority: dec.Successor.Priority,
			notBefore: cur.issued + dec.Delay, deferred: dec.Action == queuey.ActionDefer,
		})
	}
	r.cur, r.curSet = cur, true
	err := r.publishSuccessor(d.sub, q, dec)
	r.cur, r.curSet = settling{}, false
	if err != nil {
		if held {
			j.expect = j.expect[:len(j.expect)-1]
		}
		r.emit(Event{Kind: EvSettleFailed, Job: j.n, Queue: q.spec.Name, Worker: w.idx, Detail: settleFailure(err)})
	} else {
		switch dec.Action {
		case queuey.ActionRetry:
			j.failures++
		case queuey.ActionDefer:
			r.res.Deferrals++
		case queuey.ActionDeadLetter:
			j.deadWant = append(j.deadWant, deadWant{reason: dec.Reason, attempts: dec.Successor.Attempt})
			r.end1(j, "dead-lettered", dec.Reason)
		}
	}
	var buf [2]simAction
	r.exec(w, w.core.Published(buf[:0], a.ID, err))
}

// publishSuccessor is queuey.PublishSuccessor, with the deliberate bug
// Options.mutate asks for in tests.
func (r *runner) publishSuccessor(sub *subscription, q *simQueue, dec queuey.Decision) error {
	switch m := r.opts.mutate; {
	case m == mutEarly && dec.Delay > 0:
		dec.Delay /= 4
	case m == mutSpendAttempt && dec.Action == queuey.ActionDefer:
		dec.Successor.Attempt++
	case m == mutDeferPriority0 && dec.Action == queuey.ActionDefer:
		dec.Successor.Priority = 0
	case m == mutLoseRetry && dec.Action == queuey.ActionRetry:
		return nil
	case m == mutWrongReason && dec.Action == queuey.ActionDeadLetter:
		dec.Reason = "a reason nobody decided"
	}
	return queuey.PublishSuccessor(r.bg, sub.back, q.cfg, dec)
}

// publishMalformed dead-letters a body that is not an envelope, verbatim.
func (r *runner) publishMalformed(w *worker, a *simAction) {
	d := a.Msg
	err := queuey.PublishMalformed(r.bg, d.sub.back, w.q.cfg, d.Body())
	if err != nil {
		r.emit(Event{Kind: EvSettleFailed, Queue: w.q.spec.Name, Worker: w.idx, Detail: "malformed: " + settleFailure(err)})
	}
	var buf [2]simAction
	r.exec(w, w.core.Published(buf[:0], a.ID, err))
}

// ack acknowledges a settled delivery; the consumer must keep consuming
// after a malformed body.
func (r *runner) ack(w *worker, a *simAction) {
	d := a.Msg
	sub := d.sub
	if a.Malformed {
		if err := d.Ack(); err == nil {
			r.recycle(d)
		}
		if w.sub != sub || sub.ch.IsClosed() {
			r.violate(8, nil, "the consumer stopped after a malformed body")
		}
		return
	}
	j := d.j
	if a.Decision.Action == queuey.ActionAck {
		r.checkDecision(j, d.env, d.out, a.Decision)
	}
	if err := d.Ack(); err != nil {
		r.emit(Event{Kind: EvSettleFailed, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx, Detail: "ack: " + settleFailure(err)})
		return
	}
	sub.release(j.n)
	if r.opts.mutate != mutAckFirst { // there, the core publishes the successor after the ack
		r.recycle(d)
	}
	j.copies--
	j.returns = 0 // a successor is a new message, whose delivery count starts at 0
	r.emit(Event{Kind: EvAck, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx})
	if a.Decision.Action == queuey.ActionAck {
		r.end1(j, "succeeded", "")
	}
	r.retire(j)
}

// requeue returns a delivery whose settlement failed to its queue.
func (r *runner) requeue(w *worker, a *simAction) {
	d := a.Msg
	j := d.j // nil for a malformed body
	// basic.reject with requeue counts toward a quorum queue's delivery
	// limit on both profiles (as a return on 4.0, as a failed delivery on
	// 4.3; a nack would not on 4.3). Counted before the call, in which the
	// broker may dead-letter it.
	if j != nil {
		j.returns++
	}
	if err := d.Requeue(); err != nil {
		if j != nil {
			j.returns--
		}
		return // the channel is gone: the broker requeued it already
	}
	if j != nil {
		d.sub.release(j.n)
		r.emit(Event{Kind: EvRequeue, Job: j.n, Queue: w.q.spec.Name, Worker: w.idx})
	}
	r.recycle(d)
}

// end1 records that j reached a terminal state.
func (r *runner) end1(j *job, state, reason string) {
	j.ended++
	if j.ended > 1 {
		r.res.Jobs.Duplicates++
		if j.ended-1 > j.explain {
			r.violate(5, j, fmt.Sprintf("job ended %d times (%s after %s) with only %d crash requeues to explain it", j.ended, state, j.state, j.explain))
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

// --- faults -----------------------------------------------------------------

func (r *runner) fault(f Fault) {
	q := r.byName[f.Queue]
	switch f.Kind {
	case FaultCrash:
		w := q.workers[f.Worker]
		if w.up {
			w.restart = f.Restart.D()
			r.crash(w, "injected crash")
		}
	case FaultDrop:
		w := q.workers[f.Worker]
		if !w.up {
			return
		}
		r.emit(Event{Kind: EvDrop, Queue: q.spec.Name, Worker: w.idx})
		r.noteRequeues(w)
		r.broker.CloseConnection(w.conn, nil)
		// The backend learns of the drop on its publisher's goroutine;
		// until it has, a publish would still reach the broker (and bring
		// it up to the clock). Waiting for it keeps the run deterministic.
		<-w.rb.Done()
		if lb, ok := w.back.(*legacyBackend); ok {
			<-lb.pub.Done()
		}
		w.up = false
		old := w.back
		oldSub := w.sub
		w.sub = nil
		// The core learns its connection is gone: what waits to be
		// requeued is dropped now, what runs when it reports.
		var buf [4]simAction
		r.exec(w, w.core.ConnectionLost(buf[:0], oldSub.gen))
		// The process lives on and reconnects after Restart; its handlers
		// still running finish and fail to settle. If one of them kills
		// the process first, the crash's own restart replaces this one.
		gen := w.gen
		r.clk.AfterFunc(f.Restart.D(), func() {
			oldSub.dead = true
			_ = old.Close()
			if w.gen == gen {
				r.restart(w)
			}
		})
	case FaultRestart, FaultOutage:
		r.brokerDown(f)
	case FaultRefuseHold:
		ttl, _ := r.top.RetryTTL(f.TTL.D())
		r.refuseHold(q, r.top.HoldQueue(q.spec.Name, ttl), ttl, r.clk.Now().Add(f.For.D()))
	}
}

// crash kills a worker process: its handlers vanish with it and the broker
// requeues its unacknowledged deliveries when the connection drops.
func (r *runner) crash(w *worker, why string) {
	r.emit(Event{Kind: EvCrash, Queue: w.q.spec.Name, Worker: w.idx, Detail: why})
	w.gen++
	r.noteRequeues(w)
	r.broker.CloseConnection(w.conn, nil) // a no-op if a drop closed it already
	r.stopWorker(w)
	gen := w.gen
	r.clk.AfterFunc(w.restartAfter(), func() {
		if w.gen == gen { // not crashed again since: only the last crash restarts it
			r.restart(w)
		}
	})
}

// noteRequeues counts, for each job a dying connection holds, a return
// toward the quorum delivery limit and a possible duplicate.
func (r *runner) noteRequeues(w *worker) {
	if w.sub == nil {
		return
	}
	// Bring the broker up to now first: a hold expiring at this instant is
	// released, and may be delivered to this very worker, before the
	// connection closes. Deliveries the worker has not taken yet go back
	// with the connection too.
	r.broker.Queue(w.q.spec.Name)
	var d amqp.Delivery
	for w.sub.pending > 0 {
		if !receiveNow(&d, w.sub.in) {
			break
		}
		w.sub.pending--
		if j := r.job(jobNumber(d.MessageId)); j != nil {
			j.returns++
			j.explain++
			if !d.Redelivered && len(j.delivered) > 0 {
				// Checked against its expectation when the broker handed it
				// over; the worker will never decode it.
				j.delivered = popFront(j.delivered)
			}
		}
	}
	for _, n := range w.sub.held {
		if j := r.job(n); j != nil {
			j.returns++
			j.explain++
		}
	}
}

// restart has worker w's process connect again: its first attempt at
// once, then as the reconnection loop says while the broker is
// unreachable.
func (r *runner) restart(w *worker) {
	w.dials++
	w.dial = r.newLoop(uint64(w.q.idx)<<40 | uint64(w.idx)<<20 | w.dials)
	r.runWorkerLoop(w, w.dial, w.gen, w.dial.Start())
}

// connectWorker is one dial of worker w's reconnection loop.
func (r *runner) connectWorker(w *worker) error {
	if err := r.startWorker(w); err != nil {
		r.failf("restarting worker %d of %s: %v", w.idx, w.q.spec.Name, err)
		return nil
	}
	r.emit(Event{Kind: EvRestart, Queue: w.q.spec.Name, Worker: w.idx})
	return nil
}

// brokerDown restarts the broker (FaultRestart) or cuts it off
// (FaultOutage): every connection of queuey's goes, and dials fail until
// the broker is back. The producer and the workers then reconnect as a
// supervised backend does, after rabbitmq.Backoff's waits, drawn from the
// seed; each worker's core learns its connection is gone.
func (r *runner) brokerDown(f Fault) {
	span, what := f.For.D(), "outage"
	if f.Kind == FaultRestart {
		span, what = f.Restart.D(), "restart"
	}
	if until := r.clk.Now().Add(span); until.After(r.unreachable) {
		r.unreachable = until
	}
	r.emit(Event{Kind: EvBrokerDown, Worker: -1, Detail: what + " for " + span.String()})
	var up []*worker
	for _, q := range r.queues {
		r.audit(q) // what was dead-lettered before: the audit channel may go
		for _, w := range q.workers {
			if w.up {
				r.noteRequeues(w)
				up = append(up, w)
			}
		}
	}
	if f.Kind == FaultRestart {
		r.restarting = true
		r.broker.Restart()
		r.restarting = false
		r.reconnectAdmin() // the harness's own connection, not queuey's: back at once
	} else {
		// Closed one after another, a connection's returns may be handed
		// to a consumer whose connection closes next: bounces, as in a
		// restart.
		r.restarting = true
		for _, w := range up {
			r.broker.CloseConnection(w.conn, nil)
		}
		if !r.producerDown {
			r.broker.CloseConnection(r.producerConn, nil)
		}
		r.restarting = false
	}
	for _, w := range up {
		r.connectionLost(w)
		if w.dial == nil { // up since the run began: its loop starts now
			w.dials++
			w.dial = r.newLoop(uint64(w.q.idx)<<40 | uint64(w.idx)<<20 | w.dials)
			w.dial.Start()
			w.dial.DialDone(nil, false)
		}
		r.runWorkerLoop(w, w.dial, w.gen, w.dial.Lost(errBrokerDown))
	}
	if !r.producerDown {
		// As for a dropped worker, wait for the backend to see it.
		<-r.producerBack.Done()
		_ = r.producerBack.Close()
		r.producerDown = true
		if r.producerDial == nil {
			r.producerGen++
			r.producerDial = r.newLoop(1<<62 | r.producerGen)
			r.producerDial.Start()
			r.producerDial.DialDone(nil, false)
		}
		r.runProducerLoop(r.producerDial, r.producerDial.Lost(errBrokerDown))
	}
	r.clk.AfterFunc(span, func() {
		if !r.clk.Now().Before(r.unreachable) {
			r.emit(Event{Kind: EvBrokerUp, Worker: -1})
		}
	})
}

// errBrokerDown is why connections go in a restart or an outage, and
// errUnreachable why dials fail until it is over.
var (
	errBrokerDown  = errors.New("sim: the broker restarts or is unreachable")
	errUnreachable = errors.New("sim: connection refused: the broker is unreachable")
)

// connectionLost is a worker process whose connection the broker closed:
// its core drops what it cannot settle any more, and it waits to redial.
func (r *runner) connectionLost(w *worker) {
	<-w.rb.Done() // the backend learns of the close on its publisher's goroutine
	if lb, ok := w.back.(*legacyBackend); ok {
		<-lb.pub.Done()
	}
	w.up = false
	sub := w.sub
	w.sub = nil
	var buf [4]simAction
	r.exec(w, w.core.ConnectionLost(buf[:0], sub.gen))
	sub.dead = true
	_ = w.back.Close()
}

// newLoop is a reconnection loop with rabbitmq.Backoff's defaults, its
// jitter drawn from the seed under key.
func (r *runner) newLoop(key uint64) *redial.Core {
	var n uint64
	return redial.New(1, redial.Backoff{Initial: rabbitmq.DefaultBackoffInitial, Max: rabbitmq.DefaultBackoffMax},
		func() float64 { n++; return r.draw(key, n, streamBackoff) })
}

// runLoop carries out a reconnection loop's actions on the virtual clock:
// a Wait becomes a timer, a Dial fails while the broker is unreachable and
// otherwise calls connect. alive says whether the loop is still its
// process's (a crash replaces it); failed traces a failed attempt.
func (r *runner) runLoop(loop *redial.Core, acts []redial.Action, alive func() bool, connect func() error, failed func(attempt int)) {
	attempt := 0
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case redial.Report:
			if a.Event.State == redial.Connecting {
				attempt = a.Event.Attempt
			}
		case redial.Wait:
			r.clk.AfterFunc(a.Delay, func() {
				if alive() {
					r.runLoop(loop, loop.TimerFired(), alive, connect, failed)
				}
			})
		case redial.Dial:
			err := errUnreachable
			if !r.clk.Now().Before(r.unreachable) {
				err = connect()
			}
			if err != nil {
				failed(attempt)
			}
			acts = append(acts, loop.DialDone(err, false)...)
		}
	}
}

// runWorkerLoop runs worker w's reconnection loop (its process of
// generation gen).
func (r *runner) runWorkerLoop(w *worker, loop *redial.Core, gen int, acts []redial.Action) {
	r.runLoop(loop, acts,
		func() bool { return w.gen == gen && w.dial == loop && !w.up },
		func() error { return r.connectWorker(w) },
		func(attempt int) {
			r.emit(Event{Kind: EvDialFailed, Queue: w.q.spec.Name, Worker: w.idx, Attempt: attempt})
		})
}

// runProducerLoop runs the producer's reconnection loop; once connected,
// the jobs that arrived meanwhile go out in order.
func (r *runner) runProducerLoop(loop *redial.Core, acts []redial.Action) {
	r.runLoop(loop, acts,
		func() bool { return r.producerDial == loop && r.producerDown },
		func() error {
			if err := r.connectProducer(); err != nil {
				r.failf("reconnecting the producer: %v", err)
				return nil
			}
			r.emit(Event{Kind: EvRestart, Worker: -1, Detail: "producer"})
			waiting := r.waiting
			r.waiting = nil
			for _, n := range waiting {
				if j := r.job(n); j != nil {
					r.enqueue(j.q, n)
				}
			}
			return nil
		},
		func(attempt int) { r.emit(Event{Kind: EvDialFailed, Worker: -1, Attempt: attempt}) })
}

// reconnectAdmin gives the harness a fresh admin channel after a restart,
// and consumes the dead-letter queues on it again.
func (r *runner) reconnectAdmin() {
	conn, err := r.broker.Dial()
	if err == nil {
		r.adminConn = conn
		r.admin, err = conn.Channel()
	}
	if err != nil {
		r.failf("reconnecting the admin channel: %v", err)
		return
	}
	for _, q := range r.queues {
		if err := r.auditQueue(q); err != nil {
			r.failf("%v", err)
		}
	}
}

func (r *runner) refuseHold(q *simQueue, name string, ttl int64, until time.Time) {
	if !r.clk.Now().Before(until) {
		return
	}
	if _, exists := r.broker.Queue(name); exists {
		// In use: a real squatter would have to wait too. Try again soon.
		r.clk.AfterFunc(time.Second, func() { r.refuseHold(q, name, ttl, until) })
		return
	}
	r.squatted[name] = true // not one of queuey's hold queues: invariant 7 does not count it
	if _, err := r.admin.QueueDeclare(name, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-message-ttl": ttl,
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q.spec.Name,
	}); err != nil {
		r.failf("squatting %s: %v", name, err)
		return
	}
	r.emit(Event{Kind: EvRefuse, Queue: name, Worker: -1, Detail: "on"})
	r.clk.AfterFunc(until.Sub(r.clk.Now()), func() {
		if _, err := r.admin.QueueDelete(name, false, true, false); err != nil {
			r.failf("removing the squatter %s: %v", name, err)
			return
		}
		delete(r.squatted, name)
		r.emit(Event{Kind: EvRefuse, Queue: name, Worker: -1, Detail: "off"})
	})
}

// settleFailure describes a failed broker call for the trace. Only what
// the broker decided synchronously goes in: a refusal's code and text. A
// call failing because its connection is gone says only that, since the
// backend's error text then depends on whether its publisher's watcher
// goroutine has seen the close yet.
func settleFailure(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		s := ae.Error()
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[:i]
		}
		return "refused: " + s
	}
	if errors.Is(err, rabbitmq.ErrReturned) {
		return "returned: the queue does not exist"
	}
	return "the connection is gone"
}

func (r *runner) close() {
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
}

// sortedReplay returns the indexes of jobs in arrival order (stable).
func sortedReplay(jobs []ReplayJob) []int {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return jobs[order[a]].At < jobs[order[b]].At })
	return order
}
