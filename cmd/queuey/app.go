package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/queuey/queuey/rabbitmq"
)

// Exit statuses.
const (
	exitOK    = 0 // done
	exitFail  = 1 // the broker refused, could not be reached, or had nothing to act on; or the user said no
	exitUsage = 2 // bad command, flags or arguments
)

// opener opens a channel on the connection to the broker.
type opener func() (rabbitmq.InspectChannel, error)

// app is one run of the command, with everything it touches outside the
// process injected, so that the tests run it on membroker.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// interactive: stdin and stderr are a terminal, so destructive commands
	// may ask, and long redrives show a progress bar.
	interactive bool
	dial        func(ctx context.Context, url string) (opener, func() error, error)
	// httpClient reaches the management API (nil: the default).
	httpClient *http.Client
}

// usageError is a bad command line: exit status 2, with a hint.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errDeclined: the user answered no.
var errDeclined = errors.New("cancelled: nothing was changed")

const usage = `queuey inspects and repairs a queuey deployment on RabbitMQ.

Usage:
  queuey stats QUEUE...                 counts of work queues, their dead letters and hold queues
  queuey dead ls QUEUE [filters]        list QUEUE's dead letters (they stay where they are)
  queuey dead show QUEUE ID             one dead letter, with its envelope
  queuey dead redrive QUEUE [filters]   move dead letters back to QUEUE, confirmed before removed
  queuey dead purge QUEUE               delete every dead letter of QUEUE, for good

Flags (before or after the command):
  --url URL                the broker's AMQP URL (default $AMQP_URL)
  --management-url URL     its management HTTP API, for unacknowledged counts and
                           hold queues in stats (default $RABBITMQ_MANAGEMENT_URL;
                           without it, stats shows what AMQP can)
  --json                   JSON for scripts instead of tables
  --dead-suffix S          dead-letter queue suffix, as the workers' Topology (default .dead)
  --deferred-suffix S      hold queue suffix, as the workers' Topology (default .deferred)

Filters (ls, redrive):
  --reason TEXT            reasons containing TEXT ("fatal", "attempts exhausted", "delivery_limit")
  --kind KIND              jobs of this kind
  --id ID[,ID...]          these job IDs
  --malformed              malformed bodies too (redrive republishes them verbatim)
  --limit N                ls: at most N (default 100; 0 for all)

Redrive and purge:
  --reset-attempts         redrive: start each job's attempts over at 1
  --dry-run                redrive: count what would move, move nothing
  --yes                    do not ask; required when stdin is not a terminal

Exit status: 0 done; 1 the broker failed or refused, nothing matched, or
the answer was no; 2 bad usage.
`

// options are every flag; each command rejects those it does not take.
type options struct {
	url, managementURL   string
	json                 bool
	deadSuffix, deferred string
	reason, kind, ids    string
	malformed            bool
	limit                int
	resetAttempts        bool
	dryRun, yes          bool
	set                  map[string]bool // flags given
}

// parse reads flags wherever they are among the arguments, and returns the
// arguments that are not flags.
func (a *app) parse(args []string) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("queuey", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.url, "url", "", "")
	fs.StringVar(&o.managementURL, "management-url", "", "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.deadSuffix, "dead-suffix", "", "")
	fs.StringVar(&o.deferred, "deferred-suffix", "", "")
	fs.StringVar(&o.reason, "reason", "", "")
	fs.StringVar(&o.kind, "kind", "", "")
	fs.StringVar(&o.ids, "id", "", "")
	fs.BoolVar(&o.malformed, "malformed", false, "")
	fs.IntVar(&o.limit, "limit", 100, "")
	fs.BoolVar(&o.resetAttempts, "reset-attempts", false, "")
	fs.BoolVar(&o.dryRun, "dry-run", false, "")
	fs.BoolVar(&o.yes, "yes", false, "")
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return o, nil, err
			}
			return o, nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if o.url == "" {
		o.url = a.getenv("AMQP_URL")
	}
	if !o.set["management-url"] {
		o.managementURL = a.getenv("RABBITMQ_MANAGEMENT_URL")
	}
	if o.limit < 0 {
		return o, nil, usagef("--limit must be 0 (all) or more, not %d", o.limit)
	}
	return o, rest, nil
}

// only refuses flags the command does not take.
func (o options) only(cmd string, allowed ...string) error {
	common := []string{"url", "management-url", "json", "dead-suffix", "deferred-suffix"}
	for name := range o.set {
		if !contains(common, name) && !contains(allowed, name) {
			return usagef("%s does not take --%s", cmd, name)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// filter is the dead-letter filter the flags give.
func (o options) filter() rabbitmq.DeadLetterFilter {
	f := rabbitmq.DeadLetterFilter{Reason: o.reason, Kind: o.kind, Malformed: o.malformed}
	for id := range strings.SplitSeq(o.ids, ",") {
		if id = strings.TrimSpace(id); id != "" {
			f.IDs = append(f.IDs, id)
		}
	}
	return f
}

// describe says in words what the filter flags select.
func (o options) describe() string {
	var parts []string
	if o.reason != "" {
		parts = append(parts, fmt.Sprintf("--reason %q", o.reason))
	}
	if o.kind != "" {
		parts = append(parts, fmt.Sprintf("--kind %q", o.kind))
	}
	if o.ids != "" {
		parts = append(parts, fmt.Sprintf("--id %q", o.ids))
	}
	if len(parts) == 0 {
		return "any"
	}
	return strings.Join(parts, " ")
}

func (a *app) run(ctx context.Context, args []string) int {
	err := a.dispatch(ctx, args)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(a.stdout, usage)
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(a.stderr, "queuey: %v\nRun queuey --help for usage.\n", err)
		return exitUsage
	}
	fmt.Fprintf(a.stderr, "queuey: %v\n", err)
	if errors.Is(err, rabbitmq.ErrNoSuchQueue) {
		fmt.Fprintln(a.stderr, "queuey: name a work queue the workers declared; if they use their own Topology, pass its --dead-suffix")
	}
	return exitFail
}

func (a *app) dispatch(ctx context.Context, args []string) error {
	o, rest, err := a.parse(args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usagef("no command: want stats or dead")
	}
	cmd, rest := rest[0], rest[1:]
	switch cmd {
	case "stats":
		if err := o.only("stats"); err != nil {
			return err
		}
		if len(rest) == 0 {
			return usagef("stats needs at least one queue")
		}
		return a.withInspector(ctx, o, func(in *rabbitmq.Inspector) error { return a.stats(ctx, o, in, rest) })
	case "dead":
		if len(rest) == 0 {
			return usagef("dead needs a subcommand: ls, show, redrive or purge")
		}
		sub, rest := rest[0], rest[1:]
		var run func(in *rabbitmq.Inspector) error
		switch sub {
		case "ls":
			if err := o.only("dead ls", "reason", "kind", "id", "malformed", "limit"); err != nil {
				return err
			}
			if len(rest) != 1 {
				return usagef("dead ls takes one queue, not %d arguments", len(rest))
			}
			run = func(in *rabbitmq.Inspector) error { return a.deadList(ctx, o, in, rest[0]) }
		case "show":
			if err := o.only("dead show"); err != nil {
				return err
			}
			if len(rest) != 2 {
				return usagef("dead show takes a queue and a job ID")
			}
			run = func(in *rabbitmq.Inspector) error { return a.deadShow(ctx, o, in, rest[0], rest[1]) }
		case "redrive":
			if err := o.only("dead redrive", "reason", "kind", "id", "malformed", "reset-attempts", "dry-run", "yes"); err != nil {
				return err
			}
			if len(rest) != 1 {
				return usagef("dead redrive takes one queue, not %d arguments", len(rest))
			}
			run = func(in *rabbitmq.Inspector) error { return a.redrive(ctx, o, in, rest[0]) }
		case "purge":
			if err := o.only("dead purge", "yes"); err != nil {
				return err
			}
			if len(rest) != 1 {
				return usagef("dead purge takes one queue, not %d arguments", len(rest))
			}
			run = func(in *rabbitmq.Inspector) error { return a.purge(ctx, o, in, rest[0]) }
		default:
			return usagef("unknown dead subcommand %q: want ls, show, redrive or purge", sub)
		}
		return a.withInspector(ctx, o, run)
	}
	return usagef("unknown command %q: want stats or dead", cmd)
}

// withInspector connects and runs f with an Inspector.
func (a *app) withInspector(ctx context.Context, o options, f func(*rabbitmq.Inspector) error) error {
	if o.url == "" {
		return usagef("no broker: set AMQP_URL or pass --url")
	}
	top := rabbitmq.Topology{DeadSuffix: o.deadSuffix, DeferredSuffix: o.deferred}
	if err := top.Validate(); err != nil {
		return usageError{err.Error()}
	}
	opts := rabbitmq.InspectorOptions{Topology: top}
	if o.managementURL != "" {
		m, err := rabbitmq.NewManagementAPI(o.managementURL, o.url, a.httpClient)
		if err != nil {
			return usageError{err.Error()}
		}
		opts.Queues = m
	}
	open, closeConn, err := a.dial(ctx, o.url)
	if err != nil {
		return err
	}
	defer func() { _ = closeConn() }()
	in, err := rabbitmq.NewInspector(open, opts)
	if err != nil {
		return err
	}
	return f(in)
}

// confirm asks the question unless --yes; without a terminal it refuses.
func (a *app) confirm(o options, question string) error {
	if o.yes {
		return nil
	}
	if !a.interactive {
		return usagef("%s: pass --yes to confirm (stdin is not a terminal, so queuey cannot ask)", question)
	}
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errDeclined
}
