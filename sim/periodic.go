// Periodic jobs: the scenario's scheduler processes, each the shell that
// rabbitmq.Scheduler.Run drives (internal/schedshell), stepped on the
// simulation's one goroutine, and invariant 12's books.

package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/redial"
	"github.com/queuey/queuey/internal/schedcore"
	"github.com/queuey/queuey/internal/schedshell"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// schedGroup is the group's name in the simulation, and electionQueue its
// election queue.
const schedGroup = "sim"

var electionQueue = schedshell.Queue(schedGroup)

// periodic is the state of the scenario's scheduler group.
type periodic struct {
	procs []*schedProc
	byTag map[string]*schedProc // by consumer tag on the election queue
	ready []*schedProc          // with tokens delivered and not taken yet
	// arrived are tokens the broker delivered, on their way to their
	// process (pumpPeriodic gives each its delivery latency).
	arrived  []arrival
	acting   *schedProc // the process whose step is under way
	jobs     []schedshell.Job
	tickCfg  queuey.QueueConfig
	election string // the election queue
	tickArgs tickJob

	// Invariant 12's books: every copy of every tick enqueued, by tick
	// ID, and the leaderless spans. A process leads, as the broker sees
	// it, from the first token the broker hands it on a subscription until
	// that subscription's connection closes.
	copies map[string][]*tickCopy
	// tokensLost are when the broker lost tokens (a kill): the state they
	// carried, ticks recorded included, is gone with them.
	tokensLost []time.Duration
	holders    int           // processes leading now
	gaps       []gap         // spans with no process leading, in order; the last may be open
	up         int           // processes connected now
	upSince    time.Duration // since when some process has been connected, while up > 0
}

// schedProc is one scheduler process of the group: a connection, a
// backend, a producer and a rabbitmq.Scheduler on them, made afresh on
// each reconnection, and its shell, which lives as long as the process.
type schedProc struct {
	idx  int
	life int // processes so far in this slot: a crashed one is replaced
	up   bool
	conn *membroker.Connection
	rb   *rabbitmq.Backend
	// step is the process's scheduler shell; nil while it is dead.
	step    *schedshell.Shell
	sub     *consume.Sub
	tag     string // the current subscription's consumer tag
	in      <-chan amqp.Delivery
	gen     uint64 // the subscription's generation, as the shell knows it
	tags    int    // subscriptions so far, for consumer tags
	pending int    // tokens the broker handed over and the shell has yet to take
	// deliveries counts the process's latency draws (tokenLatency); takeAt
	// is when the last token handed over reaches it.
	deliveries uint64
	takeAt     time.Duration
	wake       *StoppableTimer
	wakeFn     func(at time.Time) // the shell's Wake, kept across reconnections
	leading    bool               // what the shell said last, for the trace
	// token: the broker has handed this process a token on its current
	// subscription, whose connection is open (invariant 12).
	token bool
	// faults are when a fault closed the process's connection.
	faults []time.Duration
	// unrecorded are its copies of ticks no token of its has carried yet.
	unrecorded []*tickCopy
	// dial is its reconnection loop.
	dial      redial.Stepper
	dialWatch dialWatch
	dials     uint64
}

// arrival is a token the broker delivered to p, to its consumer tag.
type arrival struct {
	p   *schedProc
	tag string
}

// tickCopy is one copy of a tick's job: when it was enqueued and by which
// process.
type tickCopy struct {
	at   time.Duration
	proc int
	// recorded is when the process next published a token, which carries
	// the tick; -1 until then.
	recorded time.Duration
}

// gap is a span with no process leading; to < 0 while it lasts.
type gap struct{ from, to time.Duration }

// tickJob is the job of every tick.
type tickJob struct {
	queue string
	At    time.Time `json:"at"`
}

func (j *tickJob) Kind() string  { return "tick" }
func (j *tickJob) Queue() string { return j.queue }

// startPeriodic starts the scenario's scheduler processes.
func (r *runner) startPeriodic() error {
	ps := r.s.Periodic
	if ps == nil {
		return nil
	}
	r.per = &periodic{
		byTag:    map[string]*schedProc{},
		tickCfg:  queuey.QueueConfig{Name: ps.Queue, Type: queuey.Classic},
		election: electionQueue,
		copies:   map[string][]*tickCopy{},
		gaps:     []gap{{from: 0, to: -1}},
	}
	pe := r.per
	pe.tickArgs.queue = ps.Queue
	for _, sc := range ps.Schedules {
		pe.jobs = append(pe.jobs, schedshell.Job{Name: sc.Name, Every: sc.Every.D(), Offset: sc.Offset.D(),
			Args: func(tick time.Time) queuey.JobArgs { pe.tickArgs.At = tick; return &pe.tickArgs }})
	}
	for i := range ps.Processes {
		p := &schedProc{idx: i}
		pe.procs = append(pe.procs, p)
		if err := r.connectSched(p); err != nil {
			return fmt.Errorf("sim: starting scheduler process %d: %w", i, err)
		}
	}
	return nil
}

// connectSched connects scheduler process p: a backend and a producer on a
// new connection, a rabbitmq.Scheduler on them, the election queue
// declared and subscribed to, as Scheduler.Run does at its start and a
// supervised backend's redeclaration and resumed consumer do after a
// reconnection. A process that starts (rather than reconnects) gets a new
// shell, and its first event.
func (r *runner) connectSched(p *schedProc) error {
	pe := r.per
	conn, err := r.broker.Dial()
	if err != nil {
		return err
	}
	rb, err := rabbitmq.New(r.channels(conn), r.backendOptions(conn))
	if err != nil {
		return err
	}
	producer, err := queuey.NewProducer(r.bg, rb, []queuey.QueueConfig{pe.tickCfg}, queuey.ProducerConfig{Clock: r.clk})
	if err != nil {
		return err
	}
	tokens, err := newTokenPublisher(r.channels(conn), electionQueue)
	if err != nil {
		return err
	}
	p.conn, p.rb = conn, rb
	env := schedshell.Env{
		Now:          r.clk.Now,
		PublishToken: tokens.publish,
		Producer:     producer,
		Log:          slog.New(slog.DiscardHandler),
	}
	starting := p.step == nil
	if starting {
		p.life++
		life := p.life
		env.Wake = func(at time.Time) {
			if p.wake != nil {
				p.wake.Stop()
			}
			p.wake = r.clk.Stoppable(max(at.Sub(r.clk.Now()), 0), func() bool { return p.life == life && p.step != nil },
				func() { r.stepSched(p, func() { p.step.Time(r.bg) }) })
		}
		p.wakeFn = env.Wake
		p.step = schedshell.New(pe.jobs, fmt.Sprintf("p%d.%d", p.idx, life), r.s.Periodic.Refresh.D(), env, r.opts.wrapSched)
	} else {
		env.Wake = p.wakeFn
		p.step.Rebind(env)
	}
	// The election queue, declared as Scheduler.Run does at its start and
	// a supervised backend does again after a reconnection.
	if err := declareOn(r.channels(conn), electionQueue, schedshell.QueueArgs()); err != nil {
		return fmt.Errorf("sim: declaring the election queue: %w", err)
	}
	p.tags++
	p.gen++
	tag := fmt.Sprintf("scheduler-%d-%d", p.idx, p.tags)
	// Up before subscribing, which may deliver at once: a token handed
	// over then makes a leader of a connected process.
	pe.byTag[tag], p.tag = p, tag
	p.up, p.takeAt = true, 0
	if pe.up++; pe.up == 1 {
		pe.upSince = r.now()
	}
	sub, err := subscribeOn(r.channels(conn), electionQueue, tag, schedshell.Prefetch, nil)
	if err != nil {
		return err
	}
	p.sub = sub
	_, _, p.in, _ = sub.Current()
	if starting {
		r.stepSched(p, func() { p.step.Start(r.bg) })
	}
	return nil
}

// stepSched runs one event of p's shell, which carries out what its core
// asks; the broker's events meanwhile are p's.
func (r *runner) stepSched(p *schedProc, step func()) {
	pe := r.per
	pe.acting = p
	step()
	pe.acting = nil
	if l := p.step != nil && p.step.Leading(); l != p.leading {
		p.leading = l
		detail := "leads"
		if !l {
			detail = "no longer leads"
		}
		r.emit(Event{Kind: EvLead, Queue: pe.election, Worker: p.idx, Detail: detail})
	}
}

// pumpPeriodic hands the tokens the broker delivered to their processes'
// shells. A token reaches its process a latency after the broker handed
// it over, up to Timing.Latency, in order: membroker hands it over at once,
// and a model where every process learns of a token at the instant it is
// sent would hide the races between processes that lead at once (a group
// whose election queue lacks single active consumer:
// TestPeriodicWithoutSingleActiveConsumerFails).
func (r *runner) pumpPeriodic() {
	pe := r.per
	for _, a := range pe.arrived {
		p, tag := a.p, a.tag
		lat := r.tokenLatency(p)
		p.takeAt = max(p.takeAt, r.now()+lat)
		take := func() {
			if p.tag != tag || !p.up {
				return // gone back with its connection
			}
			if p.pending++; p.pending == 1 {
				pe.ready = append(pe.ready, p)
			}
		}
		if p.takeAt == r.now() {
			take()
		} else {
			r.clk.AfterFunc(p.takeAt-r.now(), take)
		}
	}
	pe.arrived = pe.arrived[:0]
	for i := 0; i < len(pe.ready); i++ {
		p := pe.ready[i]
		pe.ready[i] = nil
		for p.pending > 0 {
			p.pending--
			d := new(consume.Delivery)
			if !receiveNow(&d.D, p.in) {
				if p.up && !p.sub.Channel().IsClosed() {
					r.failf("scheduler process %d: a token the broker reported is not on its channel", p.idx)
					return
				}
				p.pending = 0 // gone back with its connection
				break
			}
			p.sub.Take(d, 1)
			gen := p.gen
			r.stepSched(p, func() { p.step.Token(r.bg, gen, d) })
		}
	}
	pe.ready = pe.ready[:0]
}

// observePeriodic is the broker's events on the election and tick queues,
// under its lock: it must not call the broker.
func (r *runner) observePeriodic(ev membroker.Event) {
	pe := r.per
	switch {
	case ev.Kind == membroker.EventDelivered && ev.Queue == pe.election:
		p := pe.byTag[ev.ConsumerTag]
		if p == nil {
			r.failf("a token was delivered to consumer %q, not a scheduler process's", ev.ConsumerTag)
			return
		}
		if !p.token && !r.restarting { // not handed to a connection about to close
			p.token = true
			if pe.holders++; pe.holders == 1 {
				g := &pe.gaps[len(pe.gaps)-1]
				g.to = r.now()
				r.checkGap(g.from, g.to)
			}
		}
		pe.arrived = append(pe.arrived, arrival{p, ev.ConsumerTag})
	case ev.Kind == membroker.EventLost && ev.Queue == pe.election:
		pe.tokensLost = append(pe.tokensLost, r.now())
		r.emit(Event{Kind: EvLost, Queue: ev.Queue, Worker: -1, Detail: "a token, " + ev.Reason})
	case ev.Kind == membroker.EventEnqueued && ev.Queue == pe.election && pe.acting != nil:
		// A token of the acting process's: it carries every tick the
		// process enqueued before.
		p := pe.acting
		for _, c := range p.unrecorded {
			c.recorded = r.now()
		}
		p.unrecorded = p.unrecorded[:0]
	case ev.Kind == membroker.EventEnqueued && ev.Queue == r.s.Periodic.Queue:
		if pe.acting == nil {
			r.failf("tick %q enqueued outside a scheduler's step", ev.MessageID)
			return
		}
		r.tickEnqueued(ev.MessageID, pe.acting)
	}
}

// tickEnqueued records a copy of a tick's job, and checks that a second
// copy is explained (invariant 12): a fault hit the process that enqueued
// the copy before, after it enqueued it and before a token of its carried
// it, or the broker lost tokens since. Otherwise the tick was recorded
// in a token the group kept, and no leader may enqueue it again.
func (r *runner) tickEnqueued(id string, p *schedProc) {
	pe := r.per
	now := r.now()
	cs := pe.copies[id]
	if n := len(cs); n > 0 {
		prev := cs[n-1]
		until := now
		if prev.recorded >= 0 {
			until = prev.recorded
		}
		within := func(from, to time.Duration) func(time.Duration) bool {
			return func(t time.Duration) bool { return t >= from && t <= to }
		}
		if !slices.ContainsFunc(pe.procs[prev.proc].faults, within(prev.at, until)) && !slices.ContainsFunc(pe.tokensLost, within(prev.at, now)) {
			r.violate(invTicks, nil, fmt.Sprintf("tick %s enqueued again by scheduler %d; scheduler %d enqueued it at %s, and no fault hit it before a token of its carried it, nor were tokens lost since",
				id, p.idx, prev.proc, appendVirtual(nil, prev.at)))
		}
	}
	c := &tickCopy{at: now, proc: p.idx, recorded: -1}
	pe.copies[id] = append(cs, c)
	p.unrecorded = append(p.unrecorded, c)
	r.emit(Event{Kind: EvTick, Queue: r.s.Periodic.Queue, Worker: p.idx, Detail: id})
}

// schedDown is a fault closing p's connection, told to the books before
// the broker hands its tokens on: the process leads no more.
func (r *runner) schedDown(p *schedProc) {
	pe := r.per
	p.faults = append(p.faults, r.now())
	p.unrecorded = p.unrecorded[:0] // a token it publishes after this may not carry them
	if p.token {
		p.token = false
		if pe.holders--; pe.holders == 0 {
			pe.gaps = append(pe.gaps, gap{from: r.now(), to: -1})
		}
	}
}

// schedLost is what follows the close of p's connection: the process
// waits to reconnect, its backend closed, and its shell (unless it died)
// hears that its subscription is gone.
func (r *runner) schedLost(p *schedProc) {
	pe := r.per
	if !p.up {
		return
	}
	<-p.rb.Done() // the backend learns of the close on its publisher's goroutine
	p.up, p.pending = false, 0
	if g := pe.gaps[len(pe.gaps)-1]; pe.up == 1 && g.to < 0 {
		r.checkGap(g.from, r.now()) // the last process goes: judge the span so far
	}
	pe.up--
	_ = p.rb.Close()
	if p.step == nil {
		return // it died, and its shell with it
	}
	// The shell hears of it a latency later, as Run hears from its
	// supervised consumer's goroutine. Meanwhile it may act, and must see
	// for itself that its tokens' channel has closed.
	gen, life := p.gen, p.life
	lat := r.tokenLatency(p)
	r.clk.AfterFunc(lat, func() {
		if p.life == life && p.step != nil {
			r.stepSched(p, func() { p.step.Lost(r.bg, gen) })
		}
	})
}

// schedFault is a crash or drop of scheduler process f.Worker.
func (r *runner) schedFault(f Fault) {
	p := r.per.procs[f.Worker]
	if !p.up {
		return
	}
	ev := Event{Kind: EvDrop, Queue: r.per.election, Worker: p.idx}
	if f.Kind == FaultCrash {
		ev = Event{Kind: EvCrash, Queue: r.per.election, Worker: p.idx, Detail: "injected crash"}
	}
	r.emit(ev)
	r.schedDown(p)
	if f.Kind == FaultCrash {
		p.step = nil // the process, and its shell, died
		if p.leading {
			p.leading = false
			r.emit(Event{Kind: EvLead, Queue: r.per.election, Worker: p.idx, Detail: "no longer leads"})
		}
	}
	r.broker.CloseConnection(p.conn, nil)
	r.schedLost(p)
	life := p.life
	r.clk.AfterFunc(f.Restart.D(), func() {
		if p.life == life && !p.up { // neither back nor started afresh since
			r.restartSched(p)
		}
	})
}

// restartSched has p connect again: its first attempt at once, then as its
// reconnection loop says while the broker is unreachable.
func (r *runner) restartSched(p *schedProc) {
	p.dials++
	p.dial = r.newLoop(1<<61 | uint64(p.idx)<<20 | p.dials)
	r.runSchedLoop(p, p.dial, p.dial.Start())
}

// schedBrokerDown closes every scheduler process's connection in a broker
// restart, kill or outage (brokerDown): call before, with the broker
// still up, and with after once the connections are closed.
func (r *runner) schedBrokerDown(close func()) {
	if r.per == nil {
		close()
		return
	}
	var up []*schedProc
	for _, p := range r.per.procs {
		if p.up {
			r.schedDown(p)
			up = append(up, p)
		}
	}
	close()
	for _, p := range up {
		r.schedLost(p)
		if p.dial == nil { // up since the run began: its loop starts now
			p.dials++
			p.dial = r.newLoop(1<<61 | uint64(p.idx)<<20 | p.dials)
			p.dial.Start()
			p.dial.DialDone(nil, false)
		}
		r.runSchedLoop(p, p.dial, p.dial.Lost(errBrokerDown))
	}
}

// runSchedLoop runs p's reconnection loop.
func (r *runner) runSchedLoop(p *schedProc, loop redial.Stepper, acts []redial.Action) {
	r.runLoop(loop, &p.dialWatch, acts,
		func() bool { return p.dial == loop && !p.up },
		func() error {
			if err := r.connectSched(p); err != nil {
				r.failf("reconnecting scheduler process %d: %v", p.idx, err)
				return nil
			}
			r.emit(Event{Kind: EvRestart, Queue: r.per.election, Worker: p.idx})
			return nil
		},
		func(attempt int) {
			r.emit(Event{Kind: EvDialFailed, Queue: r.per.election, Worker: p.idx, Attempt: attempt})
		})
}

// checkTicks is invariant 12 at the end of the run: every tick due while
// some process led was enqueued. A tick may go missing only when, between
// it and the first enqueue of a later tick of its schedule, the trace
// shows a span with no leader, or a new leader's first syncAllowance,
// which the next leader's coalescing of missed ticks explains (checkGap
// bounds the spans).
func (r *runner) checkTicks() *PeriodicResult {
	pe := r.per
	stop := r.now()
	res := &PeriodicResult{}
	for _, g := range pe.gaps {
		to := g.to
		if to < 0 {
			to = stop
		}
		res.Leaderless += Duration(to - g.from)
	}
	if g := pe.gaps[len(pe.gaps)-1]; g.to < 0 {
		r.checkGap(g.from, stop) // the span lasting at the end
	}
	// leaderless: a span with no leader, or the time its next leader
	// takes to act (syncAllowance), meets [from, to].
	allow := r.syncAllowance()
	leaderless := func(from, to time.Duration) bool {
		for _, g := range pe.gaps {
			if g.from <= to && (g.to < 0 || g.to+allow >= from) {
				return true
			}
		}
		return false
	}
	for _, sc := range r.s.Periodic.Schedules {
		every := sc.Every.D()
		// The first tick is the latest at or before the start: the first
		// leader, knowing of no tick, enqueues it.
		first := schedcore.Schedule{Name: sc.Name, Every: every, Offset: sc.Offset.D()}.Tick(Start)
		var enq []time.Duration // by tick, the first copy's time; -1 for none
		var ticks []time.Time
		for t := first; !t.After(r.clk.Now()); t = t.Add(every) {
			ticks = append(ticks, t)
			at := time.Duration(-1)
			if cs := pe.copies[schedcore.TickID(sc.Name, t)]; len(cs) > 0 {
				at = cs[0].at
				res.Duplicates += len(cs) - 1
			}
			enq = append(enq, at)
		}
		next := stop // the first enqueue of a tick after the current one
		for k := len(ticks) - 1; k >= 0; k-- {
			t := ticks[k].Sub(Start)
			if t+time.Second > stop {
				continue // due too late in the run to judge
			}
			res.Due++
			if enq[k] >= 0 {
				res.Enqueued++
				next = enq[k]
				continue
			}
			res.Missed++
			if !leaderless(t, next) {
				r.violate(invTicks, nil, fmt.Sprintf("tick %s was never enqueued, and some process led from it until %s",
					schedcore.TickID(sc.Name, ticks[k]), appendVirtual(nil, next)))
			}
		}
	}
	return res
}

// checkGap is invariant 12 for the span with no leader that began at
// from, up to to, while processes have been connected since
// pe.upSince: some process leads again within the Refresh, a second and
// syncAllowance, since each process that does not lead offers a token
// every Refresh, tries again a second after a failed offer, and may first
// wait out a retry of its own (syncAllowance, which keeps the bound
// generous). It is judged when a leader comes, when the last process goes
// down, and at the end of the run.
func (r *runner) checkGap(from, to time.Duration) {
	pe := r.per
	if pe.up == 0 {
		return // every process is down: nothing can lead
	}
	since := max(from, pe.upSince)
	if bound := r.s.Periodic.Refresh.D() + time.Second + r.syncAllowance(); to-since > bound {
		r.violate(invTicks, nil, fmt.Sprintf("no scheduler process led from %s to %s, though one was connected all along from %s",
			appendVirtual(nil, from), appendVirtual(nil, to), appendVirtual(nil, since)))
	}
}

// syncAllowance is how long a process that begins to lead may take before
// it acts: its tokens reach it a latency after the broker hands them over,
// its own first token must come back to it (schedcore), a few latencies in
// all, and its core may first wait out the second after an offer that
// failed while it was cut off (schedulerRetryDelay).
func (r *runner) syncAllowance() time.Duration {
	return time.Second + 4*r.latency()
}

// latency is the most a token, or the news of a lost connection, takes to
// reach a scheduler process: the scenario's Timing.Latency, none with
// exact timing.
func (r *runner) latency() time.Duration {
	if r.s.Timing.Exact {
		return 0
	}
	return r.s.Timing.Latency.D()
}

// tokenLatency draws how long p's next token, or the news of its lost
// connection, takes to reach it: up to latency.
func (r *runner) tokenLatency(p *schedProc) time.Duration {
	p.deliveries++
	u := r.draw(uint64(p.idx)<<40|uint64(p.life)<<32|uint64(p.tags), p.deliveries, streamTokenLatency)
	return time.Duration(u * float64(r.latency()))
}

// PeriodicResult is what the scheduler group did (Scenario.Periodic).
type PeriodicResult struct {
	// Due counts the ticks of every schedule the run judged, Enqueued
	// those with at least one job, Missed the others (coalesced into a
	// later tick across a span with no leader), and Duplicates the
	// extra jobs of ticks enqueued more than once.
	Due        int `json:"due"`
	Enqueued   int `json:"enqueued"`
	Missed     int `json:"missed"`
	Duplicates int `json:"duplicates"`
	// Leaderless is how long no process led, in all.
	Leaderless Duration `json:"leaderless"`
}

// tokenPublisher publishes a scheduler process's tokens on a channel of
// its own in confirm mode, as its backend's publisher does for
// Scheduler.Run: persistent, mandatory, and done once the broker has
// confirmed (membroker confirms, or returns, before its call returns).
type tokenPublisher struct {
	ch       rabbitmq.Channel
	queue    string
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
}

func newTokenPublisher(open func() (rabbitmq.Channel, error), queue string) (*tokenPublisher, error) {
	ch, err := open()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	return &tokenPublisher{ch: ch, queue: queue,
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, 1)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, 1))}, nil
}

func (t *tokenPublisher) publish(ctx context.Context, body []byte) error {
	err := t.ch.PublishWithContext(ctx, "", t.queue, true, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body})
	if err != nil {
		return err
	}
	var c amqp.Confirmation
	select {
	case c = <-t.confirms:
	default:
		return errors.New("sim: a token's publish was not confirmed")
	}
	select {
	case ret := <-t.returns:
		return fmt.Errorf("sim: a token's publish was returned: %d %s", ret.ReplyCode, ret.ReplyText)
	default:
	}
	if !c.Ack {
		return errors.New("sim: a token's publish was nacked")
	}
	return nil
}

// declareOn declares queue, durable, with args, on a throwaway channel.
func declareOn(open func() (rabbitmq.Channel, error), queue string, args amqp.Table) error {
	ch, err := open()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclare(queue, true, false, false, false, args)
	return err
}
