package properties

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"pgregory.net/rapid"

	"github.com/queuey/queuey/internal/acktimeout"
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/execute"
	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	"github.com/queuey/queuey/sim"
)

// This file is the model of TestBackendStateMachine: rabbitmq.Backend on
// membroker, under sim's virtual clock, driven one call at a time on one
// goroutine, beside a model of where every job must be.
//
// The model knows each job's current message: its attempt, deferrals and
// priority, and whether it is being published, ready on the work queue,
// handed to a consumer and not yet read, in a worker's hand, held in a hold
// queue until a due time, done, or dead-lettered. It moves a job when an
// action does something to it, and when the broker reports (through
// membroker's Observer) that a message entered a queue, was handed to a
// consumer, or was dead-lettered: each report is checked against the model
// at the virtual instant it happens. After every action, check compares the
// model with the broker's own counts.

const (
	workQueue = "jobs"
	deadQueue = "jobs.dead"
	holdQueue = "jobs.deferred."
	jobKind   = "model"

	// deliveryLimit is a quorum queue's delivery limit on RabbitMQ 4 when
	// nothing sets it, as the backend declares it.
	deliveryLimit = 20
	// releaseSlack is how late a hold may release a job: a classic queue's
	// one expiry timer moves only when a new head is due more than a
	// millisecond earlier.
	releaseSlack = time.Millisecond
)

var ctx = context.Background()

// machineConfig is the world a run of the machine lives in.
type machineConfig struct {
	Quorum      bool
	Profile     membroker.Version
	MaxPriority uint8 // classic only; 0 declares a plain queue
	RetryG      time.Duration
	DeferredG   time.Duration
	Retry       queuey.RetryPolicy
	Workers     int
	Prefetch    int
}

func (c machineConfig) String() string {
	typ := "classic"
	if c.Quorum {
		typ = "quorum"
	}
	return fmt.Sprintf("%s queue (max priority %d), %s, retry granularity %s, deferred granularity %s, retry %+v, %d workers at prefetch %d",
		typ, c.MaxPriority, c.Profile, c.RetryG, c.DeferredG, c.Retry, c.Workers, c.Prefetch)
}

// state is where a job's current message is.
type state int

const (
	stPublishing state = iota // an action is publishing it: the broker has yet to report where it went
	stQueued                  // ready on the work queue
	stDispatched              // handed to a worker's consumer, not yet read off its channel
	stInHand                  // read by a worker, not yet settled
	stHeld                    // in a hold queue until due
	stToDead                  // being returned past the delivery limit: the broker must dead-letter it
	stDead                    // in the dead-letter queue
	stAudited                 // taken off the dead-letter queue and checked
	stDone                    // acknowledged after a success
)

var stateNames = [...]string{"publishing", "queued", "dispatched", "in hand", "held", "to be dead-lettered", "dead", "audited", "done"}

func (s state) String() string { return stateNames[s] }

// job is the model of one job.
type job struct {
	id         string
	state      state
	attempt    int
	deferrals  int
	priority   uint8     // the AMQP priority of its current message
	enqueuedAt time.Time // as the producer stamped it; every successor keeps it

	seq         uint64    // its position on a classic work queue, kept across requeues
	notBefore   time.Time // it must not be delivered before
	redelivered bool      // its current message has been returned to the queue
	returns     int       // returns of its current message, toward a quorum delivery limit

	dest string        // stPublishing: the queue it must enter
	ttl  time.Duration // stPublishing into a hold: the rounded TTL

	hold   string    // stHeld: the hold queue
	heldAt time.Time // stHeld: when it entered it
	due    time.Time // stHeld: when it must be back on the work queue

	worker      *worker       // stDispatched, stInHand
	dispatchRe  bool          // stDispatched: the Redelivered flag the broker reported
	delivery    amqp.Delivery // stInHand
	env         queuey.Envelope
	act         settle.Action[*delivery] // stInHand: the core's RunHandler for it
	ran         bool                     // stInHand: its handler has returned; the core is settling it
	confirmed   bool                     // stInHand: its successor's publish was confirmed
	deadReason  string                   // stDead: the reason its dead letter must carry
	deadByLimit bool                     // stDead: the broker dead-lettered it for delivery_limit
}

// worker is one worker process: a connection with a backend, the
// backend's subscription (its consumer core, stepped), and the worker core
// that settles what it reads with the executor that carries out the
// core's actions: the product's, which queuey.Worker.Run drives too.
type worker struct {
	idx    int
	up     bool
	starts int
	core   machineCore                  // made when the process starts; gone when it crashes
	x      *execute.Executor[*delivery] // carries out core's actions
	gen    workercore.Gen               // its connection's generation in the core
	conn   *membroker.Connection
	back   *rabbitmq.Backend
	sub    *consume.Sub         // the backend's subscription
	ch     *membroker.Channel   // sub's channel
	in     <-chan amqp.Delivery // sub's deliveries
	tag    string
	unread []*job // dispatched to it and not yet read, in the order the broker handed them over
	// stale are the deliveries whose handlers still run after the broker
	// dropped their connection (drop, restartBroker): the core must drop
	// their outcomes, even once the worker has reconnected.
	stale []staleDelivery
}

// staleDelivery is a delivery a worker read before its connection went.
type staleDelivery struct {
	j   *job
	act settle.Action[*delivery]
}

// delivery is what a worker's core settles: the backend's consumer core's
// delivery, and the job the model says it is.
type delivery struct {
	consume.Delivery
	j *job
}

// machine is the system under test and its model.
type machine struct {
	cfg  machineConfig
	qcfg queuey.QueueConfig
	top  rabbitmq.Topology

	clk      *sim.Clock
	broker   *membroker.Broker
	producer *rabbitmq.Backend
	admin    *membroker.Channel
	conns    []*membroker.Connection
	workers  []*worker
	byTag    map[string]*worker

	jobs    map[string]*job
	all     []*job // in creation order
	dead    []*job // in the dead-letter queue, in the order they entered it
	seq     uint64
	cur     *job            // the job whose message is being published
	squat   map[string]bool // hold queues declared by someone else, with other arguments
	created int             // jobs created
	// restarting is set while the broker restarts.
	restarting bool

	problems []string
	sabotage sabotage // tests only: break the settlement path on purpose

	// t and settling are the step under way, for the executor's shell
	// (settler): the test, and the handler outcome being settled.
	t        rapid.TB
	settling settlingStep
	carried  []string // the kinds of the actions carried out in this step
}

// settlingStep is a handler outcome being settled.
type settlingStep struct {
	o     outcome
	delay time.Duration
	saved job  // the job before its publish: a refused one goes back to it
	fail  bool // the publish is refused (requeue, or a gone connection)
}

func newMachine(t rapid.TB, cfg machineConfig) *machine {
	t.Helper()
	m := &machine{
		cfg: cfg,
		// Classic holds: the model follows one hold queue per TTL. The
		// default ladder's hops are a client's (the relay), which this
		// model does not drive; TestScenarioProperties checks the ladder
		// through sim.Run.
		top: rabbitmq.Topology{RetryGranularity: cfg.RetryG, DeferredGranularity: cfg.DeferredG,
			ClassicHolds: true}.WithDefaults(),
		clk:   sim.NewClock(sim.Start),
		byTag: map[string]*worker{},
		jobs:  map[string]*job{},
		squat: map[string]bool{},
	}
	typ := queuey.Classic
	if cfg.Quorum {
		typ = queuey.Quorum
	}
	// Handlers run until the test settles them, however long that is in
	// virtual time: the model has no timeouts (the simulator has them), so
	// the queue's Timeout is out of reach of any run.
	m.qcfg = queuey.QueueConfig{Name: workQueue, Type: typ, Prefetch: cfg.Prefetch, MaxPriority: new(cfg.MaxPriority), Retry: cfg.Retry,
		Timeout: 100 * 365 * 24 * time.Hour}.WithDefaults()
	if err := m.qcfg.Validate(); err != nil {
		t.Fatalf("bad queue config %+v: %v", m.qcfg, err)
	}
	m.broker = membroker.New(membroker.Config{Clock: m.clk, Version: cfg.Profile, Observer: m.observe})

	m.connectProducer(t)
	for i := range cfg.Workers {
		w := &worker{idx: i}
		m.workers = append(m.workers, w)
		m.start(t, w)
	}
	m.check(t)
	return m
}

// connectProducer connects the producer's backend, which declares the
// queue, and the admin channel that audits the dead-letter queue and
// squats hold queues.
func (m *machine) connectProducer(t rapid.TB) {
	t.Helper()
	conn := m.dial(t)
	var err error
	if m.producer, err = rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{Topology: m.top, ServerVersion: conn.ServerVersion()}); err != nil {
		t.Fatalf("producer backend: %v", err)
	}
	if err := m.producer.Declare(ctx, m.qcfg); err != nil {
		t.Fatalf("declare: %v", err)
	}
	if m.admin, err = conn.Channel(); err != nil {
		t.Fatalf("admin channel: %v", err)
	}
}

// dial opens a connection the machine closes at the end.
func (m *machine) dial(t rapid.TB) *membroker.Connection {
	conn, err := m.broker.Dial()
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	m.conns = append(m.conns, conn)
	return conn
}

// close releases the machine's backends and connections.
func (m *machine) close() {
	for _, w := range m.workers {
		if w.back != nil {
			_ = w.back.Close()
		}
	}
	if m.producer != nil {
		_ = m.producer.Close()
	}
	for _, c := range m.conns {
		_ = c.Close()
	}
}

// start connects a worker: a backend that declares the queue, and a
// consumer on a channel of its own with Qos(prefetch) and manual
// acknowledgements, read without blocking.
func (m *machine) start(t rapid.TB, w *worker) {
	t.Helper()
	if w.back != nil {
		_ = w.back.Close() // a dropped worker's
	}
	if w.core == nil {
		m.newCore(w)
	}
	w.conn = m.dial(t)
	var err error
	if w.back, err = rabbitmq.New(rabbitmq.Channels(w.conn.Channel), rabbitmq.Options{Topology: m.top, ServerVersion: w.conn.ServerVersion()}); err != nil {
		t.Fatalf("worker %d backend: %v", w.idx, err)
	}
	if err := w.back.Declare(ctx, m.qcfg); err != nil {
		t.Fatalf("worker %d declare: %v", w.idx, err)
	}
	w.starts++
	w.gen = workercore.Gen(w.starts)
	w.core.ConnectionUp(w.gen)
	w.tag = fmt.Sprintf("w%d.%d", w.idx, w.starts)
	m.byTag[w.tag] = w // before subscribing, which may deliver at once
	w.up = true
	// The subscription Backend.Consume makes (its own channel, the
	// consumer's core, the consumer timeout queuey asks for), without its
	// goroutine.
	if w.ch, err = w.conn.Channel(); err != nil {
		t.Fatalf("worker %d channel: %v", w.idx, err)
	}
	if w.sub, err = consume.Open(w.ch, workQueue, w.tag, m.cfg.Prefetch, acktimeout.ConsumeArgs(m.qcfg.WithDefaults())); err != nil {
		t.Fatalf("worker %d consume: %v", w.idx, err)
	}
	_, _, w.in, _ = w.sub.Current()
}

// newCore starts w's process: a worker core, wrapped in a broken one
// (below) if the machine's sabotage breaks the core.
func (m *machine) newCore(w *worker) {
	w.core = settle.New[*delivery]([]queuey.QueueConfig{m.qcfg}, workercore.Config{RequeueDelay: queuey.DefaultRequeueDelay})
	switch m.sabotage {
	case sabAckFirst:
		w.core = ackFirst(w.core)
	case sabSettleStale:
		w.core = deafCore{w.core}
	}
	w.x = execute.New[*delivery](ctx, w.core, settler{m, w}, machineBackend{m, w}, []queuey.QueueConfig{m.qcfg})
}

// machineCore is a worker core of the machine's.
type machineCore = execute.Core[*delivery]

type coreAction = execute.Action[*delivery]

// ackFirst wraps core so that it acknowledges a delivery as its
// successor's publish starts, not once the broker confirmed it, and drops
// the core's own acknowledgement of it later. The product's core has no
// such switch: the broken code is this test's.
func ackFirst(core machineCore) machineCore {
	return &earlyAcker{machineCore: core, early: map[workercore.ID]bool{}}
}

type earlyAcker struct {
	machineCore
	early map[workercore.ID]bool
}

func (c *earlyAcker) rewrite(acts []coreAction, from int) []coreAction {
	for i := from; i < len(acts); i++ {
		a := acts[i]
		switch {
		case a.Kind == workercore.Publish && !a.Malformed:
			ack := a
			ack.Kind = workercore.Ack
			c.early[a.ID] = true
			acts = slices.Insert(acts, i, ack)
			i++
		case a.Kind == workercore.Ack && c.early[a.ID]:
			delete(c.early, a.ID)
			acts = slices.Delete(acts, i, i+1)
			i--
		}
	}
	return acts
}

func (c *earlyAcker) HandlerDecided(acts []coreAction, id workercore.ID, dec settle.Decision, publish bool) []coreAction {
	n := len(acts)
	return c.rewrite(c.machineCore.HandlerDecided(acts, id, dec, publish), n)
}

func (c *earlyAcker) HandlerAbandoned(acts []coreAction, id workercore.ID, dec settle.Decision, publish bool) []coreAction {
	n := len(acts)
	return c.rewrite(c.machineCore.HandlerAbandoned(acts, id, dec, publish), n)
}

func (c *earlyAcker) Published(acts []coreAction, id workercore.ID, err error) []coreAction {
	n := len(acts)
	return c.rewrite(c.machineCore.Published(acts, id, err), n)
}

// deafCore never hears that a connection is gone, so it settles a
// delivery of a dropped connection as if it were not.
type deafCore struct{ machineCore }

func (deafCore) ConnectionLost(acts []coreAction, _ workercore.Gen) []coreAction { return acts }

// setSabotage breaks the settlement path, before anything is delivered.
func (m *machine) setSabotage(s sabotage) {
	m.sabotage = s
	for _, w := range m.workers {
		m.newCore(w)
		w.core.ConnectionUp(w.gen)
	}
}

// problem records something the model does not allow. The observer runs
// under the broker's lock and must not fail the test there; check reports
// what was recorded.
func (m *machine) problem(format string, args ...any) {
	m.problems = append(m.problems, fmt.Sprintf("at %s: ", m.now())+fmt.Sprintf(format, args...))
}

func (m *machine) now() time.Duration { return m.clk.Now().Sub(sim.Start) }

// stop fails the test with every problem recorded so far, if any.
func (m *machine) stop(t rapid.TB) {
	t.Helper()
	if len(m.problems) > 0 {
		t.Fatalf("%s\nconfig: %s", strings.Join(m.problems, "\n"), m.cfg)
	}
}

// effective is the priority level a classic queue files priority p at.
func (m *machine) effective(p uint8) uint8 {
	return min(p, m.cfg.MaxPriority)
}

// holdTTL rounds delay up to a whole multiple of granularity (at least a
// millisecond) and then to whole milliseconds: the model's own rounding,
// written from the documentation of the rounding (rabbitmq.Topology.RetryTTL).
func holdTTL(delay, granularity time.Duration) time.Duration {
	if delay <= 0 {
		return 0
	}
	granularity = max(granularity, time.Millisecond)
	rounded := (delay + granularity - 1) / granularity * granularity
	return (rounded + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// destination is where a message held for ttl goes first.
func destination(ttl time.Duration) string {
	if ttl == 0 {
		return workQueue
	}
	return holdQueue + strconv.FormatInt(ttl.Milliseconds(), 10)
}

// --- the broker's reports -------------------------------------------------

// observe is membroker's Observer: it checks each report against the model
// and moves the job it concerns.
func (m *machine) observe(ev membroker.Event) {
	now := m.clk.Now()
	switch ev.Kind {
	case membroker.EventQueueDeleted:
		if ev.Messages > 0 {
			m.problem("queue %s went (%s) with %d messages in it", ev.Queue, ev.Reason, ev.Messages)
		}
		if ev.Queue == workQueue || ev.Queue == deadQueue {
			m.problem("queue %s went (%s)", ev.Queue, ev.Reason)
		}
	case membroker.EventEnqueued:
		m.enqueued(ev, now)
	case membroker.EventDelivered:
		m.delivered(ev, now)
	case membroker.EventDeadLettered:
		j := m.jobs[ev.MessageID]
		if j != nil && m.restarting && ev.Queue == workQueue && (j.state == stDispatched || j.state == stInHand) {
			m.giveBack(j) // its consumer's connection has closed in the restart
		}
		switch {
		case ev.Dropped:
			m.problem("the broker dropped job %s dead-lettering it from %s (%s)", ev.MessageID, ev.Queue, ev.Reason)
		case j == nil:
			m.problem("the broker dead-lettered an unknown message %q from %s (%s)", ev.MessageID, ev.Queue, ev.Reason)
		case ev.Queue == workQueue && (j.state != stToDead || ev.Reason != "delivery_limit"):
			m.problem("the broker dead-lettered job %s (%s) from %s for %s", j.id, j.state, ev.Queue, ev.Reason)
		case ev.Queue != workQueue && (j.state != stHeld || j.hold != ev.Queue || ev.Reason != "expired"):
			m.problem("the broker dead-lettered job %s (%s in %s) from %s for %s", j.id, j.state, j.hold, ev.Queue, ev.Reason)
		}
	}
}

// enqueued checks a message entering a queue: a publish the model expects,
// a hold releasing a job at its due time, or a quorum queue's delivery
// limit.
func (m *machine) enqueued(ev membroker.Event, now time.Time) {
	if ev.Queue == deadQueue && ev.DeadLetteredFrom == "" {
		// The backend's dead letters carry no message id: it must be the
		// dead letter being published.
		j := m.cur
		if j == nil || j.state != stPublishing || j.dest != deadQueue {
			m.problem("a message entered %s while no dead letter was being published", deadQueue)
			return
		}
		j.state = stDead
		m.dead = append(m.dead, j)
		return
	}
	j := m.jobs[ev.MessageID]
	if j == nil {
		m.problem("an unknown message %q entered %s", ev.MessageID, ev.Queue)
		return
	}
	switch {
	case ev.DeadLetteredFrom == "":
		if j.state != stPublishing || j.dest != ev.Queue {
			m.problem("job %s (%s, bound for %q) entered %s", j.id, j.state, j.dest, ev.Queue)
			return
		}
		if j != m.cur {
			m.problem("job %s entered %s while job %v was being published", j.id, ev.Queue, m.cur)
		}
		if ev.Priority != j.priority {
			m.problem("job %s entered %s at priority %d, want %d", j.id, ev.Queue, ev.Priority, j.priority)
		}
		if ev.Queue == workQueue {
			m.queue(j, now)
			return
		}
		j.state, j.hold, j.heldAt, j.due = stHeld, ev.Queue, now, now.Add(j.ttl)
	case ev.Queue == workQueue:
		if j.state != stHeld || j.hold != ev.DeadLetteredFrom || ev.Reason != "expired" {
			m.problem("job %s (%s in %q) reached %s from %s (%s)", j.id, j.state, j.hold, ev.Queue, ev.DeadLetteredFrom, ev.Reason)
			return
		}
		if late := now.Sub(j.due); late < 0 || late > releaseSlack {
			m.problem("job %s held in %s at %s for %s was released %s after its due time, want within [0, %s]",
				j.id, j.hold, j.heldAt.Sub(sim.Start), j.due.Sub(j.heldAt), late, releaseSlack)
		}
		if ev.Priority != j.priority {
			m.problem("job %s came back from %s at priority %d, want %d", j.id, j.hold, ev.Priority, j.priority)
		}
		m.queue(j, j.due)
	case ev.Queue == deadQueue:
		if j.state != stToDead || ev.DeadLetteredFrom != workQueue || ev.Reason != "delivery_limit" {
			m.problem("job %s (%s, %d returns) reached %s from %s (%s)", j.id, j.state, j.returns, ev.Queue, ev.DeadLetteredFrom, ev.Reason)
			return
		}
		j.state, j.deadByLimit, j.deadReason = stDead, true, "delivery_limit"
		m.dead = append(m.dead, j)
	default:
		m.problem("job %s reached %s from %s (%s)", j.id, ev.Queue, ev.DeadLetteredFrom, ev.Reason)
	}
}

// queue puts j's fresh message on the work queue.
func (m *machine) queue(j *job, notBefore time.Time) {
	m.seq++
	j.state, j.seq, j.notBefore = stQueued, m.seq, notBefore
	j.redelivered, j.returns, j.hold = false, 0, ""
}

// delivered checks a message handed to a consumer: it must be a job on the
// work queue whose due time has come, handed to a live worker, and on a
// classic queue the first by priority, then by position.
func (m *machine) delivered(ev membroker.Event, now time.Time) {
	if ev.Queue == deadQueue && ev.ConsumerTag == "" {
		return // the audit's basic.get
	}
	j := m.jobs[ev.MessageID]
	w := m.byTag[ev.ConsumerTag]
	switch {
	case ev.Queue != workQueue:
		m.problem("message %q of %s was handed to consumer %q", ev.MessageID, ev.Queue, ev.ConsumerTag)
		return
	case j == nil:
		m.problem("an unknown message %q was delivered", ev.MessageID)
		return
	case w == nil || !w.up || w.tag != ev.ConsumerTag:
		m.problem("job %s was delivered to consumer %q, which is not a live worker's", j.id, ev.ConsumerTag)
		return
	case m.restarting && (j.state == stDispatched || j.state == stInHand):
		// Its consumer's connection has closed in the restart.
		m.giveBack(j)
		if j.state != stQueued {
			m.problem("job %s was returned %d times, over the delivery limit of %d, and delivered again", j.id, j.returns, deliveryLimit)
			return
		}
	}
	if j.state != stQueued {
		m.problem("job %s was delivered while %s", j.id, j.state)
		return
	}
	if now.Before(j.notBefore) {
		m.problem("job %s was delivered %s before its due time", j.id, j.notBefore.Sub(now))
	}
	if ev.Redelivered != j.redelivered {
		m.problem("job %s was delivered with redelivered=%t, want %t", j.id, ev.Redelivered, j.redelivered)
	}
	if !m.cfg.Quorum && !m.restarting { // in a restart, the model does not know which jobs are back yet
		for _, k := range m.all {
			if k == j || k.state != stQueued {
				continue
			}
			if ek, ej := m.effective(k.priority), m.effective(j.priority); ek > ej || (ek == ej && k.seq < j.seq) {
				m.problem("job %s (priority %d, position %d) was delivered ahead of job %s (priority %d, position %d)",
					j.id, j.priority, j.seq, k.id, k.priority, k.seq)
				break
			}
		}
	}
	j.state, j.worker, j.dispatchRe = stDispatched, w, ev.Redelivered
	w.unread = append(w.unread, j)
}

// --- actions -----------------------------------------------------------------

// newJob adds a job to the model, about to be enqueued at priority.
func (m *machine) newJob(priority uint8) *job {
	m.created++
	j := &job{id: "j" + strconv.Itoa(m.created), attempt: 1, priority: priority, enqueuedAt: m.clk.Now().UTC()}
	m.jobs[j.id] = j
	m.all = append(m.all, j)
	return j
}

// envelope is a new job's first envelope, as a producer makes it.
func (m *machine) envelope(j *job) queuey.Envelope {
	return queuey.Envelope{
		ID: j.id, Kind: jobKind, Queue: workQueue, Payload: json.RawMessage(`{"job":"` + j.id + `"}`),
		Attempt: 1, Priority: j.priority, EnqueuedAt: j.enqueuedAt,
	}
}

// expect says that j's next message goes to dest, held for ttl.
func (m *machine) expect(j *job, dest string, ttl time.Duration) {
	j.state, j.dest, j.ttl, j.worker = stPublishing, dest, ttl, nil
	m.cur = j
}

// published checks that a publish the backend confirmed reached the
// broker as expected.
func (m *machine) published(t rapid.TB, j *job, what string, err error) {
	t.Helper()
	m.cur = nil
	if err != nil {
		t.Fatalf("%s of job %s failed: %v", what, j.id, err)
	}
	if j.state == stPublishing {
		m.problem("%s of job %s returned nil, but it never reached %s", what, j.id, j.dest)
	}
	j.dest, j.ttl = "", 0
}

// enqueue publishes a new job to the work queue (Publish without a hold).
func (m *machine) enqueue(t rapid.TB, priority uint8) {
	t.Helper()
	j := m.newJob(priority)
	m.expect(j, workQueue, 0)
	err := m.producer.Publish(ctx, m.envelope(j), 0, queuey.HoldRetry)
	m.published(t, j, "enqueue", err)
}

// enqueueAfter publishes a new job through a hold (Publish with a hold,
// HoldDeferred), as Producer.EnqueueAfter does.
func (m *machine) enqueueAfter(t rapid.TB, hold time.Duration, priority uint8) {
	t.Helper()
	j := m.newJob(priority)
	ttl := holdTTL(hold, m.cfg.DeferredG)
	dest := destination(ttl)
	m.expect(j, dest, ttl)
	err := m.producer.Publish(ctx, m.envelope(j), hold, queuey.HoldDeferred)
	if m.squat[dest] {
		m.refused(t, j, "enqueue after "+hold.String(), err)
		// It was never enqueued: forget it.
		delete(m.jobs, j.id)
		m.all = m.all[:len(m.all)-1]
		return
	}
	m.published(t, j, "enqueue after "+hold.String(), err)
}

// refused checks that a publish into a squatted hold queue failed with
// the broker's refusal, and published nothing.
func (m *machine) refused(t rapid.TB, j *job, what string, err error) {
	t.Helper()
	m.cur = nil
	if err == nil || !strings.Contains(err.Error(), "PRECONDITION_FAILED") {
		m.problem("%s of job %s into %s, which exists with other arguments: got %v, want a refused declaration", what, j.id, j.dest, err)
	}
	if j.state != stPublishing {
		m.problem("%s of job %s was refused, but the job reached the broker (%s)", what, j.id, j.state)
	}
}

// deliver reads up to n deliveries off w's consumer channel, without
// blocking, and checks each against the job the broker reported handing
// over.
func (m *machine) deliver(t rapid.TB, w *worker, n int) {
	t.Helper()
	for range n {
		var d amqp.Delivery
		var ok bool
		select {
		case d, ok = <-w.in:
		default:
			if len(w.unread) > 0 {
				m.problem("worker %d: the broker handed over %d deliveries that are not on its channel", w.idx, len(w.unread))
			}
			return
		}
		if !ok {
			m.problem("worker %d: its consumer channel closed", w.idx)
			return
		}
		if len(w.unread) == 0 {
			m.problem("worker %d received %q, which the broker never reported handing over", w.idx, d.MessageId)
			return
		}
		j := w.unread[0]
		w.unread = w.unread[1:]
		m.read(j, d)
	}
}

// read checks what a worker received against the model of j.
func (m *machine) read(j *job, d amqp.Delivery) {
	env, err := queuey.DecodeEnvelope(d.Body)
	switch {
	case d.MessageId != j.id:
		m.problem("worker %d received %q where the broker handed over job %s", j.worker.idx, d.MessageId, j.id)
	case err != nil:
		m.problem("job %s: the body is not an envelope: %v", j.id, err)
	case env.ID != j.id || env.Kind != jobKind || env.Queue != workQueue:
		m.problem("job %s arrived as %s/%s on %s", j.id, env.ID, env.Kind, env.Queue)
	case env.Attempt != j.attempt || env.Deferrals != j.deferrals:
		m.problem("job %s arrived as attempt %d with %d deferrals, want attempt %d with %d", j.id, env.Attempt, env.Deferrals, j.attempt, j.deferrals)
	case env.Priority != j.priority || d.Priority != j.priority:
		m.problem("job %s arrived at priority %d (envelope %d), want %d", j.id, d.Priority, env.Priority, j.priority)
	case !env.EnqueuedAt.Equal(j.enqueuedAt) || d.Timestamp.Unix() != j.enqueuedAt.Unix():
		m.problem("job %s arrived enqueued at %s (timestamp %s), want %s", j.id, env.EnqueuedAt, d.Timestamp, j.enqueuedAt)
	case d.Redelivered != j.dispatchRe:
		m.problem("job %s arrived with redelivered=%t, the broker reported %t", j.id, d.Redelivered, j.dispatchRe)
	case d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent || d.Type != jobKind:
		m.problem("job %s arrived as %q, delivery mode %d, type %q", j.id, d.ContentType, d.DeliveryMode, d.Type)
	}
	j.state, j.delivery, j.env, j.ran, j.confirmed = stInHand, d, env, false, false
	w := j.worker
	dl := &delivery{Delivery: consume.Delivery{D: d}, j: j}
	w.sub.Take(&dl.Delivery, 1)
	m.carried = m.carried[:0]
	w.x.Deliver(0, w.gen, dl)
	if len(m.carried) != 1 || m.carried[0] != "run-handler" {
		m.problem("worker %d's core took job %s with %v, want one run-handler", w.idx, j.id, m.carried)
	}
}

// outcome is what a handler does with a job in hand.
type outcome int

const (
	succeed outcome = iota
	retry
	deferral
	fatal
	requeue
)

var outcomeNames = [...]string{"succeed", "retry", "defer", "fatal", "requeue"}

func (o outcome) String() string { return outcomeNames[o] }

// errRefusedByTest is the publish error of the requeue outcome: the
// broker never sees the publish.
var errRefusedByTest = errors.New("the test refuses this publish")

// result is what a handler returns for outcome o; requeue fails as retry
// does, and its successor's publish is refused.
func result(o outcome, delay time.Duration) error {
	switch o {
	case retry, requeue:
		return errors.New("handler failed")
	case deferral:
		return queuey.Defer(delay, "rate limited")
	case fatal:
		return queuey.Fatal(errors.New("bad input"))
	}
	return nil
}

// settle has the handler of j, in its worker's hand, return outcome o,
// and has the worker's executor carry out what its core decides:
// acknowledge a success; publish the successor (retry, defer, fatal) and
// acknowledge once it is confirmed; or, when the publish is refused
// (requeue, or a squatted hold queue), return the job to its queue after
// RequeueDelay. delay is the deferral's Retry-After and u the retry
// jitter's draw.
func (m *machine) settle(t rapid.TB, j *job, o outcome, delay time.Duration, u float64) {
	t.Helper()
	w := j.worker
	if j.state != stInHand || w == nil || j.ran {
		t.Fatalf("settle: job %s is %s (its handler returned: %t)", j.id, j.state, j.ran)
	}
	j.ran = true
	m.t, m.settling, m.carried = t, settlingStep{o: o, delay: delay}, m.carried[:0]
	act := j.act
	w.x.HandlerDone(&act, result(o, delay), u)
	m.t = nil
	for _, k := range m.carried {
		if k != "publish" && k != "ack" && k != "start-timer" {
			m.problem("worker %d's core answered job %s's %s with %s", w.idx, j.id, o, k)
		}
	}
}

// settler is a worker process as its executor's shell: handlers run when
// the test settles them, timers on the virtual clock, and every step is
// checked against the model.
type settler struct {
	m *machine
	w *worker
}

var _ execute.Shell[*delivery] = settler{}

func (s settler) Jitter(settle.Action[*delivery]) float64 { return 0.5 }

func (s settler) Now() time.Time { return s.m.clk.Now() }

func (s settler) RunHandler(a settle.Action[*delivery]) {
	s.m.carried = append(s.m.carried, a.Kind.String())
	a.Msg.j.act = a
}

// AfterFunc waits on the virtual clock; a process that crashed took its
// timers with it.
func (s settler) AfterFunc(d time.Duration, f func()) execute.Timer {
	w, core := s.w, s.w.core
	return s.m.clk.Stoppable(d, func() bool { return w.core == core }, f)
}

func (s settler) Before(a settle.Action[*delivery]) {
	m, w, j := s.m, s.w, a.Msg.j
	m.carried = append(m.carried, a.Kind.String())
	switch a.Kind {
	case workercore.Publish:
		m.beforePublish(w, j, &a)
	case workercore.Ack:
		if a.Decision.Action != queuey.ActionAck && !j.confirmed {
			m.problem("worker %d acknowledged job %s before its %s successor was confirmed", w.idx, j.id, a.Decision.Action)
		}
		if a.Decision.Action == queuey.ActionAck {
			j.state, j.worker = stDone, nil
		}
	case workercore.Requeue:
		// Bring the broker up to now first: a hold due at this instant is
		// released (and may be delivered) before the reject, which the
		// model must not yet count as queued.
		m.broker.Queue(workQueue)
		m.giveBack(j)
	}
}

func (s settler) After(a settle.Action[*delivery], rerouted string, err error) time.Duration {
	m, j := s.m, a.Msg.j
	switch a.Kind {
	case workercore.Publish:
		m.afterPublish(j, rerouted, err)
	case workercore.Ack:
		if err != nil {
			m.problem("ack job %s: %v", j.id, err)
		}
	case workercore.Requeue:
		if err != nil {
			m.problem("reject job %s: %v", j.id, err)
		}
		m.gaveBack(j)
	}
	return 0
}

// beforePublish checks the successor the core decided for j against the
// model, and moves the model to where the publish must take the job.
func (m *machine) beforePublish(w *worker, j *job, a *settle.Action[*delivery]) {
	t, o, delay := m.t, m.settling.o, m.settling.delay
	dec := a.Decision
	m.settling.saved, m.settling.fail = *j, false
	switch o {
	case retry, requeue:
		policy := m.qcfg.Retry
		if policy.MaxAttempts > 0 && j.attempt >= policy.MaxAttempts {
			if dec.Action != queuey.ActionDeadLetter || dec.Reason != queuey.ReasonAttemptsExhausted || dec.Successor.Attempt != j.attempt {
				t.Fatalf("attempt %d of %d of job %s failed: the core decided %s (%q) with attempt %d", j.attempt, policy.MaxAttempts, j.id, dec.Action, dec.Reason, dec.Successor.Attempt)
			}
			j.deadReason, j.priority = queuey.ReasonAttemptsExhausted, 0
			m.expect(j, deadQueue, 0)
			break
		}
		if dec.Action != queuey.ActionRetry || dec.Successor.Attempt != j.attempt+1 || dec.Successor.Deferrals != j.deferrals ||
			dec.Successor.Priority != 0 || dec.Delay < 0 || dec.Delay > policy.Cap {
			t.Fatalf("a retry of job %s (attempt %d, %d deferrals): the core decided %s to attempt %d with %d deferrals at priority %d after %s (cap %s)",
				j.id, j.attempt, j.deferrals, dec.Action, dec.Successor.Attempt, dec.Successor.Deferrals, dec.Successor.Priority, dec.Delay, policy.Cap)
		}
		j.attempt++
		j.priority = 0
		ttl := holdTTL(dec.Delay, m.cfg.RetryG)
		m.expect(j, destination(ttl), ttl)
	case deferral:
		if dec.Action != queuey.ActionDefer || dec.Successor.Attempt != j.attempt || dec.Successor.Deferrals != j.deferrals+1 ||
			dec.Successor.Priority != m.qcfg.TopPriority() || dec.Delay != max(delay, 0) {
			t.Fatalf("a deferral of job %s (attempt %d, %d deferrals) for %s: the core decided %s to attempt %d with %d deferrals at priority %d after %s",
				j.id, j.attempt, j.deferrals, delay, dec.Action, dec.Successor.Attempt, dec.Successor.Deferrals, dec.Successor.Priority, dec.Delay)
		}
		j.deferrals++
		j.priority = m.qcfg.TopPriority()
		ttl := holdTTL(settle.Hold(dec), m.cfg.DeferredG)
		m.expect(j, destination(ttl), ttl)
	case fatal:
		if dec.Action != queuey.ActionDeadLetter || dec.Reason != "fatal: bad input" || dec.Successor.Attempt != j.attempt {
			t.Fatalf("a fatal failure of job %s: the core decided %s (%q) with attempt %d", j.id, dec.Action, dec.Reason, dec.Successor.Attempt)
		}
		j.deadReason, j.priority = dec.Reason, 0
		m.expect(j, deadQueue, 0)
	default:
		t.Fatalf("job %s succeeded, and the core publishes a %s successor", j.id, dec.Action)
	}
	switch {
	case o == requeue:
		m.settling.fail = true // the test refuses it (machineBackend)
	case a.Gen != w.gen || !w.up:
		// Never on the product's path: the core drops the outcome of a
		// delivery whose connection went.
		m.problem("worker %d published job %s's %s successor for a delivery of a connection that is gone", w.idx, j.id, o)
		m.settling.fail = true
	}
}

// afterPublish checks the broker's answer against the model.
func (m *machine) afterPublish(j *job, rerouted string, err error) {
	t, o := m.t, m.settling.o
	what := "the " + o.String() + " successor"
	switch {
	case m.settling.fail:
		m.cur = nil
		*j = m.settling.saved // it stays in hand, unacknowledged, until the core requeues it
	case rerouted != "":
		// The model asks for no hold longer than MaxHoldTTL and no job
		// near the size limit.
		t.Fatalf("job %s's %s successor was dead-lettered instead (%s)", j.id, o, rerouted)
	case m.squat[j.dest]:
		// The hold is refused: the job stays in hand, unacknowledged,
		// until the core requeues it.
		m.refused(t, j, what, err)
		*j = m.settling.saved
	default:
		m.published(t, j, what, err)
		j.confirmed = true
	}
}

// machineBackend is what a worker's executor publishes through: its
// backend, with the machine's sabotage, refusing what the step refuses.
type machineBackend struct {
	m *machine
	w *worker
}

func (b machineBackend) backend() queuey.Backend { return b.m.settlement(b.w) }

func (b machineBackend) Declare(ctx context.Context, queues ...queuey.QueueConfig) error {
	return b.backend().Declare(ctx, queues...)
}

func (b machineBackend) Publish(ctx context.Context, env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) error {
	if b.m.settling.fail {
		return errRefusedByTest
	}
	return b.backend().Publish(ctx, env, hold, kind)
}

func (b machineBackend) DeadLetter(ctx context.Context, queue string, body []byte, reason string, attempts int) error {
	if b.m.settling.fail {
		return errRefusedByTest
	}
	return b.backend().DeadLetter(ctx, queue, body, reason, attempts)
}

func (b machineBackend) Consume(ctx context.Context, queue string, prefetch int) (queuey.Consumer, error) {
	return b.backend().Consume(ctx, queue, prefetch)
}

func (b machineBackend) Close() error { return nil }

// giveBack notes that j's message is returning to the work queue (a
// reject, or its worker's connection going): on a quorum queue, past the
// delivery limit, the broker must dead-letter it instead.
func (m *machine) giveBack(j *job) {
	j.returns++
	j.worker = nil
	if m.cfg.Quorum && j.returns > deliveryLimit {
		j.state = stToDead
		return
	}
	j.state, j.redelivered = stQueued, true
}

// gaveBack checks, once the return is done, that a job past the delivery
// limit was dead-lettered.
func (m *machine) gaveBack(j *job) {
	if j.state == stToDead {
		m.problem("job %s was returned %d times, over the delivery limit of %d, and not dead-lettered", j.id, j.returns, deliveryLimit)
	}
}

// advance moves virtual time on by d, firing every timer due meanwhile
// (hold expiries among them) at its own instant.
func (m *machine) advance(d time.Duration) {
	m.clk.RunUntil(m.clk.Now().Add(d))
}

// crash closes w's connection from the broker's side, as a dying worker
// process does: everything it was handed goes back to the queue.
func (m *machine) crash(t rapid.TB, w *worker) {
	t.Helper()
	var back []*job
	for _, j := range m.all {
		if j.worker == w && (j.state == stDispatched || j.state == stInHand) {
			back = append(back, j)
			m.giveBack(j)
		}
	}
	w.up, w.unread, w.stale = false, nil, nil
	w.core, w.x = nil, nil // the process died, its core with it
	m.broker.CloseConnection(w.conn, nil)
	_ = w.back.Close() // its channels are gone already
	w.back = nil
	for _, j := range back {
		m.gaveBack(j)
	}
}

// drop closes w's connection from the broker's side while its process
// lives on: what it was handed goes back to the queue, and the handlers
// running with what it had read can no longer settle (lateSettle).
func (m *machine) drop(t rapid.TB, w *worker) {
	t.Helper()
	back := m.loseConnection(w)
	m.broker.CloseConnection(w.conn, nil)
	for _, j := range back {
		m.gaveBack(j)
	}
}

// loseConnection gives back what w was handed, keeps the deliveries whose
// handlers still run as stale, and tells w's core: those waiting to be
// requeued must be dropped at once.
func (m *machine) loseConnection(w *worker) []*job {
	var back []*job
	for _, j := range m.all {
		if j.worker == w && (j.state == stDispatched || j.state == stInHand) {
			if j.state == stInHand && !j.ran {
				w.stale = append(w.stale, staleDelivery{j: j, act: j.act})
			}
			back = append(back, j)
			m.giveBack(j)
		}
	}
	w.up, w.unread = false, nil
	m.carried = m.carried[:0]
	w.x.Step(func(c machineCore, acts []coreAction) []coreAction {
		return c.ConnectionLost(acts, w.gen)
	})
	for _, k := range m.carried {
		if k != "drop" {
			m.problem("worker %d's core answered the loss of its connection with %s", w.idx, k)
		}
	}
	return back
}

// lateSettle has a handler of a dropped worker finish the stale delivery
// s with outcome o, before or after the worker reconnected: its core must
// drop the outcome, publishing and settling nothing.
func (m *machine) lateSettle(t rapid.TB, w *worker, s staleDelivery, o outcome, delay time.Duration, u float64) {
	t.Helper()
	m.t, m.settling, m.carried = t, settlingStep{o: o, delay: delay}, m.carried[:0]
	act := s.act
	w.x.HandlerDone(&act, result(o, delay), u)
	m.t = nil
	if len(m.carried) != 1 || m.carried[0] != "drop" {
		m.problem("worker %d's core settled job %s (%s) after its connection went: %v", w.idx, s.j.id, o, m.carried)
	}
	w.stale = slices.DeleteFunc(w.stale, func(x staleDelivery) bool { return x.act.ID == s.act.ID })
}

// restartBroker restarts the broker: every connection goes, what was
// handed out goes back to the queues, and durable queues keep their
// persistent messages (all of queuey's are), holds with their due times.
// The producer and the workers that were up reconnect.
//
// membroker closes the connections one after another, and a queue hands
// what one returns to consumers whose connection has yet to close, which
// return it in turn: while restarting is set, a job the model has handed
// out that is delivered or dead-lettered again was returned meanwhile.
func (m *machine) restartBroker(t rapid.TB) {
	t.Helper()
	for _, w := range m.workers {
		w.unread = nil
	}
	m.restarting = true
	m.broker.Restart()
	m.restarting = false
	var wasUp []*worker
	for _, w := range m.workers {
		if w.up {
			wasUp = append(wasUp, w)
			m.loseConnection(w)
		}
	}
	for _, j := range m.all {
		m.gaveBack(j)
	}
	_ = m.producer.Close()
	m.connectProducer(t)
	for _, w := range wasUp {
		m.start(t, w)
	}
}

// squatTTL declares the hold queue for ttl as someone else might, with
// other arguments, if it does not exist: every hold into it is then
// refused (406 PRECONDITION_FAILED) until unsquat deletes it.
func (m *machine) squatTTL(t rapid.TB, ttl time.Duration) {
	t.Helper()
	name := destination(ttl)
	if _, exists := m.broker.Queue(name); exists || ttl == 0 {
		return
	}
	if _, err := m.admin.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-message-ttl": ttl.Milliseconds()}); err != nil {
		t.Fatalf("squatting %s: %v", name, err)
	}
	m.squat[name] = true
}

// unsquat deletes a squatted hold queue.
func (m *machine) unsquat(t rapid.TB, name string) {
	t.Helper()
	if _, err := m.admin.QueueDelete(name, false, false, false); err != nil {
		t.Fatalf("deleting the squatter %s: %v", name, err)
	}
	delete(m.squat, name)
}

// audit takes the oldest message off the dead-letter queue and checks it
// is the job the model says, with the headers its dead-lettering must set.
func (m *machine) audit(t rapid.TB) {
	t.Helper()
	d, ok, err := m.admin.Get(deadQueue, true)
	if err != nil {
		t.Fatalf("get from %s: %v", deadQueue, err)
	}
	if !ok {
		if len(m.dead) > 0 {
			m.problem("%s is empty; %d dead letters should be on it", deadQueue, len(m.dead))
		}
		return
	}
	if len(m.dead) == 0 {
		m.problem("%s holds a message %q the model did not dead-letter", deadQueue, d.MessageId)
		return
	}
	j := m.dead[0]
	m.dead = m.dead[1:]
	j.state = stAudited
	env, err := queuey.DecodeEnvelope(d.Body)
	if err != nil || env.ID != j.id {
		m.problem("the oldest dead letter should be job %s; it is %q (%v)", j.id, env.ID, err)
		return
	}
	if env.Attempt != j.attempt || env.Deferrals != j.deferrals {
		m.problem("job %s was dead-lettered as attempt %d with %d deferrals, want %d and %d", j.id, env.Attempt, env.Deferrals, j.attempt, j.deferrals)
	}
	if j.deadByLimit {
		deaths, _ := d.Headers["x-death"].([]any)
		var first amqp.Table
		if len(deaths) > 0 {
			first, _ = deaths[0].(amqp.Table)
		}
		if first["reason"] != "delivery_limit" || first["queue"] != workQueue {
			m.problem("job %s, dead-lettered by the broker, has x-death %v", j.id, d.Headers["x-death"])
		}
		return
	}
	reason, _ := d.Headers[rabbitmq.HeaderDeathReason].(string)
	orig, _ := d.Headers[rabbitmq.HeaderOriginalQueue].(string)
	attempts, _ := d.Headers[rabbitmq.HeaderAttempts].(int64)
	if reason != j.deadReason || orig != workQueue || attempts != int64(j.attempt) {
		m.problem("job %s's dead letter says reason %q, queue %q, %d attempts; want %q, %q, %d",
			j.id, reason, orig, attempts, j.deadReason, workQueue, j.attempt)
	}
}

// check compares the model with the broker after an action: every queue's
// counts, each worker's unacknowledged deliveries, holds that should have
// been released by now, and the problems the observer recorded.
func (m *machine) check(t rapid.TB) {
	t.Helper()
	now := m.clk.Now()
	var queued, out int
	held := map[string]int{}
	perWorker := map[*worker][2]int{} // dispatched, in hand
	for _, j := range m.all {
		switch j.state {
		case stPublishing, stToDead:
			m.problem("job %s is still %s after the action", j.id, j.state)
		case stQueued:
			queued++
		case stDispatched, stInHand:
			out++
			c := perWorker[j.worker]
			if j.state == stDispatched {
				c[0]++
			} else {
				c[1]++
			}
			perWorker[j.worker] = c
			if !j.worker.up {
				m.problem("job %s is %s at worker %d, which is down", j.id, j.state, j.worker.idx)
			}
		case stHeld:
			held[j.hold]++
			if now.Sub(j.due) > releaseSlack {
				m.problem("job %s is still held in %s %s after its due time", j.id, j.hold, now.Sub(j.due))
			}
		}
	}
	work, ok := m.broker.Queue(workQueue)
	switch {
	case !ok:
		m.problem("%s is gone", workQueue)
	case work.Ready != queued || work.Unacked != out:
		m.problem("%s has %d ready and %d unacknowledged; the model has %d queued and %d handed out", workQueue, work.Ready, work.Unacked, queued, out)
	}
	for _, w := range m.workers {
		if !w.up {
			continue
		}
		c := perWorker[w]
		unacked := w.ch.Unacked()
		switch {
		case unacked != c[0]+c[1]:
			m.problem("worker %d has %d unacknowledged deliveries; the model has %d unread and %d in hand", w.idx, unacked, c[0], c[1])
		case len(w.in) != c[0] || len(w.unread) != c[0]:
			m.problem("worker %d has %d deliveries on its channel; the broker reported handing over %d (%d by the model)", w.idx, len(w.in), len(w.unread), c[0])
		case unacked > m.cfg.Prefetch:
			m.problem("worker %d has %d unacknowledged deliveries, over its prefetch of %d", w.idx, unacked, m.cfg.Prefetch)
		case ok && work.Ready > 0 && unacked < m.cfg.Prefetch:
			m.problem("worker %d has %d of %d deliveries while %d jobs wait on %s", w.idx, unacked, m.cfg.Prefetch, work.Ready, workQueue)
		}
	}
	for _, qi := range m.broker.Queues() {
		if !strings.HasPrefix(qi.Name, holdQueue) {
			continue
		}
		if qi.Ready != held[qi.Name] || qi.Unacked != 0 {
			m.problem("%s has %d ready and %d unacknowledged; the model holds %d there", qi.Name, qi.Ready, qi.Unacked, held[qi.Name])
		}
		delete(held, qi.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(held)) {
		m.problem("%s is gone with %d jobs the model holds there", name, held[name])
	}
	if dead, ok := m.broker.Queue(deadQueue); !ok || dead.Ready != len(m.dead) || dead.Unacked != 0 {
		m.problem("%s has %d ready and %d unacknowledged (exists: %t); the model has %d dead letters", deadQueue, dead.Ready, dead.Unacked, ok, len(m.dead))
	}
	m.stop(t)
}

// --- sabotage, to show the checks bite ---------------------------------------

// sabotage is a deliberate bug in the settlement path.
type sabotage int

const (
	sabNone               sabotage = iota
	sabLoseRetry                   // a retry's successor is never published
	sabDeferSpendsAttempt          // a deferral's successor counts an attempt
	sabShortHold                   // holds are published for a quarter of their delay
	sabWrongReason                 // dead letters carry another reason
	sabAckFirst                    // the worker core acknowledges before the successor is confirmed
	sabSettleStale                 // the worker core settles a delivery whose connection is gone
)

// settlement is the backend w settles through: its own, or with the
// machine's sabotage.
func (m *machine) settlement(w *worker) queuey.Backend {
	if m.sabotage == sabNone {
		return w.back
	}
	return sabotaged{Backend: w.back, s: m.sabotage}
}

type sabotaged struct {
	queuey.Backend
	s sabotage
}

func (b sabotaged) Publish(ctx context.Context, env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) error {
	switch {
	case b.s == sabLoseRetry && kind == queuey.HoldRetry:
		return nil
	case b.s == sabDeferSpendsAttempt && kind == queuey.HoldDeferred:
		env.Attempt++
	case b.s == sabShortHold:
		hold /= 4
	}
	return b.Backend.Publish(ctx, env, hold, kind)
}

func (b sabotaged) DeadLetter(ctx context.Context, queue string, body []byte, reason string, attempts int) error {
	if b.s == sabWrongReason {
		reason = "a reason nobody decided"
	}
	return b.Backend.DeadLetter(ctx, queue, body, reason, attempts)
}
