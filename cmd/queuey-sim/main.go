// Command queuey-sim sizes queuey's hold-queue retry granularity by
// simulation. It runs a workload on sim, queuey's deterministic simulator,
// once per granularity (the same seed each time, so every job meets the
// same fate) and prints, for each: how many hold queues exist at once, how
// often the broker declares them, how much wait the rounding adds, how
// long released deferrals and new jobs wait for a worker, how many jobs
// were dead-lettered, and the invariant violations (which must be zero).
// It ends with a recommendation: the smallest granularity whose peak hold
// queues stay within a budget.
//
//	queuey-sim                   the embedded default scenario
//	queuey-sim run FILE          a scenario file, YAML or JSON
//	queuey-sim replay FILE       a recorded workload, JSON Lines
//
// Run queuey-sim --help for every flag. Install it with
//
//	go install github.com/queuey/queuey/cmd/queuey-sim@latest
//
// default.pgo, next to this file, is a CPU profile of the default run:
// go build, go run and go install use it for profile-guided optimisation
// (a few percent faster). Regenerate it after changes to the hot paths
// with, from the repository root,
//
//	go test -run '^$' -bench BenchmarkDefaultRun -benchtime 1x -cpuprofile cmd/queuey-sim/default.pgo ./cmd/queuey-sim
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
)

// Exit statuses.
const (
	exitOK    = 0 // the sweep ran and no invariant was violated (legacy rows excepted)
	exitFail  = 1 // a simulation failed, was interrupted, or violated an invariant; or the output could not be written
	exitUsage = 2 // bad flags, arguments or input files
)

func main() {
	tuneGC()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// tuneGC trades memory for throughput, unless GOGC is set. Each
// simulation's live heap is a few MB but it allocates quickly, so at Go's
// default GOGC of 100 the collector runs often; at 400 it runs a quarter as
// often. Measured on a 2-core machine, the default run, twice each: 7.8 to
// 7.9 s at 400 against 8.1 to 8.3 s at 100, for a peak RSS of about 120 MB
// against 65 MB.
//
// But GOGC 400 lets the heap grow to five times what is live, and the
// default run now runs its four simulations at once (about 13 MB live
// each, with the hold ladder): its peak RSS was 310 MB (2026-12-03). So a
// soft memory limit, unless GOMEMLIMIT is set, makes the collector run
// more often only when the heap nears memoryLimit. Side by side, four
// alternating runs each (2026-12-03): peak RSS 120 to 121 MB against 308
// to 312 MB with GOMEMLIMIT=off, for a median of 4 % more CPU (50.5 s
// against 48.4 s of user time); the report is byte for byte the same.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}

// memoryLimit is tuneGC's soft limit on the Go heap and runtime: 120 MiB.
const memoryLimit = 120 << 20

// run is the whole command: it parses args, runs the sweep and writes the
// report to stdout, errors and (on a terminal) progress to stderr, and
// returns the exit status. It never panics on bad input and never calls
// os.Exit, so tests call it directly.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		writeHelp(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "queuey-sim: %v\nRun 'queuey-sim --help' for usage.\n", err)
		return exitUsage
	}
	p, err := cfg.plan()
	if err != nil {
		fmt.Fprintf(stderr, "queuey-sim: %v\n", err)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	prog := newProgress(stderr, p.runs)
	rows, err := sweep(ctx, p.runs, cfg.parallel, prog)
	prog.finish()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintf(stderr, "queuey-sim: %v\n", err)
		return exitFail
	}

	rep := newReport(p, cfg.budget, rows)
	if err := writeReport(stdout, cfg.format, rep); err != nil {
		fmt.Fprintf(stderr, "queuey-sim: writing the report: %v\n", err)
		return exitFail
	}
	if cfg.plot != "" {
		if err := writePlot(cfg.plot, rep); err != nil {
			fmt.Fprintf(stderr, "queuey-sim: %v\n", err)
			return exitFail
		}
	}
	if n := reportViolations(stderr, rows); n > 0 {
		fmt.Fprintf(stderr, "queuey-sim: %d invariant violations (seed %d); rerun with the same flags to reproduce them\n", n, p.seed)
		return exitFail
	}
	return exitOK
}
