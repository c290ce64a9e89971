package main

import (
	"fmt"
	"time"

	"github.com/queuey/queuey/sim"
)

// replayDrain is how long a replay goes on after its last arrival, unless
// --drain or the base scenario says otherwise: long enough for a 5-minute
// backoff cap.
const replayDrain = 5 * time.Minute

// plan is a checked sweep: the scenario after the command line's
// overrides, and one run per row. Everything that can be wrong with the
// input is found while making it, before anything runs.
type plan struct {
	source string       // "default scenario", or the file the scenario or workload came from
	base   sim.Scenario // overrides and defaults applied
	seed   uint64
	runs   []runSpec // the rows, in report order
}

// runSpec is one row's simulation.
type runSpec struct {
	granularity time.Duration // the retry granularity
	legacy      bool          // the shared-wait-queue topology (Scenario.Legacy)
	scenario    sim.Scenario
}

// plan loads the scenario the command names, applies the flags' overrides
// and validates one scenario per granularity (and the legacy one).
func (cfg *config) plan() (*plan, error) {
	base, source, err := cfg.baseScenario()
	if err != nil {
		return nil, err
	}
	base = cfg.override(base)
	if err := base.Validate(); err != nil {
		return nil, fmt.Errorf("%s, with the command line's overrides: %w", source, describe(err))
	}
	base = base.WithDefaults()
	p := &plan{source: source, base: base, seed: base.Seed}
	for _, g := range cfg.grans {
		s := base
		s.Topology.RetryGranularity = sim.Duration(g)
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("%s at granularity %s: %w", source, fmtGranularity(g), describe(err))
		}
		p.runs = append(p.runs, runSpec{granularity: g, scenario: s})
	}
	if cfg.legacy {
		s := base
		s.Legacy = true
		p.runs = append(p.runs, runSpec{granularity: base.Topology.RetryGranularity.D(), legacy: true, scenario: s})
	}
	return p, nil
}

// baseScenario returns the scenario the command names and a label for it.
func (cfg *config) baseScenario() (sim.Scenario, string, error) {
	switch cfg.command {
	case "run":
		s, err := loadScenarioFile(cfg.file)
		return s, cfg.file, err
	case "replay":
		s, err := cfg.replayScenario()
		return s, cfg.file, err
	}
	s, err := defaultScenario()
	return s, "default scenario", err
}

// replayScenario puts the replay file's arrivals on the base scenario's
// first queue, in place of its arrival processes. Arrivals run through the
// last recorded one (rounded up to the next second) unless --duration
// says otherwise, then the base scenario's drain, or replayDrain if it has
// none.
func (cfg *config) replayScenario() (sim.Scenario, error) {
	var base sim.Scenario
	var err error
	if cfg.scenario != "" {
		base, err = loadScenarioFile(cfg.scenario)
	} else {
		base, err = defaultScenario()
	}
	if err != nil {
		return sim.Scenario{}, err
	}
	jobs, err := loadReplay(cfg.file)
	if err != nil {
		return sim.Scenario{}, err
	}
	var last time.Duration
	for _, j := range jobs {
		last = max(last, j.At.D())
	}
	queues := append([]sim.Queue(nil), base.Queues...)
	queues[0].Arrivals = []sim.Arrival{{Process: sim.ArrivalReplay, Jobs: jobs}}
	base.Queues = queues
	base.Duration = sim.Duration(last.Truncate(time.Second) + time.Second)
	if base.Drain == 0 {
		base.Drain = sim.Duration(replayDrain)
	}
	base.Name = "replay onto " + orDefault(base.Name, "the scenario's first queue")
	return base, nil
}

// override applies the flags that change the scenario.
func (cfg *config) override(s sim.Scenario) sim.Scenario {
	if cfg.seedSet {
		s.Seed = cfg.seed
	}
	if cfg.duration > 0 {
		s.Duration = sim.Duration(cfg.duration)
	}
	if cfg.drainSet {
		s.Drain = sim.Duration(cfg.drain)
	}
	if cfg.profile != "" {
		s.Profile = cfg.profile
	}
	if cfg.holdType != "" {
		s.Topology.HoldType = cfg.holdType
	}
	if cfg.queueType != "" {
		qs := append([]sim.Queue(nil), s.Queues...)
		for i := range qs {
			qs[i].Type = cfg.queueType
		}
		s.Queues = qs
	}
	return s
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
