package membroker

import (
	"encoding/base64"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/internal/minheap"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Version selects which RabbitMQ release's behaviour the model follows where
// releases differ.
type Version int

const (
	// RabbitMQ43 models RabbitMQ 4.3: quorum queues with 32 strict priority
	// levels, a delivery limit counted on failed deliveries (reject and
	// connection loss, not nack), the x-acquired-count header, and 4.3's
	// declaration rules (semantics §E13). It is the zero Version.
	RabbitMQ43 Version = iota
	// RabbitMQ40 models RabbitMQ 4.0 to 4.2: quorum queues with two priority
	// tiers served 2:1, and every requeue (reject, nack, channel close)
	// counting toward the delivery limit. This is the profile the conformance
	// suite proves against a live RabbitMQ 4.0.5.
	RabbitMQ40
)

func (v Version) String() string {
	if v == RabbitMQ40 {
		return "RabbitMQ40"
	}
	return "RabbitMQ43"
}

// Config configures a Broker. The zero Config is ready to use.
type Config struct {
	// Clock drives message TTLs, queue expiry and x-death times.
	// Defaults to the real clock. Its AfterFunc must not call the function
	// before returning; membroker never stops the timers it arms, so a
	// simulation clock may return a nil *clock.Timer.
	Clock clock.Clock
	// Version is the RabbitMQ release to model. Defaults to RabbitMQ43.
	Version Version
	// Observer, if set, is told of every queue created or deleted and every
	// message enqueued, delivered or dead-lettered, in the order they
	// happen. It runs under the broker's lock, on the goroutine whose call
	// (or clock timer) caused the event: it must return quickly and must
	// not call the broker. Defaults to nil: nothing is reported.
	Observer func(Event)
	// Timing loosens the model's timing the way a live broker's is loose:
	// publishes that land late and timers that fire late. Defaults to the
	// zero Timing: exact. Negative durations count as 0 (Timing.Validate
	// reports them).
	Timing Timing
	// ConsumerTimeout is the broker's consumer_timeout: how long a
	// delivery may stay unacknowledged before the broker gives up on its
	// consumer, unless the queue (x-consumer-timeout, on 4.0 and on a 4.3
	// quorum queue) or the consumer (x-consumer-timeout, on a 4.3 quorum
	// queue) sets its own. Defaults to DefaultConsumerTimeout, RabbitMQ's
	// 30 minutes; a negative value disables it. What the broker then does
	// depends on the profile: docs/rabbitmq-semantics.md §14.
	ConsumerTimeout time.Duration
	// ChannelTick is the RabbitMQ40 profile's channel_tick_interval: a
	// channel checks its oldest unacknowledged delivery against the
	// consumer timeout this often, counting from its first unacknowledged
	// delivery. Defaults to DefaultChannelTick, RabbitMQ's 60 s. The
	// RabbitMQ43 profile does not use it.
	ChannelTick time.Duration
}

// RabbitMQ's defaults for Config.ConsumerTimeout and Config.ChannelTick
// (deps/rabbit/Makefile at v4.0.5: consumer_timeout 1800000,
// channel_tick_interval 60000).
const (
	DefaultConsumerTimeout = 30 * time.Minute
	DefaultChannelTick     = 60 * time.Second
)

// Broker is one in-memory RabbitMQ node with a single virtual host, "/", and
// the default exchange. It is safe for concurrent use. Every method first
// brings the model up to Config.Clock's current time, processing what fell
// due in deadline order.
type Broker struct {
	mu      sync.Mutex
	clk     clock.Clock
	version Version
	now     time.Time

	queues map[string]*queue
	conns  []*Connection // open, in dial order

	events   minheap.Heap[event]
	timing   timing
	eventSeq uint64
	armedAt  time.Time // earliest deadline a clock timer is pending for; zero if none
	msgSeq   uint64
	connSeq  uint64
	nameSeq  uint64 // server-named queues and consumer tags

	unsentBlocked []*consumer  // consumers waiting for room in their delivery channel
	free          []*message   // acknowledged messages whose memory newMessage may reuse
	reusedTables  []amqp.Table // header tables given back by Reuse, empty
	reusedBodies  [][]byte     // bodies given back by Reuse
	reusedSlices  [][]any      // x-death lists given back by Reuse, empty
	queued        int          // outputs held back in connections' out buffers
	reap          bool         // a closed connection may still be in conns
	deadLetters   []deadLetterInFlight
	dlSpare       []deadLetterInFlight // the other buffer landDeadLetters swaps with deadLetters
	dlTargets     []*queue             // the arena deadLetters' targets are cut from
	routed        []*queue             // Publish's scratch for its targets
	fired         func()               // the timer callback, allocated once
	observer      func(Event)
	// consumerTimeout is Config.ConsumerTimeout with its default, 0 when
	// disabled; tick is Config.ChannelTick with its default.
	consumerTimeout time.Duration
	tick            time.Duration

	boxed     map[string]any // see box
	lastTime  time.Time      // see boxTime
	lastTimeV any
}

// New returns a broker with no queues and no connections.
func New(cfg Config) *Broker {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.New()
	}
	b := &Broker{clk: clk, version: cfg.Version, queues: map[string]*queue{}, now: clk.Now(), observer: cfg.Observer,
		timing: newTiming(cfg.Timing)}
	b.events.Less = eventBefore
	b.fired = b.onTimer
	switch {
	case cfg.ConsumerTimeout == 0:
		b.consumerTimeout = DefaultConsumerTimeout
	case cfg.ConsumerTimeout > 0:
		b.consumerTimeout = cfg.ConsumerTimeout
	}
	b.tick = cfg.ChannelTick
	if b.tick <= 0 {
		b.tick = DefaultChannelTick
	}
	return b
}

// Version reports the profile the broker models.
func (b *Broker) Version() Version { return b.version }

// Dial opens a connection, as amqp.Dial does against a real broker.
func (b *Broker) Dial() (*Connection, error) {
	b.lock()
	defer b.unlock()
	b.connSeq++
	c := &Connection{b: b, id: b.connSeq}
	b.conns = append(b.conns, c)
	return c, nil
}

// lock takes the broker's lock, brings the model up to the clock, and
// resumes consumers whose delivery channel has drained since.
func (b *Broker) lock() {
	b.mu.Lock()
	b.advance(b.clk.Now())
	if len(b.unsentBlocked) > 0 {
		b.flush()
		b.retryUnsent()
	}
}

// unlock hands buffered outputs to their channels, arms the clock for the
// next deadline and releases the lock.
func (b *Broker) unlock() {
	b.landDeadLetters()
	b.flush()
	b.arm()
	b.mu.Unlock()
}

// newMessage builds the stored form of a publishing whose headers, in wire
// form, are fields, reusing an acknowledged message's memory when one is
// free.
func (b *Broker) newMessage(exchange, key string, pub amqp.Publishing, fields []field) *message {
	var m *message
	pub.Headers = nil // kept as m.headers
	if n := len(b.free); n > 0 {
		m = b.free[n-1]
		b.free[n-1] = nil
		b.free = b.free[:n-1]
		body, headers, deaths := m.pub.Body[:0], m.headers[:0], m.deaths[:0]
		*m = message{exchange: exchange, routingKey: key, pub: pub, deaths: deaths, headers: headers}
		m.pub.Body = append(body, pub.Body...)
	} else {
		m = &message{exchange: exchange, routingKey: key, pub: pub}
		m.pub.Body = append([]byte(nil), pub.Body...)
	}
	m.hadHeaders = len(fields) > 0
	for _, f := range fields {
		switch f.key {
		case "CC":
			m.cc = stringList(f.val)
		case "BCC":
			m.bcc = stringList(f.val)
			continue // routes, and is never delivered
		}
		m.headers = append(m.headers, f)
	}
	m.pub.Timestamp = wireTimestamp(pub.Timestamp)
	m.persistent = pub.DeliveryMode == amqp.Persistent
	return m
}

func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// maxFree bounds the free list of recycled messages.
const maxFree = 1024

// recycle takes back an acknowledged message. Nothing may refer to it
// afterwards: deliveries hold copies of its body and headers.
func (b *Broker) recycle(m *message) {
	if len(b.free) < maxFree {
		b.free = append(b.free, m)
	}
}

// route appends to dst the existing queues a message published to the
// default exchange with routing key key and CC and BCC headers cc and bcc
// reaches, one entry per queue, in routing-key order.
func (b *Broker) route(dst []*queue, key string, cc, bcc []string) []*queue {
	start := len(dst)
	add := func(k string) {
		q, ok := b.queues[k]
		if !ok {
			return
		}
		for _, x := range dst[start:] {
			if x == q {
				return
			}
		}
		dst = append(dst, q)
	}
	add(key)
	for _, k := range cc {
		add(k)
	}
	for _, k := range bcc {
		add(k)
	}
	return dst
}

// deliverTo enqueues a copy of m on each target queue. The first target takes
// m itself.
func (b *Broker) deliverTo(targets []*queue, m *message, from *deathSite, confirmed bool, src *queue) {
	for i, q := range targets {
		c := m
		if i > 0 {
			cp := *m
			cp.deaths = append([]death(nil), m.deaths...)
			c = &cp
		}
		if b.observer != nil {
			ev := Event{Kind: EventEnqueued, Queue: q.name, MessageID: c.pub.MessageId, Priority: c.pub.Priority}
			if from != nil {
				ev.DeadLetteredFrom, ev.Reason = from.queue, from.reason
			}
			b.observe(ev)
		}
		if from == nil {
			q.published++ // RabbitMQ counts no dead-lettered message as published to its queue
		}
		b.landed(q, c, confirmed, src)
		b.enqueue(q, c)
	}
}

// enqueue adds a freshly routed message to q: it goes straight to a consumer
// with room when nothing is waiting, else to the back of its level.
func (b *Broker) enqueue(q *queue, m *message) {
	b.msgSeq++
	m.id = b.msgSeq
	m.redelivered, m.acquired, m.failed = false, 0, 0
	if q.isQuorum() || b.version != RabbitMQ40 {
		// A quorum queue starts its header's delivery_count from the
		// message's delivery_count annotation (maybe_set_msg_delivery_count);
		// a RabbitMQ43 classic queue enters it in its delivery_count map
		// (semantics §12).
		m.failed = m.deliveryCountAnn
	}
	m.level = q.priorityLevel(m.pub.Priority, b.version)
	m.hasExpiry = false
	ttl, has := int64(-1), false
	if q.cfg.hasMessageTTL {
		ttl, has = q.cfg.messageTTL, true
	}
	if m.pub.Expiration != "" {
		if n, reason := parseExpiration(m.pub.Expiration); reason == "" && (!has || n < ttl) {
			ttl, has = n, true
		}
	}
	if has {
		if q.isQuorum() && ttl == 0 {
			ttl = 1 // rabbit_fifo: discard unless consumed within the same millisecond
		}
		m.expiry, m.hasExpiry = b.now.Add(time.Duration(ttl)*time.Millisecond), true
	}
	if q.ready == 0 && !q.isQuorum() {
		// deliver_or_enqueue: a consumer with room gets the message before
		// any expiry check, which is what makes x-message-ttl 0 deliverable.
		if c := b.nextConsumer(q); c != nil {
			b.deliver(q, c, m)
			return
		}
		if q.cfg.hasMessageTTL && q.cfg.messageTTL == 0 && !q.cfg.hasDLX {
			return // classic TTL 0 without a DLX: discarded, never enqueued
		}
	}
	if !q.isQuorum() {
		// A message with a delivery count leaves a classic queue with its
		// is_delivered flag set (set_deliver_flag), but one handed straight
		// to a waiting consumer above does not (semantics §12).
		m.redelivered = m.failed > 0
	}
	q.enqueue(m)
	if q.isQuorum() {
		b.run(q)
	} else if q.ready == 1 {
		// deliver_or_enqueue checks expiry only when the message is the
		// queue's only one; otherwise the head and its timer stay as they
		// were, even when a higher-priority message goes in front.
		b.dropExpired(q)
	}
}

// dispatch hands ready messages to consumers with room, round robin.
func (b *Broker) dispatch(q *queue) {
	for q.ready > 0 {
		c := b.nextConsumer(q)
		if c == nil {
			return
		}
		if !q.isQuorum() {
			// fetch/2 takes the head first, even one that expired with no
			// timer covering it, then drops what has expired behind it.
			m := q.take(b.version)
			b.dropExpired(q)
			b.deliver(q, c, m)
			continue
		}
		b.reapExpired(q)
		m := q.take(b.version)
		if m == nil {
			return
		}
		b.deliver(q, c, m)
	}
}

// nextConsumer returns the consumer at the head of q's round robin that can
// take a message now, moving consumers without room to the blocked list.
func (b *Broker) nextConsumer(q *queue) *consumer {
	for len(q.consumers) > 0 {
		c := q.consumers[0]
		switch {
		case !c.hasCredit():
			q.consumers = dropFront(q.consumers)
			q.blocked = append(q.blocked, c)
			c.blocked = true
		case !c.hasRoom():
			q.consumers = dropFront(q.consumers)
			c.unsent = true
			b.unsentBlocked = append(b.unsentBlocked, c)
		default:
			return c
		}
	}
	return nil
}

// retryUnsent puts consumers whose delivery channel has room again back into
// their queue's round robin.
func (b *Broker) retryUnsent() {
	if len(b.unsentBlocked) == 0 {
		return
	}
	waiting := b.unsentBlocked
	b.unsentBlocked = nil
	for _, c := range waiting {
		if c.cancelled {
			continue
		}
		if !c.hasRoom() {
			b.unsentBlocked = append(b.unsentBlocked, c)
			continue
		}
		c.unsent = false
		c.q.consumers = append(c.q.consumers, c)
		b.serve(c.q)
	}
}

// unblock returns a consumer freed by a settlement to the end of the round
// robin.
func (b *Broker) unblock(c *consumer) {
	if !c.blocked || c.cancelled || !c.hasCredit() {
		return
	}
	c.blocked = false
	c.q.blocked = deleteFirst(c.q.blocked, c)
	c.q.consumers = append(c.q.consumers, c)
}

// deleteQueue removes q with its messages (which are not dead-lettered) and
// cancels its consumers, telling their channels.
func (b *Broker) deleteQueue(q *queue, reason string) int {
	n := q.ready
	b.observe(Event{Kind: EventQueueDeleted, Queue: q.name, Reason: reason, Messages: n})
	q.deleted = true
	delete(b.queues, q.name)
	for _, c := range q.allConsumers() {
		c.ch.serverCancel(c)
	}
	q.purge()
	return n
}

func (q *queue) allConsumers() []*consumer {
	out := make([]*consumer, 0, q.nconsumers)
	out = append(out, q.consumers...)
	out = append(out, q.blocked...)
	out = append(out, q.waiting...)
	return out
}

// settleRequeue returns an unacknowledged message to its queue. failed says
// whether the delivery counts as failed (reject, or the channel going down),
// explicit whether the client asked for it (reject or nack, as opposed to a
// channel or connection closing). On RabbitMQ43 a failed delivery raises
// a classic queue's delivery count too (semantics §12).
func (b *Broker) settleRequeue(q *queue, m *message, failed, explicit bool) {
	if q.deleted {
		return
	}
	if !q.isQuorum() {
		if failed && b.version != RabbitMQ40 {
			m.failed++ // maybe_inc_delivery_count (semantics §12)
		}
		q.requeueClassic(m)
		return
	}
	m.acquired++
	if failed && (b.version != RabbitMQ40 || !explicit) {
		// On 4.0 reject and nack are both a plain #return (delivery
		// failed only when the channel goes down).
		m.failed++
	}
	count := m.acquired
	if b.version != RabbitMQ40 {
		count = m.failed
	}
	limit := q.cfg.deliveryLimit
	if limit >= 0 && int64(count) > limit {
		b.deadLetter(q, m, "delivery_limit")
		return
	}
	if limit < 0 && explicit && b.version == RabbitMQ40 {
		// Without a limit, an explicit return is re-enqueued at the back with
		// a new index, in the normal tier (rabbit_fifo #requeue). RabbitMQ
		// 4.3.6 returns it to the front like any other return (semantics
		// §12.6).
		b.msgSeq++
		m.id = b.msgSeq
		m.level = 0
		q.enqueue(m)
		return
	}
	q.returnQuorum(m)
}

// queueNames returns the names of all queues, sorted.
func (b *Broker) queueNames() []string {
	names := make([]string, 0, len(b.queues))
	for n := range b.queues {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// serverName returns a fresh server-generated queue name: "amq.gen-" and 22
// base64url characters, as RabbitMQ makes them, drawn from a per-broker
// sequence so that runs repeat exactly.
func (b *Broker) serverName() string {
	for {
		b.nameSeq++
		x := b.nameSeq
		var raw [16]byte
		for i := 0; i < 2; i++ { // splitmix64, twice
			x += 0x9e3779b97f4a7c15
			z := x
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
			z = (z ^ (z >> 27)) * 0x94d049bb133111eb
			z ^= z >> 31
			binary.BigEndian.PutUint64(raw[i*8:], z)
		}
		name := "amq.gen-" + base64.RawURLEncoding.EncodeToString(raw[:])
		if _, taken := b.queues[name]; !taken {
			return name
		}
	}
}
