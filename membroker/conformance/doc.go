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
package conformance
