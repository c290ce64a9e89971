package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

const helpHead = `queuey-sim sizes queuey's hold-queue retry granularity by simulation.

It runs one workload on queuey's deterministic simulator (the real queuey and
RabbitMQ backend on an in-memory RabbitMQ model, in virtual time) once per
retry granularity, with the same seed, so every job meets the same fate in
every run, and prints a table: peak and mean hold queues, relays (or, with
classic holds, declarations) per second, the wait the rounding adds (p50,
p99, max), how long released deferrals and new jobs wait for a worker, jobs
dead-lettered, and invariant violations (which must be 0). A recommendation follows, with the
Topology field that applies it and what it costs in added wait. Its rule:
%s.
The seed is printed: the same flags give the same report, byte for byte.

Usage:
  queuey-sim [flags]                the default scenario
  queuey-sim [flags] run FILE       a scenario file, YAML or JSON
  queuey-sim [flags] replay FILE    a recorded workload, JSON Lines
Flags may also follow the command and its FILE.

The default scenario is a rate-limited external API: Poisson arrivals at 100
jobs/s for 1 virtual hour; 30% of handler runs fail retryably (exponential
backoff from 1s with full jitter, capped at 5m, 10 attempts); 5% are answered
with a Retry-After of 30s (deferred, no attempt spent); handlers take 250ms on
average, exponentially distributed, so the 4 workers at prefetch 10 (on a
classic priority queue) run near capacity and backlogs form; profile
RabbitMQ43; seed 1; no drain.

run FILE: a scenario in YAML or JSON (a .json name is read as JSON, anything
else as YAML); the fields are sim.Scenario's, documented with a commented
example in cmd/queuey-sim/examples/scenario.yaml. Unknown fields are refused.

replay FILE: one job arrival per line, as exported from production logs:
  {"at": "1.5s", "outcomes": ["retry", "defer", "ok"], "retry_after": "30s", "handler": "40ms"}
  at           required: an offset from the start ("1.5s") or an RFC 3339
               timestamp, taken from the earliest line; one form per file
  outcomes     successive runs' results: ok, retry, fatal, defer (a
               Retry-After) or crash (the worker dies); the last repeats;
               none means ok
  retry_after  each defer's delay (default: the scenario's retry_after draw)
  handler      each run's duration (default: the scenario's handler draw)
Blank lines and lines starting with # are skipped; unknown fields are refused.
The jobs go to the first queue of the default scenario (or of --scenario),
replacing its arrivals; the run lasts through the last arrival, then drains.
Example: cmd/queuey-sim/examples/replay.jsonl.

Flags:
`

const helpTail = `
Exit status: 0 when every run kept every invariant (the legacy row's expected
invariant-2 violations aside); 1 when a run failed or violated an invariant,
or the report or plot could not be written; 2 for bad flags or input.
On a terminal, stderr shows each run's headline figures as it finishes,
and progress (share of virtual time simulated, ETA) once the sweep has run a
second; nothing else goes to stderr but errors and violations.
`

// flagArgs names each valued flag's argument in --help.
var flagArgs = map[string]string{
	"granularity": "LIST", "budget": "N", "seed": "N", "duration": "DURATION", "drain": "DURATION",
	"profile": "NAME", "queue-type": "TYPE", "hold-type": "TYPE", "scenario": "FILE", "plot": "FILE", "parallel": "N",
}

// writeHelp writes the --help text: what the command does, its commands,
// and every flag with its default.
func writeHelp(w io.Writer) {
	var b strings.Builder
	b.WriteString(strings.Replace(helpHead, "%s", strings.TrimSuffix(wrap(recommendationRule, "", 78), "\n"), 1))
	newConfig().flagSet().VisitAll(func(f *flag.Flag) {
		name := "--" + f.Name
		if arg := flagArgs[f.Name]; arg != "" {
			name += " " + arg
		}
		usage := f.Usage
		if !strings.Contains(usage, "(default") {
			def := f.DefValue
			if def == "" {
				def = `""`
			}
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(&b, "  %s\n%s", name, wrap(usage, "      ", 78))
	})
	b.WriteString(helpTail)
	_, _ = io.WriteString(w, b.String())
}

// wrap breaks s into lines of at most width runes, each starting with
// indent.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(s) {
		if line != indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
	return b.String()
}
