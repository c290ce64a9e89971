package membroker

import (
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// message is one copy of a published message, held by one queue.
type message struct {
	id         uint64 // broker-wide enqueue sequence: original position (classic), Raft index (quorum)
	exchange   string
	routingKey string
	cc, bcc    []string        // extra routes from the CC and BCC headers
	pub        amqp.Publishing // without Headers: see headers
	headers    []field         // in wire form, without BCC
	hadHeaders bool            // published with a non-empty table
	persistent bool
	expiry     time.Time
	hasExpiry  bool
	level      int // priority level within its queue

	// Classic: the is_delivered flag, set once the message has been
	// requeued, or (RabbitMQ43) when it is enqueued with a delivery count.
	redelivered bool
	// Quorum: acquired_count and delivery_count of rabbit_fifo's message
	// header. On RabbitMQ43 a classic queue keeps failed too: the message's
	// entry in rabbit_variable_queue's delivery_count map, 0 for none
	// (semantics §12).
	acquired, failed int
	// Classic, under Timing.ClassicSync: the message's arrival is not yet
	// on disk, so a Crash loses it; src is the classic queue that
	// dead-lettered it and srcSyncs that queue's syncs at the time, so that
	// a Crash can tell whether its removal from src is on disk either.
	unsynced bool
	in       *queue // the queue whose unsynced list holds it, while unsynced
	src      *queue
	srcSyncs uint64
	// The delivery_count annotation a message carries out of a queue that
	// dead-letters it, 0 if none: a quorum queue's header delivery_count
	// (rabbit_fifo:annotate_msg), and on RabbitMQ43 a classic queue's
	// delivery count as well. A quorum queue the message reaches starts its
	// delivery_count from it, and on RabbitMQ43 a classic one too.
	deliveryCountAnn int

	deaths []death   // newest first
	died   bool      // first and last are set
	first  deathSite // x-first-death-*, set at the first death the broker records
	last   deathSite // x-last-death-*
}

// declaration is a queue.declare's flags and arguments (in wire form, as
// the client sent them) that passed the equivalence check against an
// existing queue.
type declaration struct {
	ok                  bool
	durable, autoDelete bool
	args                []field
}

// declaredLike reports whether durable, autoDelete and args (in wire form)
// are what q's last passing redeclaration sent, so that the equivalence
// check, a pure function of them and q, passes again.
func (q *queue) declaredLike(durable, autoDelete bool, args []field) bool {
	d := &q.lastDecl
	if !d.ok || d.durable != durable || d.autoDelete != autoDelete || len(d.args) != len(args) || len(args) > 16 {
		return false
	}
	// The same number of distinct keys, each with the same value.
	for _, f := range args {
		same := false
		for _, g := range d.args {
			if g.key == f.key {
				same = sameArg(f.val, g.val)
				break
			}
		}
		if !same {
			return false
		}
	}
	return true
}

// fifo is a deque of messages ordered by id, with insertion at an arbitrary
// position for classic requeues. Pops from the front are O(1).
type fifo struct {
	items []*message
	head  int
}

func (f *fifo) front() *message {
	if f.head == len(f.items) {
		return nil
	}
	return f.items[f.head]
}

func (f *fifo) pushBack(m *message) { f.items = append(f.items, m) }

func (f *fifo) popFront() *message {
	m := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	return m
}

// insertByID puts m back where its id says it belongs: a classic requeue
// returns a message to its original position.
func (f *fifo) insertByID(m *message) {
	live := f.items[f.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].id > m.id })
	if i == 0 && f.head > 0 {
		f.head--
		f.items[f.head] = m
		return
	}
	pos := f.head + i
	f.items = append(f.items, nil)
	copy(f.items[pos+1:], f.items[pos:])
	f.items[pos] = m
}

// queue is one queue's state.
type queue struct {
	name       string
	durable    bool
	autoDelete bool
	exclusive  bool
	owner      *Connection // exclusive queues only
	args       amqp.Table  // as declared, wire form, with x-queue-type injected
	lastDecl   declaration // the last redeclaration that passed the equivalence check
	nameV      any         // name in an interface: see boxedName
	cfg        queueConfig
	deleted    bool

	// Ready messages. Classic: one fifo per priority level (one level when not
	// a priority queue). Quorum: returns first, then levels (RabbitMQ40: [0]
	// normal, [1] high; RabbitMQ43: 32 strict levels).
	levels  []fifo
	returns fifo
	counter int // RabbitMQ40 quorum: rabbit_fifo_q's dequeue counter
	ready   int
	unacked int
	// published and acked count what the management API's message_stats
	// of the queue call publish and ack (QueueInfo).
	published, acked int64

	// Single active consumer (sac.go): active is the consumer that
	// receives, waiting the others, in the order they will take over.
	active  *consumer
	waiting []*consumer

	consumers   []*consumer // active, in round-robin order
	blocked     []*consumer // at their prefetch limit, rejoin at the end when freed
	nconsumers  int
	getHolders  int // quorum: unacknowledged basic.get deliveries (see consumerCount)
	exclusiveBy *consumer
	hadConsumer bool

	ttlArmed time.Time // deadline of the head the pending head-expiry timer covers, zero if none
	ttlFires time.Time // when that timer fires: ttlArmed plus its slack (Timing)
	// x-expires: leaseDue is when the queue expires if nothing renews it,
	// zero while it cannot (it has consumers, or no x-expires); leaseArmed
	// says an expiry event is pending. Renewing only moves leaseDue: the
	// pending event, when it fires early, re-arms itself at leaseDue, so a
	// hold queue declared before every publish costs one event per lease
	// period, not one per declaration.
	leaseDue      time.Time
	leaseArmed    bool
	leaseArmedFor time.Time // the leaseDue the pending expiry event was armed for
	lastActive    time.Time

	// What a kill -9 would lose (Timing.ClassicSync, Timing.QuorumRegister;
	// durability.go). Tracked only while the model has a ClassicSync.
	created  time.Time  // the declaration that created it
	unsynced []*message // classic: messages whose arrival is not yet on disk; also ones gone since (acknowledged, even recycled), which sync skips by their in
	touched  time.Time  // classic: its last arrival, delivery or settlement
	syncs    uint64     // classic: how many times it has written to disk

	// After a Restart or Crash (Timing.BootSpan, DeadLetterResend;
	// deadletter_resend.go): when the quorum queue has started again, the
	// at-least-once dead letters it holds because a target refused them,
	// and when it sends them again.
	bootAt      time.Time
	dlxHeld     []deadLetterInFlight
	dlxResendAt time.Time
	// dlxWaiting are dead letters behind a full worker, sent once their
	// targets have started, at dlxWaitAt.
	dlxWaiting []deadLetterInFlight
	dlxWaitAt  time.Time
	// dlxStallAll says that, since a Crash, a full worker (deadLetterPrefetch
	// refused) holds back every later dead letter until the resend.
	dlxStallAll bool
}

func (q *queue) isQuorum() bool { return q.cfg.kind == quorumKind }

// priorityLevel maps a message priority to the queue's level for it.
func (q *queue) priorityLevel(p uint8, v Version) int {
	if q.isQuorum() {
		if v == RabbitMQ40 {
			if p > 4 {
				return 1
			}
			return 0
		}
		if p == 0 {
			// amqp091 sends priority 0 as an absent property, and 4.3
			// files a message without one at level 4.
			return 4
		}
		return min(int(p), 31)
	}
	if !q.cfg.hasMaxPriority {
		return 0
	}
	return min(int(p), q.cfg.maxPriority)
}

func newLevels(cfg queueConfig, v Version) []fifo {
	switch {
	case cfg.kind == quorumKind && v == RabbitMQ40:
		return make([]fifo, 2)
	case cfg.kind == quorumKind:
		return make([]fifo, 32)
	case cfg.hasMaxPriority:
		return make([]fifo, cfg.maxPriority+1)
	}
	return make([]fifo, 1)
}

// peek returns the message the next take would return, without changing
// anything.
func (q *queue) peek(v Version) *message {
	if q.ready == 0 {
		return nil
	}
	if q.isQuorum() {
		if m := q.returns.front(); m != nil {
			return m
		}
		if v == RabbitMQ40 {
			return q.quorum40Pick()
		}
	}
	for l := len(q.levels) - 1; l >= 0; l-- {
		if m := q.levels[l].front(); m != nil {
			return m
		}
	}
	return nil
}

// quorum40Pick implements rabbit_fifo_q:out/1's choice: with both FIFOs
// non-empty and the counter at 2, the earlier-enqueued head wins; otherwise
// high before normal.
func (q *queue) quorum40Pick() *message {
	hi, no := q.levels[1].front(), q.levels[0].front()
	if hi != nil && no != nil && q.counter == 2 {
		if no.id < hi.id {
			return no
		}
		return hi
	}
	if hi != nil {
		return hi
	}
	return no
}

// take removes and returns the next message (see peek). On RabbitMQ40 quorum
// queues every take from the priority FIFOs advances the counter.
func (q *queue) take(v Version) *message {
	m := q.peek(v)
	if m == nil {
		return nil
	}
	q.ready--
	if q.isQuorum() && q.returns.front() == m {
		return q.returns.popFront()
	}
	if q.isQuorum() && v == RabbitMQ40 {
		if q.counter == 2 {
			q.counter = 0
		} else {
			q.counter++
		}
	}
	return q.levels[m.level].popFront()
}

// headDeadline is when the message that would be checked for expiry next
// expires. On RabbitMQ43 a quorum queue's timer is for the earliest expiry
// among the heads of its returns and of its levels (rabbit_fifo
// timer_effect, semantics §12.7).
func (q *queue) headDeadline(v Version) (time.Time, bool) {
	if q.isQuorum() && v == RabbitMQ43 {
		var at time.Time
		ok := false
		consider := func(m *message) {
			if m != nil && m.hasExpiry && (!ok || m.expiry.Before(at)) {
				at, ok = m.expiry, true
			}
		}
		consider(q.returns.front())
		for l := range q.levels {
			consider(q.levels[l].front())
		}
		return at, ok
	}
	if q.isQuorum() {
		m := q.peek(v)
		if m == nil || !m.hasExpiry {
			return time.Time{}, false
		}
		return m.expiry, true
	}
	for l := len(q.levels) - 1; l >= 0; l-- {
		if m := q.levels[l].front(); m != nil {
			return m.expiry, m.hasExpiry
		}
	}
	return time.Time{}, false
}

// popExpired removes and returns one expired message from the head, or nil.
// Classic: only the head of the highest non-empty level is examined, moving
// down a level only once a level is empty (rabbit_priority_queue:dropwhile).
// Quorum: only the message that would be delivered next (rabbit_fifo
// expire_msgs), taken the way a delivery would take it.
func (q *queue) popExpired(now time.Time, v Version) *message {
	if q.isQuorum() {
		m := q.peek(v)
		if m == nil || !m.hasExpiry || now.Before(m.expiry) {
			return nil
		}
		return q.take(v)
	}
	for l := len(q.levels) - 1; l >= 0; l-- {
		m := q.levels[l].front()
		if m == nil {
			continue
		}
		if !m.hasExpiry || now.Before(m.expiry) {
			return nil
		}
		q.ready--
		return q.levels[l].popFront()
	}
	return nil
}

// enqueue appends m at the back of its level.
func (q *queue) enqueue(m *message) {
	q.levels[m.level].pushBack(m)
	q.ready++
}

// requeueClassic puts m back at its original position.
func (q *queue) requeueClassic(m *message) {
	m.redelivered = true
	q.levels[m.level].insertByID(m)
	q.ready++
}

// returnQuorum appends m to the returns queue, served before everything else.
func (q *queue) returnQuorum(m *message) {
	q.returns.pushBack(m)
	q.ready++
}

// purge removes every ready message and reports how many there were.
func (q *queue) purge() int {
	n := q.ready
	for i := range q.levels {
		q.levels[i] = fifo{}
	}
	q.returns = fifo{}
	q.ready = 0
	q.counter = 0 // rabbit_fifo's purge starts a new rabbit_fifo_q, counter included
	return n
}

// readyMessages returns the ready messages in delivery order without taking
// them (for restart and introspection; the quorum 2:1 interleave is not
// applied).
func (q *queue) readyMessages() []*message {
	out := make([]*message, 0, q.ready)
	out = append(out, q.returns.items[q.returns.head:]...)
	for l := len(q.levels) - 1; l >= 0; l-- {
		out = append(out, q.levels[l].items[q.levels[l].head:]...)
	}
	return out
}

// consumerCount is the consumer count RabbitMQ reports and checks before
// expiring a queue. On a quorum queue every unacknowledged basic.get counts:
// rabbit_fifo checks the message out to a one-shot consumer keyed by the
// delivery tag, which lives until the message is settled.
func (q *queue) consumerCount() int {
	n := q.nconsumers + q.getHolders
	if q.isQuorum() {
		n -= len(q.waiting) // rabbit_fifo counts no waiting consumer (sac.go)
	}
	return n
}

// removeConsumer takes c out of the queue's dispatch lists.
func (q *queue) removeConsumer(c *consumer) {
	q.sacLeave(c)
	q.consumers = deleteFirst(q.consumers, c)
	q.blocked = deleteFirst(q.blocked, c)
	q.nconsumers--
	if q.exclusiveBy == c {
		q.exclusiveBy = nil
	}
}

// dropFront removes s's first consumer. Short lists (the usual case) shift
// in place, so the slice keeps its capacity and a later append does not
// allocate; long ones are resliced, so a dispatch stays O(1).
func dropFront(s []*consumer) []*consumer {
	if len(s) > 64 {
		return s[1:]
	}
	copy(s, s[1:])
	s[len(s)-1] = nil
	return s[:len(s)-1]
}

// rotate moves s's first consumer to the back: the round robin's step.
func rotate(s []*consumer) []*consumer {
	if len(s) > 64 {
		return append(s[1:], s[0])
	}
	c := s[0]
	copy(s, s[1:])
	s[len(s)-1] = c
	return s
}

func deleteFirst(s []*consumer, c *consumer) []*consumer {
	for i, x := range s {
		if x == c {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// suspendLease stops q's x-expires period: a queue with consumers does not
// expire. renewLease starts it again.
func (q *queue) suspendLease() { q.leaseDue = time.Time{} }
