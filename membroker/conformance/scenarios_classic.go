package conformance

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Classic-queue scenarios: message TTL and head-only expiry, x-message-ttl
// 0, dead-lettering (x-death, cycles, routing), x-expires leases, requeue
// positions, purge and delete counts, mandatory returns, exclusive and
// auto-delete queues.
//
// Timing: every deadline is observed at least ~200 ms before or after it
// (the live broker runs in real time, with a few ms per operation and
// 150 ms per quiet period, so a live run is always a little later than the
// model's virtual clock), and each scenario waits less than ~3 s in all.
//
// "semantics §N" cites docs/rabbitmq-semantics.md, "observed" its
// section 11, observations on a live RabbitMQ 4.0.5.

//lint:ignore ST1011 a multiplier: 300 * clsMs reads as 300 ms, which is what the scenarios mean
const clsMs = time.Millisecond

// dlTo is the argument table that dead-letters through the default exchange
// to target, plus more.
func clsDLTo(target string, more tbl) tbl {
	args := tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": target}
	for k, v := range more {
		args[k] = v
	}
	return args
}

// getReject gets one message from queue and rejects it.
func clsGetReject(r *Run, ch Channel, queue string, requeue bool) {
	if d, ok := r.Get(ch, queue, false); ok {
		r.Reject(ch, d.DeliveryTag, requeue)
	}
}

// drainGet gets (auto-ack) from queue until it reports empty, at most n+1
// times.
func clsDrain(r *Run, ch Channel, queue string, n int) {
	for range n + 1 {
		if _, ok := r.Get(ch, queue, true); !ok {
			return
		}
	}
}

// probe publishes a mandatory message to queue: a 312 return shows the
// queue is gone, without renewing its x-expires lease as a declare or a get
// would.
func clsProbe(r *Run, ch Channel, queue, body string) {
	r.PublishMandatory(ch, queue, body, pub{})
}

func init() {
	classicScenarios = []Scenario{
		// ----------------------------------------------------------------
		// Message TTL

		{
			Name: "classic-ttl-head-only",
			Cite: "semantics §1.2 (only the head is examined); observed: per-message 2000 then 200 ms, wait 500, only the 2000 ms one comes out",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("ttl")
				r.Declare(ch, q, true, false, false, nil)
				r.Publish(ch, q, "long", pub{Expiration: "2000"})
				r.Publish(ch, q, "short", pub{Expiration: "200"})
				r.Wait(600 * clsMs)
				r.Passive(ch, q) // the expired "short" still counts, stuck behind "long"
				clsDrain(r, ch, q, 2)
			},
		},
		{
			Name: "classic-ttl-head-only-dead-letter",
			Cite: "semantics §1.2, §3.3; observed: shared wait queue, long published before short, both dead-lettered together when the long one expires",
			Run: func(r *Run) {
				_, ch := setup(r)
				wait, work := r.Q("wait"), r.Q("work")
				r.Declare(ch, work, true, false, false, nil)
				r.Declare(ch, wait, true, false, false, clsDLTo(work, nil))
				c := r.Consume(ch, work, "worker", true, false)
				r.Publish(ch, wait, "long", pub{Expiration: "1500"})
				r.Publish(ch, wait, "short", pub{Expiration: "200"})
				r.Wait(500 * clsMs)
				r.Receive(c, 0) // nothing yet: "short" is not at the head
				r.Passive(ch, wait)
				r.Wait(1400 * clsMs)
				r.Receive(c, 2)
				r.Passive(ch, wait)
			},
		},
		{
			Name: "classic-ttl-queue-vs-message",
			Cite: "semantics §1.1 (lower of x-message-ttl and expiration wins, fixed at enqueue); §3.3 (original-expiration only for a per-message TTL)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("ttl"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-message-ttl": 1000}))
				r.Publish(ch, q, "msg-300", pub{Expiration: "300"}) // message TTL lower
				r.Publish(ch, q, "msg-5000", pub{Expiration: "5000"})
				r.Publish(ch, q, "none", pub{})
				r.Wait(600 * clsMs)
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 1)
				r.Wait(800 * clsMs)
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 2)
			},
		},
		{
			Name: "classic-ttl-zero-drops-without-consumer",
			Cite: "semantics §1.3 (deliver_or_enqueue: ttl 0, no DLX, nobody waiting: discarded, confirm still ack); §8",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("ttl0")
				r.Declare(ch, q, true, false, false, tbl{"x-message-ttl": 0})
				r.Publish(ch, q, "m0", pub{})
				r.Publish(ch, q, "m1", pub{DeliveryMode: amqp.Persistent})
				r.Passive(ch, q)
				r.Get(ch, q, true)
			},
		},
		{
			Name: "classic-ttl-zero-dead-letters",
			Cite: "semantics §1.3 (with a DLX the message is enqueued and dead-lettered as expired); §3.3 (no original-expiration for a queue TTL)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("ttl0"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-message-ttl": 0}))
				r.Publish(ch, q, "m0", pub{})
				r.Publish(ch, q, "m1", pub{Expiration: "60000"})
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 2)
			},
		},
		{
			Name: "classic-ttl-zero-delivers-to-waiting-consumer",
			Cite: "semantics §1.3 (ttl 0: delivered if a consumer can take it at once, else expired); §7.1",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("ttl0"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-message-ttl": 0}))
				r.Qos(ch, 1)
				c := r.Consume(ch, q, "waiting", false, false)
				r.Publish(ch, q, "m0", pub{})
				ds := r.Receive(c, 1)
				r.Publish(ch, q, "m1", pub{}) // the consumer is at its prefetch: expired
				r.Receive(c, 0)
				if len(ds) == 1 {
					r.Ack(ch, ds[0].DeliveryTag, false)
				}
				r.Receive(c, 0)
				r.Publish(ch, q, "m2", pub{}) // room again
				r.Receive(c, 1)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-ttl-zero-requeue-expires",
			Cite: "semantics §1.3 (a message requeued into a ttl 0 queue has expired: requeue_and_run drops or dead-letters it)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("ttl0"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-message-ttl": 0}))
				r.Qos(ch, 1)
				c := r.Consume(ch, q, "waiting", false, false)
				r.Publish(ch, q, "m0", pub{})
				if ds := r.Receive(c, 1); len(ds) == 1 {
					r.Reject(ch, ds[0].DeliveryTag, true)
				}
				r.Receive(c, 0)
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-ttl-expiration-zero",
			Cite: "semantics §1.3 (per-message expiration \"0\" is enqueued with expiry now, not discarded on the ttl-0 shortcut; it expires when at the head)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("exp0"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, nil))
				r.Publish(ch, q, "head", pub{})
				r.Publish(ch, q, "zero", pub{Expiration: "0"})
				r.Passive(ch, q) // "zero" waits behind "head"
				clsDrain(r, ch, dlq, 0)
				r.Get(ch, q, true) // "head"; "zero" is now the head and expires
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-ttl-unacked-never-expires",
			Cite: "semantics §1.5 (unacked messages do not expire; requeued with their original expiry, expired at the head at once)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("ttl"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, nil))
				r.Publish(ch, q, "held", pub{Expiration: "300"})
				r.Publish(ch, q, "later", pub{Expiration: "2500"})
				d, ok := r.Get(ch, q, false)
				r.Wait(650 * clsMs)
				clsDrain(r, ch, dlq, 0) // "held" is unacked: not expired
				if ok {
					r.Reject(ch, d.DeliveryTag, true) // back at the head, expired
				}
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-ttl-priority-stuck-behind-higher",
			Cite: "semantics §1.4 (priority queue: only the head of the highest non-empty level expires; expired low-priority messages stay counted)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("prio")
				r.Declare(ch, q, true, false, false, tbl{"x-max-priority": 5})
				r.Publish(ch, q, "low", pub{Expiration: "200"})
				r.Publish(ch, q, "high", pub{Expiration: "2000", Priority: 5})
				r.Wait(600 * clsMs)
				r.Passive(ch, q)
				clsDrain(r, ch, q, 2)
			},
		},

		{
			Name: "classic-ttl-priority-shorter-head-not-rearmed",
			Cite: "semantics §1.4 (deliver_or_enqueue runs drop_expired_msgs only when the queue had been empty, so a higher-priority message with a shorter TTL that becomes the head waits for the timer armed for the old head)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("prio"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-max-priority": 5}))
				r.Publish(ch, q, "low", pub{Expiration: "1500"})
				r.Publish(ch, q, "high", pub{Expiration: "200", Priority: 5})
				r.Wait(600 * clsMs)
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 0)
				r.Wait(1300 * clsMs)
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 2)
			},
		},
		{
			Name: "classic-ttl-priority-expired-head-fetched",
			Cite: "semantics §1.2 race (fetch takes the head before dropping expired messages), §1.4 (the expired high-priority head has no timer of its own)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("prio"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-max-priority": 5}))
				r.Publish(ch, q, "low", pub{Expiration: "1500"})
				r.Publish(ch, q, "high", pub{Expiration: "200", Priority: 5})
				r.Wait(600 * clsMs)
				clsDrain(r, ch, q, 2)
				clsDrain(r, ch, dlq, 0)
			},
		},

		{
			Name: "classic-ttl-priority-expired-head-consumed",
			Cite: "semantics §1.4 with run_message_queue (a consumer attaching fetches the head with no expiry check first: the uncovered expired high-priority message is delivered)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("prio"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-max-priority": 5}))
				r.Publish(ch, q, "low", pub{Expiration: "1500"})
				r.Publish(ch, q, "high", pub{Expiration: "200", Priority: 5})
				r.Wait(600 * clsMs)
				c := r.Consume(ch, q, "late", true, false)
				r.Receive(c, 2)
				clsDrain(r, ch, dlq, 0)
			},
		},
		{
			Name: "classic-ttl-priority-cancel-drops-expired-head",
			Cite: "semantics §1.4 with stop_consumer (basic.cancel runs requeue_and_run, whose drop_expired_msgs reaps the uncovered expired high-priority head)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("prio"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-max-priority": 5}))
				r.Qos(ch, 1)
				c := r.Consume(ch, q, "busy", false, false)
				r.Publish(ch, q, "x", pub{})
				r.Receive(c, 1) // held unacked: the consumer has no room
				r.Publish(ch, q, "low", pub{Expiration: "1500"})
				r.Publish(ch, q, "high", pub{Expiration: "200", Priority: 5})
				r.Wait(700 * clsMs)
				r.Passive(ch, q)
				r.Cancel(ch, "busy")
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 1)
				clsDrain(r, ch, q, 1)
			},
		},
		{
			Name: "classic-ttl-requeue-keeps-expiry",
			Cite: "semantics §1.5 (the original expiry is kept on requeue: a message requeued 600 ms into a 1000 ms queue TTL expires at 1000, not 1600)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("ttl"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-message-ttl": 1000}))
				r.Publish(ch, q, "m0", pub{})
				r.Publish(ch, q, "m1", pub{})
				d, ok := r.Get(ch, q, false)
				r.Wait(600 * clsMs)
				if ok {
					r.Reject(ch, d.DeliveryTag, true)
				}
				r.Passive(ch, q)
				r.Wait(700 * clsMs)
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 2)
			},
		},

		// ----------------------------------------------------------------
		// Dead-letter headers

		{
			Name: "classic-dead-letter-expired-headers",
			Cite: "semantics §3.3 (x-death fields, x-first/last-death-*, expiration removed, other properties and headers kept, delivered with the DLX and DLRK)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("src"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, nil))
				r.Publish(ch, q, "m", pub{
					Expiration: "300", Priority: 3, DeliveryMode: amqp.Persistent,
					MessageId: "id-1", CorrelationId: "corr", ContentType: "text/plain",
					Type: "kind", AppId: "app", Headers: tbl{"k": "v", "n": int32(7)},
					ContentEncoding: "identity", ReplyTo: "rt", UserId: "guest",
					Timestamp: time.Unix(1700000000, 0),
				})
				r.Wait(650 * clsMs)
				r.Passive(ch, q)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-dead-letter-rejected-headers",
			Cite: "semantics §3.1 (reject and nack without requeue: reason rejected), §3.3 (original-expiration only with a per-message TTL)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("src"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-message-ttl": 60000}))
				r.Publish(ch, q, "plain", pub{MessageId: "p"})
				r.Publish(ch, q, "with-ttl", pub{Expiration: "60000", Priority: 2})
				r.Publish(ch, q, "nacked", pub{})
				clsGetReject(r, ch, q, false)
				clsGetReject(r, ch, q, false)
				if d, ok := r.Get(ch, q, false); ok {
					r.Nack(ch, d.DeliveryTag, false, false)
				}
				clsDrain(r, ch, dlq, 3)
			},
		},
		{
			Name: "classic-dead-letter-after-requeue",
			Cite: "semantics §3.3, §7.3: a message requeued (redelivered) and then rejected arrives in the dead-letter queue as a new message, redelivered=false",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("src"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, nil))
				r.Publish(ch, q, "m", pub{})
				clsGetReject(r, ch, q, true)
				clsGetReject(r, ch, q, false)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-dead-letter-nack-multiple",
			Cite: "semantics §3.1 (basic.nack without requeue dead-letters with reason rejected); the order several nacked messages reach the dead-letter queue",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("src"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, nil))
				for _, b := range []string{"n0", "n1", "n2", "n3"} {
					r.Publish(ch, q, b, pub{})
				}
				var last uint64
				for range 3 {
					if d, ok := r.Get(ch, q, false); ok {
						last = d.DeliveryTag
					}
				}
				r.Nack(ch, last, true, false)
				clsDrain(r, ch, dlq, 3)
				clsDrain(r, ch, q, 1)
			},
		},
		{
			Name: "classic-dead-letter-ignores-client-x-death",
			Cite: "semantics §3.4 (4.0 does not interpret a client-supplied x-death: the first broker death starts from count 1, overwrites x-death and sets x-first-death-*)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("src"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, nil))
				forged := []any{tbl{"count": int64(5), "reason": "rejected", "queue": q, "exchange": "", "routing-keys": []any{q}}}
				r.Publish(ch, q, "m", pub{Headers: tbl{"x-death": forged, "x-first-death-queue": "elsewhere"}})
				r.Get(ch, q, false)
				r.Nack(ch, 0, true, false)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-dead-letter-own-routing-keys-bcc",
			Cite: "semantics §3.2 (without a DLRK the message's routing keys are used: the publish key, CC and BCC), §3.3 (routing-keys excludes BCC); BCC is removed from the headers at publish",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, bcc := r.Q("src"), r.Q("bcc")
				r.Declare(ch, bcc, true, false, false, nil)
				r.Declare(ch, q, true, false, false, tbl{"x-dead-letter-exchange": ""})
				r.Publish(ch, q, "m", pub{Headers: tbl{"BCC": []any{bcc}}})
				r.Get(ch, bcc, true)
				clsGetReject(r, ch, q, false)
				clsDrain(r, ch, q, 1)
				clsDrain(r, ch, bcc, 1)
			},
		},
		{
			Name: "classic-dead-letter-twice",
			Cite: "semantics §3.3 (x-death newest first, one entry per {queue,reason}; x-first-death-* kept, x-last-death-* updated; the second death has no original-expiration)",
			Run: func(r *Run) {
				_, ch := setup(r)
				a, b, c := r.Q("a"), r.Q("b"), r.Q("c")
				r.Declare(ch, c, true, false, false, nil)
				r.Declare(ch, b, true, false, false, clsDLTo(c, nil))
				r.Declare(ch, a, true, false, false, clsDLTo(b, nil))
				r.Publish(ch, a, "m", pub{Expiration: "300", Headers: tbl{"h": "x"}})
				r.Wait(650 * clsMs)
				clsGetReject(r, ch, b, false)
				clsDrain(r, ch, c, 1)
			},
		},
		{
			Name: "classic-dead-letter-reject-into-same-queue",
			Cite: "semantics §3.5 (no cycle check for reason rejected: DLX \"\" without DLRK sends a rejected message back to its own queue), §3.3 (repeated death: count 2)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("loop")
				r.Declare(ch, q, true, false, false, tbl{"x-dead-letter-exchange": ""})
				r.Publish(ch, q, "m0", pub{})
				r.Publish(ch, q, "m1", pub{})
				clsGetReject(r, ch, q, false) // m0 goes to the back, behind m1
				clsGetReject(r, ch, q, false) // m1
				clsGetReject(r, ch, q, false) // m0 again
				clsDrain(r, ch, q, 2)
			},
		},
		{
			Name: "classic-dead-letter-repeated-death-moves-to-front",
			Cite: "semantics §3.3 (a repeated {queue,reason} death increments count and moves the entry to the front, keeping its first values), §3.5 (reject cycles allowed)",
			Run: func(r *Run) {
				_, ch := setup(r)
				a, b := r.Q("a"), r.Q("b")
				r.Declare(ch, a, true, false, false, tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b})
				r.Declare(ch, b, true, false, false, clsDLTo(a, nil))
				r.Publish(ch, a, "m", pub{})
				clsGetReject(r, ch, a, false) // {a,rejected}
				clsGetReject(r, ch, b, false) // {b,rejected} {a,rejected}
				clsGetReject(r, ch, a, false) // {a,rejected,2} {b,rejected}
				clsDrain(r, ch, b, 1)
			},
		},
		{
			Name: "classic-dead-letter-expiry-cycle-dropped",
			Cite: "semantics §3.5 (expiry back into the same queue through DLX \"\" is a cycle without a rejection: dropped)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("loop")
				r.Declare(ch, q, true, false, false, tbl{"x-dead-letter-exchange": ""})
				r.Publish(ch, q, "m", pub{Expiration: "300"})
				r.Wait(650 * clsMs)
				r.Passive(ch, q)
				r.Get(ch, q, true)
			},
		},
		{
			Name: "classic-dead-letter-expiry-cycle-two-queues",
			Cite: "semantics §3.5 (a→b→a by expiry: the second death in b would route to a, whose death is in the list with no rejection: dropped)",
			Run: func(r *Run) {
				_, ch := setup(r)
				a, b := r.Q("a"), r.Q("b")
				r.Declare(ch, a, true, false, false, clsDLTo(b, tbl{"x-message-ttl": 500}))
				r.Declare(ch, b, true, false, false, clsDLTo(a, tbl{"x-message-ttl": 500}))
				r.Publish(ch, a, "m", pub{})
				r.Wait(750 * clsMs)
				r.Passive(ch, a)
				r.Passive(ch, b)
				r.Wait(500 * clsMs)
				r.Passive(ch, a)
				r.Passive(ch, b)
			},
		},
		{
			Name: "classic-dead-letter-cycle-with-rejection-kept",
			Cite: "semantics §3.5 (a cycle with a rejection in it is not dropped: rejected from a, expired from b, back into a)",
			Run: func(r *Run) {
				_, ch := setup(r)
				a, b := r.Q("a"), r.Q("b")
				r.Declare(ch, a, true, false, false, clsDLTo(b, nil))
				r.Declare(ch, b, true, false, false, clsDLTo(a, tbl{"x-message-ttl": 300}))
				r.Publish(ch, a, "m", pub{})
				clsGetReject(r, ch, a, false)
				r.Wait(650 * clsMs)
				r.Passive(ch, b)
				clsDrain(r, ch, a, 1)
			},
		},

		// ----------------------------------------------------------------
		// Dead-letter routing

		{
			Name: "classic-dead-letter-routing-key",
			Cite: "semantics §3.2 (x-dead-letter-routing-key replaces the message's routing keys; CC routes not used), §3.3 (CC header, x-death routing-keys), §10 open point 2",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq, cc := r.Q("src"), r.Q("dlq"), r.Q("cc")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, cc, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, nil))
				r.Publish(ch, q, "m", pub{Headers: tbl{"CC": []any{cc}}})
				r.Get(ch, cc, true) // the CC copy
				clsGetReject(r, ch, q, false)
				r.Passive(ch, cc)
				clsDrain(r, ch, dlq, 1)
			},
		},
		{
			Name: "classic-dead-letter-own-routing-keys",
			Cite: "semantics §3.2 (without x-dead-letter-routing-key the message's own routing key and CC routes are used)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, cc := r.Q("src"), r.Q("cc")
				r.Declare(ch, cc, true, false, false, nil)
				r.Declare(ch, q, true, false, false, tbl{"x-dead-letter-exchange": ""})
				r.Publish(ch, q, "m", pub{Headers: tbl{"CC": []any{cc}}})
				r.Get(ch, cc, true) // the CC copy of the publish
				clsGetReject(r, ch, q, false)
				clsDrain(r, ch, q, 1)
				clsDrain(r, ch, cc, 1)
			},
		},
		{
			Name: "classic-dead-letter-missing-queue",
			Cite: "semantics §3.2 (DLX \"\" routing to a queue that does not exist: dropped silently, no return, channel open)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("src")
				r.Declare(ch, q, true, false, false, clsDLTo(r.Q("missing"), tbl{"x-message-ttl": 300}))
				r.Publish(ch, q, "rejected", pub{})
				r.Publish(ch, q, "expires", pub{})
				d, ok := r.Get(ch, q, false)
				r.Wait(650 * clsMs)
				if ok {
					r.Reject(ch, d.DeliveryTag, false)
				}
				r.Passive(ch, q)
				r.Passive(ch, r.Q("missing"))
			},
		},
		{
			Name: "classic-dead-letter-missing-exchange",
			Cite: "semantics §3.2 (a DLX that does not exist when a message dies: dropped silently; with_dlx falls back to drop)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("src")
				r.Declare(ch, q, true, false, false, tbl{"x-dead-letter-exchange": r.Q("no-such-exchange"), "x-message-ttl": 300})
				r.Publish(ch, q, "rejected", pub{})
				r.Publish(ch, q, "expires", pub{})
				d, ok := r.Get(ch, q, false)
				r.Wait(650 * clsMs)
				if ok {
					r.Reject(ch, d.DeliveryTag, false)
				}
				r.Passive(ch, q)
				r.Publish(ch, q, "after", pub{})
				r.Get(ch, q, true)
			},
		},
		{
			Name: "classic-hold-queue-priority",
			Cite: "observed: hold queue x-message-ttl 500, x-expires 1000, DLX \"\" to a priority work queue with 3 messages at priority 0: the held message (priority 10, delivery mode 2) is delivered first; semantics §2 (not renewed by publish)",
			Run: func(r *Run) {
				_, ch := setup(r)
				work, hold := r.Q("work"), r.Q("hold")
				r.Declare(ch, work, true, false, false, tbl{"x-max-priority": 10})
				for _, b := range []string{"w0", "w1", "w2"} {
					r.Publish(ch, work, b, pub{})
				}
				r.Declare(ch, hold, true, false, false, clsDLTo(work, tbl{"x-message-ttl": 500, "x-expires": 1000}))
				r.Publish(ch, hold, "held", pub{Priority: 10, DeliveryMode: amqp.Persistent})
				r.Wait(800 * clsMs)
				clsDrain(r, ch, work, 4)
				r.Wait(500 * clsMs)
				r.Passive(ch, hold)
			},
		},

		// ----------------------------------------------------------------
		// x-expires

		{
			Name: "classic-expires-renewed-by-declare",
			Cite: "semantics §2 (classic: a non-passive, non-nowait queue.declare restarts the x-expires period)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("lease")
				r.Declare(ch, q, true, false, false, tbl{"x-expires": 700})
				r.Wait(500 * clsMs)
				r.Declare(ch, q, true, false, false, tbl{"x-expires": 700})
				r.Wait(450 * clsMs)
				clsProbe(r, ch, q, "alive") // past the first lease, within the second
				r.Wait(550 * clsMs)
				clsProbe(r, ch, q, "gone")
				r.Passive(ch, q)
			},
		},
		{
			Name: "classic-expires-renewed-by-passive",
			Cite: "semantics §2 (classic: a passive declare is a stat call, which restarts the x-expires period)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("lease")
				r.Declare(ch, q, true, false, false, tbl{"x-expires": 700})
				r.Wait(500 * clsMs)
				r.Passive(ch, q)
				r.Wait(450 * clsMs)
				clsProbe(r, ch, q, "alive")
				r.Wait(550 * clsMs)
				clsProbe(r, ch, q, "gone")
				r.Passive(ch, q)
			},
		},
		{
			Name: "classic-expires-renewed-by-get",
			Cite: "semantics §2 (classic: basic.get restarts the x-expires period, even on an empty queue)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("lease")
				r.Declare(ch, q, true, false, false, tbl{"x-expires": 700})
				r.Wait(500 * clsMs)
				r.Get(ch, q, true)
				r.Wait(450 * clsMs)
				clsProbe(r, ch, q, "alive")
				r.Wait(550 * clsMs)
				clsProbe(r, ch, q, "gone")
				r.Passive(ch, q)
			},
		},
		{
			Name: "classic-expires-not-renewed-by-publish",
			Cite: "semantics §2 (publishing does not renew the lease; messages of an expired queue are not dead-lettered); observed: x-expires 1600 with a publish every 300 ms gone 2.4 s after its one declare",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dlq := r.Q("lease"), r.Q("dlq")
				r.Declare(ch, dlq, true, false, false, nil)
				r.Declare(ch, q, true, false, false, clsDLTo(dlq, tbl{"x-expires": 700}))
				clsProbe(r, ch, q, "p0")
				r.Wait(250 * clsMs)
				clsProbe(r, ch, q, "p1")
				r.Wait(200 * clsMs)
				clsProbe(r, ch, q, "p2")
				r.Wait(550 * clsMs)
				clsProbe(r, ch, q, "p3")
				r.Passive(ch, dlq)
				r.Passive(ch, q)
			},
		},
		{
			Name: "classic-expires-not-renewed-by-refused-declare",
			Cite: "semantics §6.1 (assert_equivalence runs before the stat that renews the lease): an inequivalent redeclare (406) does not renew x-expires",
			Run: func(r *Run) {
				conn, ch := setup(r)
				q := r.Q("lease")
				r.Declare(ch, q, true, false, false, tbl{"x-expires": 600})
				r.Wait(400 * clsMs)
				r.Declare(ch, q, true, false, false, tbl{"x-expires": 700})
				r.Closed(ch)
				ch2 := r.Channel(conn)
				r.Wait(500 * clsMs)
				clsProbe(r, ch2, q, "gone")
			},
		},
		{
			Name: "classic-expires-renewed-by-refused-passive",
			Cite: "semantics §2, rabbit_channel passive queue.declare (the stat that renews the lease runs before check_exclusive_access): another connection's passive declare of an exclusive queue is refused (405) but renews x-expires",
			Run: func(r *Run) {
				_, och := setup(r)
				q := r.Q("lease")
				r.Declare(och, q, false, false, true, tbl{"x-expires": 700})
				other, ch := setup(r)
				r.Wait(500 * clsMs)
				r.Passive(ch, q)
				r.Closed(ch)
				ch2 := r.Channel(other)
				r.Wait(450 * clsMs)
				clsProbe(r, ch2, q, "alive")
				r.Wait(550 * clsMs)
				clsProbe(r, ch2, q, "gone")
			},
		},
		{
			Name: "classic-expires-consumer-holds-lease",
			Cite: "semantics §2 (a queue with consumers never expires; the period restarts when the last consumer is cancelled)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("lease")
				r.Declare(ch, q, true, false, false, tbl{"x-expires": 500})
				r.Consume(ch, q, "holder", true, false)
				r.Wait(800 * clsMs)
				clsProbe(r, ch, q, "alive")
				r.Cancel(ch, "holder")
				r.Wait(250 * clsMs)
				clsProbe(r, ch, q, "still")
				r.Wait(550 * clsMs)
				clsProbe(r, ch, q, "gone")
			},
		},

		// ----------------------------------------------------------------
		// Requeue positions and counts

		{
			Name: "classic-requeue-original-position",
			Cite: "semantics §7.3 (classic requeue merges back by sequence id: original position, redelivered); observed: get m0, get m1, reject m1, reject m0 → m0 m1 m2",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("rq")
				r.Declare(ch, q, true, false, false, nil)
				for _, b := range []string{"m0", "m1", "m2", "m3"} {
					r.Publish(ch, q, b, pub{})
				}
				d0, ok0 := r.Get(ch, q, false)
				d1, ok1 := r.Get(ch, q, false)
				if ok1 {
					r.Reject(ch, d1.DeliveryTag, true)
				}
				if ok0 {
					r.Reject(ch, d0.DeliveryTag, true)
				}
				clsDrain(r, ch, q, 4)
			},
		},
		{
			Name: "classic-priority-requeue-original-position",
			Cite: "semantics §4.1 (requeue returns a message to its own priority level at its original position, redelivered)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("prio")
				r.Declare(ch, q, true, false, false, tbl{"x-max-priority": 5})
				r.Publish(ch, q, "l0", pub{})
				r.Publish(ch, q, "h0", pub{Priority: 5})
				r.Publish(ch, q, "l1", pub{})
				r.Publish(ch, q, "h1", pub{Priority: 5})
				r.Get(ch, q, false)
				r.Get(ch, q, false)
				r.Get(ch, q, false)
				r.Nack(ch, 0, true, true)
				clsDrain(r, ch, q, 4)
			},
		},
		{
			Name: "classic-priority-max-zero",
			Cite: "semantics §4.1, §10 open point 5 (x-max-priority 0 is accepted; rabbit_priority_queue uses max(1, ...), so it behaves like 1)",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("prio0")
				r.Declare(ch, q, true, false, false, tbl{"x-max-priority": 0})
				r.Publish(ch, q, "p0", pub{})
				r.Publish(ch, q, "p1", pub{Priority: 1})
				r.Publish(ch, q, "p0b", pub{})
				r.Publish(ch, q, "p9", pub{Priority: 9})
				clsDrain(r, ch, q, 4)
			},
		},
		{
			Name: "classic-channel-close-requeue",
			Cite: "semantics §7.3 (unacked deliveries requeued to their original positions when the channel closes); observed: prefetch 2 over 3 messages, close → c0* c1* c2",
			Run: func(r *Run) {
				conn, ch := setup(r)
				q := r.Q("close")
				r.Declare(ch, q, true, false, false, nil)
				for _, b := range []string{"c0", "c1", "c2"} {
					r.Publish(ch, q, b, pub{})
				}
				r.Qos(ch, 2)
				c := r.Consume(ch, q, "two", false, false)
				r.Receive(c, 2)
				_ = ch.Close()
				r.Closed(ch)
				ch2 := r.Channel(conn)
				r.Passive(ch2, q)
				clsDrain(r, ch2, q, 3)
			},
		},
		{
			Name: "classic-purge-counts-ready-only",
			Cite: "semantics §7.3; queue.purge removes and counts ready messages only: unacked ones survive and can be requeued",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("purge")
				r.Declare(ch, q, true, false, false, nil)
				for _, b := range []string{"p0", "p1", "p2", "p3", "p4"} {
					r.Publish(ch, q, b, pub{})
				}
				r.Get(ch, q, false)
				r.Get(ch, q, false)
				r.Purge(ch, q)
				r.Passive(ch, q)
				r.Nack(ch, 0, true, true) // both back
				r.Passive(ch, q)
				clsDrain(r, ch, q, 2)
			},
		},
		{
			Name: "classic-delete-counts-ready-only",
			Cite: "queue.delete-ok counts ready messages only; the queue's unacked delivery can still be acked; a deleted queue is a 404 to passive declare",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("del")
				r.Declare(ch, q, true, false, false, nil)
				for _, b := range []string{"d0", "d1", "d2", "d3"} {
					r.Publish(ch, q, b, pub{})
				}
				d, ok := r.Get(ch, q, false)
				r.Delete(ch, q, false, false)
				if ok {
					r.Ack(ch, d.DeliveryTag, false)
				}
				r.Passive(ch, q)
				r.Closed(ch)
			},
		},
		{
			Name: "classic-delete-missing-queue",
			Cite: "queue.delete of a queue that does not exist succeeds with 0 messages and leaves the channel open",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("gone")
				r.Delete(ch, q, false, false)
				r.Declare(ch, q, true, false, false, nil)
				r.Publish(ch, q, "m", pub{})
				r.Delete(ch, q, false, false)
				r.Delete(ch, q, false, false)
				r.Delete(ch, q, true, true)
				r.Passive(ch, q)
				r.Closed(ch)
			},
		},
		{
			Name: "classic-purge-missing-queue",
			Cite: "semantics §6.2 (404 NOT_FOUND - no queue 'q' in vhost '/'): queue.purge of a missing queue closes the channel",
			Run: func(r *Run) {
				conn, ch := setup(r)
				q := r.Q("gone")
				r.Purge(ch, q)
				r.Closed(ch)
				ch2 := r.Channel(conn)
				r.Declare(ch2, q, true, false, false, nil)
				r.Purge(ch2, q)
			},
		},
		{
			Name: "classic-mandatory-no-route",
			Cite: "semantics §8 (default exchange, missing queue: mandatory → basic.return 312 NO_ROUTE before the confirm ack; not mandatory → dropped, acked); observed",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("nowhere")
				r.PublishMandatory(ch, q, "m0", pub{MessageId: "id", Priority: 4})
				r.Publish(ch, q, "m1", pub{})
				r.Declare(ch, q, true, false, false, nil)
				r.PublishMandatory(ch, q, "m2", pub{})
				r.Passive(ch, q)
			},
		},

		// ----------------------------------------------------------------
		// Exclusive and auto-delete

		{
			Name: "classic-exclusive-other-connection",
			Cite: "semantics §6.1a (405 RESOURCE_LOCKED for another connection's exclusive queue: declare, passive, get, consume, purge, delete; publishing is allowed)",
			Run: func(r *Run) {
				owner, och := setup(r)
				q := r.Q("excl")
				r.Declare(och, q, false, false, true, nil)
				other := r.Dial()
				ops := []func(Channel){
					func(ch Channel) { r.Declare(ch, q, false, false, true, nil) },
					func(ch Channel) { r.Declare(ch, q, false, false, false, nil) },
					func(ch Channel) { r.Passive(ch, q) },
					func(ch Channel) { r.Get(ch, q, true) },
					func(ch Channel) { r.Consume(ch, q, "intruder", true, false) },
					func(ch Channel) { r.Purge(ch, q) },
					func(ch Channel) { r.Delete(ch, q, false, false) },
				}
				for _, op := range ops {
					ch := r.Channel(other)
					op(ch)
					r.Closed(ch)
				}
				pch := r.Channel(other)
				r.Publish(pch, q, "from-other", pub{})
				och2 := r.Channel(owner)
				r.Get(och2, q, true)
			},
		},
		{
			Name: "classic-exclusive-deleted-with-owner",
			Cite: "an exclusive queue is deleted with its messages (not dead-lettered) when its connection closes",
			Run: func(r *Run) {
				owner, och := setup(r)
				q, dlq := r.Q("excl"), r.Q("dlq")
				r.Declare(och, dlq, true, false, false, nil)
				r.Declare(och, q, false, false, true, clsDLTo(dlq, nil))
				r.Publish(och, q, "m", pub{})
				och2 := r.Channel(owner)
				_ = och.Close() // closing a channel is not closing the connection
				r.Closed(och)
				r.Passive(och2, q)
				_ = owner.Close()
				r.Wait(200 * clsMs)
				other, ch := setup(r)
				_ = other
				r.Passive(ch, dlq)
				r.Passive(ch, q)
			},
		},
		{
			Name: "classic-auto-delete-last-consumer",
			Cite: "auto-delete: deleted when its last consumer is cancelled (should_auto_delete), not before; a never-consumed auto-delete queue stays",
			Run: func(r *Run) {
				conn, ch := setup(r)
				q, never := r.Q("ad"), r.Q("never")
				r.Declare(ch, q, true, true, false, nil)
				r.Declare(ch, never, true, true, false, nil)
				r.Publish(ch, q, "m", pub{})
				c := r.Consume(ch, q, "one", true, false)
				r.Receive(c, 1)
				r.Consume(ch, q, "two", true, false)
				r.Cancel(ch, "one")
				r.Passive(ch, q)
				r.Cancel(ch, "two")
				r.Passive(ch, q)
				r.Closed(ch)
				ch2 := r.Channel(conn)
				r.Get(ch2, never, true)
				r.Passive(ch2, never)
			},
		},
		{
			Name: "classic-auto-delete-channel-close",
			Cite: "auto-delete: handle_ch_down deletes the queue when the closing channel held its last consumer; its messages, unacked ones included, are gone",
			Run: func(r *Run) {
				conn, ch := setup(r)
				q := r.Q("ad")
				r.Declare(ch, q, true, true, false, nil)
				for _, b := range []string{"a0", "a1", "a2"} {
					r.Publish(ch, q, b, pub{})
				}
				r.Qos(ch, 1)
				c := r.Consume(ch, q, "one", false, false)
				r.Receive(c, 1)
				_ = ch.Close()
				r.Closed(ch)
				ch2 := r.Channel(conn)
				r.Passive(ch2, q)
			},
		},
	}
}
