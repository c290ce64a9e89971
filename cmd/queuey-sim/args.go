package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/queuey/queuey/rabbitmq"
)

// defaultGranularities are the retry granularities the sweep compares
// unless --granularity says otherwise.
var defaultGranularities = []time.Duration{
	time.Millisecond, 100 * time.Millisecond, time.Second, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute,
}

// defaultBudget is --budget's default: hold queues per work queue.
const defaultBudget = 50

// maxGranularity is the longest TTL a hold queue can have.
const maxGranularity = time.Duration(rabbitmq.MaxHoldTTL) * time.Millisecond

// Output formats.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatCSV   = "csv"
)

// config is the parsed command line. Zero values of the override fields
// mean "the scenario's own"; the *Set fields say whether a flag was given.
type config struct {
	command  string // "" (the default scenario), "run" or "replay"
	file     string // run's scenario file or replay's workload file
	scenario string // replay: the base scenario file; "" for the default scenario

	grans     []time.Duration // ascending, no duplicates, all positive
	budget    int
	seed      uint64
	seedSet   bool
	duration  time.Duration // 0: the scenario's
	drain     time.Duration
	drainSet  bool
	profile   string // "": the scenario's
	queueType string // "": the scenario's
	holdType  string // "": the scenario's
	legacy    bool
	jsonOut   bool
	csvOut    bool
	format    string // formatTable, formatJSON or formatCSV, from jsonOut and csvOut
	plot      string
	parallel  int
}

// defaultParallel is how many runs go at once unless --parallel says:
// four per core. Each run is one goroutine, so runs beyond the cores share
// them, and a sweep ends when the work does rather than when the run that
// started last does: the default run's seven granularities on two cores
// end about 9 % sooner than two at a time, for about half as much memory
// again (docs/performance.md, "The default run"). The cap keeps a long sweep's
// memory bounded: a run's live heap is about 9 MB.
func defaultParallel() int { return 4 * runtime.GOMAXPROCS(0) }

// newConfig returns the configuration with no flag given.
func newConfig() *config {
	return &config{
		grans:    slices.Clone(defaultGranularities),
		budget:   defaultBudget,
		format:   formatTable,
		parallel: defaultParallel(),
	}
}

// flagSet binds every flag to cfg. The same set documents them in --help,
// so every flag's usage says what its default is.
func (cfg *config) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("queuey-sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.Var((*granularityList)(&cfg.grans), "granularity",
		"comma-separated retry granularities to compare, each a duration of at least 1ms; the deferred granularity stays the scenario's")
	fs.IntVar(&cfg.budget, "budget", cfg.budget,
		"with classic holds (--hold-type classic), the most hold queues the recommendation may need at once: it names the finest granularity whose peak stays at or under this")
	fs.Uint64Var(&cfg.seed, "seed", 0,
		"seed for every random draw (default: the scenario's; the default scenario's is 1)")
	fs.Var(&durationFlag{d: &cfg.duration, positive: true}, "duration",
		"virtual time during which jobs arrive, positive (default: the scenario's; 1h for the default scenario; for replay, through the last arrival)")
	fs.Var(&durationFlag{d: &cfg.drain, set: &cfg.drainSet}, "drain",
		"virtual time the run goes on after arrivals stop (default: the scenario's; 0 for the default scenario; 5m for replay unless --scenario sets one)")
	fs.StringVar(&cfg.profile, "profile", "",
		"broker profile: RabbitMQ40 or RabbitMQ43 (default: the scenario's; RabbitMQ43 if it sets none)")
	fs.StringVar(&cfg.queueType, "queue-type", "",
		"type of every work queue: classic or quorum (default: the scenario's; classic if it sets none)")
	fs.StringVar(&cfg.holdType, "hold-type", "",
		"type of the hold queues: quorum, the ladder of quorum queues, or classic, one per TTL (default: the scenario's; quorum if it sets none); with kill and restart faults in the scenario, the lost column shows what each loses")
	fs.StringVar(&cfg.scenario, "scenario", "",
		"replay only: scenario file (YAML or JSON) whose first queue receives the replayed jobs (default: the default scenario)")
	fs.BoolVar(&cfg.legacy, "compare-legacy", false,
		"add a row for the old shared-wait-queue topology, at the scenario's own retry granularity; its invariant-2 violations are expected")
	fs.BoolVar(&cfg.jsonOut, "json", false, "write the report as JSON instead of a table")
	fs.BoolVar(&cfg.csvOut, "csv", false, "write the report as CSV instead of a table, one line per row")
	fs.StringVar(&cfg.plot, "plot", "",
		"also draw peak hold queues and p99 added wait against granularity into this file, .svg or .png (default: no plot)")
	fs.IntVar(&cfg.parallel, "parallel", cfg.parallel,
		"how many simulations run at once; more than the cores share them, so that they end together (default: 4 × GOMAXPROCS)")
	return fs
}

// parseArgs parses the command line. Flags may come before or after the
// command and its file. It returns flag.ErrHelp for -h, -help or --help,
// and otherwise an error naming the flag or argument at fault.
func parseArgs(args []string) (*config, error) {
	cfg := newConfig()
	fs := cfg.flagSet()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "seed" {
			cfg.seedSet = true
		}
	})
	if err := cfg.setCommand(pos); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// flagError rewords the flag package's errors with the double-dash
// spelling --help uses.
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := strings.Replace(err.Error(), "flag -", "flag --", 1)
	msg = strings.Replace(msg, "flag provided but not defined: -", "unknown flag --", 1)
	msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
	return &reworded{msg: msg, err: err}
}

// reworded is an error shown as msg for the command line that still
// unwraps to its cause, for errors.Is and errors.As.
type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }

// setCommand reads the positional arguments: nothing, "run FILE" or
// "replay FILE".
func (cfg *config) setCommand(pos []string) error {
	if len(pos) == 0 {
		return nil
	}
	cfg.command = pos[0]
	switch cfg.command {
	case "run", "replay":
	case "help":
		return flag.ErrHelp
	default:
		return fmt.Errorf("unknown command %q: want run FILE or replay FILE, or no command for the default scenario", pos[0])
	}
	switch len(pos) {
	case 1:
		return fmt.Errorf("%s: missing FILE argument", cfg.command)
	case 2:
		cfg.file = pos[1]
		return nil
	}
	return fmt.Errorf("%s takes one FILE, got also %q", cfg.command, pos[2])
}

// check refuses flag values that cannot work together or at all.
func (cfg *config) check() error {
	switch {
	case cfg.jsonOut && cfg.csvOut:
		return errors.New("--json and --csv: choose one output format")
	case cfg.jsonOut:
		cfg.format = formatJSON
	case cfg.csvOut:
		cfg.format = formatCSV
	}
	if cfg.budget < 1 {
		return fmt.Errorf("--budget: must be at least 1, got %d", cfg.budget)
	}
	if cfg.parallel < 1 {
		return fmt.Errorf("--parallel: must be at least 1, got %d", cfg.parallel)
	}
	if cfg.profile != "" && cfg.profile != "RabbitMQ40" && cfg.profile != "RabbitMQ43" {
		return fmt.Errorf("--profile: unknown profile %q: want RabbitMQ40 or RabbitMQ43", cfg.profile)
	}
	if cfg.queueType != "" && cfg.queueType != "classic" && cfg.queueType != "quorum" {
		return fmt.Errorf("--queue-type: unknown queue type %q: want classic or quorum", cfg.queueType)
	}
	if cfg.holdType != "" && cfg.holdType != "classic" && cfg.holdType != "quorum" {
		return fmt.Errorf("--hold-type: unknown hold queue type %q: want classic or quorum", cfg.holdType)
	}
	if cfg.scenario != "" && cfg.command != "replay" {
		return errors.New("--scenario: only replay takes a base scenario; run takes the scenario file as its argument")
	}
	if cfg.plot != "" {
		if _, err := plotFormat(cfg.plot); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}

// plotFormat is the image format of a --plot file, from its extension.
func plotFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg", ".png":
		return ext[1:], nil
	default:
		return "", fmt.Errorf("%s: want a file ending in .svg or .png", path)
	}
}

// granularityList is the --granularity flag: a comma-separated list of
// positive durations, kept sorted and without duplicates.
type granularityList []time.Duration

func (g *granularityList) String() string {
	if g == nil {
		return ""
	}
	parts := make([]string, len(*g))
	for i, d := range *g {
		parts[i] = fmtGranularity(d)
	}
	return strings.Join(parts, ",")
}

// Set replaces the list; a zero, negative or unparsable entry is refused.
func (g *granularityList) Set(s string) error {
	var out []time.Duration
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return errors.New("an empty entry: want durations such as 100ms,1s,10s")
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return fmt.Errorf("%q is not a duration: want one such as 100ms, 1s or 1m", part)
		}
		switch {
		case d == 0:
			return fmt.Errorf("granularity of zero (%q): each must be positive, 1ms at least", part)
		case d < 0:
			return fmt.Errorf("negative granularity %q: each must be positive", part)
		case d < time.Millisecond:
			return fmt.Errorf("granularity %q is under 1ms: hold-queue TTLs are whole milliseconds", part)
		case d > maxGranularity:
			return fmt.Errorf("granularity %q is over %s, the longest a hold queue can wait", part, fmtGranularity(maxGranularity))
		}
		out = append(out, d)
	}
	slices.Sort(out)
	*g = slices.Compact(out)
	return nil
}

// durationFlag is a duration flag that records whether it was given and,
// if positive is set, refuses zero and negative values (otherwise only
// negative ones).
type durationFlag struct {
	d        *time.Duration
	set      *bool
	positive bool
}

func (f *durationFlag) String() string {
	if f == nil || f.d == nil || *f.d == 0 {
		return ""
	}
	return f.d.String()
}

// Set parses a Go duration string.
func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: want one such as 90s, 10m or 1h", s)
	}
	if f.positive && d <= 0 {
		return fmt.Errorf("must be positive, got %s", s)
	}
	if d < 0 {
		return fmt.Errorf("must not be negative, got %s", s)
	}
	*f.d = d
	if f.set != nil {
		*f.set = true
	}
	return nil
}
