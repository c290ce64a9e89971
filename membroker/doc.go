// Package membroker is a deterministic in-memory model of a RabbitMQ 4.x
// node, for testing code written against github.com/rabbitmq/amqp091-go
// without a broker and in virtual time.
//
// A *Channel has the names and signatures of the *amqp.Channel methods a job
// library uses (QueueDeclare, QueueDeclarePassive, QueueDelete, QueuePurge,
// Qos, Confirm, NotifyPublish, NotifyReturn, NotifyClose, NotifyCancel,
// GetNextPublishSeqNo, Publish, PublishWithContext, Consume, Get, Cancel,
// Ack, Nack, Reject, Close, IsClosed) and speaks amqp091's own types, so code
// that takes an interface of those methods runs unchanged on either.
// Deliveries carry the channel as their amqp.Acknowledger.
//
//	b := membroker.New(membroker.Config{Clock: clk, Version: membroker.RabbitMQ40})
//	conn, _ := b.Dial()
//	ch, _ := conn.Channel()
//
// # What it models
//
// The default exchange, routing by queue name (and by CC and BCC headers).
// Classic queues: FIFO; strict priorities with x-max-priority (above the
// maximum counts as the maximum); requeue to the original position with
// redelivered set; x-message-ttl and per-message expiration, the lower
// winning, expired only at the head (of the highest non-empty priority
// level) and with RabbitMQ's one TTL timer per queue, so a shorter-lived
// higher-priority message published in front of others is reaped only when
// that timer fires or the queue is next fetched from, requeued to or
// cancelled on, and a fetch before then hands it out expired;
// x-message-ttl 0 delivering only to a waiting consumer;
// dead-lettering with x-death, x-first-death-* and x-last-death-*, the
// expiration removed, cycles dropped unless a rejection is in them, a missing
// target dropping silently, and the messages of one reject or nack
// dead-lettered queue by queue, a priority queue's from the highest
// priority down; x-expires leases renewed by declare, passive
// declare, basic.get and the last consumer leaving, never by publishing;
// exclusive and auto-delete queues.
//
// Quorum queues: durable only, classic-only arguments refused;
// x-delivery-count and the delivery limit (default 20, negative disables);
// returned messages served first, in the order returned; two priority tiers
// served 2:1 (RabbitMQ40) or 32 strict levels (RabbitMQ43); head-only TTL
// (RabbitMQ43: the head of each level); x-expires not renewed by declaring.
//
// Declarations are validated as RabbitMQ 4.0.5 does (RabbitMQ43: 4.3.6),
// with its error codes and texts (406 PRECONDITION_FAILED, 404 NOT_FOUND,
// 403 ACCESS_REFUSED, 405 RESOURCE_LOCKED), including re-declaration equivalence with integer
// widths compared as one class. A channel exception closes that channel
// only; RabbitMQ's connection exceptions (530 NOT_ALLOWED, 540
// NOT_IMPLEMENTED, 541 INTERNAL_ERROR) close the connection. membroker's own
// refusals of what it does not model are 540 NOT_IMPLEMENTED channel
// exceptions, so the connection survives them.
// Consumers get per-consumer prefetch, round robin, a freed consumer
// rejoining at the end. Publisher confirms, mandatory returns (312 NO_ROUTE
// before the ack), unknown delivery tags (406), and basic.cancel when a queue
// is deleted under a consumer. A single active consumer
// (x-single-active-consumer: sac.go) and the consumer timeout
// (acktimeout.go) as each release has them.
//
// The two profiles differ where RabbitMQ releases do: RabbitMQ40 (4.0 to
// 4.2) counts every requeue toward the quorum delivery limit and has two
// priority tiers; RabbitMQ43 counts reject and channel loss but not nack,
// adds x-acquired-count, counts failed deliveries on classic queues too (a
// dead letter that was rejected or requeued arrives redelivered), expires
// the head of every quorum priority level, has strict priorities and
// validates declarations as 4.3 does (docs/rabbitmq-semantics.md §12,
// §E13). Each profile is verified against its own live broker by the
// conformance suite, hand-written scenarios and generated sequences alike:
// RabbitMQ40 against RabbitMQ 4.0.5, RabbitMQ43 against RabbitMQ 4.3.6.
//
// # What it does not model
//
// Named exchanges and bindings, streams, policies, x-max-length (and so
// what x-overflow does at a limit), consumer priorities (and so a
// higher-priority single active consumer taking over), transactions,
// basic.recover, publisher nacks (the model never fails to enqueue),
// memory and disk alarms, flow
// control, clustering (so at-least-once dead-lettering behaves as
// at-most-once: its difference shows only when a target is unavailable,
// docs/rabbitmq-semantics.md §3.6) and authentication (the user is
// "guest"). Declaring a queue with an argument whose effect is not modelled
// (x-max-length, x-max-in-memory-length, ...), or consuming with a valid
// x-priority, is refused with 540 NOT_IMPLEMENTED rather than accepted and
// ignored (invalid values get RabbitMQ's own errors first), so no test
// silently relies on a behaviour the model lacks.
//
// # Timing
//
// By default the model is exact where a live broker is sloppy: RabbitMQ
// reaps an expired head a millisecond or more late and checks a quorum
// queue's x-expires on a 5 s tick, and a publish lands in its queue a round
// trip after the declaration before it; membroker does each at its
// deadline or at the instant of the call. That exactness hides losses: a
// queue whose x-expires lease ends before the TTL of a message inside it
// fires is deleted with the message. Config.Timing (a Timing) adds the
// slack, drawn from its own seed: lease renewals count from up to Latency
// before the call, timers fire up to TimerSlack late, and a quorum queue's
// deletion comes up to QuorumTick late. The conformance suite runs exact,
// and also runs every hand-written scenario with the simulator's timing
// against the recorded live traces (TestHandWrittenWithSimulatorTiming).
//
// # Time and determinism
//
// The broker is a state machine behind one mutex, with no goroutines of its
// own. Every method first brings it up to Config.Clock's current time,
// processing due expiries in deadline order (ties in insertion order), and
// arms the clock's AfterFunc for the next deadline, so a consumer receives an
// expired message's dead letter without anybody calling in. With a
// *clock.Mock, Add(d) followed by any call observes the state at the new
// time. The same sequence of calls gives the same results, byte for byte:
// generated names and tags come from per-broker counters and nothing
// depends on map order.
//
// # Delivery to Go channels
//
// membroker never blocks its caller. Deliveries, confirms, returns and
// notifications go to the Go channels without waiting; what does not fit
// waits, in order per connection as on amqp091's reader, until the next call
// or a clock tick of a millisecond. A consumer's delivery channel is
// buffered to its prefetch limit (up to 2000), so deliveries always fit;
// consumers without a limit get a buffer of 200 (RabbitMQ's unsent-message
// limit) and further messages stay ready on the queue until the consumer
// has drained its channel and anything calls into the broker (an ack does),
// or a clock tick passes: an auto-ack consumer that never calls in resumes
// on the tick, which a *clock.Mock only gives on Add. Size the buffers of
// NotifyPublish and NotifyReturn listeners for what you have in flight, as
// amqp091 asks.
//
// Each delivery has a header table and a body of its own, as amqp091
// decodes them. A consumer that is done with a delivery may give both back
// with Broker.Reuse for later deliveries to be built in; the simulator
// does, and saves a few allocations per message.
//
// # Watching and breaking it
//
// Broker.Queues, Broker.Queue, Broker.Connections and Channel.Unacked
// describe the state at one moment; Config.Observer reports, as they
// happen and in order, every queue created or deleted and every message
// enqueued (with where it was dead-lettered from), delivered or
// dead-lettered, or lost in a crash. Broker.CloseConnection,
// Broker.CloseChannel, Broker.Restart and Broker.Crash inject the failures
// a real broker causes; what a Crash loses depends on Timing.ClassicSync
// and Timing.QuorumRegister (semantics §13).
package membroker
