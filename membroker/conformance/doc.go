// Package conformance is membroker's differential conformance suite: the
// evidence that the model behaves like RabbitMQ.
//
// A Scenario is written once against Channel, the amqp091 channel methods
// that *amqp091.Channel and *membroker.Channel share, and run on two
// Targets: a live broker (Live, real time) and membroker (Model, the
// RabbitMQ40 profile on a mock clock advanced by the same waits). Each run
// records a Trace, the ordered observations a client can make: deliveries
// with their properties and headers, message counts, errors with their
// codes and texts, confirms, returns and channel closes. Queue names are
// made unique per run and stripped from the trace; x-death times and
// server-generated names are normalised. The two traces must be equal.
//
// Hand-written scenarios (Scenarios) cover one behaviour each; Generate
// builds random operation sequences for pgregory.net/rapid. The tests in
// this package run both against the broker at AMQP_URL and skip the live
// half, with a notice, when it is unset.
//
// A live run that has set no deadline waits, after each Wait, until its
// queues' counts are the model's (Expectations): a live broker settles
// returns, Raft commands and dead letters after it has answered, the model
// before.
//
// Two kinds of run are inconclusive rather than a divergence, and are
// counted apart in the report. A live run that fell more than MaxLate
// behind its schedule may have seen a deadline pass that the model had not.
// And a live broker runs each queue as a process of its own, so when two
// queues dead-letter into one queue at the same virtual instant, by expiry
// or by settlements of one kind of queue, the live broker lands them in
// either order, and a quorum queue's after a classic queue's
// (docs/rabbitmq-semantics.md §3.7, Model.Raced); a generated sequence whose
// traces differ after such a race says nothing about the model.
package conformance
