package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/queuey/queuey/sim"
)

// legacyInvariant is the invariant the legacy topology is expected to
// break: never stuck behind a longer wait.
const legacyInvariant = 2

// report is what the command prints, in every format. It holds nothing
// that depends on the wall clock or the machine, so the same flags give
// the same report byte for byte.
type report struct {
	Scenario            string         `json:"scenario"`
	Source              string         `json:"source"`
	Seed                uint64         `json:"seed"`
	Duration            sim.Duration   `json:"duration"`
	Drain               sim.Duration   `json:"drain"`
	Profile             string         `json:"profile"`
	Timing              sim.Timing     `json:"timing"`
	DeferredGranularity sim.Duration   `json:"deferred_granularity"`
	HoldType            string         `json:"hold_type"`
	Queues              []queueInfo    `json:"queues"`
	Budget              int            `json:"budget"`
	Rows                []rowReport    `json:"rows"`
	Recommendation      recommendation `json:"recommendation"`
}

// queueInfo describes one work queue of the scenario.
type queueInfo struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Workers  int    `json:"workers"`
	Prefetch int    `json:"prefetch"`
}

// rowReport is one granularity's (or the legacy topology's) figures.
// Durations are in nanoseconds, as in sim.Summary.
type rowReport struct {
	Label                 string       `json:"label"`
	Granularity           sim.Duration `json:"granularity"`
	GranularityNS         int64        `json:"granularity_ns"`
	Legacy                bool         `json:"legacy"`
	HoldQueuesPeak        int          `json:"hold_queues_peak"`
	HoldQueuesMean        float64      `json:"hold_queues_mean"`
	HoldQueuesCreated     int          `json:"hold_queues_created"`
	HoldDeclarations      int          `json:"hold_declarations"`
	DeclarationsPerSecond float64      `json:"declarations_per_second"`
	RelaysPerSecond       float64      `json:"relays_per_second"`
	// QuorumQueues counts the quorum queues the run's declarations made
	// for its WorkQueues work queues (sim.Result.QuorumQueues).
	QuorumQueues int `json:"quorum_queues"`
	// LadderQueues is how many of them are the hold ladder's, which all
	// work queues share (sim.Result.LadderQueues).
	LadderQueues int `json:"ladder_queues"`
	WorkQueues   int `json:"work_queues"`
	// AddedWait is what rounding (and, on the legacy row, head-of-line
	// blocking) added to retries' holds, over the delay asked for;
	// DeferredAddedWait the same for deferrals, which round to the
	// scenario's deferred granularity.
	AddedWait         sim.Summary    `json:"added_wait"`
	DeferredAddedWait sim.Summary    `json:"deferred_added_wait"`
	DeferredWait      sim.Summary    `json:"deferred_wait"`
	BacklogWait       sim.Summary    `json:"backlog_wait"`
	Jobs              sim.JobCounts  `json:"jobs"`
	DeadByReason      map[string]int `json:"dead_by_reason"`
	Deferrals         int            `json:"deferrals"`
	// TimedOut counts handler runs that overran their queue's Timeout,
	// Abandoned those of them the worker abandoned (sim.Result).
	TimedOut  int `json:"timed_out"`
	Abandoned int `json:"abandoned"`
	// LateHolds counts holds released more than a second after they were
	// due, LateDeferrals the deferrals among them, LatestHold the latest
	// (sim.Result).
	LateHolds     int          `json:"late_holds"`
	LateDeferrals int          `json:"late_deferrals"`
	LatestHold    sim.Duration `json:"latest_hold"`
	Violations    int          `json:"violations"`
	// ViolationsByInvariant counts the violations by invariant number.
	ViolationsByInvariant map[string]int `json:"violations_by_invariant"`
	// ExpectedViolations are the legacy row's invariant-2 violations: its
	// head-of-line blocking, the point of the comparison.
	ExpectedViolations int    `json:"expected_violations"`
	TraceHash          string `json:"trace_hash"`
	// Periodic is what the scenario's scheduler group did, if it has one.
	Periodic *sim.PeriodicResult `json:"periodic,omitempty"`
}

// recommendation is the granularity recommendationRule picks, if any.
type recommendation struct {
	Found       bool         `json:"found"`
	Granularity sim.Duration `json:"granularity,omitzero"`
	// IsDefault is whether it is rabbitmq.Topology's default already.
	IsDefault bool        `json:"is_default"`
	Peak      int         `json:"hold_queues_peak"`
	AddedWait sim.Summary `json:"added_wait"`
	// Rule is recommendationRule; Text says what it picked and why, and
	// what the choice trades, over several lines.
	Rule string `json:"rule"`
	Text string `json:"text"`
}

// recommendationRule is the rule the recommendation follows, worded once
// for --help, the output and the README alike.
const recommendationRule = `the finest retry granularity whose cost to the broker stays in bounds: ` +
	`with the hold ladder, relays a second at most twice the fewest of any row; ` +
	`with classic holds, peak hold queues at most --budget`

// defaultRetryGranularity is rabbitmq.Topology's default RetryGranularity.
const defaultRetryGranularity = time.Second

// newReport gathers the rows' figures and the recommendation.
func newReport(p *plan, budget int, rows []row) *report {
	b := p.base
	rep := &report{
		Scenario: b.Name, Source: p.source, Seed: p.seed, Duration: b.Duration, Drain: b.Drain,
		Profile: b.Profile, Timing: b.Timing, DeferredGranularity: b.Topology.DeferredGranularity, Budget: budget,
		HoldType: orDefault(b.Topology.HoldType, "quorum"),
	}
	for _, q := range b.Queues {
		rep.Queues = append(rep.Queues, queueInfo{Name: q.Name, Type: q.Type, Workers: q.Workers, Prefetch: q.Prefetch})
	}
	for _, r := range rows {
		rep.Rows = append(rep.Rows, newRowReport(r))
	}
	if rep.HoldType == "classic" {
		rep.Recommendation = recommend(rep.Rows, budget)
	} else {
		rep.Recommendation = recommendLadder(rep.Rows)
	}
	return rep
}

func newRowReport(r row) rowReport {
	res := r.res
	rr := rowReport{
		Label: r.label(), Granularity: sim.Duration(r.granularity), GranularityNS: int64(r.granularity), Legacy: r.legacy,
		HoldQueuesPeak: res.HoldQueuesPeak, HoldQueuesMean: res.HoldQueuesMean, HoldQueuesCreated: res.HoldQueuesCreated,
		HoldDeclarations: res.HoldDeclarations, DeclarationsPerSecond: res.DeclarationsPerSecond, RelaysPerSecond: res.RelaysPerSecond,
		QuorumQueues: res.QuorumQueues, LadderQueues: res.LadderQueues, WorkQueues: res.WorkQueues,
		AddedWait: res.RetryAddedWait.Summary(), DeferredAddedWait: res.DeferredAddedWait.Summary(), DeferredWait: res.DeferredWait.Summary(), BacklogWait: res.BacklogWait.Summary(),
		Jobs: res.Jobs, DeadByReason: res.DeadByReason, Deferrals: res.Deferrals, TimedOut: res.TimedOut, Abandoned: res.Abandoned,
		LateHolds: res.LateHolds, LateDeferrals: res.LateDeferrals, LatestHold: res.LatestHold,
		Violations: res.ViolationCount, ViolationsByInvariant: map[string]int{}, TraceHash: res.TraceHash,
		Periodic: res.Periodic,
	}
	for inv, n := range r.byInvariant {
		rr.ViolationsByInvariant[strconv.Itoa(inv)] = n
	}
	if r.legacy {
		rr.ExpectedViolations = r.byInvariant[legacyInvariant]
	}
	return rr
}

// unexpected is how many of the row's violations are not the legacy
// topology's expected ones.
func (rr rowReport) unexpected() int { return rr.Violations - rr.ExpectedViolations }

// applies names the field that applies granularity g, and says whether g
// is its default already.
func applies(g time.Duration, classic bool) (string, bool) {
	field := "rabbitmq.Topology.RetryGranularity"
	if classic {
		field += " (with ClassicHolds)"
	}
	return field, g == defaultRetryGranularity
}

// found is the recommendation of row r, why being the rule's figures and
// more what a finer and a coarser choice would trade.
func found(r rowReport, classic bool, why, more string) recommendation {
	g := r.Granularity.D()
	field, isDefault := applies(g, classic)
	set := fmt.Sprintf("set %s to %s", field, r.Label)
	if isDefault {
		set = fmt.Sprintf("%s is the default of %s: nothing to set", r.Label, field)
	}
	s := r.AddedWait
	return recommendation{
		Found: true, Granularity: r.Granularity, IsDefault: isDefault, Peak: r.HoldQueuesPeak, AddedWait: s, Rule: recommendationRule,
		Text: fmt.Sprintf("retry granularity %s (%s)\nwhy: %s\ncost: rounding up to %s adds p50 %s, p99 %s, max %s to a retry's wait; %s\nqueues: %s",
			r.Label, set, why, r.Label, fmtDur(s.P50), fmtDur(s.P99), fmtDur(s.Max), more, quorumCost(r)),
	}
}

// quorumCost says how many quorum queues row r's configuration declared:
// what a user sizing a cluster pays in Raft groups.
func quorumCost(r rowReport) string {
	if r.QuorumQueues == 0 {
		return "no quorum queues"
	}
	own := r.QuorumQueues - r.LadderQueues
	each := ""
	if r.WorkQueues > 1 && own%r.WorkQueues == 0 {
		each = fmt.Sprintf(", %d each", own/r.WorkQueues)
	}
	ladder := ""
	if r.LadderQueues > 0 {
		ladder = fmt.Sprintf("%d for the hold ladder every work queue shares (its rungs, relay queue and warm marker) and ", r.LadderQueues)
	}
	return fmt.Sprintf("%s: %s%d for %s%s (dead-letter queues, warm markers, and work queues of type quorum); "+
		"on a three-node cluster each is a Raft group with a member on every node, %d in all",
		plural(r.QuorumQueues, "1 quorum queue", "%d quorum queues"), ladder, own, plural(r.WorkQueues, "1 work queue", "%d work queues"), each, 3*r.QuorumQueues)
}

// recommend applies recommendationRule to classic holds: the finest
// granularity whose peak hold queues stay at or under budget. rows are in
// ascending granularity order, legacy last.
func recommend(rows []rowReport, budget int) recommendation {
	fewest := -1
	for i, r := range rows {
		if r.Legacy {
			continue
		}
		if r.HoldQueuesPeak <= budget {
			return found(r, true,
				fmt.Sprintf("the finest row whose peak hold queues (%d) stay within --budget (%d)", r.HoldQueuesPeak, budget),
				"a finer one rounds less but needs more hold queues at once (one per rounded delay in use)")
		}
		if fewest < 0 || r.HoldQueuesPeak < rows[fewest].HoldQueuesPeak {
			fewest = i
		}
	}
	if fewest < 0 {
		return recommendation{Rule: recommendationRule, Text: "none: no granularity was simulated"}
	}
	return recommendation{Rule: recommendationRule, Text: fmt.Sprintf("none: no granularity keeps peak hold queues within the budget of %d "+
		"(the fewest, %d, at %s); raise --budget or add coarser granularities", budget, rows[fewest].HoldQueuesPeak, rows[fewest].Label)}
}

// recommendLadder applies recommendationRule to the hold ladder, whose
// number of queues the retry granularity hardly changes: the finest
// granularity whose relays a second are at most twice the fewest of any
// row. A finer granularity rounds less; relays follow the binary digits a
// hold's rounded delay has in the ladder's shortest rung (the finer of the
// two granularities), so they rise at fine granularities and, when the
// deferred granularity fixes that rung, at coarse ones too (30 s in 1 s
// rungs is 16 + 8 + 4 + 2 s, four relays).
func recommendLadder(rows []rowReport) recommendation {
	fewest := -1
	for i, r := range rows {
		if !r.Legacy && (fewest < 0 || r.RelaysPerSecond < rows[fewest].RelaysPerSecond) {
			fewest = i
		}
	}
	if fewest < 0 {
		return recommendation{Rule: recommendationRule, Text: "none: no granularity was simulated"}
	}
	for i, r := range rows {
		if r.Legacy || r.RelaysPerSecond > 2*rows[fewest].RelaysPerSecond {
			continue
		}
		why := fmt.Sprintf("the finest row whose relays (%s a second) stay within twice the fewest (%s, at %s)",
			fmtRate(r.RelaysPerSecond), fmtRate(rows[fewest].RelaysPerSecond), rows[fewest].Label)
		if i == fewest {
			why = fmt.Sprintf("the fewest relays of any row (%s a second), and no finer row is within twice that", fmtRate(r.RelaysPerSecond))
		}
		return found(r, false, why,
			"a finer one rounds less but relays more (a relay is a delivery and a confirmed publish through a worker); "+
				"a coarser one rounds more and need not relay less")
	}
	panic("unreachable: the fewest is within twice itself")
}

// writeReport writes rep to w in format.
func writeReport(w io.Writer, format string, rep *report) error {
	switch format {
	case formatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case formatCSV:
		return writeCSV(w, rep)
	}
	return writeTable(w, rep)
}

// writeTable writes the aligned table with its header, legend and
// recommendation.
func writeTable(w io.Writer, rep *report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "queuey-sim: %s (%s)\n", rep.Scenario, rep.Source)
	holds := "the hold ladder (quorum)"
	if rep.HoldType == "classic" {
		holds = "classic hold queues"
	}
	fmt.Fprintf(&b, "seed %d; %s of arrivals, then %s of drain (virtual time); profile %s; deferred granularity %s; %s\n",
		rep.Seed, fmtGranularity(rep.Duration.D()), fmtGranularity(rep.Drain.D()), rep.Profile, fmtGranularity(rep.DeferredGranularity.D()), holds)
	if t := rep.Timing; t.Exact {
		b.WriteString("broker timing: exact (publishes land at once, timers fire on time)\n")
	} else {
		fmt.Fprintf(&b, "broker timing: a publish lands up to %s into the hold-queue lease its declaration renewed; timers fire up to %s late\n",
			fmtDur(t.Latency.D()), fmtDur(t.TimerSlack.D()))
	}
	for _, q := range rep.Queues {
		fmt.Fprintf(&b, "queue %s: %s, %d workers at prefetch %d\n", q.Name, q.Type, q.Workers, q.Prefetch)
	}
	b.WriteString("\n")
	t := newTable()
	legacy := false
	for _, r := range rep.Rows {
		t.add(tableRow(r))
		legacy = legacy || r.Legacy
	}
	t.render(&b)
	b.WriteString("\n")
	b.WriteString(legend)
	if legacy {
		b.WriteString(legacyNote)
	}
	head, rest, _ := strings.Cut(rep.Recommendation.Text, "\n")
	fmt.Fprintf(&b, "\nrecommendation: %s\n", head)
	if rep.Recommendation.Rule != "" {
		b.WriteString(wrap("rule: "+rep.Recommendation.Rule, "  ", 92))
	}
	if rest != "" {
		for _, line := range strings.Split(rest, "\n") {
			b.WriteString(wrap(line, "  ", 92))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

const legend = `hold queues: how many exist at once, peak and time-weighted mean. The ladder's rungs
  are fixed by the finer of the two granularities (22 at 1s); classic ones follow the TTLs in use.
decl./relays per second: with classic holds, hold-queue declarations per virtual second
  (the backend declares before every hold); with the ladder, relays from rung to rung, one
  delivery and one confirmed publish each. A hold takes one relay per binary digit set in
  its rounded delay counted in shortest rungs: a finer granularity relays more, and so can a
  coarser one, whose rounding sets more digits (30s in 1s rungs is 16+8+4+2s, four relays).
added wait: a retry's hold, its release minus the delay asked for (the rounding up to the
  granularity, the broker's timer slack, and on the ladder each relay's).
deferred wait: a released deferral's time from its release to its delivery;
backlog wait: a new job's time from enqueue to its first delivery (both p50 and p99).
timed out: handler runs past their queue's Timeout, a failed attempt each; "(N abandoned)"
  counts those whose handler ignored its context, settled AbandonGrace (5s) later without it.
lost: confirmed jobs the broker dropped: with a hold queue that expired while they were in it,
  or in a restart or kill fault of the scenario.
late holds: holds released over 1s after they were due, and the latest: a fault's doing (the
  broker down, no worker to relay, or a rung whose releases the broker refused after a restart
  or kill and sends again only 180s later).
invariant violations must be 0.
`

const legacyNote = `legacy: the old topology, one shared wait queue with a per-message expiration. RabbitMQ
  expires only the queue's head, so a short wait queued behind a longer one is released late:
  its added wait includes that head-of-line blocking, and the "expected" violations of
  invariant 2 (never stuck behind a longer wait) are the point of the comparison.
`

// tableRow formats one row's cells.
func tableRow(r rowReport) []string {
	viol := strconv.Itoa(r.Violations)
	if r.Legacy && r.Violations > 0 {
		viol = fmt.Sprintf("%d expected (inv. 2)", r.ExpectedViolations)
		if n := r.unexpected(); n > 0 {
			viol += fmt.Sprintf(" + %d other", n)
		}
	}
	return []string{
		r.Label,
		strconv.Itoa(r.HoldQueuesPeak), strconv.FormatFloat(r.HoldQueuesMean, 'f', 1, 64),
		fmtRate(r.DeclarationsPerSecond + r.RelaysPerSecond),
		fmtDur(r.AddedWait.P50), fmtDur(r.AddedWait.P99), fmtDur(r.AddedWait.Max),
		fmtDur(r.DeferredWait.P50), fmtDur(r.DeferredWait.P99),
		fmtDur(r.BacklogWait.P50), fmtDur(r.BacklogWait.P99),
		fmtTimedOut(r), strconv.Itoa(r.Jobs.DeadLettered), strconv.Itoa(r.Jobs.Lost),
		strconv.Itoa(r.LateHolds), fmtLatest(r), viol,
	}
}

// fmtLatest is the latest hold's cell: how late, or "-" if none was late.
func fmtLatest(r rowReport) string {
	if r.LateHolds == 0 {
		return "-"
	}
	return fmtDur(r.LatestHold.D())
}

// fmtTimedOut is the timed-out runs cell: how many, and how many of them
// were abandoned.
func fmtTimedOut(r rowReport) string {
	if r.Abandoned == 0 {
		return strconv.Itoa(r.TimedOut)
	}
	return fmt.Sprintf("%d (%d abandoned)", r.TimedOut, r.Abandoned)
}

// newTable returns the sweep table's columns and their group headers.
func newTable() *table {
	return &table{
		heads: []string{"granularity", "peak", "mean", "per second", "p50", "p99", "max", "p50", "p99", "p50", "p99", "timed out", "dead-lettered", "lost", "count", "latest", "violations"},
		groups: []group{
			{"retry", 0, 1}, {"hold queues", 1, 3}, {"decl./relays", 3, 4}, {"added wait", 4, 7},
			{"deferred wait", 7, 9}, {"backlog wait", 9, 11}, {"runs", 11, 12}, {"jobs", 12, 14}, {"late holds", 14, 16}, {"invariant", 16, 17},
		},
		leftCols: map[int]bool{0: true, 16: true},
	}
}

// writeCSV writes one line per row, durations in milliseconds.
func writeCSV(w io.Writer, rep *report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{
		"scenario", "seed", "granularity", "granularity_ms", "legacy",
		"hold_queues_peak", "hold_queues_mean", "declarations_per_second", "relays_per_second",
		"added_wait_p50_ms", "added_wait_p99_ms", "added_wait_max_ms",
		"deferred_wait_p50_ms", "deferred_wait_p99_ms", "backlog_wait_p50_ms", "backlog_wait_p99_ms",
		"timed_out", "abandoned", "dead_lettered", "lost", "late_holds", "latest_hold_ms", "violations", "expected_violations", "trace_hash",
	}); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		rec := []string{
			rep.Scenario, strconv.FormatUint(rep.Seed, 10), r.Label, ms(time.Duration(r.GranularityNS)), strconv.FormatBool(r.Legacy),
			strconv.Itoa(r.HoldQueuesPeak), fmtFloat(r.HoldQueuesMean), fmtFloat(r.DeclarationsPerSecond), fmtFloat(r.RelaysPerSecond),
			ms(r.AddedWait.P50), ms(r.AddedWait.P99), ms(r.AddedWait.Max),
			ms(r.DeferredWait.P50), ms(r.DeferredWait.P99), ms(r.BacklogWait.P50), ms(r.BacklogWait.P99),
			strconv.Itoa(r.TimedOut), strconv.Itoa(r.Abandoned),
			strconv.Itoa(r.Jobs.DeadLettered), strconv.Itoa(r.Jobs.Lost), strconv.Itoa(r.LateHolds), ms(r.LatestHold.D()),
			strconv.Itoa(r.Violations), strconv.Itoa(r.ExpectedViolations), r.TraceHash,
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func ms(d time.Duration) string { return fmtFloat(float64(d) / float64(time.Millisecond)) }

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// reportViolations writes the unexpected violations (all but the legacy
// row's invariant-2 ones) to w, up to three per row, and returns how many
// there are in all.
func reportViolations(w io.Writer, rows []row) int {
	total := 0
	for _, r := range rows {
		rr := newRowReport(r)
		n := rr.unexpected()
		if n == 0 {
			continue
		}
		total += n
		fmt.Fprintf(w, "queuey-sim: %s: %d invariant violations:\n", r.label(), n)
		shown := 0
		for _, v := range r.res.Violations {
			if r.legacy && v.Invariant == legacyInvariant {
				continue
			}
			if shown == 3 {
				fmt.Fprintf(w, "  ...\n")
				break
			}
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(v.String(), "\n", "\n  "))
			shown++
		}
	}
	return total
}

// plural formats n with one when it is 1, else with many (a format with
// one %d).
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}
