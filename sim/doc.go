// Package sim is queuey's deterministic simulator: it runs the real
// rabbitmq backend and the worker's own core on membroker, under a virtual
// clock, on one goroutine, and checks queuey's guarantees as invariants on
// every run.
//
// # Scenarios
//
// A Scenario describes queues with their arrival processes, a handler
// outcome model (success, retryable and fatal failures, rate limits with a
// Retry-After, handler durations, poison jobs, malformed bodies), workers,
// a broker profile and faults (worker crashes, dropped connections, refused
// hold declarations, broker restarts, kills and outages), and perhaps a
// group of periodic schedulers (Periodic). Run simulates it and
// returns a Result: jobs by
// terminal state, attempts and deferrals, the wait rounding added to each
// hold, how long released deferrals and new jobs waited for a worker, hold
// queues over time, declarations per second, and every invariant violation
// with the trace that shows it.
//
// # Determinism
//
// Everything random is drawn from the scenario's seed, per job and per run
// of its handler, so the same job meets the same fate whatever else
// happens (which makes runs at different granularities comparable), and
// the same scenario gives the same trace byte for byte (Result.TraceHash).
//
// # Invariants
//
// The invariants, checked as the run goes:
//
//  1. never released early: a successor held for a delay d decided at t is
//     next delivered no earlier than t + d;
//  2. never stuck behind a longer wait: a hold is released into its work
//     queue at its publish time plus its rounded TTL, within a millisecond
//     plus the broker's timer slack;
//  3. deferrals never spend attempts and never consult the retry policy;
//     retries spend exactly one;
//  4. ahead of the backlog: on a classic priority queue nothing of lower
//     priority is delivered while a released deferral waits on the queue,
//     and a job comes back at the priority its last settlement set (a
//     deferral's top priority lasts one round);
//  5. conservation: every job ends exactly once or is still somewhere at
//     the end; duplicates only where a crash explains them; the broker's
//     message count matches the simulation's;
//  6. no hold queue expires with messages in it (the jobs inside are
//     counted in Result.Jobs.Lost);
//  7. hold queues per work queue stay within the number of TTLs the
//     granularities allow;
//  8. dead letters carry the right reason and headers, malformed bodies
//     reach the dead-letter queue verbatim and the consumer keeps
//     consuming, and a poison job on a quorum queue is dead-lettered for
//     delivery_limit after the default limit of 20 returns;
//  9. reconnection keeps to its backoff, with no dial storm: after a
//     restart or an outage, every dial of a process but its first comes
//     exactly the wait its loop drew after the loop asked for it, one dial
//     per wait, each wait within the backoff's bound for its attempt;
//  10. the broker never closes a worker's channel: no settlement is a
//     protocol error;
//  11. no job runs more than its attempts allow, nor twice at one attempt
//     unless it went back to its queue unsettled as often;
//  12. every periodic tick enqueued once: each tick at least once unless
//     a span with no leader comes between it and the next tick enqueued,
//     twice only after a fault on the process that enqueued it before (or
//     lost tokens), and no span without a leader outlasting the Refresh
//     while a process is connected;
//  13. a reconnected worker consumes again: its subscriptions resume on
//     the new connection as their core (consume.Follow) decides.
//
// docs/simulator.md states each in full.
//
// The simulated broker is as sloppy as a live one (Scenario.Timing, on by
// default at values measured on a live RabbitMQ 4.0.5): a publish lands up
// to a few milliseconds into the hold-queue lease its declaration renewed,
// and timers fire late. With exact timing, a hold queue whose x-expires
// left one TTL of margin never lost a job here, while a live broker lost a
// quarter of them at a 1 ms TTL (docs/hold-queue-expiry.md).
//
// Scenario.Legacy runs the topology queuey replaced (one wait queue with
// per-message expirations) as a negative control: invariant 2 catches its
// head-of-line blocking.
//
// After a broker restart or an outage, the producer and every worker dial
// again until the broker is back, each with the reconnection loop that
// rabbitmq.Connect's supervisor runs (internal/redial: rabbitmq.Backoff's
// defaults, jitter drawn from the seed), its waits on the virtual clock.
// Jobs that arrive meanwhile wait for the producer, as Enqueue does.
//
// Each simulated worker process settles its deliveries with the worker
// core that queuey.Worker.Run drives (internal/workercore): the same code
// decodes, decides, publishes the successor before the acknowledgement,
// requeues after RequeueDelay, and drops the outcome of a delivery whose
// connection went. The simulator only carries out what the core says, on
// the virtual clock, and checks it.
//
// Each scheduler process of a Periodic group is the shell that
// rabbitmq.Scheduler.Run drives (internal/schedshell), which the
// simulation steps on its clock: the product's own core and shell elect,
// enqueue and record the ticks; the simulation hands each process
// its tokens, a drawn latency after the broker delivered them, and checks
// invariant 12.
//
// Deliveries are taken off the worker's channel the way the backend's
// Consume sets it up (its own channel, the consumer's core consume.Sub,
// Qos(prefetch), manual acknowledgements, the consumer timeout of
// internal/acktimeout, basic.reject with requeue), but without its
// forwarding goroutine, so that the simulation stays on one goroutine; a
// subscription whose connection drops resumes as consume.Follow decides.
// Publishing, hold queues, dead-lettering and declarations all go through
// rabbitmq.Backend, with the virtual clock as its Options.Clock; every
// call carries the virtual now as its deadline, so that the backend never
// waits (a hold ladder still warming up fails at once with a
// *rabbitmq.WarmupError, and the simulation publishes again then).
//
// One more goroutine takes no part in the simulation: the trace hash is
// computed on a goroutine of its own, a megabyte of trace records at a
// time, in order, so that hashing uses the second core. The hash does not
// depend on it (TestRecorderHashesEverythingInOrder).
package sim
