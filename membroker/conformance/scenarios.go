package conformance

import (
	"slices"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Scenario is one hand-written behaviour check.
type Scenario struct {
	// Name identifies the scenario in test names and golden files.
	Name string
	// Cite says what it checks and where the behaviour is documented (a
	// section of docs/rabbitmq-semantics.md, a RabbitMQ
	// source file, or an observation on a live 4.0.5).
	Cite string
	// Run performs it.
	Run func(r *Run)
}

// All returns every hand-written scenario, sorted by name.
func All() []Scenario {
	var all []Scenario
	for _, group := range [][]Scenario{basicScenarios, classicScenarios, quorumScenarios, errorScenarios, consumerScenarios, ackTimeoutScenarios, expiryOrderScenarios, sacScenarios} {
		all = append(all, group...)
	}
	slices.SortFunc(all, func(a, b Scenario) int { return strings.Compare(a.Name, b.Name) })
	return all
}

// setup dials one connection with one channel.
func setup(r *Run) (Conn, Channel) {
	c := r.Dial()
	return c, r.Channel(c)
}

// Shorthands for argument tables and publishings.
type tbl = amqp.Table
type pub = amqp.Publishing

var basicScenarios = []Scenario{
	{
		Name: "fifo",
		Cite: "queues.md: FIFO ordering; §7.3",
		Run: func(r *Run) {
			_, ch := setup(r)
			q := r.Q("fifo")
			r.Declare(ch, q, true, false, false, nil)
			for _, b := range []string{"m0", "m1", "m2", "m3"} {
				r.Publish(ch, q, b, pub{})
			}
			r.Passive(ch, q)
			for range 5 {
				if d, ok := r.Get(ch, q, false); ok {
					r.Ack(ch, d.DeliveryTag, false)
				}
			}
		},
	},
	{
		Name: "classic-priority-above-max",
		Cite: "§4.1; observed on 4.0.5: p20 p5 low0 low1 low2, priority property kept",
		Run: func(r *Run) {
			_, ch := setup(r)
			q := r.Q("prio")
			r.Declare(ch, q, true, false, false, tbl{"x-max-priority": 10})
			for _, b := range []string{"low0", "low1", "low2"} {
				r.Publish(ch, q, b, pub{})
			}
			r.Publish(ch, q, "p20", pub{Priority: 20})
			r.Publish(ch, q, "p5", pub{Priority: 5})
			for range 6 {
				r.Get(ch, q, true)
			}
		},
	},
	{
		Name: "quorum-priority-two-to-one",
		Cite: "§4.2 rabbit_fifo_q; observed on 4.0.5: high0 high1 low0 high2 high3 low1 ...",
		Run: func(r *Run) {
			_, ch := setup(r)
			q := r.Q("qprio")
			r.Declare(ch, q, true, false, false, tbl{"x-queue-type": "quorum"})
			for i := range 6 {
				r.Publish(ch, q, "low"+string(rune('0'+i)), pub{})
			}
			for i := range 6 {
				r.Publish(ch, q, "high"+string(rune('0'+i)), pub{Priority: 10})
			}
			for range 13 {
				r.Get(ch, q, true)
			}
		},
	},
}

// Groups filled in by the other scenario files.
var (
	classicScenarios     []Scenario
	quorumScenarios      []Scenario
	errorScenarios       []Scenario
	consumerScenarios    []Scenario
	ackTimeoutScenarios  []Scenario
	expiryOrderScenarios []Scenario
	sacScenarios         []Scenario
)
