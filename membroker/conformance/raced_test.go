package conformance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/membroker/conformance"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestModelFlagsRacingDeadLetters checks when the model reports that a live
// broker may land dead letters in another order than it does: when dead
// letters of two different queues reach one queue at the same virtual
// instant, expired, or out of two queues of a kind, or out of a quorum
// queue before a classic one (semantics §3.7). The expiry cases are cut
// down from sequences on which the live brokers gave both orders from one
// run to the next.
func TestModelFlagsRacingDeadLetters(t *testing.T) {
	dlq := conformance.QueueSpec{Quorum: true, MessageTTL: 250, DeadLetter: true, DeadLetterKey: "dead"}
	classic := conformance.QueueSpec{MessageTTL: 250, DeadLetter: true, DeadLetterKey: "dead"}
	publish := func(q int) conformance.Op { return conformance.Op{Kind: conformance.OpPublish, Queue: q} }
	wait := conformance.Op{Kind: conformance.OpWait}
	ttlDead := conformance.QueueSpec{Quorum: true, MessageTTL: 250, DeadLetter: true, DeadLetterKey: "dead"}
	get := func(q int) conformance.Op { return conformance.Op{Kind: conformance.OpGet, Queue: q} }
	nack := func(pick int, multiple bool) conformance.Op {
		return conformance.Op{Kind: conformance.OpNack, Channel: 1, Pick: pick, Multiple: multiple}
	}
	quorumDL := conformance.QueueSpec{Quorum: true, DeadLetter: true, DeadLetterKey: "dead"}
	classicDL := conformance.QueueSpec{DeadLetter: true, DeadLetterKey: "dead"}
	prio := func(p uint8) conformance.Op {
		return conformance.Op{Kind: conformance.OpPublish, Queue: 0, Priority: p}
	}
	cases := []struct {
		name    string
		version membroker.Version
		seq     conformance.Sequence
		raced   bool
	}{
		// The 4.3 case, cut down from a sequence on which 4.3.6 landed
		// five dead letters in publish order, not highest priority first.
		{"4.3: one quorum queue's levels expire at one instant", membroker.RabbitMQ43, conformance.Sequence{
			Queues: []conformance.QueueSpec{ttlDead},
			Ops:    []conformance.Op{prio(1), prio(7), wait},
		}, true},
		{"4.3: one level", membroker.RabbitMQ43, conformance.Sequence{
			Queues: []conformance.QueueSpec{ttlDead},
			Ops:    []conformance.Op{prio(1), prio(1), wait},
		}, false},
		{"4.0: its next message only", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{ttlDead},
			Ops:    []conformance.Op{prio(1), prio(7), wait},
		}, false},
		{"two quorum queues expire into dead at one instant", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, dlq},
			Ops:    []conformance.Op{publish(1), {Kind: conformance.OpPurge, Queue: 1}, publish(0), {Kind: conformance.OpPublish, Queue: 1, Priority: 7, Expiration: "750"}, wait},
		}, true},
		{"a classic and a quorum queue at one instant", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{classic, dlq},
			Ops:    []conformance.Op{publish(0), publish(1), wait},
		}, true},
		{"a wait apart", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, dlq},
			Ops:    []conformance.Op{publish(0), wait, publish(1), wait},
		}, false},
		{"one queue: its own order is fixed", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, dlq},
			Ops:    []conformance.Op{publish(0), publish(0), wait},
		}, false},
		{"no dead-letter routing key: separate targets", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{{Quorum: true, MessageTTL: 250, DeadLetter: true}, {Quorum: true, MessageTTL: 250, DeadLetter: true}},
			Ops:    []conformance.Op{publish(0), publish(1), wait},
		}, false},
		// Rejections: the model lands what one nack dead-letters out of a
		// classic queue before what it dead-letters out of a quorum
		// queue, as the live brokers do every time.
		{"one nack over a quorum and a classic queue", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{quorumDL, classicDL},
			Ops:    []conformance.Op{publish(0), publish(1), get(0), get(1), nack(1, true)},
		}, false},
		{"a quorum queue's nack, then a classic queue's, at one instant", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{quorumDL, classicDL},
			Ops:    []conformance.Op{publish(0), publish(1), get(0), get(1), nack(0, false), nack(0, false)},
		}, true},
		{"a classic queue's nack, then a quorum queue's", membroker.RabbitMQ43, conformance.Sequence{
			Queues: []conformance.QueueSpec{classicDL, quorumDL},
			Ops:    []conformance.Op{publish(0), publish(1), get(0), get(1), nack(0, false), nack(0, false)},
		}, false},
		{"one nack over two classic queues", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{classicDL, classicDL},
			Ops:    []conformance.Op{publish(0), publish(1), get(0), get(1), nack(1, true)},
		}, true},
		{"two quorum queues' nacks", membroker.RabbitMQ43, conformance.Sequence{
			Queues: []conformance.QueueSpec{quorumDL, quorumDL},
			Ops:    []conformance.Op{publish(0), publish(1), get(0), get(1), nack(0, false), nack(0, false)},
		}, true},
		{"nacks a wait apart", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{quorumDL, classicDL},
			Ops:    []conformance.Op{publish(0), publish(1), get(0), get(1), nack(0, false), wait, nack(0, false)},
		}, false},
		{"one queue's nacks", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{quorumDL, classicDL},
			Ops:    []conformance.Op{publish(0), publish(0), get(0), get(0), nack(0, false), nack(0, false)},
		}, false},
		{"one expired, one never dead-lettered", membroker.RabbitMQ40, conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, {Quorum: true, DeadLetter: true, DeadLetterKey: "dead"}},
			Ops:    []conformance.Op{publish(0), publish(1), wait},
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := conformance.NewModel(c.version)
			trace, err := conformance.NewRun(m, "cf-model-").Execute(c.seq.Play)
			if err != nil {
				t.Fatal(err)
			}
			if m.Raced() != c.raced {
				t.Errorf("Raced() = %v, want %v; trace:\n  %s", m.Raced(), c.raced, strings.Join(trace, "\n  "))
			}
		})
	}
}

// A run's shortest deadline comes from its positive TTLs, expirations and
// x-expires, of whatever integer type; a TTL of 0 sets none.
func TestRunShortestDeadline(t *testing.T) {
	for _, c := range []struct {
		name string
		args amqp.Table
		exp  string
		want time.Duration
	}{
		{"ttl 0 is no deadline", amqp.Table{"x-message-ttl": int32(0)}, "", 0},
		{"int32 ttl", amqp.Table{"x-message-ttl": int32(500)}, "", 500 * time.Millisecond},
		{"int64 x-expires under a ttl", amqp.Table{"x-message-ttl": int64(60000), "x-expires": int64(2000)}, "", 2 * time.Second},
		{"an expiration shorter than the ttl", amqp.Table{"x-message-ttl": 60000}, "250", 250 * time.Millisecond},
		{"an expiration of 0", nil, "0", 0},
	} {
		run := conformance.NewRun(conformance.NewModel(membroker.RabbitMQ40), "cf-model-")
		_, err := run.Execute(func(r *conformance.Run) {
			ch := r.Channel(r.Dial())
			q := r.Q("q")
			r.Declare(ch, q, true, false, false, c.args)
			if c.exp != "" {
				r.Publish(ch, q, "m", amqp.Publishing{Expiration: c.exp})
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if run.Shortest() != c.want || run.Timed() != (c.want > 0) {
			t.Errorf("%s: shortest %s, timed %t; want %s", c.name, run.Shortest(), run.Timed(), c.want)
		}
	}
}
