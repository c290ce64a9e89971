package conformance

import (
	"fmt"
	"time"
)

// Quorum-queue scenarios: the 2:1 priority tiers and their counter, the
// delivery count and limit, where returned messages go, head-only TTL,
// dead-lettering out of a quorum queue, and x-expires.
func init() {
	// quorum declares a durable quorum queue with extra arguments.
	quorum := func(r *Run, ch Channel, name string, extra tbl) {
		args := tbl{"x-queue-type": "quorum"}
		for k, v := range extra {
			args[k] = v
		}
		r.Declare(ch, name, true, false, false, args)
	}
	// publishN publishes prefix0 .. prefix(n-1) with p.
	publishN := func(r *Run, ch Channel, q, prefix string, n int, p pub) {
		for i := range n {
			r.Publish(ch, q, fmt.Sprintf("%s%d", prefix, i), p)
		}
	}
	// drain records n auto-ack basic.gets.
	drain := func(r *Run, ch Channel, q string, n int) {
		for range n {
			r.Get(ch, q, true)
		}
	}
	// reopen closes ch cleanly, records it, and opens a new channel on c.
	reopen := func(r *Run, c Conn, ch Channel) Channel {
		if err := ch.Close(); err != nil {
			r.Logf("close: %s", describeErr(err))
		}
		r.Closed(ch)
		return r.Channel(c)
	}
	// Dead-lettering out of a quorum queue is an effect applied after the
	// Raft commit, and a channel's unacked messages return when the queue
	// sees the channel go down: both asynchronous on a live broker.
	const settle = 200 * time.Millisecond
	// A live run's waits are scheduled from its first Dial, so a scenario
	// whose timing starts at a publish first waits out the declarations
	// (quorum declares take tens of milliseconds) and publishes on schedule.
	const declared = 300 * time.Millisecond

	quorumScenarios = []Scenario{
		{
			Name: "quorum-priority-mid-cycle",
			Cite: "§4.2 rabbit_fifo_q:out/1: the dequeue counter advances on every out, basic.get included, " +
				"and is not reset; after one get (counter 1) lo0..2 then hi0..2 come out hi0 lo0 hi1 hi2 lo1 lo2; §10 item 3",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qmid")
				quorum(r, ch, q, nil)
				r.Publish(ch, q, "n0", pub{})
				r.Get(ch, q, true)
				publishN(r, ch, q, "lo", 3, pub{})
				publishN(r, ch, q, "hi", 3, pub{Priority: 9})
				drain(r, ch, q, 7)
			},
		},
		{
			Name: "quorum-priority-high-published-first",
			Cite: "§4.2 and quorum-queues docs: a high message enqueued before a normal one is served first " +
				"even on the normal tier's turn (the turn takes the lower Raft index)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qhifirst")
				quorum(r, ch, q, nil)
				publishN(r, ch, q, "hi", 4, pub{Priority: 5})
				publishN(r, ch, q, "lo", 2, pub{Priority: 4})
				drain(r, ch, q, 7)
			},
		},
		{
			Name: "quorum-priority-consumer",
			Cite: "§4.2: a consumer's checkouts go through rabbit_fifo_q:out/1 like basic.get: with prefetch 1 " +
				"and an ack each time, a mid-cycle counter (one get before) gives hi0 lo0 hi1 hi2 lo1 lo2",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qprioconsumer")
				quorum(r, ch, q, nil)
				r.Publish(ch, q, "n0", pub{})
				r.Get(ch, q, true)
				publishN(r, ch, q, "lo", 3, pub{})
				publishN(r, ch, q, "hi", 3, pub{Priority: 9})
				r.Qos(ch, 1)
				c := r.Consume(ch, q, "c1", false, false)
				for range 6 {
					for _, d := range r.Receive(c, 1) {
						r.Ack(ch, d.DeliveryTag, false)
					}
				}
			},
		},
		{
			Name: "quorum-priority-expiry-advances-counter",
			Cite: "§4.2: TTL expiry takes the message with take_next_msg and advances the 2:1 counter " +
				"(expire/3); §1.6 quorum head expiry on the Ra timer",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qexpcounter")
				quorum(r, ch, q, nil)
				r.Wait(declared)
				r.Publish(ch, q, "gone", pub{Expiration: "200"})
				r.Wait(500 * time.Millisecond)
				r.Passive(ch, q)
				publishN(r, ch, q, "lo", 3, pub{})
				publishN(r, ch, q, "hi", 3, pub{Priority: 9})
				drain(r, ch, q, 7)
			},
		},
		{
			Name: "quorum-priority-return-keeps-counter",
			Cite: "§4.2: returned messages are taken before both tiers and do not advance the counter; " +
				"§5.3 returns queue",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qretcounter")
				quorum(r, ch, q, nil)
				publishN(r, ch, q, "lo", 3, pub{})
				publishN(r, ch, q, "hi", 3, pub{Priority: 9})
				if d, ok := r.Get(ch, q, false); ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				drain(r, ch, q, 7)
			},
		},
		{
			Name: "quorum-ttl-head-only",
			Cite: "§1.6 expire_msgs looks only at the next message; §11 observed: expiration 2000 then 200, " +
				"after 500 ms only the 2000 ms one comes out, the 200 ms one dropped at the head",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qttlhead")
				quorum(r, ch, q, nil)
				r.Wait(declared)
				r.Publish(ch, q, "long", pub{Expiration: "2000"})
				r.Publish(ch, q, "short", pub{Expiration: "200"})
				r.Wait(500 * time.Millisecond)
				r.Passive(ch, q)
				drain(r, ch, q, 2)
				r.Passive(ch, q)
			},
		},
		{
			Name: "quorum-ttl-get-remaining",
			Cite: "§1.6, v4.0.5 rabbit_fifo dequeue: message_count is messages_ready right after checkout_one, " +
				"so an expired message left at the head still counts after a manual-ack get; a no-ack get " +
				"settles at once and the settlement's checkout (expire_msgs) reaps it before the count",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qttlget")
				quorum(r, ch, q, nil)
				r.Wait(declared)
				r.Publish(ch, q, "a", pub{Expiration: "2000"})
				r.Publish(ch, q, "b", pub{Expiration: "200"})
				r.Publish(ch, q, "c", pub{Expiration: "2000"})
				r.Publish(ch, q, "d", pub{Expiration: "200"})
				r.Wait(500 * time.Millisecond)
				r.Passive(ch, q)
				d, ok := r.Get(ch, q, false)
				r.Passive(ch, q)
				r.Get(ch, q, true)
				if ok {
					r.Ack(ch, d.DeliveryTag, false)
				}
				r.Passive(ch, q)
			},
		},
		{
			Name: "quorum-ttl-zero",
			Cite: "§1.6: x-message-ttl 0 on a quorum queue is RaCmdTs+1: dead-lettered as expired unless a consumer " +
				"takes it in the same command; a waiting consumer gets it",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("qttl0"), r.Q("qttl0-dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				quorum(r, ch, q, tbl{"x-message-ttl": 0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Wait(declared)
				r.Publish(ch, q, "m0", pub{})
				r.Wait(settle)
				r.Passive(ch, q)
				r.Get(ch, dlq, true)
				c := r.Consume(ch, q, "c1", false, false)
				r.Publish(ch, q, "m1", pub{})
				for _, d := range r.Receive(c, 1) {
					r.Ack(ch, d.DeliveryTag, false)
				}
				r.Passive(ch, q)
			},
		},
		{
			Name: "quorum-ttl-requeued-expired",
			Cite: "§1.5/§1.6: unacked messages do not expire, and a returned message keeps its expiry: " +
				"returned after its TTL it is dead-lettered as expired instead of redelivered",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("qttlret"), r.Q("qttlret-dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				quorum(r, ch, q, tbl{"x-message-ttl": 500, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Wait(declared)
				r.Publish(ch, q, "m0", pub{})
				d, ok := r.Get(ch, q, false)
				r.Wait(700 * time.Millisecond)
				if ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				r.Get(ch, q, true)
				r.Wait(settle)
				r.Get(ch, dlq, true)
			},
		},
		{
			Name: "quorum-delivery-limit-default",
			Cite: "§5.1 default limit 20; §5.2 acquired_count > limit; §11 observed: reject(requeue) each time, " +
				"21 deliveries, the last with x-delivery-count 20, then gone",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qlimit20")
				quorum(r, ch, q, nil)
				r.Publish(ch, q, "m", pub{})
				for range 22 {
					if d, ok := r.Get(ch, q, false); ok {
						r.Reject(ch, d.DeliveryTag, true)
					}
				}
				r.Passive(ch, q)
			},
		},
		{
			Name: "quorum-delivery-limit-dead-letter",
			Cite: "§5.2, §3.3; §11 observed: x-delivery-limit 2 with a dead-letter target: 3 deliveries, then in the " +
				"target with x-death reason delivery_limit, no original-expiration, priority kept",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("qlimit2"), r.Q("qlimit2-dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				quorum(r, ch, q, tbl{"x-delivery-limit": 2, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Publish(ch, q, "m", pub{Priority: 7, MessageId: "id-1"})
				for range 4 {
					if d, ok := r.Get(ch, q, false); ok {
						r.Reject(ch, d.DeliveryTag, true)
					}
				}
				r.Wait(settle)
				r.Get(ch, dlq, true)
			},
		},
		{
			Name: "quorum-nack-reject-both-count",
			Cite: "§5.2 (4.0: every return increments acquired_count); §11 observed: alternating nack/reject " +
				"via basic.get gives x-delivery-count 1,2,3,4,5",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qnackreject")
				quorum(r, ch, q, nil)
				r.Publish(ch, q, "m", pub{})
				for i := range 5 {
					d, ok := r.Get(ch, q, false)
					if !ok {
						continue
					}
					if i%2 == 0 {
						r.Nack(ch, d.DeliveryTag, false, true)
					} else {
						r.Reject(ch, d.DeliveryTag, true)
					}
				}
				if d, ok := r.Get(ch, q, false); ok {
					r.Ack(ch, d.DeliveryTag, false)
				}
				r.Get(ch, q, false)
			},
		},
		{
			Name: "quorum-return-positions",
			Cite: "§5.3 returns are served first in the order returned; §11 observed: get m0, get m1, reject m1, " +
				"reject m0 gives m1 m0 m2, each returned one with x-delivery-count 1",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qretpos")
				quorum(r, ch, q, nil)
				publishN(r, ch, q, "m", 3, pub{})
				d0, ok0 := r.Get(ch, q, false)
				d1, ok1 := r.Get(ch, q, false)
				if ok1 {
					r.Reject(ch, d1.DeliveryTag, true)
				}
				if ok0 {
					r.Reject(ch, d0.DeliveryTag, true)
				}
				drain(r, ch, q, 4)
			},
		},
		{
			Name: "quorum-nack-multiple-order",
			Cite: "§5.3: one nack(multiple) returns its messages oldest first, behind earlier returns; §10 item 4",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qnackmulti")
				quorum(r, ch, q, nil)
				publishN(r, ch, q, "m", 4, pub{})
				var tags []uint64
				for range 3 {
					if d, ok := r.Get(ch, q, false); ok {
						tags = append(tags, d.DeliveryTag)
					}
				}
				if len(tags) == 3 {
					r.Reject(ch, tags[1], true)
					r.Nack(ch, tags[2], true, true)
				}
				drain(r, ch, q, 5)
			},
		},
		{
			Name: "quorum-unlimited-requeue-to-back",
			Cite: "§5.3 and §4.2: with x-delivery-limit -1 an explicit requeue goes to the back of the normal tier " +
				"(rabbit_fifo #requeue), so a high-priority message loses its priority; §10 item 4",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qunlimback")
				quorum(r, ch, q, tbl{"x-delivery-limit": -1})
				publishN(r, ch, q, "lo", 2, pub{})
				r.Publish(ch, q, "hi", pub{Priority: 9})
				if d, ok := r.Get(ch, q, false); ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				drain(r, ch, q, 4)
			},
		},
		{
			Name: "quorum-ttl-head-of-each-level",
			Cite: "semantics §1.6 and §12.7: a quorum queue expires only its next message on 4.0.5, but the " +
				"head of every priority level on 4.3.6 (rabbit_fifo expire_batch, timer_effect at v4.3.5)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("qttllevels"), r.Q("qttllevels-dlq")
				quorum(r, ch, dlq, nil)
				quorum(r, ch, q, tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Publish(ch, q, "hi", pub{Priority: 9})
				r.Publish(ch, q, "lo", pub{Expiration: "200"})
				r.Wait(400 * time.Millisecond)
				r.Passive(ch, q)
				r.Passive(ch, dlq)
				drain(r, ch, q, 3)
				drain(r, ch, dlq, 2)
			},
		},
		{
			Name: "quorum-hold-at-least-once",
			Cite: "semantics §3.6: a quorum hold queue as queuey declares it (x-message-ttl, dead-lettering to a " +
				"quorum work queue, x-dead-letter-strategy at-least-once with x-overflow reject-publish) releases " +
				"its messages into the work queue like an at-most-once one; at-least-once without reject-publish " +
				"is accepted and dead-letters at most once (rabbit_fifo_dlx:make_state)",
			Run: func(r *Run) {
				_, ch := setup(r)
				work, hold, fallback := r.Q("qhwork"), r.Q("qhold"), r.Q("qhold-fallback")
				quorum(r, ch, work, nil)
				dl := func(extra tbl) tbl {
					t := tbl{"x-message-ttl": 200, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work,
						"x-dead-letter-strategy": "at-least-once"}
					for k, v := range extra {
						t[k] = v
					}
					return t
				}
				quorum(r, ch, hold, dl(tbl{"x-overflow": "reject-publish"}))
				quorum(r, ch, fallback, dl(tbl{"x-overflow": "drop-head"}))
				quorum(r, ch, hold, dl(tbl{"x-overflow": "reject-publish"}))
				r.Publish(ch, hold, "a", pub{DeliveryMode: 2})
				r.Publish(ch, hold, "b", pub{Priority: 5})
				r.Wait(settle + 200*time.Millisecond)
				r.Publish(ch, fallback, "c", pub{})
				r.Wait(settle + 200*time.Millisecond)
				r.Passive(ch, hold)
				r.Passive(ch, fallback)
				r.Passive(ch, work)
				drain(r, ch, work, 4)
			},
		},
		{
			Name: "quorum-unlimited-requeue-same-priority",
			Cite: "semantics §5.3 and §12: with x-delivery-limit -1, a reject or nack with requeue of a message of the " +
				"normal tier goes to the back on 4.0.5 (rabbit_fifo #requeue) and back to the front on 4.3.6",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qunlimsame")
				quorum(r, ch, q, tbl{"x-delivery-limit": -1})
				publishN(r, ch, q, "m", 3, pub{})
				if d, ok := r.Get(ch, q, false); ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				if d, ok := r.Get(ch, q, false); ok {
					r.Nack(ch, d.DeliveryTag, false, true)
				}
				drain(r, ch, q, 4)
			},
		},
		{
			Name: "quorum-unlimited-close-to-front",
			Cite: "§5.3: with x-delivery-limit -1 a channel close still returns unacked messages to the front " +
				"returns queue (only explicit returns go to the back); §7.3",
			Run: func(r *Run) {
				c, ch := setup(r)
				q := r.Q("qunlimfront")
				quorum(r, ch, q, tbl{"x-delivery-limit": -1})
				publishN(r, ch, q, "m", 3, pub{})
				r.Get(ch, q, false)
				r.Get(ch, q, false)
				ch = reopen(r, c, ch)
				r.Wait(settle)
				drain(r, ch, q, 4)
			},
		},
		{
			Name: "quorum-channel-close-unacked",
			Cite: "§7.3 quorum: unacked messages return to the front in delivery order with x-delivery-count 1; " +
				"§11 observed: prefetch 2 over 3, close with 2 unacked gives c0 c1 c2",
			Run: func(r *Run) {
				c, ch := setup(r)
				q := r.Q("qcloseunacked")
				quorum(r, ch, q, nil)
				publishN(r, ch, q, "c", 3, pub{})
				r.Qos(ch, 2)
				r.Receive(r.Consume(ch, q, "cons", false, false), 2)
				ch = reopen(r, c, ch)
				r.Wait(settle)
				r.Passive(ch, q)
				drain(r, ch, q, 4)
			},
		},
		{
			Name: "quorum-dead-letter-to-classic",
			Cite: "§3.3 and §10 item 6: what a classic dead-letter target sees of a message rejected out of a " +
				"quorum queue after one return (x-delivery-count, redelivered)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("qdlc"), r.Q("qdlc-dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				quorum(r, ch, q, tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Publish(ch, q, "m", pub{})
				if d, ok := r.Get(ch, q, false); ok {
					r.Nack(ch, d.DeliveryTag, false, true)
				}
				if d, ok := r.Get(ch, q, false); ok {
					r.Reject(ch, d.DeliveryTag, false)
				}
				r.Wait(settle)
				if d, ok := r.Get(ch, dlq, false); ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				r.Get(ch, dlq, true)
			},
		},
		{
			Name: "quorum-dead-letter-to-quorum",
			Cite: "§3.3 and §10 item 6, v4.0.5 rabbit_fifo: a dead-lettered message carries the source header's " +
				"delivery_count (failed deliveries: channel close and the discard itself, not reject/nack " +
				"requeue) as an annotation (rabbit_fifo_dlx annotate_msg); a quorum target starts its " +
				"delivery_count from it (maybe_set_msg_delivery_count), so its first delivery shows " +
				"redelivered and x-delivery-count 2 here, and after one return x-delivery-count 1 (acquired_count)",
			Run: func(r *Run) {
				c, ch := setup(r)
				q, dlq := r.Q("qdlq"), r.Q("qdlq-dlq")
				quorum(r, ch, dlq, nil)
				quorum(r, ch, q, tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Publish(ch, q, "m", pub{})
				if d, ok := r.Get(ch, q, false); ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				r.Get(ch, q, false)
				ch = reopen(r, c, ch)
				r.Wait(settle)
				if d, ok := r.Get(ch, q, false); ok {
					r.Reject(ch, d.DeliveryTag, false)
				}
				r.Wait(settle)
				if d, ok := r.Get(ch, dlq, false); ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				r.Get(ch, dlq, true)
			},
		},
		{
			Name: "quorum-delivery-limit-dead-letter-to-quorum",
			Cite: "v4.0.5 rabbit_fifo: explicit returns raise only acquired_count, so a message dead-lettered " +
				"for delivery_limit after reject(requeue) has no delivery_count to carry: a quorum target " +
				"delivers it as new (no x-delivery-count, redelivered false)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("qlimitq"), r.Q("qlimitq-dlq")
				quorum(r, ch, dlq, nil)
				quorum(r, ch, q, tbl{"x-delivery-limit": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Publish(ch, q, "m", pub{})
				for range 3 {
					if d, ok := r.Get(ch, q, false); ok {
						r.Reject(ch, d.DeliveryTag, true)
					}
				}
				r.Wait(settle)
				r.Get(ch, dlq, true)
			},
		},
		{
			Name: "quorum-dead-letter-count-through-classic",
			Cite: "v4.0.5 mc annotations: the delivery_count annotation a quorum queue puts on a dead-lettered " +
				"message, invisible on a classic queue, travels on with it to a quorum queue further down",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, mid, dlq := r.Q("qthru"), r.Q("qthru-mid"), r.Q("qthru-dlq")
				quorum(r, ch, dlq, nil)
				r.Declare(ch, mid, true, false, false, tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				quorum(r, ch, q, tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": mid})
				r.Publish(ch, q, "m", pub{})
				if d, ok := r.Get(ch, q, false); ok {
					r.Reject(ch, d.DeliveryTag, false)
				}
				r.Wait(settle)
				if d, ok := r.Get(ch, mid, false); ok {
					r.Reject(ch, d.DeliveryTag, false)
				}
				r.Wait(settle)
				r.Get(ch, dlq, true)
			},
		},
		{
			Name: "quorum-expires-not-renewed-by-declare",
			Cite: "§2 quorum: x-expires is checked on the ~5 s Ra tick against last_active, which a re-declare " +
				"does not touch (docs: lease not renewed on re-declaration): declared at 0, re-declared at " +
				"1.5 s, gone by 8 s",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("qexpires")
				quorum(r, ch, q, tbl{"x-expires": 2000})
				r.Wait(1500 * time.Millisecond)
				quorum(r, ch, q, tbl{"x-expires": 2000})
				r.Wait(6500 * time.Millisecond)
				r.Passive(ch, q)
				r.Closed(ch)
			},
		},
		{
			Name: "quorum-expires-drops-messages",
			Cite: "§2: an expired queue's messages are deleted, not dead-lettered (dlx.md); quorum x-expires " +
				"on the ~5 s tick, so observed 8 s after a 2 s lease",
			Run: func(r *Run) {
				c, ch := setup(r)
				q, dlq := r.Q("qexpmsgs"), r.Q("qexpmsgs-dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				quorum(r, ch, q, tbl{"x-expires": 2000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
				r.Publish(ch, q, "m", pub{})
				r.Wait(8 * time.Second)
				r.Passive(ch, q)
				r.Closed(ch)
				ch = r.Channel(c)
				r.Passive(ch, dlq)
			},
		},
		{
			Name: "dead-letter-order-classic-before-quorum",
			Cite: "§3.7: one basic.nack with multiple over deliveries of a quorum queue (the lower tags) and a " +
				"classic queue: the classic queue publishes its dead letters while it handles the nack, the " +
				"quorum queue only after the Raft commit (rabbit_quorum_queue:dead_letter_publish as a Ra effect), " +
				"so the classic queue's land first",
			Run: func(r *Run) {
				_, ch := setup(r)
				qq, cq, dead := r.Q("dlorder-qq"), r.Q("dlorder-cq"), r.Q("dlorder-dead")
				r.Declare(ch, dead, true, false, false, nil)
				quorum(r, ch, qq, clsDLTo(dead, nil))
				r.Declare(ch, cq, true, false, false, clsDLTo(dead, nil))
				publishN(r, ch, qq, "q", 2, pub{})
				publishN(r, ch, cq, "c", 2, pub{})
				var last uint64
				for _, q := range []string{qq, qq, cq, cq} {
					if d, ok := r.Get(ch, q, false); ok {
						last = d.DeliveryTag
					}
				}
				r.Nack(ch, last, true, false)
				// Waits count from the first Dial: the declarations and
				// the gets take most of settle, so wait past both.
				r.Wait(declared + settle)
				clsDrain(r, ch, dead, 4)
			},
		},
	}
}
