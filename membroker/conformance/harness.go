package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Channel is the part of *amqp091.Channel that membroker mirrors.
type Channel interface {
	QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
	QueuePurge(name string, noWait bool) (int, error)
	Qos(prefetchCount, prefetchSize int, global bool) error
	Confirm(noWait bool) error
	NotifyPublish(confirm chan amqp.Confirmation) chan amqp.Confirmation
	NotifyReturn(c chan amqp.Return) chan amqp.Return
	NotifyClose(c chan *amqp.Error) chan *amqp.Error
	NotifyCancel(c chan string) chan string
	GetNextPublishSeqNo() uint64
	Publish(exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error
	PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg amqp.Publishing) error
	Consume(queue, consumer string, autoAck, exclusive, noLocal, noWait bool, args amqp.Table) (<-chan amqp.Delivery, error)
	Get(queue string, autoAck bool) (msg amqp.Delivery, ok bool, err error)
	Cancel(consumer string, noWait bool) error
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
	Reject(tag uint64, requeue bool) error
	Close() error
	IsClosed() bool
}

// Conn is a connection on a Target.
type Conn interface {
	Channel() (Channel, error)
	Close() error
}

// Target is a broker a scenario runs on.
type Target interface {
	// Name is "live" or "model".
	Name() string
	// Dial opens a connection.
	Dial() (Conn, error)
	// Wait lets d pass: real time on a live broker, virtual time on the model.
	Wait(d time.Duration)
	// Quiet is how long to watch for something that should not happen
	// (a delivery that must not arrive): real time on a live broker,
	// nothing on the model, where everything due has happened by the time
	// a call returns.
	Quiet() time.Duration
	// Patience bounds the wait for something that should happen.
	Patience() time.Duration
	// Poke makes the target process what is due (the model needs a call
	// after its clock moved; a live broker does it by itself).
	Poke()
	// Cleanup deletes the named queues (a live broker keeps state between
	// runs; the model is discarded).
	Cleanup(queues []string)
}

// Live is a RabbitMQ broker at an AMQP URL. Use one per run: it keeps the
// run's schedule, so that Wait(d) ends d after the previous Wait ended (or
// after the first Dial), however long the operations in between took. The
// time between two waits is then the same as on the model, where
// operations take no time, up to the latency of one operation.
type Live struct {
	URL     string
	start   time.Time
	elapsed time.Duration
	late    time.Duration // the most the run has been behind its schedule
	ended   time.Time     // when the scenario returned
}

// Span is how long the run took, from the start of its schedule to the
// scenario's return.
func (l *Live) Span() time.Duration { return l.ended.Sub(l.start) }

// MaxLate is how far behind its schedule a live run may fall and still be
// compared with the model: scenarios keep every deadline at least 250 ms
// from every observation. A live broker under load can fall further
// behind; such a run is inconclusive, not a divergence.
const MaxLate = 200 * time.Millisecond

// Late reports the most the run fell behind its schedule: how much longer
// than on the model (where they take no time) the operations before a wait
// (or before a Checkpoint) took.
func (l *Live) Late() time.Duration { return l.late }

// checkpoint records how far behind its schedule the run is now.
func (l *Live) checkpoint() { l.checkpointAt(time.Now()) }

// checkpointAt records how far behind its schedule the run was at t.
func (l *Live) checkpointAt(t time.Time) {
	if l.start.IsZero() {
		l.start = t
	}
	if late := t.Sub(l.start.Add(l.elapsed)); late > l.late {
		l.late = late
	}
}

// Name implements Target.
func (*Live) Name() string { return "live" }

// Dial implements Target.
func (l *Live) Dial() (Conn, error) {
	if l.start.IsZero() {
		l.start = time.Now()
	}
	c, err := amqp.Dial(l.URL)
	if err != nil {
		return nil, err
	}
	return liveConn{c}, nil
}

type liveConn struct{ c *amqp.Connection }

func (c liveConn) Channel() (Channel, error) { return c.c.Channel() }
func (c liveConn) Close() error              { return c.c.Close() }

// Wait implements Target: it sleeps until the run's schedule has advanced
// by d.
func (l *Live) Wait(d time.Duration) {
	l.checkpoint()
	l.elapsed += d
	time.Sleep(time.Until(l.start.Add(l.elapsed)))
}

// reanchor starts the run's schedule afresh at now: for a run that has
// set no deadline, whose schedule nothing depends on yet.
func (l *Live) reanchor() {
	l.start = time.Now().Add(-l.elapsed)
	l.late = 0
}

// Quiet implements Target.
func (*Live) Quiet() time.Duration { return 150 * time.Millisecond }

// Patience implements Target.
func (*Live) Patience() time.Duration { return 10 * time.Second }

// Poke implements Target.
func (*Live) Poke() {}

// Cleanup implements Target.
func (l *Live) Cleanup(queues []string) {
	c, err := amqp.Dial(l.URL)
	if err != nil {
		return
	}
	defer c.Close()
	for _, q := range queues {
		ch, err := c.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = ch.Close()
	}
}

// Model is membroker with the given profile on a mock clock.
type Model struct {
	B   *membroker.Broker
	Clk *clock.Mock

	version membroker.Version
	landed  map[string]landing // per queue, the last dead letter that reached it
	raced   atomic.Bool        // set by observe, under the broker's lock, maybe on the mock clock's goroutine

	mu     sync.Mutex      // guards quorum: declarations and timers run on different goroutines
	quorum map[string]bool // the quorum queues declared through a Run
}

// landing is a dead letter reaching a queue: when, from which queue, and
// whether it was set off by a timer (an expiry) rather than by an operation,
// and whether the queue it left is a quorum queue.
type landing struct {
	at       time.Time
	from     string
	timed    bool
	quorum   bool
	priority uint8
}

// NewModel returns a fresh model of release v on a mock clock, with exact
// timing.
func NewModel(v membroker.Version) *Model { return NewTimedModel(v, membroker.Timing{}) }

// NewTimedModel is NewModel with the broker's latency and timer slack set
// to t: what the simulator runs on.
func NewTimedModel(v membroker.Version, t membroker.Timing) *Model {
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := &Model{Clk: clk, version: v, landed: map[string]landing{}, quorum: map[string]bool{}}
	m.B = membroker.New(membroker.Config{Clock: clk, Version: v, Observer: m.observe, Timing: t})
	return m
}

// Raced reports whether the run had dead letters from two different queues
// reach one queue at the same virtual instant in an order a live broker
// does not keep. The model does at one instant what a live broker does
// over a few milliseconds, in processes of their own: each queue is one,
// with its own timers, and a quorum queue dead-letters only once its Raft
// log has the command. Measured on 4.0.5 and 4.3.6 (semantics §3.7):
//
//   - at least one of the two expired: they land in either order, from one
//     run of the same sequence to the next (two quorum queues with a 250 ms
//     TTL, one message published to each in turn);
//   - both set off by operations, out of two classic or two quorum queues:
//     mostly in the order of the operations, but not always (3 and 10 runs
//     in 40 reversed on 4.0.5);
//   - set off by one operation (a nack with multiple) out of a classic and
//     a quorum queue: the classic queue's first, always (40 of 40,
//     whichever delivery came first), as the model does;
//   - set off by two operations, a quorum queue's then a classic queue's:
//     sent back to back, the classic queue's lands first, always. A Run
//     waits for each settlement's effects to settle (Run.Nack quiesces)
//     before the next operation, so the quorum queue's, settled first,
//     usually lands first, as the model has it; but nothing makes it, and
//     the model flags it.
//
// On RabbitMQ43 the same holds for expired messages of one queue at
// different priorities landing at one instant: a 4.3 quorum queue expires
// the heads of all its priority levels in one batch, highest first
// (semantics §12.7), but on a live broker messages published a millisecond
// apart expire a millisecond apart, in publish order. (Seen on 4.3.6: five
// messages of priorities 1, 1, 1, 2 and 7 under a 250 ms queue TTL reached
// the dead-letter queue in publish order.)
//
// A sequence whose traces differ after such a race is inconclusive, not a
// divergence.
func (m *Model) Raced() bool { return m.raced.Load() }

// declaredQuorum records that the queue name was declared as a quorum queue.
func (m *Model) declaredQuorum(name string) {
	m.mu.Lock()
	m.quorum[name] = true
	m.mu.Unlock()
}

// observe is the model broker's Observer: it runs under the broker's lock.
// The landing's instant is the broker's (ev.At), not the mock clock's now:
// the mock runs a timer's callback on a goroutine of its own, so while Wait
// is still moving the clock on, now may change between two landings of one
// instant (TestModelFlagsRacingDeadLetters' expiry cases failed once in 37 runs of the
// whole test suite beside a CPU hog).
func (m *Model) observe(ev membroker.Event) {
	if ev.Kind != membroker.EventEnqueued || ev.DeadLetteredFrom == "" {
		return
	}
	m.mu.Lock()
	quorum := m.quorum[ev.DeadLetteredFrom]
	m.mu.Unlock()
	l := landing{at: ev.At, from: ev.DeadLetteredFrom, timed: ev.Reason == "expired", quorum: quorum, priority: ev.Priority}
	if prev, ok := m.landed[ev.Queue]; ok && prev.at.Equal(l.at) {
		switch {
		case prev.from != l.from && (prev.timed || l.timed):
			m.raced.Store(true)
		case prev.from != l.from && (prev.quorum == l.quorum || prev.quorum):
			// Two of a kind, or a quorum queue's before a classic
			// queue's: live, the classic queue's lands first.
			m.raced.Store(true)
		case m.version == membroker.RabbitMQ43 && prev.from == l.from && prev.timed && l.timed && prev.priority != l.priority:
			m.raced.Store(true)
		}
	}
	m.landed[ev.Queue] = l
}

// Name implements Target.
func (*Model) Name() string { return "model" }

// Dial implements Target.
func (m *Model) Dial() (Conn, error) {
	c, err := m.B.Dial()
	if err != nil {
		return nil, err
	}
	return modelConn{c}, nil
}

type modelConn struct{ c *membroker.Connection }

func (c modelConn) Channel() (Channel, error) { return c.c.Channel() }
func (c modelConn) Close() error              { return c.c.Close() }

// Wait implements Target.
func (m *Model) Wait(d time.Duration) { m.Clk.Add(d); m.Poke() }

// Quiet implements Target.
func (*Model) Quiet() time.Duration { return 0 }

// Patience implements Target.
func (*Model) Patience() time.Duration { return 2 * time.Second }

// Poke implements Target.
func (m *Model) Poke() { m.B.Queues() }

// Cleanup implements Target.
func (*Model) Cleanup([]string) {}

// Run is one execution of a scenario on one target. Its methods perform an
// operation and record what a client observes; they never stop the
// scenario on a broker error, which is an observation like any other.
type Run struct {
	target Target
	prefix string
	mu     sync.Mutex
	lines  []string
	queues []string
	conns  []Conn
	chans  map[Channel]*chanState
	quorum map[string]bool // queues declared as quorum queues
	leased map[string]bool // queues declared with x-expires: Quiesce and Wait must not read them
	// shortest is the shortest deadline the run has set (a positive TTL,
	// expiration or x-expires); zero if it has set none. A TTL of 0 is
	// not a deadline: such a message expires at once unless a consumer
	// takes it, whatever the clock says.
	shortest time.Duration
	fatal    error
	// What ReceiveAll took and what the queues held after each Wait:
	// recorded on a run without expectations (the model's), consumed as
	// expectations by a run given them (the live one). See Expectations.
	counts, expect     []int
	settled, expectSet []string // expectSet is nil on a run given none
	// observed is when the last observation outside a Surplus quiet period
	// was recorded; quiet is set during one.
	observed time.Time
	quiet    bool
	obs      Conn // the run's observer connection (see observer)
}

type chanState struct {
	id       int
	closes   chan *amqp.Error
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	cancels  chan string
	prefetch int
}

// errAbort stops a scenario that cannot go on (the target is unreachable).
var errAbort = errors.New("conformance: scenario aborted")

// NewRun prepares a run on target. prefix makes queue names unique on a
// shared live broker; it is removed from the trace.
func NewRun(target Target, prefix string) *Run {
	return &Run{target: target, prefix: prefix, chans: map[Channel]*chanState{}, quorum: map[string]bool{}, leased: map[string]bool{}}
}

// Target is the broker this run is on.
func (r *Run) Target() Target { return r.target }

// Trace returns the observations so far.
func (r *Run) Trace() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// Timed reports whether anything in the run had a deadline (a queue TTL or
// x-expires was declared, or a message with an expiration published): only
// then can falling behind the schedule change what a live run observes.
func (r *Run) Timed() bool { return r.shortest > 0 }

// Shortest is the shortest deadline the run has set, zero if none: no
// deadline can pass before this much time after the run began.
func (r *Run) Shortest() time.Duration { return r.shortest }

// deadline notes a deadline of v milliseconds (an argument's value, of
// whatever integer type the scenario gave it, or an expiration's string);
// a value that is not a positive integer sets none.
func (r *Run) deadline(v any) {
	var ms int64
	if s, ok := v.(string); ok {
		ms, _ = strconv.ParseInt(s, 10, 64)
	} else if rv := reflect.ValueOf(v); rv.CanInt() {
		ms = rv.Int()
	} else if rv.CanUint() {
		ms = int64(min(rv.Uint(), math.MaxInt64))
	}
	if d := time.Duration(ms) * time.Millisecond; d > 0 && (r.shortest == 0 || d < r.shortest) {
		r.shortest = d
	}
}

// Err reports why the run was aborted, if it was.
func (r *Run) Err() error { return r.fatal }

// Q returns the run's name for queue name and remembers it for cleanup.
func (r *Run) Q(name string) string {
	full := r.prefix + name
	if !slices.Contains(r.queues, full) {
		r.queues = append(r.queues, full)
	}
	return full
}

// Logf records one observation.
func (r *Run) Logf(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	line = strings.ReplaceAll(line, r.prefix, "")
	line = serverNames.ReplaceAllString(line, "amq.gen-*")
	// One observation is one line of a golden trace: a newline inside it
	// (RabbitMQ's ~tp breaks long reasons over lines) is written as \n.
	line = strings.ReplaceAll(line, "\n", `\n`)
	r.mu.Lock()
	r.lines = append(r.lines, line)
	if !r.quiet {
		r.observed = time.Now()
	}
	r.mu.Unlock()
}

var serverNames = regexp.MustCompile(`amq\.gen-[A-Za-z0-9_-]{22}`)

// abort records a failure that makes the rest of the scenario meaningless.
func (r *Run) abort(err error) {
	if r.fatal == nil {
		r.fatal = err
	}
	panic(errAbort)
}

// Execute runs fn and then deletes the run's queues and closes its
// connections. It returns the trace and an error if the run was aborted.
func (r *Run) Execute(fn func(*Run)) (trace []string, err error) {
	defer func() {
		if p := recover(); p != nil && p != errAbort {
			panic(p)
		}
		for _, c := range r.conns {
			_ = c.Close()
		}
		if r.obs != nil {
			_ = r.obs.Close()
		}
		r.target.Cleanup(r.queues)
		trace, err = r.Trace(), r.fatal
	}()
	fn(r)
	// The observations after the last wait count too: a run that fell
	// behind its schedule there saw them late (seen in CI on a loaded
	// machine: a 2 s TTL ran out before a read the scenario made 500 ms
	// in). Surplus's quiet period, deliberate, does not count.
	if live, ok := r.target.(*Live); ok {
		live.ended = time.Now()
		r.mu.Lock()
		at := r.observed
		r.mu.Unlock()
		if !at.IsZero() {
			live.checkpointAt(at)
		}
	}
	return
}

// Dial opens a connection; failing to is fatal.
func (r *Run) Dial() Conn {
	c, err := r.target.Dial()
	if err != nil {
		r.abort(fmt.Errorf("dial %s: %w", r.target.Name(), err))
	}
	r.conns = append(r.conns, c)
	if live, ok := r.target.(*Live); ok && live.elapsed == 0 && !r.Timed() {
		// Nothing with a deadline has happened yet: the schedule starts
		// once the connections are up, the observer's too. On a busy
		// broker an AMQP handshake now and then takes 5 s (measured on
		// 4.0.5: at 32 connections opening and closing, the slowest of 160
		// opens took 5.0 s, the median 4 ms), which made the run late
		// before it had begun.
		r.observer()
		live.start = time.Now()
	}
	return c
}

// Channel opens a channel in confirm mode with listeners for closes,
// confirms, returns and cancels. Failing to open one is recorded.
func (r *Run) Channel(c Conn) Channel {
	ch, err := c.Channel()
	if err != nil {
		r.Logf("channel: %s", describeErr(err))
		return nil
	}
	st := &chanState{
		id:       len(r.chans) + 1,
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, 4096)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, 256)),
		cancels:  ch.NotifyCancel(make(chan string, 64)),
	}
	if err := ch.Confirm(false); err != nil {
		r.abort(fmt.Errorf("confirm: %w", err))
	}
	r.chans[ch] = st
	return ch
}

func (r *Run) state(ch Channel) *chanState {
	st, ok := r.chans[ch]
	if !ok {
		r.abort(errors.New("channel not opened through Run.Channel"))
	}
	return st
}

// describeErr renders an error as a client sees it: an *amqp.Error by code
// and reason, anything else by its text.
func describeErr(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		if ae == amqp.ErrClosed {
			return "error closed"
		}
		return fmt.Sprintf("error %d %s", ae.Code, ae.Reason)
	}
	return "error " + err.Error()
}

// Declare declares a queue and records the reply or the error.
func (r *Run) Declare(ch Channel, name string, durable, autoDelete, exclusive bool, args amqp.Table) bool {
	r.settleStats(name)
	q, err := ch.QueueDeclare(name, durable, autoDelete, exclusive, false, args)
	if err != nil {
		r.Logf("declare %s: %s", name, describeErr(err))
		return false
	}
	if t, _ := args["x-queue-type"].(string); t == "quorum" {
		r.quorum[name] = true
		if m, ok := r.target.(*Model); ok {
			m.declaredQuorum(name)
		}
	}
	if v, ok := args["x-expires"]; ok {
		r.leased[name] = true
		r.deadline(v)
	}
	if v, ok := args["x-message-ttl"]; ok {
		r.deadline(v)
	}
	r.Logf("declare %s: ok name=%s messages=%d consumers=%d", name, q.Name, q.Messages, q.Consumers)
	return true
}

// Passive records a passive declare: the ready count, or the error.
func (r *Run) Passive(ch Channel, name string) {
	r.settleStats(name)
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err != nil {
		r.Logf("passive %s: %s", name, describeErr(err))
		return
	}
	r.Logf("passive %s: messages=%d consumers=%d", name, q.Messages, q.Consumers)
}

// Delete records a queue.delete.
func (r *Run) Delete(ch Channel, name string, ifUnused, ifEmpty bool) {
	r.settleStats(name)
	n, err := ch.QueueDelete(name, ifUnused, ifEmpty, false)
	if err != nil {
		r.Logf("delete %s: %s", name, describeErr(err))
		return
	}
	r.Logf("delete %s: messages=%d", name, n)
}

// Purge records a queue.purge.
func (r *Run) Purge(ch Channel, name string) {
	n, err := ch.QueuePurge(name, false)
	if err != nil {
		r.Logf("purge %s: %s", name, describeErr(err))
		return
	}
	r.Logf("purge %s: messages=%d", name, n)
}

// Qos sets the channel's prefetch and records an error.
func (r *Run) Qos(ch Channel, prefetch int) {
	if err := ch.Qos(prefetch, 0, false); err != nil {
		r.Logf("qos %d: %s", prefetch, describeErr(err))
		return
	}
	r.state(ch).prefetch = prefetch
}

// barrier makes sure the broker has processed everything sent on ch
// (publishes are confirmed; acks and rejects have reached their queues):
// a synchronous basic.qos that changes nothing.
func (r *Run) barrier(ch Channel) {
	st := r.state(ch)
	_ = ch.Qos(st.prefetch, 0, false)
}

// Publish publishes body to the default exchange with routing key queue,
// waits for its confirm and records the confirm and any return. A
// publish the broker refuses shows as the channel closing.
func (r *Run) Publish(ch Channel, queue, body string, p amqp.Publishing) {
	r.publish(ch, queue, body, p, false)
}

// PublishMandatory is Publish with the mandatory flag.
func (r *Run) PublishMandatory(ch Channel, queue, body string, p amqp.Publishing) {
	r.publish(ch, queue, body, p, true)
}

func (r *Run) publish(ch Channel, queue, body string, p amqp.Publishing, mandatory bool) {
	st := r.state(ch)
	if p.Expiration != "" {
		r.deadline(p.Expiration)
	}
	p.Body = []byte(body)
	if err := ch.Publish("", queue, mandatory, false, p); err != nil {
		r.Logf("publish %s %q: %s", queue, body, describeErr(err))
		return
	}
	r.awaitConfirm(ch, st, body)
}

// PublishTo publishes to a named exchange (which membroker does not have):
// the refusal shows as the channel closing.
func (r *Run) PublishTo(ch Channel, exchange, key, body string, p amqp.Publishing) {
	st := r.state(ch)
	p.Body = []byte(body)
	if err := ch.Publish(exchange, key, false, false, p); err != nil {
		r.Logf("publish %s/%s %q: %s", exchange, key, body, describeErr(err))
		return
	}
	r.awaitConfirm(ch, st, body)
}

func (r *Run) awaitConfirm(ch Channel, st *chanState, body string) {
	timeout := time.After(r.target.Patience())
	returns := st.returns
	for {
		select {
		case ret, ok := <-returns:
			if !ok {
				// The channel closed: its returns listener is closed too
				// and would otherwise yield zero Returns until the
				// confirms listener is picked.
				returns = nil
				continue
			}
			r.Logf("return %d %s rk=%s body=%q", ret.ReplyCode, ret.ReplyText, ret.RoutingKey, ret.Body)
		case c, ok := <-st.confirms:
			// A basic.return is sent before its confirm, but when both are
			// already buffered select picks either: record returns first.
			r.pendingReturns(st)
			if !ok {
				r.Closed(ch)
				return
			}
			r.Logf("confirm %q tag=%d ack=%t", body, c.DeliveryTag, c.Ack)
			return
		case <-timeout:
			r.Logf("confirm %q: none within %s", body, r.target.Patience())
			return
		}
	}
}

// pendingReturns records the returns already buffered on st.
func (r *Run) pendingReturns(st *chanState) {
	for {
		select {
		case ret, ok := <-st.returns:
			if !ok {
				return
			}
			r.Logf("return %d %s rk=%s body=%q", ret.ReplyCode, ret.ReplyText, ret.RoutingKey, ret.Body)
		default:
			return
		}
	}
}

// Closed waits for ch's close notification and records it.
func (r *Run) Closed(ch Channel) {
	st := r.state(ch)
	select {
	case e, ok := <-st.closes:
		if !ok {
			r.Logf("channel %d: closed", st.id)
			return
		}
		r.Logf("channel %d: closed %d %s", st.id, e.Code, e.Reason)
	case <-time.After(r.target.Patience()):
		r.Logf("channel %d: still open", st.id)
	}
}

// Get records a basic.get: the delivery, "empty", or the error.
func (r *Run) Get(ch Channel, queue string, autoAck bool) (amqp.Delivery, bool) {
	d, ok, err := ch.Get(queue, autoAck)
	switch {
	case err != nil:
		r.Logf("get %s: %s", queue, describeErr(err))
	case !ok:
		r.Logf("get %s: empty", queue)
	default:
		r.Logf("get %s: %s", queue, Describe(d))
	}
	return d, ok && err == nil
}

// Ack acknowledges d and waits until the broker has processed it.
func (r *Run) Ack(ch Channel, tag uint64, multiple bool) {
	if err := ch.Ack(tag, multiple); err != nil {
		r.Logf("ack %d: %s", tag, describeErr(err))
	}
	r.barrier(ch)
}

// Nack negatively acknowledges and waits until the broker has processed it,
// and any dead letter or requeue it caused has landed (see Quiesce).
func (r *Run) Nack(ch Channel, tag uint64, multiple, requeue bool) {
	if err := ch.Nack(tag, multiple, requeue); err != nil {
		r.Logf("nack %d: %s", tag, describeErr(err))
	}
	r.barrier(ch)
	r.Quiesce()
}

// Reject rejects and waits until the broker has processed it, and any dead
// letter or requeue it caused has landed (see Quiesce).
func (r *Run) Reject(ch Channel, tag uint64, requeue bool) {
	if err := ch.Reject(tag, requeue); err != nil {
		r.Logf("reject %d: %s", tag, describeErr(err))
	}
	r.barrier(ch)
	r.Quiesce()
}

// Consume starts a consumer with an explicit tag (tags are compared).
func (r *Run) Consume(ch Channel, queue, tag string, autoAck, exclusive bool) <-chan amqp.Delivery {
	c, err := ch.Consume(queue, tag, autoAck, exclusive, false, false, nil)
	if err != nil {
		r.Logf("consume %s %s: %s", queue, tag, describeErr(err))
		return nil
	}
	r.Logf("consume %s %s: ok", queue, tag)
	return c
}

// ConsumeArgs is Consume with basic.consume arguments.
func (r *Run) ConsumeArgs(ch Channel, queue, tag string, args amqp.Table) <-chan amqp.Delivery {
	c, err := ch.Consume(queue, tag, false, false, false, false, args)
	if err != nil {
		r.Logf("consume %s %s %v: %s", queue, tag, args, describeErr(err))
		return nil
	}
	r.Logf("consume %s %s %v: ok", queue, tag, args)
	return c
}

// Cancel cancels a consumer and records an error.
func (r *Run) Cancel(ch Channel, tag string) {
	if err := ch.Cancel(tag, false); err != nil {
		r.Logf("cancel %s: %s", tag, describeErr(err))
	}
}

// Receive waits for n deliveries on c and records them, then records any
// surplus that arrives within the target's quiet period.
func (r *Run) Receive(c <-chan amqp.Delivery, n int) []amqp.Delivery {
	out := r.receiveN(c, n)
	if len(out) < n {
		return out
	}
	return append(out, r.Surplus(c)...)
}

// receiveN waits for n deliveries on c and records them.
func (r *Run) receiveN(c <-chan amqp.Delivery, n int) []amqp.Delivery {
	r.target.Poke()
	var out []amqp.Delivery
	timeout := time.After(r.target.Patience())
	for len(out) < n {
		select {
		case d, ok := <-c:
			if !ok {
				r.Logf("deliveries closed after %d of %d", len(out), n)
				return out
			}
			r.Logf("deliver %s", Describe(d))
			out = append(out, d)
		case <-timeout:
			r.Logf("deliveries: %d of %d within %s", len(out), n, r.target.Patience())
			return out
		}
	}
	return out
}

// ReceiveAll records every delivery the consumer has been handed. On a run
// with expectations it waits for the expected number and no longer: time
// spent watching for a surplus would pass on the live broker and not on
// the model. A surplus shows up in a later ReceiveAll, or in Surplus at the
// end of the scenario.
func (r *Run) ReceiveAll(c <-chan amqp.Delivery) []amqp.Delivery {
	if r.expect != nil {
		n := 0
		if len(r.expect) > 0 {
			n, r.expect = r.expect[0], r.expect[1:]
		}
		return r.receiveN(c, n)
	}
	r.target.Poke()
	var out []amqp.Delivery
	for {
		select {
		case d, ok := <-c:
			if !ok {
				r.Logf("deliveries closed")
				r.counts = append(r.counts, len(out))
				return out
			}
			r.Logf("deliver %s", Describe(d))
			out = append(out, d)
			continue
		default:
		}
		break
	}
	r.counts = append(r.counts, len(out))
	return out
}

// Surplus records deliveries that arrive on c within the quiet period.
func (r *Run) Surplus(c <-chan amqp.Delivery) []amqp.Delivery {
	r.setQuiet(true)
	defer r.setQuiet(false)
	r.target.Poke()
	var out []amqp.Delivery
	quiet := time.After(r.target.Quiet())
	over := false
	for {
		var d amqp.Delivery
		var ok bool
		if over {
			// What is already on c counts even when the quiet period is
			// over (the model's is zero, and select picks among ready
			// cases at random).
			select {
			case d, ok = <-c:
			default:
				return out
			}
		} else {
			select {
			case d, ok = <-c:
			case <-quiet:
				over = true
				continue
			}
		}
		if !ok {
			r.Logf("deliveries closed")
			return out
		}
		r.Logf("deliver (unexpected) %s", Describe(d))
		out = append(out, d)
	}
}

func (r *Run) setQuiet(q bool) {
	r.mu.Lock()
	r.quiet = q
	r.mu.Unlock()
}

// CancelsSoFar records the consumer cancellations the broker has sent on
// ch by now, without waiting for more: for a scenario that has waited past
// the instant a cancellation would come, where "none" is an observation.
func (r *Run) CancelsSoFar(ch Channel) {
	r.target.Poke()
	st := r.state(ch)
	for {
		select {
		case tag, ok := <-st.cancels:
			if !ok {
				r.Logf("cancels: listener closed")
				return
			}
			r.Logf("cancelled by broker: %s", tag)
		default:
			r.Logf("cancels: no more")
			return
		}
	}
}

// Cancels records consumer cancellations the broker sent on ch.
func (r *Run) Cancels(ch Channel, n int) {
	st := r.state(ch)
	timeout := time.After(r.target.Patience())
	for range n {
		select {
		case tag := <-st.cancels:
			r.Logf("cancelled by broker: %s", tag)
		case <-timeout:
			r.Logf("no broker cancel within %s", r.target.Patience())
			return
		}
	}
}

// Checkpoint notes, on a live run, how far behind its schedule it is at
// this point (see Live.Late); it records nothing in the trace. Execute
// checks the time of the run's last observation outside a Surplus quiet
// period too, so a scenario needs it only before a quiet period.
func (r *Run) Checkpoint() {
	if live, ok := r.target.(*Live); ok {
		live.checkpoint()
	}
}

// Describe renders a delivery as a trace line: body, delivery fields, the
// properties that are set, and the headers with their Go types.
func Describe(d amqp.Delivery) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q tag=%d redelivered=%t exchange=%q rk=%q", d.Body, d.DeliveryTag, d.Redelivered, d.Exchange, d.RoutingKey)
	if d.ConsumerTag != "" {
		fmt.Fprintf(&b, " ctag=%s", d.ConsumerTag)
	} else {
		fmt.Fprintf(&b, " remaining=%d", d.MessageCount)
	}
	props := []struct {
		k string
		v any
		z bool
	}{
		{"content-type", d.ContentType, d.ContentType == ""},
		{"content-encoding", d.ContentEncoding, d.ContentEncoding == ""},
		{"delivery-mode", d.DeliveryMode, d.DeliveryMode == 0},
		{"priority", d.Priority, d.Priority == 0},
		{"correlation-id", d.CorrelationId, d.CorrelationId == ""},
		{"reply-to", d.ReplyTo, d.ReplyTo == ""},
		{"expiration", d.Expiration, d.Expiration == ""},
		{"message-id", d.MessageId, d.MessageId == ""},
		{"timestamp", d.Timestamp.Unix(), d.Timestamp.IsZero()},
		{"type", d.Type, d.Type == ""},
		{"user-id", d.UserId, d.UserId == ""},
		{"app-id", d.AppId, d.AppId == ""},
	}
	for _, p := range props {
		if !p.z {
			fmt.Fprintf(&b, " %s=%v", p.k, p.v)
		}
	}
	if d.Headers != nil {
		fmt.Fprintf(&b, " headers=%s", describeValue(d.Headers))
	}
	return b.String()
}

// describeValue renders a header value with its Go type, tables sorted by
// key, and times (x-death's) as "time": they differ between a live run and
// the model's virtual clock.
func describeValue(v any) string {
	switch x := v.(type) {
	case amqp.Table:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ":" + describeValue(x[k])
		}
		return "{" + strings.Join(parts, " ") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = describeValue(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case time.Time:
		return "time"
	case string:
		return fmt.Sprintf("%q", x)
	case []byte:
		return fmt.Sprintf("bytes(%q)", x)
	case nil:
		return "nil"
	default:
		return fmt.Sprintf("%T(%v)", x, x)
	}
}
