package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// receiveNow takes a delivery already on c into d, if there is one.
func receiveNow(d *amqp.Delivery, c <-chan amqp.Delivery) (ok bool) {
	select {
	case *d, ok = <-c:
		return ok
	default:
		return false
	}
}

// InvariantName returns the short name of invariant n (1–13), as
// Violation.Name gives it.
func InvariantName(n int) string {
	if n > 0 && n < len(invariants) {
		return invariants[n].name
	}
	return "invariant " + strconv.Itoa(n)
}

// expiryResolution is how late membroker may release a hold and still be
// on time: a classic queue's one expiry timer moves only when the new head
// is due more than a millisecond earlier (ensure_ttl_timer).
const expiryResolution = time.Millisecond

// Violation is one broken invariant, with the trace that shows it.
type Violation struct {
	Invariant int           `json:"invariant"`
	Name      string        `json:"name"`
	At        time.Duration `json:"at_ns"`
	Job       uint64        `json:"job,omitempty"`
	Detail    string        `json:"detail"`
	// Excerpt is the trace that shows it: the job's events up to the
	// violation (the last 24), or for a violation that concerns no job the
	// 24 events before it.
	Excerpt []string `json:"excerpt,omitempty"`

	seq uint64 // the violation's event number in the trace
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "invariant %d (%s) violated at %s", v.Invariant, v.Name, appendVirtual(nil, v.At))
	if v.Job != 0 {
		fmt.Fprintf(&b, " by job %d", v.Job)
	}
	b.WriteString(": ")
	b.WriteString(v.Detail)
	for _, l := range v.Excerpt {
		b.WriteString("\n    ")
		b.WriteString(l)
	}
	return b.String()
}

func (r *runner) violate(inv invariant, j *job, detail string) {
	r.res.ViolationCount++
	r.res.ViolationsByInvariant[int(inv)]++
	var n uint64
	if j != nil {
		n = j.n
	}
	r.emit(Event{Kind: EvViolation, Job: n, Worker: -1, Detail: fmt.Sprintf("invariant %d (%s): %s", inv, invariants[inv].name, detail)})
	if len(r.res.Violations) >= r.opts.MaxViolations {
		return
	}
	v := Violation{Invariant: int(inv), Name: invariants[inv].name, At: r.now(), Job: n, Detail: detail, seq: r.rec.events}
	r.res.Violations = append(r.res.Violations, v)
}

// queue roles.
const (
	roleOther = iota
	roleWork
	roleDead
	roleHold
	roleWait
	roleRelay // the hold ladder's relay queue: jobs between rungs
)

type queueRole struct {
	q    *simQueue
	role int
}

// classify says what a queue name is to the simulation.
func (r *runner) classify(name string) queueRole {
	// Events come in runs on a few queues: the names classified last are
	// checked first, without hashing (equal strings from the same queue
	// share their bytes, which the comparison notices first).
	for i := range r.recentNames {
		if e := &r.recentNames[i]; e.name == name && e.set {
			return e.qr
		}
	}
	qr := r.classifyName(name)
	r.recentNames[r.recentNext] = recentName{name: name, qr: qr, set: true}
	r.recentNext = (r.recentNext + 1) % len(r.recentNames)
	return qr
}

// recentName is a name classify has classified lately.
type recentName struct {
	name string
	qr   queueRole
	set  bool
}

func (r *runner) classifyName(name string) queueRole {
	if qr, ok := r.holdNames[name]; ok {
		return qr
	}
	if q, ok := r.byName[name]; ok {
		switch name {
		case q.spec.Name:
			return queueRole{q, roleWork}
		case q.dead:
			return queueRole{q, roleDead}
		case q.wait:
			return queueRole{q, roleWait}
		}
	}
	if !r.top.ClassicHolds {
		// The ladder is shared by every work queue (rabbitmq.Topology.Ladder):
		// its queues belong to none, and a job's queue is its own.
		switch {
		case name == r.relayName:
			return queueRole{role: roleRelay}
		case strings.HasPrefix(name, r.rungPrefix) && rungTTL(name) > 0:
			return queueRole{role: roleHold}
		}
		return queueRole{}
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return queueRole{}
	}
	if _, err := strconv.ParseUint(name[i+1:], 10, 32); err != nil {
		return queueRole{}
	}
	base, ok := strings.CutSuffix(name[:i], r.top.DeferredSuffix)
	if !ok {
		return queueRole{}
	}
	if q, ok := r.byName[base]; ok && q.spec.Name == base {
		qr := queueRole{q, roleHold}
		// A small cache stays in the processor's cache: with a fine
		// granularity hold names are mostly new, and a big map of them
		// costs more to look up than parsing the name again.
		if len(r.holdNames) >= 4096 {
			clear(r.holdNames)
		}
		r.holdNames[name] = qr
		return qr
	}
	return queueRole{}
}

// observe is membroker's Observer: it runs under the broker's lock, on the
// simulation's goroutine, and must not call the broker.
func (r *runner) observe(ev membroker.Event) {
	if r.closed {
		return // the run is over: closing its backends returns what workers hold
	}
	if r.per != nil && (ev.Queue == r.per.election || ev.Queue == r.s.Periodic.Queue) {
		r.observePeriodic(ev)
		return
	}
	qr := r.classify(ev.Queue)
	q := qr.q
	switch ev.Kind {
	case membroker.EventQueueCreated:
		if qr.role == roleHold && !r.squatted[ev.Queue] {
			r.holdsChanged(q, +1)
			r.emit(Event{Kind: EvHoldCreated, Queue: ev.Queue, Worker: -1})
			switch {
			case q == nil: // the shared ladder's rungs
				if bound := len(r.top.Rungs()); r.res.holdsNow > bound {
					r.violate(invHoldsBounded, nil, fmt.Sprintf("the ladder has %d rungs, over the bound of %d", r.res.holdsNow, bound))
				}
			case q.holds > q.holdBound:
				r.violate(invHoldsBounded, nil, fmt.Sprintf("%s has %d hold queues, over the bound of %d", q.spec.Name, q.holds, q.holdBound))
			}
		}
	case membroker.EventQueueDeleted:
		switch {
		case r.squatted[ev.Queue]:
		case qr.role == roleHold:
			r.holdsChanged(q, -1)
			r.emit(Event{Kind: EvHoldExpired, Queue: ev.Queue, Worker: -1, Detail: ev.Reason})
			if ev.Messages > 0 {
				r.violate(invHoldExpiresEmpty, nil, fmt.Sprintf("hold queue %s went (%s) with %d messages in it", ev.Queue, ev.Reason, ev.Messages))
				r.lose(ev.Queue, ev.Messages)
			}
		case qr.role == roleWork || qr.role == roleDead || qr.role == roleWait:
			r.failf("queue %s deleted (%s)", ev.Queue, ev.Reason)
		}
	case membroker.EventEnqueued:
		r.enqueued(qr, ev)
	case membroker.EventDeadLettered:
		j := r.job(jobNumber(ev.MessageID))
		if j == nil || qr.role == roleDead {
			return
		}
		if ev.Dropped {
			j.copies--
			r.violate(invConservation, j, fmt.Sprintf("the broker dropped a copy from %s (%s)", ev.Queue, ev.Reason))
			return
		}
		if qr.role == roleWork {
			j.copies-- // it goes to the dead-letter queue, where it ends
		}
	case membroker.EventLost:
		r.crashLost(qr, ev)
	case membroker.EventDeadLetterHeld:
		// A rung's dead letter, refused by a relay queue not started again
		// yet: it comes back DeadLetterResend later (docs/hold-ladder.md,
		// "What a restart still does").
		if j := r.job(jobNumber(ev.MessageID)); j != nil {
			if k := r.pendingHold(j, r.holdKey(qr, ev.Queue)); k >= 0 {
				j.holds[k].held = true
			}
		}
	case membroker.EventDelivered:
		switch qr.role {
		case roleWork:
			if r.restarting {
				r.bounced(q, ev)
				return
			}
			r.delivered(q, ev)
			if sub := r.subs[ev.ConsumerTag]; sub != nil {
				if sub.pending++; sub.pending == 1 {
					r.ready = append(r.ready, sub)
				}
			}
		case roleRelay:
			if r.restarting {
				return // handed to a consumer whose connection closes next
			}
			if sub := r.subs[ev.ConsumerTag]; sub != nil {
				if sub.pending++; sub.pending == 1 {
					r.ready = append(r.ready, sub)
				}
			}
		}
	}
}

// holdKey is the queue a pendingHold in name is filed under: name itself,
// or for the ladder's rungs and relay queue, the relay queue.
func (r *runner) holdKey(qr queueRole, name string) string {
	if r.top.ClassicHolds || qr.role == roleWait {
		return name
	}
	return r.relayName
}

// bounced is a delivery made inside Broker.Restart: a message one closing
// connection returned was handed to a consumer whose connection closes
// next, so it comes straight back, one more return toward a quorum queue's
// delivery limit, and a possible duplicate. The worker never takes it.
func (r *runner) bounced(q *simQueue, ev membroker.Event) {
	j := r.job(jobNumber(ev.MessageID))
	if j == nil {
		return // a malformed body
	}
	before := len(j.delivered)
	r.delivered(q, ev)
	j.delivered = j.delivered[:before]
	j.returns++
	j.explain++
}

// lose ends, as lost, the jobs held in hold queue name, which the broker
// has just deleted with n messages in it: they will never come back.
func (r *runner) lose(name string, n int) {
	var lost []*job
	r.jobs.each(func(_ uint64, j *job) {
		for k, h := range j.holds {
			if h.queue == name {
				j.holds = append(j.holds[:k], j.holds[k+1:]...)
				lost = append(lost, j)
				break
			}
		}
	})
	if len(lost) != n {
		r.failf("hold queue %s went with %d messages, and the simulation held %d jobs there", name, n, len(lost))
		return
	}
	slices.SortFunc(lost, func(a, b *job) int { return cmp.Compare(a.n, b.n) })
	for _, j := range lost {
		j.copies--
		r.emit(Event{Kind: EvLost, Job: j.n, Queue: name, Worker: -1})
		r.end1(j, "lost", "")
		r.retire(j)
	}
}

// crashLost ends, as lost, the job whose copy the broker's crash lost
// from a queue of ours, if that was its last copy.
func (r *runner) crashLost(qr queueRole, ev membroker.Event) {
	if qr.role == roleDead {
		return
	}
	if n, err := strconv.ParseUint(strings.TrimPrefix(ev.MessageID, "m"), 10, 64); err == nil && strings.HasPrefix(ev.MessageID, "m") && qr.q != nil {
		if _, ok := qr.q.malformed[n]; ok { // a malformed body (arrive): no job to end
			delete(qr.q.malformed, n)
			r.emit(Event{Kind: EvLost, Job: n, Queue: ev.Queue, Worker: -1, Detail: "malformed body, " + ev.Reason})
			return
		}
	}
	j := r.job(jobNumber(ev.MessageID))
	if j == nil {
		return
	}
	if qr.role == roleHold || qr.role == roleWait || qr.role == roleRelay {
		if k := r.pendingHold(j, r.holdKey(qr, ev.Queue)); k >= 0 {
			j.holds = append(j.holds[:k], j.holds[k+1:]...)
		}
	}
	if qr.role == roleWork && qr.q != nil {
		// A released deferral the crash lost no longer waits on the queue
		// (invariant 4).
		if i := slices.Index(qr.q.released, j.n); i >= 0 {
			qr.q.released = slices.Delete(qr.q.released, i, i+1)
		}
	}
	if j.copies--; j.copies > 0 {
		return
	}
	r.emit(Event{Kind: EvLost, Job: j.n, Queue: ev.Queue, Worker: -1, Detail: ev.Reason})
	r.end1(j, "lost", "")
	r.retire(j)
}

// holdsChanged tracks the number of hold queues over time.
func (r *runner) holdsChanged(q *simQueue, d int) {
	now := r.now()
	res := r.res
	res.holdArea += float64(res.holdsNow) * float64(now-res.holdSince)
	res.holdSince = now
	res.holdsNow += d
	if q != nil {
		q.holds += d
	}
	if d > 0 {
		res.HoldQueuesCreated++
	}
	res.HoldQueuesPeak = max(res.HoldQueuesPeak, res.holdsNow)
}

func (r *runner) enqueued(qr queueRole, ev membroker.Event) {
	q := qr.q
	if r.relaying {
		r.relayed(qr, ev)
		return
	}
	switch qr.role {
	case roleRelay:
		if ev.DeadLetteredFrom == "" || ev.Reason != "expired" || r.classify(ev.DeadLetteredFrom).role != roleHold {
			r.failf("message %q reached %s from %q (%s)", ev.MessageID, ev.Queue, ev.DeadLetteredFrom, ev.Reason)
		}
		// A rung released it: it moves, and waits for a worker's relay.
		// The rung must release it on time (invariant 2); the relay that
		// takes it on is a client, which an outage can hold up.
		j := r.job(jobNumber(ev.MessageID))
		if j == nil {
			return
		}
		if k := r.pendingHold(j, ev.Queue); k >= 0 {
			h := &j.holds[k]
			due := h.rungAt + h.rung
			booting := due < r.bootEnd && r.now() <= r.bootEnd+expiryResolution+r.releaseSlack // the rung started late
			if late := r.now() - due; late < 0 || (late > expiryResolution+r.releaseSlack && !h.held && !booting) {
				r.violate(invNotStuck, j, fmt.Sprintf("entered %s at %s, released %s after its TTL", ev.DeadLetteredFrom, appendVirtual(nil, h.rungAt), late))
			}
			h.held = false
		}
	case roleHold, roleWait:
		c := &r.cur
		j := r.job(jobNumber(ev.MessageID))
		if !r.curSet || j == nil || c.j != j {
			r.failf("message %q entered %s outside a settlement", ev.MessageID, ev.Queue)
			return
		}
		kind := queuey.HoldRetry
		if c.dec.Action == queuey.ActionDefer {
			kind = queuey.HoldDeferred
		}
		j.holds = append(j.holds, pendingHold{queue: r.holdKey(qr, ev.Queue), at: c.issued, ttl: c.ttl, delay: c.dec.Delay, kind: kind,
			rungAt: r.now(), rung: rungTTL(ev.Queue)})
		j.copies++
		r.emit(Event{Kind: EvHold, Job: j.n, Queue: ev.Queue, Worker: -1, Attempt: c.dec.Successor.Attempt,
			Deferrals: c.dec.Successor.Deferrals, Priority: ev.Priority, Delay: c.dec.Delay, TTL: c.ttl})
	case roleWork:
		j := r.job(jobNumber(ev.MessageID))
		if j == nil {
			return // a malformed body
		}
		if ev.DeadLetteredFrom == "" {
			j.copies++
			j.fresh++
			return
		}
		from := r.classify(ev.DeadLetteredFrom)
		if (from.role != roleHold && from.role != roleWait) || ev.Reason != "expired" {
			r.failf("job %d reached %s from %s (%s)", j.n, ev.Queue, ev.DeadLetteredFrom, ev.Reason)
			return
		}
		r.released(q, j, ev, ev.DeadLetteredFrom)
	case roleDead:
		r.auditDue = true // audited off the queue once the broker's call is over (pump)
		if ev.DeadLetteredFrom == "" {
			return // queuey's own dead letter
		}
		j := r.job(jobNumber(ev.MessageID))
		if j == nil {
			return
		}
		r.emit(Event{Kind: EvDeadLetter, Job: j.n, Queue: q.spec.Name, Worker: -1, Detail: ev.Reason + " (by the broker)"})
		if ev.Reason != "delivery_limit" {
			r.violate(invDeadLetterReason, j, fmt.Sprintf("dead-lettered by the broker for %q", ev.Reason))
		} else if want := deliveryLimit + 1; j.returns != want {
			r.violate(invDeadLetterReason, j, fmt.Sprintf("dead-lettered for delivery_limit after %d counted returns, want %d", j.returns, want))
		}
		j.deadWant = append(j.deadWant, deadWant{reason: "delivery_limit"})
		r.end1(j, "dead-lettered", "delivery_limit")
	}
}

// lateHold is how late a hold's release must be for Result.LateHolds to
// count it: a second, well past what rounding, timers and relays add.
const lateHold = time.Second

// deliveryLimit is a quorum queue's delivery limit on RabbitMQ 4 when
// nothing sets it: x-delivery-limit is not among the backend's arguments.
const deliveryLimit = 20

// released checks a hold's release into the work queue (invariant 2) and
// notes when a deferral is back.
func (r *runner) released(q *simQueue, j *job, ev membroker.Event, from string) {
	now := r.now()
	k := r.pendingHold(j, from)
	if k < 0 {
		r.failf("job %d released from %s where it was never held", j.n, from)
		return
	}
	h := j.holds[k]
	j.holds = append(j.holds[:k], j.holds[k+1:]...)
	j.fresh++
	due := h.at + h.ttl
	late := now - due
	r.emit(Event{Kind: EvRelease, Job: j.n, Queue: q.spec.Name, Worker: -1, Priority: ev.Priority, Delay: h.delay, TTL: h.ttl,
		Detail: ev.DeadLetteredFrom, Late: late})
	added := now - (h.at + h.delay)
	r.res.AddedWait.Add(added)
	if late > lateHold {
		r.res.LateHolds++
		if h.kind == queuey.HoldDeferred {
			r.res.LateDeferrals++
		}
		r.res.LatestHold = max(r.res.LatestHold, Duration(late))
	}
	if h.kind == queuey.HoldDeferred {
		r.res.DeferredAddedWait.Add(added)
	} else {
		r.res.RetryAddedWait.Add(added)
	}
	// On the ladder each rung's release is checked on its own (enqueued,
	// roleRelay); the whole hold must not end early.
	if late < 0 || (r.top.ClassicHolds && late > expiryResolution+r.releaseSlack) {
		r.violate(invNotStuck, j, fmt.Sprintf("held in %s at %s for %s, released %s after it was due", from,
			appendVirtual(nil, h.at), h.ttl, late))
	}
	for i := range j.expect {
		if j.expect[i].released == 0 {
			j.expect[i].released = now
			break
		}
	}
	if h.kind == queuey.HoldDeferred && q.priority && ev.Priority == q.top {
		q.released = append(q.released, j.n)
	}
}

// rungTTL is the TTL in a ladder rung's name (queuey.ladder.TTL);
// 0 for another name.
func rungTTL(name string) time.Duration {
	ms, err := strconv.ParseInt(name[strings.LastIndexByte(name, '.')+1:], 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// pendingHold is the index of j's earliest hold filed under key, or -1.
func (r *runner) pendingHold(j *job, key string) int {
	for i, h := range j.holds {
		if h.queue == key {
			return i
		}
	}
	return -1
}

// relayed follows a relay's publish (Backend.Relay, in a worker's relay
// consumer): a new copy of the job, on its next rung or back on its work
// queue, which is the hold's release (invariant 2). The relay's ack
// removes the copy it took from the relay queue.
func (r *runner) relayed(qr queueRole, ev membroker.Event) {
	j := r.relayJob
	if j == nil || jobNumber(ev.MessageID) != j.n {
		return // a malformed body, or not a job of the run
	}
	key := r.relayName
	k := r.pendingHold(j, key)
	if k < 0 {
		r.failf("job %d relayed to %s but never held on the ladder", j.n, ev.Queue)
		return
	}
	j.copies++
	switch qr.role {
	case roleHold:
		h := &j.holds[k]
		h.hops++
		h.rungAt, h.rung = r.now(), rungTTL(ev.Queue)
		r.res.Relays++
		r.emit(Event{Kind: EvRelay, Job: j.n, Queue: ev.Queue, Worker: -1})
	case roleWork:
		r.released(qr.q, j, ev, key)
	default:
		r.failf("job %d relayed to %s", j.n, ev.Queue)
	}
}

// delivered checks a delivery from a work queue as the broker makes it:
// not early (1), at the priority its last settlement set (4), and, on a
// classic priority queue, no lower-priority message handed out while a
// released deferral waits on the queue (4).
func (r *runner) delivered(q *simQueue, ev membroker.Event) {
	j := r.job(jobNumber(ev.MessageID))
	if q.priority && len(q.released) > 0 {
		switch {
		case j != nil && q.released[0] == j.n:
			q.released = q.released[1:]
		case ev.Priority < q.top:
			waiting := r.job(q.released[0])
			r.violate(invAheadOfBacklog, waiting, fmt.Sprintf("a priority-%d message was delivered from %s while this released deferral waited on it", ev.Priority, q.spec.Name))
		default:
			for i, n := range q.released {
				if j != nil && n == j.n {
					q.released = append(q.released[:i], q.released[i+1:]...)
					break
				}
			}
		}
	}
	if j == nil || ev.Redelivered || j.fresh == 0 {
		return
	}
	j.fresh--
	if len(j.expect) == 0 {
		r.failf("job %d delivered with nothing expected", j.n)
		return
	}
	e := j.expect[0]
	j.expect = popFront(j.expect)
	now := r.now()
	if now < e.notBefore {
		r.violate(invNeverEarly, j, fmt.Sprintf("delivered %s before its delay was up", e.notBefore-now))
	}
	if ev.Priority != e.priority {
		r.violate(invAheadOfBacklog, j, fmt.Sprintf("delivered at priority %d, want %d (a deferral's priority lasts one round)", ev.Priority, e.priority))
	}
	switch {
	case e.deferred && e.released != 0:
		r.res.DeferredWait.Add(now - e.released)
	case e.attempt == 1 && e.deferrals == 0:
		r.res.BacklogWait.Add(now - j.enqueued)
	}
	j.delivered = append(j.delivered, e)
}
