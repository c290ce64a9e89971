// Package properties holds queuey's property-based tests, written with
// pgregory.net/rapid. It has no API: everything in it is a test.
//
//   - TestScenarios draws whole sim.Scenario values field by field (queue
//     type and broker profile, granularities, retry policy, workers and
//     prefetch, constant, Poisson, burst and replayed arrivals, outcome
//     rates, handler and Retry-After distributions, handler timeouts,
//     crashes, dropped connections, refused hold declarations, broker
//     restarts, kills and outages, and in about half of them a group of
//     periodic schedulers with crashes and drops of its own), runs each
//     with sim.Run and requires no error and no violation of any of the
//     simulator's invariants (docs/simulator.md). Scenarios
//     stay small (at most 30 virtual seconds of arrivals, a 2-minute drain,
//     20 jobs a second per arrival process), so one run takes a few
//     milliseconds, and a failure shrinks to a small scenario rather than
//     to a seed. TestRunsAreDeterministic requires two runs of a scenario
//     to give the same trace.
//   - TestBackendStateMachine drives rabbitmq.Backend on membroker
//     directly, one call at a time under sim's virtual clock, with rapid's
//     state-machine Repeat: enqueues, holds, deliveries, handler outcomes,
//     time, worker crashes, dropped connections, broker restarts and
//     squatted hold queues, checked after every step against a model of
//     where each job must be. Each worker settles what it reads with the
//     product's worker core (internal/workercore), the one queuey.Worker.Run
//     drives: the machine carries out its actions and checks them, and a
//     handler that returns after its connection went must have its outcome
//     dropped.
//   - The tests named …ChecksBite, …Catches… and …Finds… break things on
//     purpose and require the properties to fail, so that none of them
//     passes for want of teeth.
//
// # Running
//
//	go test ./properties/                                           # 100 checks per property, a few seconds
//	go test ./properties/ -run TestScenarios -rapid.checks=1000     # what CI runs
//	go test -race ./properties/
//
// Each run starts from a random seed. A failure prints the shrunk case (for
// a scenario, its seed, its JSON, which sim.Load and queuey-sim read, and
// every violation with its trace excerpt; for the state machine, the
// actions taken) and how to replay it: -rapid.seed=N, or
// -rapid.failfile=FILE. rapid writes the failing case to
// testdata/rapid/<TestName>/, and every later run replays the files there
// before anything else, so a failing case found once stays a regression
// test: commit it with the fix, and delete it only when the generator
// changes so that it no longer means the same case. -rapid.nofailfile
// stops rapid writing one; -rapid.v shows every case tried.
//
// # Soaking locally
//
// A soak is the same tests with many more checks, each invocation from a
// fresh random seed:
//
//	go test ./properties/ -count=1 -timeout 0 -run 'TestScenarios|TestBackendStateMachine$' -rapid.checks=100000
//	for i in $(seq 50); do go test ./properties/ -count=1 -timeout 0 -rapid.checks=20000 || break; done
//
// A thousand scenarios take about five seconds of one core, a thousand
// state-machine runs about ten. -rapid.steps (30 by default) sets the
// average number of actions per round of the state machine, which runs
// four rounds; RAPID_CHECKS and RAPID_STEPS set the same from the
// environment. Shrinking a failure stops after -rapid.shrinktime (30 s by
// default). Keep the fail files a soak leaves in testdata/rapid.
package properties
