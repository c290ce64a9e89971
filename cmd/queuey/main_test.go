package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/internal/memapi"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// deployment is a queuey deployment on membroker: the work queue "jobs"
// with six dead letters (three exhausted "email" jobs e-0..e-2, two fatal
// "charge" jobs c-0, c-1, one malformed body), two ready jobs and one job
// in a hold queue; and a management API over it.
type deployment struct {
	broker *membroker.Broker
	mgmt   *httptest.Server
	// down stops the broker, as far as the command sees: dials are
	// refused and the management API answers 503.
	down atomic.Bool
}

// dial is the command's dialer on d: the URL amqp://guest:guest@mem/
// reaches its broker while it is up.
func (d *deployment) dial(_ context.Context, url string) (opener, func() error, error) {
	if url != "amqp://guest:guest@mem/" || d.down.Load() {
		return nil, nil, fmt.Errorf("cannot reach the broker at %s: connection refused", rabbitmq.Redact(url))
	}
	conn, err := d.broker.Dial()
	if err != nil {
		return nil, nil, err
	}
	return func() (rabbitmq.InspectChannel, error) { return conn.Channel() }, conn.Close, nil
}

// backend is a backend with top on a connection of its own to d's broker,
// both closed when the test ends.
func (d *deployment) backend(t *testing.T, top rabbitmq.Topology) *rabbitmq.Backend {
	t.Helper()
	conn, err := d.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	b, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{Topology: top})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	d := &deployment{broker: membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})}
	// No warm-up: this membroker is never killed.
	b := d.backend(t, rabbitmq.Topology{HoldWarmup: -1})
	ctx := t.Context()
	if err := b.Declare(ctx, queuey.QueueConfig{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	env := func(id, kind string, attempt int) queuey.Envelope {
		return queuey.Envelope{ID: id, Kind: kind, Queue: "jobs", Payload: json.RawMessage(`{"to":"a@example.com"}`), Attempt: attempt, EnqueuedAt: at}
	}
	deadLetter := func(e queuey.Envelope, reason string) {
		body, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.DeadLetter(ctx, "jobs", body, reason, e.Attempt); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		deadLetter(env(fmt.Sprintf("e-%d", i), "email", 5), queuey.ReasonAttemptsExhausted)
	}
	for i := range 2 {
		deadLetter(env(fmt.Sprintf("c-%d", i), "charge", 1), "fatal: card declined")
	}
	if err := b.DeadLetter(ctx, "jobs", []byte("{oops"), queuey.ReasonMalformed, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := b.Publish(ctx, env(fmt.Sprintf("n-%d", i), "email", 1), 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Publish(ctx, env("h-0", "email", 2), 30*time.Second, queuey.HoldRetry); err != nil {
		t.Fatal(err)
	}
	// Over whichever broker d has: a test may replace it.
	d.mgmt = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api := memapi.New(d.broker, "guest", "guest")
		api.SetDown(d.down.Load())
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(d.mgmt.Close)
	return d
}

// managementURL is the URL of a management API over d: "ok" its own, "401"
// its own with a password it refuses, "refused" one where nothing listens.
func (d *deployment) managementURL(t *testing.T, which string) string {
	t.Helper()
	switch which {
	case "ok":
		return d.mgmt.URL
	case "401":
		return strings.Replace(d.mgmt.URL, "http://", "http://guest:topsecret@", 1)
	case "refused":
		gone := httptest.NewServer(http.NotFoundHandler())
		gone.Close()
		return gone.URL
	}
	t.Fatalf("no management API %q", which)
	return ""
}

func (d *deployment) count(t *testing.T, queue string) int {
	t.Helper()
	q, ok := d.broker.Queue(queue)
	if !ok {
		t.Fatalf("no queue %s", queue)
	}
	return q.Ready + q.Unacked
}

// runCLI runs the command on d with env and stdin; interactive says
// whether stdin and stderr are a terminal.
func (d *deployment) runCLI(t *testing.T, env map[string]string, stdin string, interactive bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut,
		getenv:      func(k string) string { return env[k] },
		interactive: interactive,
		dial:        d.dial,
	}
	code = a.run(t.Context(), args)
	return code, out.String(), errOut.String()
}

func TestCommands(t *testing.T) {
	const url = "amqp://guest:guest@mem/"
	for _, tc := range []struct {
		name        string
		args        []string
		noURL       bool
		mgmt        string // the management API: "" none, "ok", "401" (a wrong password), "refused", or a URL
		stdin       string
		interactive bool
		code        int
		stdout      []string // each must appear
		stderr      []string
		dead, work  int // the queues' counts after, when dead > -1
	}{
		{name: "no command", args: nil, code: 2, stderr: []string{"no command"}, dead: 6, work: 2},
		{name: "help", args: []string{"--help"}, code: 0, stdout: []string{"queuey dead redrive QUEUE"}, dead: 6, work: 2},
		{name: "unknown command", args: []string{"top"}, code: 2, stderr: []string{`unknown command "top"`}, dead: 6, work: 2},
		{name: "no broker", args: []string{"stats", "jobs"}, noURL: true, code: 2, stderr: []string{"set AMQP_URL or pass --url"}, dead: 6, work: 2},
		{name: "unreachable broker", args: []string{"--url", "amqp://guest:topsecret@nowhere:5672/", "stats", "jobs"}, code: 1,
			stderr: []string{"cannot reach the broker at amqp://guest:xxxxx@nowhere:5672/"}, dead: 6, work: 2},
		{name: "flag a command does not take", args: []string{"stats", "jobs", "--yes"}, code: 2, stderr: []string{"stats does not take --yes"}, dead: 6, work: 2},
		{name: "bad limit", args: []string{"dead", "ls", "jobs", "--limit", "-1"}, code: 2, stderr: []string{"--limit must be"}, dead: 6, work: 2},
		{name: "version", args: []string{"version"}, noURL: true, code: 0, stdout: []string{"queuey "}, dead: 6, work: 2},
		{name: "version flag", args: []string{"--version"}, noURL: true, code: 0, stdout: []string{"queuey "}, dead: 6, work: 2},
		{name: "version with an argument", args: []string{"version", "jobs"}, code: 2, stderr: []string{"version takes no arguments"}, dead: 6, work: 2},

		{name: "stats", args: []string{"stats", "jobs"}, code: 0,
			stdout: []string{"QUEUE  READY  UNACKED  CONSUMERS  DEAD  HOLD QUEUES  HELD  QUORUM QUEUES\njobs   2      -        0          6     -            -     -\n", "need the management API"}, dead: 6, work: 2},
		{name: "stats with the management API", args: []string{"stats", "jobs"}, mgmt: "ok", code: 0,
			stdout: []string{"jobs   2      0        0          6     0            0     1\n",
				`the hold ladder "queuey", shared by every work queue: 23 hold queues, 1 job held`,
				"24 quorum queues for these work queues and the ladder", `hold queues of the ladder "queuey" holding jobs:`,
				"queuey.ladder.16000  16s  ladder  1", "(and 22 empty)"}, dead: 6, work: 2},
		{name: "stats json", args: []string{"stats", "--json", "jobs"}, mgmt: "ok", code: 0,
			stdout: []string{`"dead": 6`, `"holds": []`, `"unacked": 0`, `"quorum_queues": 1`}, dead: 6, work: 2},
		{name: "stats when the management API refuses the user", args: []string{"stats", "jobs"}, mgmt: "401", code: 0,
			stdout: []string{"jobs   2      -        0          6     -            -", "(unacked and hold queues unknown: the management API failed)"},
			stderr: []string{"queuey: the management API failed, so unacked counts and hold queues are unknown: ", "401 Unauthorized"}, dead: 6, work: 2},
		{name: "stats when the management API is not there", args: []string{"stats", "jobs", "--json"}, mgmt: "refused", code: 0,
			stdout: []string{`"dead": 6`, `"unacked": null`, `"holds": null`, `"quorum_queues": null`}, stderr: []string{"the management API failed", "refused"}, dead: 6, work: 2},
		{name: "stats with a bad management URL", args: []string{"stats", "jobs", "--management-url", "localhost:15672"}, code: 0,
			stdout: []string{"jobs   2      -"}, stderr: []string{"the management API failed", `management API URL "localhost:15672": want http(s)://host:port/`}, dead: 6, work: 2},
		{name: "stats with a bad management URL and a password", args: []string{"stats", "jobs", "--management-url", "htp://guest:topsecret@localhost:15672"}, code: 0,
			stdout: []string{"jobs   2      -"}, stderr: []string{"the management API failed", "xxxxx"}, dead: 6, work: 2},

		{name: "queues", args: []string{"queues"}, mgmt: "ok", code: 0,
			stdout: []string{"QUEUE  READY  UNACKED  CONSUMERS  DEAD  HOLD QUEUES  HELD  QUORUM QUEUES\njobs   2      0        0          6     0            0     1\n\n" +
				"the hold ladder \"queuey\", shared by every work queue: 23 hold queues, 1 job held\n\n24 quorum queues for these work queues and the ladder"}, dead: 6, work: 2},
		{name: "queues json", args: []string{"queues", "--json"}, mgmt: "ok", code: 0,
			stdout: []string{`"queue": "jobs"`, `"dead": 6`, `"unacked": 0`, `"quorum_queues": 1`}, dead: 6, work: 2},
		{name: "queues without the management API", args: []string{"queues"}, code: 2,
			stderr: []string{"queues needs the management API, since AMQP cannot list queues: set RABBITMQ_MANAGEMENT_URL or pass --management-url"}, dead: 6, work: 2},
		{name: "queues with a bad management URL", args: []string{"queues", "--management-url", "localhost:15672"}, code: 2, stderr: []string{"management API URL"}, dead: 6, work: 2},
		{name: "queues when the management API refuses the user", args: []string{"queues"}, mgmt: "401", code: 1, stderr: []string{"401 Unauthorized"}, dead: 6, work: 2},
		{name: "queues with an argument", args: []string{"queues", "jobs"}, mgmt: "ok", code: 2, stderr: []string{"queues takes no arguments"}, dead: 6, work: 2},
		{name: "stats unknown queue", args: []string{"stats", "nope"}, code: 1, stderr: []string{`no such queue: "nope"`, "--dead-suffix"}, dead: 6, work: 2},

		{name: "ls", args: []string{"dead", "ls", "jobs"}, code: 0,
			stdout: []string{"ID   KIND    ATTEMPT  ENQUEUED              REASON", "e-0  email   5        2026-11-30T09:00:00Z  attempts exhausted", "c-1  charge  1", "fatal: card declined",
				"(and 1 malformed dead letter not listed: --malformed lists them)\n"}, dead: 6, work: 2},
		{name: "ls malformed", args: []string{"dead", "ls", "jobs", "--malformed"}, code: 0, stdout: []string{"malformed envelope (5 bytes)"}, dead: 6, work: 2},
		{name: "ls only malformed", args: []string{"dead", "ls", "jobs", "--reason", "malformed"}, code: 0,
			stdout: []string{"jobs has no dead letters to list but 1 malformed one (--malformed lists them)\n"}, dead: 6, work: 2},
		{name: "ls filter", args: []string{"dead", "ls", "--reason", "fatal", "jobs"}, code: 0, stdout: []string{"c-0", "c-1"}, dead: 6, work: 2},
		{name: "ls limit", args: []string{"dead", "ls", "jobs", "--limit", "2"}, code: 0, stdout: []string{"the first 2"}, dead: 6, work: 2},
		{name: "ls json", args: []string{"dead", "ls", "jobs", "--kind", "charge", "--json"}, code: 0,
			stdout: []string{`"id": "c-0"`, `"reason": "fatal: card declined"`, `"envelope": {`}, dead: 6, work: 2},
		{name: "ls matching nothing", args: []string{"dead", "ls", "jobs", "--kind", "sms"}, code: 0, stdout: []string{`no dead letters of jobs match --kind "sms"`}, dead: 6, work: 2},
		{name: "ls json matching nothing", args: []string{"dead", "ls", "jobs", "--kind", "sms", "--json"}, code: 0, stdout: []string{"[]"}, dead: 6, work: 2},
		{name: "ls ignores the management API", args: []string{"dead", "ls", "jobs", "--management-url", "localhost:15672"}, code: 0, stdout: []string{"e-0"}, dead: 6, work: 2},
		{name: "ls unknown queue", args: []string{"dead", "ls", "nope"}, code: 1, stderr: []string{`no such queue: "nope.dead"`}, dead: 6, work: 2},

		{name: "show", args: []string{"dead", "show", "jobs", "c-1"}, code: 0,
			stdout: []string{"id:               c-1\n", "reason:           fatal: card declined\n", "dead-lettered at: 20", `"kind": "charge"`}, dead: 6, work: 2},
		{name: "show json", args: []string{"dead", "show", "jobs", "c-1", "--json"}, code: 0, stdout: []string{`"id": "c-1"`}, dead: 6, work: 2},
		{name: "show unknown id", args: []string{"dead", "show", "jobs", "zz"}, code: 1, stderr: []string{`queuey: jobs has no dead letter with the job ID "zz"`}, dead: 6, work: 2},

		{name: "redrive needs yes", args: []string{"dead", "redrive", "jobs"}, code: 2,
			stderr: []string{"queuey: not confirmed, so nothing was done: queuey would redrive 5 dead letters from jobs.dead to jobs, but it cannot ask since stdin is not a terminal; pass --yes to go ahead"}, dead: 6, work: 2},
		{name: "redrive declined", args: []string{"dead", "redrive", "jobs"}, interactive: true, stdin: "n\n", code: 1,
			stderr: []string{"Redrive the 5 dead letters (not the malformed one) from jobs.dead to jobs, keeping their attempt counts? [y/N]", "cancelled"}, dead: 6, work: 2},
		{name: "redrive all declined", args: []string{"dead", "redrive", "jobs", "--malformed", "--reset-attempts"}, interactive: true, stdin: "no\n", code: 1,
			stderr: []string{"Redrive all 6 dead letters from jobs.dead to jobs, starting their attempts over at 1? [y/N]"}, dead: 6, work: 2},
		{name: "redrive one declined", args: []string{"dead", "redrive", "jobs", "--id", "e-1"}, interactive: true, stdin: "\n", code: 1,
			stderr: []string{`Redrive the one dead letter matching --id "e-1" from jobs.dead to jobs, keeping its attempt count? [y/N]`}, dead: 6, work: 2},
		{name: "redrive confirmed", args: []string{"dead", "redrive", "jobs", "--reason", "exhausted", "--reset-attempts"}, interactive: true, stdin: "y\n", code: 0,
			stdout: []string{"redrove 3 of the 6 dead letters read from jobs.dead to jobs (attempts reset to 1); left in place: 3 not matching"}, dead: 3, work: 5},
		{name: "redrive yes", args: []string{"dead", "redrive", "jobs", "--yes", "--id", "c-0,e-2"}, code: 0, stdout: []string{"redrove 2 of the 6 dead letters read"}, dead: 4, work: 4},
		{name: "redrive dry run", args: []string{"dead", "redrive", "jobs", "--dry-run", "--malformed"}, code: 0, stdout: []string{"dry run: would redrive 6 dead letters from jobs.dead to jobs"}, dead: 6, work: 2},
		{name: "redrive json", args: []string{"dead", "redrive", "jobs", "--yes", "--kind", "charge", "--json"}, code: 0,
			stdout: []string{`"moved": 2`, `"skipped": 4`}, dead: 4, work: 4},
		{name: "redrive matching nothing", args: []string{"dead", "redrive", "jobs", "--yes", "--reason", "timeout"}, code: 0,
			stdout: []string{`nothing to redrive: no dead letters of jobs match --reason "timeout"`}, dead: 6, work: 2},
		{name: "redrive json matching nothing", args: []string{"dead", "redrive", "jobs", "--reason", "timeout", "--json"}, code: 0,
			stdout: []string{`"moved": 0`, `"skipped": 6`}, dead: 6, work: 2},

		{name: "purge needs yes", args: []string{"dead", "purge", "jobs"}, code: 2,
			stderr: []string{"queuey would delete all 6 dead letters of jobs.dead, but it cannot ask since stdin is not a terminal; pass --yes to go ahead"}, dead: 6, work: 2},
		{name: "purge declined", args: []string{"dead", "purge", "jobs"}, interactive: true, stdin: "\n", code: 1,
			stderr: []string{"Delete all 6 dead letters of jobs.dead for good? [y/N]"}, dead: 6, work: 2},
		{name: "purge", args: []string{"dead", "purge", "jobs", "--yes"}, code: 0, stdout: []string{"purged 6 dead letters from jobs.dead"}, dead: 0, work: 2},
		{name: "purge a filter", args: []string{"dead", "purge", "jobs", "--yes", "--kind", "x"}, code: 2, stderr: []string{"dead purge does not take --kind"}, dead: 6, work: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDeployment(t)
			env := map[string]string{"AMQP_URL": url}
			if tc.noURL {
				env = nil
			}
			if tc.mgmt != "" {
				env["RABBITMQ_MANAGEMENT_URL"] = d.managementURL(t, tc.mgmt)
			}
			code, stdout, stderr := d.runCLI(t, env, tc.stdin, tc.interactive, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			if strings.Contains(stdout+stderr, "topsecret") {
				t.Errorf("a password was printed:\n%s%s", stdout, stderr)
			}
			if got, want := [2]int{d.count(t, "jobs.dead"), d.count(t, "jobs")}, [2]int{tc.dead, tc.work}; got != want {
				t.Errorf("after: %d dead, %d in jobs; want %d, %d", got[0], got[1], want[0], want[1])
			}
		})
	}
}

// A redriven job keeps its envelope: same ID, kind and payload, attempts
// as asked.
func TestRedrivenJobIsTheSameJob(t *testing.T) {
	d := newDeployment(t)
	env := map[string]string{"AMQP_URL": "amqp://guest:guest@mem/"}
	if code, _, stderr := d.runCLI(t, env, "", false, "dead", "redrive", "jobs", "--yes", "--id", "e-1", "--reset-attempts"); code != 0 {
		t.Fatal(stderr)
	}
	conn, err := d.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var got []queuey.Envelope
	for {
		m, ok, err := ch.Get("jobs", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		e, err := queuey.DecodeEnvelope(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	last := got[len(got)-1]
	if len(got) != 3 || last.ID != "e-1" || last.Kind != "email" || last.Attempt != 1 || string(last.Payload) != `{"to":"a@example.com"}` {
		t.Fatalf("work queue holds %+v; want n-0, n-1, then e-1 at attempt 1 with its payload", got)
	}
}

// A URL the client library cannot parse never shows its password: its
// parse error quotes the URL whole.
func TestDialHidesThePasswordOfABadURL(t *testing.T) {
	for _, u := range []string{
		"amqp://user:s3cr3t@localhost:5672x/", // a bad port
		"amqp://user:s3cr3t%zz@localhost/",    // a bad escape
	} {
		_, _, err := dialAMQP(t.Context(), u)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("dialAMQP(%q): %v", u, err)
		}
	}
}
