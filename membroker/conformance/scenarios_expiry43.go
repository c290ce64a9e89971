package conformance

import (
	"fmt"
	"time"
)

// Expiry-order scenarios: messages of different priorities that expire
// together in a quorum queue, and the order they reach the dead-letter
// queue in (docs/rabbitmq-semantics.md §1.6). 4.0 has two priority levels
// and expires only the message it would deliver next; 4.3 has 32.
func init() {
	// publishAll publishes one message per priority, in order, with the
	// given per-message expiration ("" for none).
	// They are 250 ms apart, so each expires at its own instant: when the
	// broker's expiry timer fires late enough that two have expired, 4.3
	// dead-letters them level by level, from the highest (§12.7). 20 ms
	// was not enough under CI's load (a run of 306313b's CI dead-lettered
	// p5-1 before p0-0 on 4.3.6).
	const spacing = 250 * time.Millisecond
	publishAll := func(r *Run, ch Channel, q string, prios []uint8, expiration string) {
		for i, p := range prios {
			if i > 0 {
				r.Wait(spacing)
			}
			r.Publish(ch, q, fmt.Sprintf("p%d-%d", p, i), pub{Priority: p, Expiration: expiration})
		}
	}
	// drain gets every dead letter, in order.
	drain := func(r *Run, ch Channel, dead string, n int) {
		for range n {
			if _, ok := r.Get(ch, dead, true); !ok {
				return
			}
		}
	}
	mixed := []uint8{0, 5, 0, 9, 5, 31, 1, 9}
	cases := []struct {
		name, cite string
		ttl        int64  // the queue's x-message-ttl; 0 for none
		expiration string // each message's
		prios      []uint8
	}{
		// A TTL longer than the publishing (7 × spacing), so that every
		// message is in the queue before the first expires.
		{"queue-ttl", "the queue's x-message-ttl", 2500, "", mixed},
		{"message-ttl", "a per-message expiration", 0, "2500", mixed},
		{"high-first", "priorities published highest first", 2500, "", []uint8{31, 9, 5, 1, 0, 9, 0}},
	}
	for _, c := range cases {
		expiryOrderScenarios = append(expiryOrderScenarios, Scenario{
			Name: "quorum-expiry-order-priorities-" + c.name,
			Cite: "§1.6: messages of several priorities that expire together in a quorum queue, by " + c.cite +
				", dead-lettered in the order the release expires them",
			Run: func(r *Run) {
				_, ch := setup(r)
				q, dead := r.Q("expiring"), r.Q("dead")
				r.Declare(ch, dead, true, false, false, nil)
				args := tbl{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
				if c.ttl > 0 {
					args["x-message-ttl"] = c.ttl
				}
				r.Declare(ch, q, true, false, false, args)
				publishAll(r, ch, q, c.prios, c.expiration)
				r.Wait(3 * time.Second) // the last expires 2.5 s after it was published
				r.Passive(ch, q)
				drain(r, ch, dead, len(c.prios))
				r.Checkpoint()
			},
		})
	}
}
