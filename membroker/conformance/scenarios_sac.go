package conformance

import (
	"fmt"
	"time"
)

// Single active consumer scenarios (docs/rabbitmq-semantics.md §15): which
// consumer receives, who takes over after a cancel or a closed channel,
// in what order the waiting ones do, what queue.declare-ok counts, and
// basic.get; each on a classic and a quorum queue.
func init() {
	declare := func(r *Run, ch Channel, name, typ string) {
		r.Declare(ch, name, true, false, false, tbl{"x-queue-type": typ, "x-single-active-consumer": true})
	}
	publishN := func(r *Run, ch Channel, q string, from, to int) {
		for i := from; i < to; i++ {
			r.Publish(ch, q, fmt.Sprintf("m%d", i), pub{})
		}
	}
	// A closed channel's deliveries return to a quorum queue when it sees
	// the channel go down.
	const settle = 200 * time.Millisecond

	var out []Scenario
	for _, typ := range []string{"classic", "quorum"} {
		out = append(out,
			Scenario{
				Name: "sac-first-consumer-active-" + typ,
				Cite: "§15: the first consumer is active, the second waits with no deliveries; a classic " +
					"queue counts the waiting one in declare-ok, a quorum queue does not (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("sac-first")
					declare(r, ch, q, typ)
					r.Qos(ch, 10)
					a := r.Consume(ch, q, "A", false, false)
					ch2 := r.Channel(conn)
					r.Qos(ch2, 10)
					b := r.Consume(ch2, q, "B", false, false)
					publishN(r, ch, q, 0, 4)
					r.Receive(a, 4)
					r.Surplus(b)
					r.Passive(ch, q)
				},
			},
			Scenario{
				Name: "sac-cancel-promotes-next-" + typ,
				Cite: "§15: basic.cancel of the active consumer makes the waiting one active at once; the " +
					"cancelled one keeps its unacked deliveries, acked afterwards (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("sac-cancel")
					declare(r, ch, q, typ)
					r.Qos(ch, 10)
					a := r.Consume(ch, q, "A", false, false)
					ch2 := r.Channel(conn)
					r.Qos(ch2, 10)
					b := r.Consume(ch2, q, "B", false, false)
					publishN(r, ch, q, 0, 2)
					got := r.Receive(a, 2)
					r.Cancel(ch, "A")
					publishN(r, ch, q, 2, 4)
					r.Receive(b, 2)
					r.Passive(ch, q)
					for _, d := range got {
						r.Ack(ch, d.DeliveryTag, false)
					}
					r.Surplus(b)
					r.Passive(ch, q)
				},
			},
			Scenario{
				Name: "sac-channel-close-hands-over-" + typ,
				Cite: "§15: the active consumer's channel closes with two unacked: they return (classic: " +
					"their places; quorum: ahead of the rest) and go, redelivered, to the consumer now active (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("sac-close")
					declare(r, ch, q, typ)
					ach := r.Channel(conn)
					r.Qos(ach, 2)
					a := r.Consume(ach, q, "A", false, false)
					r.Qos(ch, 10)
					b := r.Consume(ch, q, "B", false, false)
					publishN(r, ch, q, 0, 4)
					got := r.Receive(a, 2)
					if len(got) > 0 {
						r.Ack(ach, got[0].DeliveryTag, false)
					}
					r.Receive(a, 1)
					_ = ach.Close()
					r.Closed(ach)
					r.Wait(settle)
					r.Receive(b, 3)
					r.Surplus(b)
					r.Passive(ch, q)
				},
			},
			Scenario{
				Name: "sac-waiting-order-" + typ,
				Cite: "§15: consumers waiting take over in registration order on a classic queue, and by " +
					"credit, the highest first, on a quorum queue (rabbit_fifo sort_waiting): B prefetch 1, " +
					"then C prefetch 5; A cancelled (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("sac-order")
					declare(r, ch, q, typ)
					r.Qos(ch, 10)
					r.Consume(ch, q, "A", false, false)
					bch := r.Channel(conn)
					r.Qos(bch, 1)
					b := r.Consume(bch, q, "B", false, false)
					cch := r.Channel(conn)
					r.Qos(cch, 5)
					c := r.Consume(cch, q, "C", false, false)
					r.Cancel(ch, "A")
					publishN(r, ch, q, 0, 1)
					r.Surplus(b)
					r.Surplus(c)
				},
			},
			Scenario{
				Name: "sac-basic-get-" + typ,
				Cite: "§15: basic.get on a single-active-consumer queue works on a classic queue and is " +
					"refused 405 RESOURCE_LOCKED on a quorum queue (rabbit_channel handle_method basic.get) (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("sac-get")
					declare(r, ch, q, typ)
					publishN(r, ch, q, 0, 1)
					gch := r.Channel(conn)
					r.Get(gch, q, true)
					r.Passive(ch, q)
				},
			},
		)
	}
	sacScenarios = out
}
