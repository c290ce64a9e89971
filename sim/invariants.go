package sim

// invariant numbers one of the properties every run is checked against.
// To add one: a constant here, its row in invariants, a check that calls
// runner.violate with it, and its section in docs/simulator.md. The
// numbers are in reports and traces: never renumber.
type invariant int

const (
	invNeverEarly       invariant = 1 + iota // 1
	invNotStuck                              // 2
	invDeferralsFree                         // 3
	invAheadOfBacklog                        // 4
	invConservation                          // 5
	invHoldExpiresEmpty                      // 6
	invHoldsBounded                          // 7
	invDeadLetterReason                      // 8
	invReconnectBackoff                      // 9
	invChannelKept                           // 10
	invAttemptsBounded                       // 11
	invTicks                                 // 12
	invConsuming                             // 13
)

// invariants is the registry: each invariant's short name (Violation.Name)
// and where it is checked.
var invariants = [...]struct{ name, checkedIn string }{
	invNeverEarly:       {"never released early", "check.go"},
	invNotStuck:         {"never stuck behind a longer wait", "check.go (each release, and each rung's on the ladder)"},
	invDeferralsFree:    {"deferrals never spend attempts", "check.go (each delivery and settlement)"},
	invAheadOfBacklog:   {"ahead of the backlog", "check.go"},
	invConservation:     {"conservation", "ledger.go, result.go (at the end), check.go (broker drops), driver.go (stale successors)"},
	invHoldExpiresEmpty: {"no hold queue expires with messages", "check.go (each hold queue deleted)"},
	invHoldsBounded:     {"hold queues bounded", "check.go (each hold queue declared)"},
	invDeadLetterReason: {"dead letters carry the right reason", "check.go (each dead letter), driver.go (malformed bodies)"},
	invReconnectBackoff: {"reconnection keeps to its backoff", "faults.go (each dial)"},
	invChannelKept:      {"the broker never closes a worker's channel", "driver.go (each settlement)"},
	invAttemptsBounded:  {"no job runs more than its attempts allow", "check.go (each handler run)"},
	invTicks:            {"every periodic tick enqueued once", "periodic.go (each tick enqueued, each span without a leader, and at the end)"},
	invConsuming:        {"a reconnected worker consumes again", "faults.go (each reconnection)"},
}
