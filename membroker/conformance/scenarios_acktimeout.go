package conformance

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Consumer-timeout scenarios (docs/rabbitmq-semantics.md §14): what the
// broker does to a delivery left unacknowledged past x-consumer-timeout.
// The live brokers keep RabbitMQ's defaults (consumer_timeout 30 min,
// channel_tick_interval 60 s), so the timeouts here are the queue's and the
// consumer's arguments, and a RabbitMQ 4.0 channel is checked on its
// 60-second tick: a scenario that needs it waits a whole tick past the
// deadline.
func init() {
	// tick is RabbitMQ 4.0's channel_tick_interval, and the model's.
	const tick = 60 * time.Second
	// Unacked messages of a closed channel return asynchronously to a
	// quorum queue.
	const settle = 200 * time.Millisecond
	var out []Scenario
	for _, typ := range []string{"classic", "quorum"} {
		out = append(out,
			Scenario{
				Name: "consumer-timeout-queue-arg-" + typ,
				Cite: "§14: a delivery left unacknowledged past the queue's x-consumer-timeout. 4.0: the channel is " +
					"closed (406) at its next tick, the message requeued; 4.3: a classic queue refuses the " +
					"argument, a quorum queue cancels the consumer at the deadline, returns the message and " +
					"accepts a late ack, which removes it (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("acktimeout")
					r.Declare(ch, q, true, false, false, tbl{"x-queue-type": typ, "x-consumer-timeout": int64(1000)})
					r.Publish(ch, q, "m0", pub{})
					r.Qos(ch, 1)
					var got []amqp.Delivery
					if c := r.ConsumeArgs(ch, q, "c1", nil); c != nil {
						got = r.Receive(c, 1)
					}
					r.Wait(tick + 2*time.Second)
					r.CancelsSoFar(ch)
					r.Closed(ch)
					other := r.Channel(conn)
					r.Passive(other, q)
					if len(got) > 0 {
						r.Ack(ch, got[0].DeliveryTag, false)
					}
					r.Passive(other, q)
					if d, ok := r.Get(other, q, false); ok {
						r.Ack(other, d.DeliveryTag, false)
					}
					r.Checkpoint()
				},
			},
			Scenario{
				Name: "consumer-timeout-consumer-arg-" + typ,
				Cite: "§14: basic.consume's x-consumer-timeout. 4.0 ignores it; 4.3 honours it on a quorum " +
					"queue, over the queue's argument, and a classic queue refuses it (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("consumertimeout")
					args := tbl{"x-queue-type": typ}
					if typ == "quorum" {
						args["x-consumer-timeout"] = int64(600000)
					}
					r.Declare(ch, q, true, false, false, args)
					r.Publish(ch, q, "m0", pub{})
					r.Publish(ch, q, "m1", pub{})
					r.Qos(ch, 2)
					if c := r.ConsumeArgs(ch, q, "c1", tbl{"x-consumer-timeout": int64(1000)}); c != nil {
						r.Receive(c, 2)
					}
					r.Wait(3 * time.Second)
					r.CancelsSoFar(ch)
					other := r.Channel(conn)
					r.Passive(other, q)
					_ = ch.Close()
					r.Closed(ch)
					r.Wait(settle)
					r.Passive(other, q)
					if d, ok := r.Get(other, q, false); ok {
						r.Ack(other, d.DeliveryTag, false)
					}
					r.Checkpoint()
				},
			},
			Scenario{
				Name: "consumer-timeout-redeclare-" + typ,
				Cite: "§14: adding x-consumer-timeout to an existing queue. 4.0 checks it on no queue type; 4.3 " +
					"checks it on a quorum queue (inequivalent arg) and lets an existing classic queue be " +
					"redeclared with it, though it refuses to create one with it (" + typ + ")",
				Run: func(r *Run) {
					conn, ch := setup(r)
					q := r.Q("redeclare")
					r.Declare(ch, q, true, false, false, tbl{"x-queue-type": typ})
					r.Declare(ch, q, true, false, false, tbl{"x-queue-type": typ, "x-consumer-timeout": int64(1000)})
					ch = r.Channel(conn)
					r.Declare(ch, q, true, false, false, tbl{"x-queue-type": typ, "x-consumer-timeout": int64(2000)})
					ch = r.Channel(conn)
					r.Declare(ch, q, true, false, false, tbl{"x-queue-type": typ})
				},
			},
		)
	}
	ackTimeoutScenarios = out
}
