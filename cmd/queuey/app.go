package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/queuey/queuey/internal/redact"
	"github.com/queuey/queuey/rabbitmq"
)

// Exit statuses.
const (
	exitOK    = 0 // done, including when there was nothing to list, redrive or purge
	exitFail  = 1 // the broker or its management API failed or refused, a named queue or job does not exist, or the user said no
	exitUsage = 2 // bad command, flags or arguments, or a setting the command needs is missing
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
	// buildInfo reads the binary's build information (nil:
	// debug.ReadBuildInfo).
	buildInfo func() (*debug.BuildInfo, bool)
	// listen opens the dashboard's listener (nil: net.Listen).
	listen func(network, address string) (net.Listener, error)
}

// usageError is a bad command line: exit status 2, with a hint.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errDeclined: the user answered no.
var errDeclined = errors.New("cancelled: nothing was changed")

const usage = `queuey inspects and repairs a queuey deployment on RabbitMQ.

Usage:
  queuey queues                         every work queue, with its counts (management API)
  queuey stats QUEUE...                 counts of work queues, their dead letters and hold queues
  queuey dead ls QUEUE [filters]        list QUEUE's dead letters (they stay where they are)
  queuey dead show QUEUE ID             one dead letter, with its envelope
  queuey dead redrive QUEUE [filters]   move dead letters back to QUEUE, confirmed before removed
  queuey dead delete QUEUE --id ID[,ID...]
                                        delete these dead letters of QUEUE, for good
  queuey dead purge QUEUE               delete every dead letter of QUEUE, for good
  queuey delete QUEUE                   delete QUEUE with its dead-letter and hold queues and
                                        every message in them, for good (management API)
  queuey scheduler delete GROUP         delete the election queue of a scheduler group
                                        (queuey.scheduler.GROUP) once no process runs it
  queuey ui [--listen ADDR] [--read-only]
                                        serve the web dashboard (management API), on
                                        127.0.0.1:8080 unless --listen says otherwise
  queuey version                        the version of this binary (also --version)

Flags (before or after the command):
  --url URL                the broker's AMQP URL (default $AMQP_URL)
  --management-url URL     its management HTTP API (default $RABBITMQ_MANAGEMENT_URL):
                           queues, delete and ui need it; stats uses it for
                           unacknowledged counts and hold queues, and without it,
                           or when it fails, shows what AMQP can
  --json                   JSON for scripts instead of tables
  --dead-suffix S          dead-letter queue suffix, as the workers' Topology (default .dead)
  --deferred-suffix S      hold queue suffix, as the workers' Topology (default .deferred)

Filters (ls, redrive; delete takes --id only):
  --reason TEXT            reasons containing TEXT ("fatal", "attempts exhausted", "delivery_limit")
  --kind KIND              jobs of this kind
  --id ID[,ID...]          these job IDs
  --malformed              malformed bodies too (redrive republishes them verbatim)
  --limit N                ls: at most N (default 100; 0 for all)

Redrive, purge, delete and scheduler delete:
  --reset-attempts         redrive: start each job's attempts over at 1
  --dry-run                redrive: count what would move, move nothing
  --yes                    do not ask; required when stdin is not a terminal

Dashboard (ui):
  --listen ADDR            where to listen (default 127.0.0.1:8080); beyond loopback
                           it needs $QUEUEY_UI_PASSWORD (user $QUEUEY_UI_USER, default
                           queuey), asked of every request by HTTP basic auth
  --read-only              no redrive or purge

Exit status: 0 done, including when there was nothing to list, redrive or
purge; 1 the broker or its management API failed or refused, a named queue
or job does not exist, or the answer was no; 2 bad usage, or a setting the
command needs is missing.
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
	version              bool
	listen               string
	readOnly             bool
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
	fs.BoolVar(&o.version, "version", false, "")
	fs.StringVar(&o.listen, "listen", defaultListen, "")
	fs.BoolVar(&o.readOnly, "read-only", false, "")
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

// describe says in words what the filter flags select: "" for no filter,
// else the flags as given, such as --kind "email" --reason "fatal".
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
	switch {
	case errors.Is(err, rabbitmq.ErrNoSuchQueue):
		fmt.Fprintln(a.stderr, "queuey: name a work queue the workers declared (queuey queues lists them); if they use their own Topology, pass its --dead-suffix")
	case errors.Is(err, rabbitmq.ErrQueueInUse):
		fmt.Fprintln(a.stderr, "queuey: nothing was deleted")
	}
	return exitFail
}

// commands lists the commands, for messages.
const commands = "queues, stats, dead, delete, scheduler, ui or version"

func (a *app) dispatch(ctx context.Context, args []string) error {
	o, rest, err := a.parse(args)
	if err != nil {
		return err
	}
	if o.version {
		return a.version(o)
	}
	if len(rest) == 0 {
		return usagef("no command: want %s", commands)
	}
	cmd, rest := rest[0], rest[1:]
	switch cmd {
	case "version":
		if err := o.only("version"); err != nil {
			return err
		}
		if len(rest) != 0 {
			return usagef("version takes no arguments")
		}
		return a.version(o)
	case "queues":
		if err := o.only("queues"); err != nil {
			return err
		}
		if len(rest) != 0 {
			return usagef("queues takes no arguments: it lists every work queue")
		}
		return a.withInspector(ctx, o, "queues", apiRequired, func(s *session) error { return a.queues(ctx, o, s.in) })
	case "ui":
		if err := o.only("ui", "listen", "read-only"); err != nil {
			return err
		}
		if len(rest) != 0 {
			return usagef("ui takes no arguments")
		}
		return a.ui(ctx, o)
	case "stats":
		if err := o.only("stats"); err != nil {
			return err
		}
		if len(rest) == 0 {
			return usagef("stats needs at least one queue (queuey queues lists them)")
		}
		return a.withInspector(ctx, o, "stats", apiOptional, func(s *session) error { return a.stats(ctx, o, s, rest) })
	case "delete":
		if err := o.only("delete", "yes"); err != nil {
			return err
		}
		if len(rest) != 1 {
			return usagef("delete takes one queue, not %d arguments", len(rest))
		}
		return a.withInspector(ctx, o, "delete", apiRequired, func(s *session) error { return a.deleteTopology(ctx, o, s.in, rest[0]) })
	case "scheduler":
		if len(rest) == 0 || rest[0] != "delete" {
			return usagef("scheduler needs a subcommand: delete")
		}
		if err := o.only("scheduler delete", "yes"); err != nil {
			return err
		}
		if len(rest) != 2 {
			return usagef("scheduler delete takes one group, not %d arguments", len(rest)-1)
		}
		return a.withInspector(ctx, o, "scheduler delete", apiOptional, func(s *session) error { return a.deleteScheduler(ctx, o, s.in, rest[1]) })
	case "dead":
		if len(rest) == 0 {
			return usagef("dead needs a subcommand: ls, show, redrive, delete or purge")
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
		case "delete":
			if err := o.only("dead delete", "id", "yes"); err != nil {
				return err
			}
			if len(rest) != 1 {
				return usagef("dead delete takes one queue, not %d arguments", len(rest))
			}
			if strings.TrimSpace(strings.ReplaceAll(o.ids, ",", "")) == "" {
				return usagef("dead delete needs --id: the job IDs of the dead letters to delete (purge deletes them all)")
			}
			run = func(in *rabbitmq.Inspector) error { return a.deadDelete(ctx, o, in, rest[0]) }
		default:
			return usagef("unknown dead subcommand %q: want ls, show, redrive or purge", sub)
		}
		return a.withInspector(ctx, o, "dead "+sub, apiNone, func(s *session) error { return run(s.in) })
	}
	return usagef("unknown command %q: want %s", cmd, commands)
}

// apiUse is what a command does with the management API.
type apiUse int

const (
	apiNone     apiUse = iota // nothing: it is not even checked
	apiOptional               // uses it when it is set and works (stats)
	apiRequired               // cannot work without it (queues, delete)
)

// session is what a command runs with: Inspectors on one connection.
type session struct {
	// in has the management API as its QueueLister when the command uses
	// it and it is set with a URL that parses.
	in *rabbitmq.Inspector
	// amqpOnly has no QueueLister: what stats falls back to.
	amqpOnly *rabbitmq.Inspector
	// apiErr says why in has no management API although one is set (its
	// URL does not parse), for a command that can do without.
	apiErr error
}

// withInspector connects and runs f with a session for the command cmd.
func (a *app) withInspector(ctx context.Context, o options, cmd string, api apiUse, f func(*session) error) error {
	if o.url == "" {
		return usagef("no broker: set AMQP_URL or pass --url")
	}
	top := rabbitmq.Topology{DeadSuffix: o.deadSuffix, DeferredSuffix: o.deferred}
	if err := top.Validate(); err != nil {
		return usageError{err.Error()}
	}
	s := &session{}
	plain := rabbitmq.InspectorOptions{Topology: top}
	opts := plain
	switch {
	case api == apiNone:
	case o.managementURL == "" && api == apiRequired:
		return usagef("%s needs the management API, since AMQP cannot list queues: set RABBITMQ_MANAGEMENT_URL or pass --management-url (for example http://localhost:15672/)", cmd)
	case o.managementURL != "":
		m, err := rabbitmq.NewManagementAPI(o.managementURL, o.url, a.httpClient)
		switch {
		case err != nil && api == apiRequired:
			return usageError{err.Error()}
		case err != nil:
			s.apiErr = err
		default:
			opts.Queues = m
		}
	}
	open, closeConn, err := a.dial(ctx, o.url)
	if err != nil {
		return err
	}
	defer func() { _ = closeConn() }()
	if s.in, err = rabbitmq.NewInspector(open, opts); err != nil {
		return err
	}
	if s.amqpOnly, err = rabbitmq.NewInspector(open, plain); err != nil {
		return err
	}
	if err := f(s); err != nil {
		if api != apiNone {
			return redactAPIErr(err, o)
		}
		return err
	}
	return nil
}

// redactAPIErr hides the passwords of the management API's URL and of the
// AMQP URL, whose password the API uses when its URL has none, in err. A
// ManagementAPI's errors name neither password, only the user; this is
// the second line of defence, and hides a user whose name is also the
// password.
func redactAPIErr(err error, o options) error {
	return redact.Err(redact.Err(err, o.managementURL), o.url)
}

// confirm asks question unless --yes; without a terminal it refuses,
// naming action ("purge 6 dead letters from jobs.dead").
func (a *app) confirm(o options, action, question string) error {
	if o.yes {
		return nil
	}
	if !a.interactive {
		return usagef("not confirmed, so nothing was done: queuey would %s, but it cannot ask since stdin is not a terminal; pass --yes to go ahead", action)
	}
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errDeclined
}

// version prints the module version the binary was built from.
func (a *app) version(o options) error {
	read := a.buildInfo
	if read == nil {
		read = debug.ReadBuildInfo
	}
	v := versionOf(read)
	if o.json {
		return writeJSON(a.stdout, v)
	}
	fmt.Fprintln(a.stdout, v.String())
	return nil
}

// versionInfo is `version --json`.
type versionInfo struct {
	Module  string `json:"module,omitempty"`
	Version string `json:"version"` // "(devel)" for a build from a source checkout, "unknown" without build information
	Go      string `json:"go,omitempty"`
	// The source checkout's commit, its time, and whether it had changes
	// not committed, when the build recorded them.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

func versionOf(read func() (*debug.BuildInfo, bool)) versionInfo {
	bi, ok := read()
	if !ok || bi == nil {
		return versionInfo{Version: "unknown"}
	}
	v := versionInfo{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the version as `queuey version` prints it.
func (v versionInfo) String() string {
	switch v.Version {
	case "unknown":
		return "queuey: version unknown: this binary carries no build information"
	case "(devel)":
		var b strings.Builder
		b.WriteString("queuey (devel): built from a source checkout, not a released version")
		if v.Revision != "" {
			fmt.Fprintf(&b, "; commit %s", v.Revision)
			if v.Time != "" {
				fmt.Fprintf(&b, " of %s", v.Time)
			}
			if v.Modified {
				b.WriteString(", with changes not committed")
			}
		}
		if v.Go != "" {
			fmt.Fprintf(&b, "; %s", v.Go)
		}
		return b.String()
	}
	s := "queuey " + v.Version
	if v.Go != "" {
		s += " (" + v.Go + ")"
	}
	return s
}
