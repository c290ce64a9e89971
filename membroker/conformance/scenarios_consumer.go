package conformance

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Consumer scenarios: prefetch, round robin, consumers freed by acks,
// auto-ack, basic.cancel, and consumers of a deleted queue; each on a
// classic and a quorum queue where the two could differ.
func init() {
	// declare declares a durable queue of the given type ("classic" or
	// "quorum").
	declare := func(r *Run, ch Channel, name, typ string) {
		r.Declare(ch, name, true, false, false, tbl{"x-queue-type": typ})
	}
	// publishN publishes prefix0 .. prefix(n-1).
	publishN := func(r *Run, ch Channel, q, prefix string, from, to int) {
		for i := from; i < to; i++ {
			r.Publish(ch, q, fmt.Sprintf("%s%d", prefix, i), pub{})
		}
	}
	// ackAll acks each delivery.
	ackAll := func(r *Run, ch Channel, ds []amqp.Delivery) {
		for _, d := range ds {
			r.Ack(ch, d.DeliveryTag, false)
		}
	}
	// Unacked messages of a closed channel return asynchronously to a
	// quorum queue (when it sees the channel go down).
	const settle = 200 * time.Millisecond

	var out []Scenario
	for _, typ := range []string{"classic", "quorum"} {
		lingers := ""
		if typ == "quorum" {
			lingers = "; rabbit_fifo keeps the cancelled consumer (status cancelled) until its deliveries are " +
				"settled, and query_stat counts it in queue.declare's consumer count"
		}
		out = append(out,
			Scenario{
				Name: "consumer-prefetch-" + typ,
				Cite: "§7.1 per-consumer prefetch; §11 observed: prefetch 2 over 3 ready, 2 delivered, the third " +
					"held back until an ack frees a slot (" + typ + ")",
				Run: func(r *Run) {
					_, ch := setup(r)
					q := r.Q("prefetch")
					declare(r, ch, q, typ)
					publishN(r, ch, q, "m", 0, 3)
					r.Qos(ch, 2)
					c := r.Consume(ch, q, "c1", false, false)
					got := r.Receive(c, 2)
					r.Passive(ch, q)
					if len(got) > 0 {
						r.Ack(ch, got[0].DeliveryTag, false)
					}
					ackAll(r, ch, r.Receive(c, 1))
					if len(got) > 1 {
						r.Ack(ch, got[1].DeliveryTag, false)
					}
					r.Passive(ch, q)
				},
			},
			Scenario{
				Name: "consumer-round-robin-" + typ,
				Cite: "§7.2: consumers attached before publishing are served round robin " +
					"(rabbit_queue_consumers:deliver / rabbit_fifo service queue): A m0 m2, B m1 m3 (" + typ + ")",
				Run: func(r *Run) {
					_, ch := setup(r)
					q := r.Q("rr")
					declare(r, ch, q, typ)
					r.Qos(ch, 10)
					a := r.Consume(ch, q, "A", false, false)
					b := r.Consume(ch, q, "B", false, false)
					publishN(r, ch, q, "m", 0, 4)
					r.Receive(a, 2)
					r.Receive(b, 2)
				},
			},
			Scenario{
				Name: "consumer-freed-rejoins-end-" + typ,
				Cite: "§7.2: a consumer blocked at its prefetch and freed by an ack rejoins the round robin at the " +
					"end: A (prefetch 1), B, C (10); m0..m3 go A B C B; after A's ack m4..m6 go C B A (" + typ + ")",
				Run: func(r *Run) {
					_, ch := setup(r)
					q := r.Q("rejoin")
					declare(r, ch, q, typ)
					r.Qos(ch, 1)
					a := r.Consume(ch, q, "A", false, false)
					r.Qos(ch, 10)
					b := r.Consume(ch, q, "B", false, false)
					c := r.Consume(ch, q, "C", false, false)
					publishN(r, ch, q, "m", 0, 4)
					held := r.Receive(a, 1)
					r.Receive(b, 2)
					r.Receive(c, 1)
					ackAll(r, ch, held)
					publishN(r, ch, q, "m", 4, 7)
					r.Receive(a, 1)
					r.Receive(b, 1)
					r.Receive(c, 1)
				},
			},
			Scenario{
				Name: "consumer-auto-ack-" + typ,
				Cite: "§7.1: an auto-ack consumer is not limited by prefetch and leaves nothing unacked, so " +
					"closing its channel requeues nothing (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("autoack")
					declare(r, ch, q, typ)
					r.Qos(ch, 1)
					c := r.Consume(ch, q, "c1", true, false)
					publishN(r, ch, q, "m", 0, 3)
					r.Receive(c, 3)
					r.Passive(ch, q)
					_ = ch.Close()
					r.Closed(ch)
					ch = r.Channel(conn)
					r.Wait(settle)
					r.Passive(ch, q)
				},
			},
			Scenario{
				Name: "consumer-cancel-keeps-unacked-" + typ,
				Cite: "§5.2 and consumers.md: basic.cancel neither discards nor requeues the consumer's unacked " +
					"deliveries; they can be acked or nacked afterwards (" + typ + ")" + lingers,
				Run: func(r *Run) {
					_, ch := setup(r)
					q := r.Q("cancel")
					declare(r, ch, q, typ)
					r.Qos(ch, 3)
					c := r.Consume(ch, q, "c1", false, false)
					publishN(r, ch, q, "m", 0, 2)
					got := r.Receive(c, 2)
					r.Cancel(ch, "c1")
					r.Surplus(c)
					if len(got) == 2 {
						r.Ack(ch, got[0].DeliveryTag, false)
					}
					r.Wait(settle)
					r.Passive(ch, q)
					if len(got) == 2 {
						r.Nack(ch, got[1].DeliveryTag, false, true)
					}
					r.Wait(settle)
					r.Passive(ch, q)
					r.Get(ch, q, true)
				},
			},
			Scenario{
				Name: "consumer-queue-deleted-" + typ,
				Cite: "§7 consumer cancel notification: deleting a queue under a consumer sends basic.cancel " +
					"(NotifyCancel) and amqp091 closes the delivery channel; the deleting channel stays open (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("deleted")
					declare(r, ch, q, typ)
					r.Qos(ch, 1)
					c := r.Consume(ch, q, "c1", false, false)
					publishN(r, ch, q, "m", 0, 2)
					got := r.Receive(c, 1)
					other := r.Channel(conn)
					r.Delete(other, q, false, false)
					r.Cancels(ch, 1)
					r.Surplus(c)
					ackAll(r, ch, got)
					r.Passive(other, q)
					r.Closed(other)
					r.Passive(ch, q)
					r.Closed(ch)
				},
			},
		)
	}

	out = append(out,
		Scenario{
			Name: "consumer-freed-by-acks-classic",
			Cite: "§7.2 classic: rabbit_queue_consumers blocks a consumer only when a delivery to it is tried, so " +
				"A, B, C at prefetch 1 with m0..m2, then acks of B and A, keep the rotation: m3 to A, m4 to B " +
				"(contrast consumer-freed-by-acks-quorum; membroker deliver())",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("ackorder")
				declare(r, ch, q, "classic")
				r.Qos(ch, 1)
				a := r.Consume(ch, q, "A", false, false)
				b := r.Consume(ch, q, "B", false, false)
				c := r.Consume(ch, q, "C", false, false)
				publishN(r, ch, q, "m", 0, 3)
				da, db := r.Receive(a, 1), r.Receive(b, 1)
				r.Receive(c, 1)
				ackAll(r, ch, db)
				ackAll(r, ch, da)
				publishN(r, ch, q, "m", 3, 5)
				r.Receive(a, 1)
				r.Receive(b, 1)
				r.Receive(c, 0)
			},
		},
		Scenario{
			Name: "consumer-freed-by-acks-quorum",
			Cite: "§7.2 quorum: rabbit_fifo drops a consumer out of credit from the service queue and re-adds it " +
				"when an ack gives it credit, so after acks of B then A, m3 goes to B and m4 to A " +
				"(contrast consumer-freed-by-acks-classic; membroker deliver())",
			Run: func(r *Run) {
				_, ch := setup(r)
				q := r.Q("ackorder")
				declare(r, ch, q, "quorum")
				r.Qos(ch, 1)
				a := r.Consume(ch, q, "A", false, false)
				b := r.Consume(ch, q, "B", false, false)
				c := r.Consume(ch, q, "C", false, false)
				publishN(r, ch, q, "m", 0, 3)
				da, db := r.Receive(a, 1), r.Receive(b, 1)
				r.Receive(c, 1)
				ackAll(r, ch, db)
				ackAll(r, ch, da)
				publishN(r, ch, q, "m", 3, 5)
				r.Receive(a, 1)
				r.Receive(b, 1)
				r.Receive(c, 0)
			},
		},
		Scenario{
			Name: "consumer-channel-close-requeues-classic",
			Cite: "§7.3 classic: a closed channel's unacked deliveries return to their original positions with " +
				"redelivered set; §11 observed: prefetch 2 over 3, close, then c0* c1* c2",
			Run: func(r *Run) {
				conn, ch := setup(r)
				q := r.Q("closereq")
				declare(r, ch, q, "classic")
				publishN(r, ch, q, "c", 0, 3)
				r.Qos(ch, 2)
				r.Receive(r.Consume(ch, q, "c1", false, false), 2)
				_ = ch.Close()
				r.Closed(ch)
				ch = r.Channel(conn)
				r.Wait(settle)
				r.Passive(ch, q)
				for range 4 {
					r.Get(ch, q, true)
				}
			},
		},
	)
	consumerScenarios = out
}
