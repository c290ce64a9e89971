package properties

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/queuey/queuey/internal/consume"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/queuey/queuey/internal/relay"
	simsabotage "github.com/queuey/queuey/internal/sabotage"
	"github.com/queuey/queuey/rabbitmq"
	"github.com/queuey/queuey/sim"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestScenarios is the simulator's property: for every scenario the
// generator can draw (classic and quorum queues, both broker profiles, any
// granularities and retry policy, 1–4 workers at prefetch 1–10, constant,
// Poisson, burst and replayed arrivals, every handler outcome, and crashes,
// dropped connections, refused hold declarations, broker restarts, kill -9
// and outages, on a fresh broker or one an earlier deployment left),
// sim.Run finishes (within runTimeout of wall time: virtual time keeps
// moving), returns no error and reports no violation of any invariant;
// and with the default hold ladder no confirmed job is lost. A failure names the
// scenario's seed, prints the scenario as JSON and every violation with
// its trace excerpt, and rapid shrinks it to a small scenario.
//
// CI runs it with -rapid.checks=1000.
func TestScenarios(t *testing.T) {
	rapid.Check(t, scenarioProperty(scenarioGen()))
}

// scenarioProperty is TestScenarios' property over the scenarios gen draws.
func scenarioProperty(gen *rapid.Generator[sim.Scenario]) func(*rapid.T) {
	return func(t *rapid.T) {
		s := gen.Draw(t, "scenario")
		if err := s.Validate(); err != nil {
			t.Fatalf("the generator drew an invalid scenario: %v\n%s", err, scenarioJSON(s))
		}
		res, err := run(t, s)
		if errors.Is(err, sim.ErrLivelock) && canSpinAtOneInstant(s) {
			return // the scenario has no next instant: Run says so, as it must
		}
		if err != nil {
			t.Fatalf("seed %d: sim.Run: %v\nscenario: %s", s.Seed, err, scenarioJSON(s))
		}
		if res.ViolationCount != 0 {
			t.Fatal(violationReport(s, res))
		}
		// The default hold ladder loses nothing, whatever the faults:
		// restarts, kills and outages included. Classic holds may (the
		// simulator loses what RabbitMQ loses), and are only counted.
		if s.Topology.HoldType != "classic" && res.Jobs.Lost != 0 {
			t.Fatalf("seed %d: the hold ladder lost %d confirmed jobs\nscenario: %s", s.Seed, res.Jobs.Lost, scenarioJSON(s))
		}
	}
}

// canSpinAtOneInstant reports whether s can keep a job deferring for 0 by
// a handler that takes no time: a replayed job whose outcomes end in
// "defer" with no Retry-After of its own, or a queue where every run is
// rate-limited, on a queue whose Retry-After and handler durations are
// both constant 0. Only then may sim.Run report ErrLivelock.
func canSpinAtOneInstant(s sim.Scenario) bool {
	for _, q := range s.WithDefaults().Queues {
		o := q.Outcome
		if o.Handler.Dist != sim.DistConstant || o.Handler.Value != 0 ||
			o.RetryAfter.Dist != sim.DistConstant || o.RetryAfter.Value != 0 {
			continue
		}
		if o.RateLimited >= 1 {
			return true // every run defers
		}
		for _, a := range q.Arrivals {
			for _, j := range a.Jobs {
				if n := len(j.Outcomes); n > 0 && j.Outcomes[n-1] == "defer" && j.RetryAfter == 0 && j.Handler == 0 {
					return true
				}
			}
		}
	}
	return false
}

// runTimeout is the wall time a generated scenario's run may take: a few
// milliseconds is usual, so reaching it means virtual time stopped moving.
const runTimeout = 10 * time.Second

// run runs s, and fails if the run outlives runTimeout: sim.Run returns
// only when virtual time reaches the scenario's end, or when its context
// is done, and then not necessarily with an error (so the result cannot be
// trusted).
func run(t *rapid.T, s sim.Scenario) (*sim.Result, error) {
	c, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	res, err := sim.Run(c, s, sim.Options{})
	if c.Err() != nil {
		t.Fatalf("seed %d: sim.Run did not finish within %s of wall time (it returned %v): virtual time stopped advancing?\nscenario: %s",
			s.Seed, runTimeout, err, scenarioJSON(s))
	}
	return res, err
}

// violationReport is the failure message of a run with violations: the
// seed, the scenario, and every violation kept with its trace excerpt.
func violationReport(s sim.Scenario, res *sim.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d invariant violations", s.Seed, res.ViolationCount)
	if len(res.Violations) < res.ViolationCount {
		fmt.Fprintf(&b, " (the first %d shown)", len(res.Violations))
	}
	fmt.Fprintf(&b, "\nscenario: %s", scenarioJSON(s))
	for _, v := range res.Violations {
		b.WriteString("\n")
		b.WriteString(v.String())
	}
	return b.String()
}

// scenarioJSON is s in the scenario file format (sim.Load reads it back).
func scenarioJSON(s sim.Scenario) string {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%+v (not JSON: %v)", s, err)
	}
	return string(b)
}

// TestRunsAreDeterministic: running a scenario twice gives the same trace
// (Result.TraceHash) and the same result, or the same error, so that a
// seed reproduces a failure. It runs every scenario twice, so it checks
// fewer of them than TestScenarios does under CI's -rapid.checks=1000;
// errors themselves are TestScenarios' business.
func TestRunsAreDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := scenarioGen().Draw(t, "scenario")
		a, errA := run(t, s)
		b, errB := run(t, s)
		switch {
		case errA != nil || errB != nil:
			if fmt.Sprint(errA) != fmt.Sprint(errB) {
				t.Fatalf("seed %d: two runs of one scenario ended with %v and %v\nscenario: %s", s.Seed, errA, errB, scenarioJSON(s))
			}
		case a.TraceHash != b.TraceHash:
			t.Fatalf("seed %d: two runs of one scenario traced %s and %s\nscenario: %s", s.Seed, a.TraceHash, b.TraceHash, scenarioJSON(s))
		default:
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Fatalf("seed %d: two runs of one scenario gave different results:\n%s\n%s", s.Seed, ja, jb)
			}
		}
	})
}

// TestScenarioPropertyCatchesTheLegacyTopology shows that TestScenarios'
// check can fail, and what its failure looks like: over scenarios drawn by
// the same generator but run on the topology queuey replaced (one wait
// queue with per-message expirations, sim's negative control), rapid finds
// a violation of invariant 2 (a short wait stuck behind a longer one) and
// reports the seed, the scenario and the violation's trace. Only invariant
// 2 counts here, so that a bug of another kind, which TestScenarios
// reports, does not stand in for it.
func TestScenarioPropertyCatchesTheLegacyTopology(t *testing.T) {
	legacy := rapid.Map(scenarioGen(), func(s sim.Scenario) sim.Scenario {
		s.Legacy = true
		return s
	})
	out := expectRapidFailure(t, func(t *rapid.T) {
		s := legacy.Draw(t, "scenario")
		c, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		res, err := sim.Run(c, s, sim.Options{})
		if err != nil || c.Err() != nil {
			return
		}
		for _, v := range res.Violations {
			if v.Invariant == 2 {
				t.Fatal(violationReport(s, res))
			}
		}
	})
	for _, want := range []string{"seed ", "invariant 2 (never stuck behind a longer wait) violated", "scenario: {", "release job="} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure report lacks %q:\n%s", want, out)
		}
	}
}

// With a scheduler group whose election queue lacks single active
// consumer (its declaration stripped of it by a channel wrapper, below),
// every process leads, and rapid finds a violation of invariant 12: a
// tick enqueued twice with no fault to explain it. The scenarios are the
// property's own, each with a group of at least two processes.
func TestScenarioPropertyCatchesSchedulersLeadingAtOnce(t *testing.T) {
	grouped := rapid.Map(scenarioGen(), func(s sim.Scenario) sim.Scenario {
		if s.Periodic == nil {
			s.Periodic = &sim.Periodic{Schedules: []sim.Schedule{{Name: "a", Every: sim.Duration(time.Second)}}}
		}
		s.Periodic.Processes = max(s.Periodic.Processes, 2)
		return s
	})
	expectSabotageCaught(t, grouped, simsabotage.Set{Channel: func(ch rabbitmq.Channel) rabbitmq.Channel { return noSAC{ch} }}, 12)
}

// noSAC declares a scheduler group's election queue without single
// active consumer.
type noSAC struct{ rabbitmq.Channel }

func (c noSAC) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	if strings.HasPrefix(name, "queuey.scheduler.") {
		args = maps.Clone(args)
		delete(args, "x-single-active-consumer")
	}
	return c.Channel.QueueDeclare(name, durable, autoDelete, exclusive, noWait, args)
}

// With a relay that acknowledges a held job's delivery from the relay
// queue before the broker confirmed the job's next publish (the relay's
// core wrapped, below), a job would be in no queue were that publish lost,
// and rapid finds a violation of invariant 5 (conservation). The scenarios
// are the property's own, on the hold ladder.
func TestScenarioPropertyCatchesARelayAckingFirst(t *testing.T) {
	laddered := rapid.Map(scenarioGen(), func(s sim.Scenario) sim.Scenario {
		s.Topology.HoldType = "quorum"
		return s
	})
	ackFirst := func(relay.Stepper) relay.Stepper { return relayAcksFirst{} }
	expectSabotageCaught(t, laddered, simsabotage.Set{Relay: ackFirst}, 5)
}

// relayAcksFirst is the relay's core with its order broken: it
// acknowledges a delivery as it arrives, then relays it, whatever the
// relay's publish does.
type relayAcksFirst struct{}

func (relayAcksFirst) Delivered(acts []relay.Action, stale bool) []relay.Action {
	if stale {
		return acts
	}
	return append(acts, relay.Action{Kind: relay.Ack}, relay.Action{Kind: relay.Relay})
}

func (relayAcksFirst) Relayed(acts []relay.Action, _ error) []relay.Action { return acts }

// With the subscriptions' core unable to resume (it takes every closed
// channel for a consumer the broker cancelled), a worker whose connection
// drops or whose broker restarts comes back connected but consuming
// nothing, and rapid finds a violation of invariant 13. The scenarios are
// the property's own, which drop connections and restart brokers.
func TestScenarioPropertyCatchesASubscriptionThatNeverResumes(t *testing.T) {
	never := func(f consume.Follower) consume.Follower { return unresumed{f} }
	expectSabotageCaught(t, scenarioGen(), simsabotage.Set{Follow: never}, 13)
}

// unresumed is the subscriptions' core without resubscription.
type unresumed struct{ consume.Follower }

func (u unresumed) Stopped(acts []consume.FollowAction, why error, ours, _ bool, gen uint64) []consume.FollowAction {
	return u.Follower.Stopped(acts, why, ours, false, gen)
}

// expectSabotageCaught requires rapid to find, among the scenarios gen
// draws, run with the sabotage sab, a violation of invariant inv, and its
// report to name it. Runs that end in an error do not count: the
// violation must be the invariant's, not another failure's.
func expectSabotageCaught(t *testing.T, gen *rapid.Generator[sim.Scenario], sab simsabotage.Set, inv int) {
	t.Helper()
	out := expectRapidFailure(t, func(t *rapid.T) {
		s := gen.Draw(t, "scenario")
		c, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		res, err := sim.Run(c, s, sim.Options{Sabotage: sab})
		if err != nil || c.Err() != nil {
			return
		}
		for _, v := range res.Violations {
			if v.Invariant == inv {
				t.Fatal(violationReport(s, res))
			}
		}
	})
	if want := fmt.Sprintf("invariant %d (%s) violated", inv, sim.InvariantName(inv)); !strings.Contains(out, want) {
		t.Errorf("the failure report lacks %q:\n%s", want, out)
	}
}

// TestKeptScenarios replays scenarios the property once failed on, kept
// as JSON under testdata/kept: rapid's fail files replay only while the
// generator draws the same values, and each new draw strands the older
// ones. Each file is the scenario its fail file drew with the generator of
// the commit that added it, named as the fail file was. Each must run
// without an error or a violation, and lose nothing on the hold ladder. A
// new failure of TestScenarios goes here too, once fixed.
func TestKeptScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "kept", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no kept scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s, err := sim.Load(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Run(t.Context(), s, sim.Options{})
			if err != nil {
				t.Fatalf("sim.Run: %v", err)
			}
			if res.ViolationCount != 0 {
				t.Fatal(violationReport(s, res))
			}
			if s.Topology.HoldType != "classic" && res.Jobs.Lost != 0 {
				t.Fatalf("the hold ladder lost %d confirmed jobs", res.Jobs.Lost)
			}
		})
	}
}
