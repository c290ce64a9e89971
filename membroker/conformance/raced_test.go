package conformance_test

import (
	"strings"
	"testing"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/membroker/conformance"
)

// TestModelFlagsRacingExpiries checks when the model reports that a live
// broker may land dead letters in another order than it does: only when
// expired messages of two different queues reach one queue at the same
// virtual instant. The first case is the sequence, cut down, on which the
// live 4.0.5 broker gave both orders from one run to the next.
func TestModelFlagsRacingExpiries(t *testing.T) {
	dlq := conformance.QueueSpec{Quorum: true, MessageTTL: 250, DeadLetter: true, DeadLetterKey: "dead"}
	classic := conformance.QueueSpec{MessageTTL: 250, DeadLetter: true, DeadLetterKey: "dead"}
	publish := func(q int) conformance.Op { return conformance.Op{Kind: conformance.OpPublish, Queue: q} }
	wait := conformance.Op{Kind: conformance.OpWait}
	ttlDead := conformance.QueueSpec{Quorum: true, MessageTTL: 250, DeadLetter: true, DeadLetterKey: "dead"}
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
