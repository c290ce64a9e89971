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
	cases := []struct {
		name  string
		seq   conformance.Sequence
		raced bool
	}{
		{"two quorum queues expire into dead at one instant", conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, dlq},
			Ops:    []conformance.Op{publish(1), {Kind: conformance.OpPurge, Queue: 1}, publish(0), {Kind: conformance.OpPublish, Queue: 1, Priority: 7, Expiration: "750"}, wait},
		}, true},
		{"a classic and a quorum queue at one instant", conformance.Sequence{
			Queues: []conformance.QueueSpec{classic, dlq},
			Ops:    []conformance.Op{publish(0), publish(1), wait},
		}, true},
		{"a wait apart", conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, dlq},
			Ops:    []conformance.Op{publish(0), wait, publish(1), wait},
		}, false},
		{"one queue: its own order is fixed", conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, dlq},
			Ops:    []conformance.Op{publish(0), publish(0), wait},
		}, false},
		{"no dead-letter routing key: separate targets", conformance.Sequence{
			Queues: []conformance.QueueSpec{{Quorum: true, MessageTTL: 250, DeadLetter: true}, {Quorum: true, MessageTTL: 250, DeadLetter: true}},
			Ops:    []conformance.Op{publish(0), publish(1), wait},
		}, false},
		{"one expired, one never dead-lettered", conformance.Sequence{
			Queues: []conformance.QueueSpec{dlq, {Quorum: true, DeadLetter: true, DeadLetterKey: "dead"}},
			Ops:    []conformance.Op{publish(0), publish(1), wait},
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := conformance.NewModel(membroker.RabbitMQ40)
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
