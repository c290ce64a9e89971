package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

const memURL = "amqp://guest:guest@mem/"

// addMail adds to d a second work queue, "mail", with classic holds and
// one job held 5 s in mail.deferred.5000; and "other", a queue that is
// not queuey's (no dead-letter queue), holding one message.
func (d *deployment) addMail(t *testing.T) {
	t.Helper()
	b := d.backend(t, rabbitmq.Topology{ClassicHolds: true})
	ctx := t.Context()
	if err := b.Declare(ctx, queuey.QueueConfig{Name: "mail"}); err != nil {
		t.Fatal(err)
	}
	env := queuey.Envelope{ID: "m-0", Kind: "email", Queue: "mail", Payload: json.RawMessage(`{}`), Attempt: 2, EnqueuedAt: time.Now()}
	if err := b.Publish(ctx, env, 5*time.Second, queuey.HoldRetry); err != nil {
		t.Fatal(err)
	}
	ch := d.channel(t)
	if _, err := ch.QueueDeclare("other", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "other", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
}

// channel is a channel of its own on d's broker.
func (d *deployment) channel(t *testing.T) *membroker.Channel {
	t.Helper()
	conn, err := d.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// queueNames lists d's queues whose names start with prefix.
func (d *deployment) queueNames(prefix string) []string {
	var names []string
	for _, q := range d.broker.Queues() {
		if strings.HasPrefix(q.Name, prefix) {
			names = append(names, q.Name)
		}
	}
	return names
}

// queuey queues lists the work queues, each with its figures, and none of
// the queues beside them or queues that are not queuey's.
func TestQueuesListsTheWorkQueues(t *testing.T) {
	d := newDeployment(t)
	d.addMail(t)
	env := map[string]string{"AMQP_URL": memURL, "RABBITMQ_MANAGEMENT_URL": d.mgmt.URL}
	code, stdout, stderr := d.runCLI(t, env, "", false, "queues")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	table, _, _ := strings.Cut(stdout, "\n\n")
	// jobs: its dead-letter queue, its held job on the shared ladder;
	// mail, with classic holds, a hold queue of its own.
	want := "QUEUE  READY  UNACKED  CONSUMERS  DEAD  HOLD QUEUES  HELD  QUORUM QUEUES\n" +
		"jobs   2      0        0          6     0            0     1\n" +
		"mail   0      0        0          0     1            1     0"
	if table != want {
		t.Fatalf("queues:\n%s\nwant\n%s", stdout, want)
	}
	code, stdout, stderr = d.runCLI(t, env, "", false, "queues", "--json")
	var got []statsJSON
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil {
		t.Fatalf("queues --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	if len(got) != 2 || got[1].Queue != "mail" || len(got[1].Holds) != 1 || got[1].Holds[0] != (holdJSON{"mail.deferred.5000", 5000, "classic", 1}) {
		t.Fatalf("queues --json: %+v", got)
	}

	// A virtual host with no work queue is an empty listing, not an error.
	d.broker = membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
	code, stdout, _ = d.runCLI(t, env, "", false, "queues")
	if code != 0 || !strings.Contains(stdout, "no queuey work queues here") {
		t.Fatalf("queues on an empty broker: exit %d\n%s", code, stdout)
	}
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"released", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/queuey/queuey", Version: "v1.4.0"}},
			"queuey v1.4.0 (go1.26.0)\n"},
		{"checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/queuey/queuey", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "5f63b17"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"queuey (devel): built from a source checkout, not a released version; commit 5f63b17 of 2026-12-01T10:00:00Z, with changes not committed; go1.26.0\n"},
		{"checkout without VCS", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/queuey/queuey", Version: "(devel)"}},
			"queuey (devel): built from a source checkout, not a released version; go1.26.0\n"},
		{"no build information", nil, "queuey: version unknown: this binary carries no build information\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{{"version"}, {"--version"}} {
				var out, errOut strings.Builder
				a := &app{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" },
					buildInfo: func() (*debug.BuildInfo, bool) { return tc.bi, tc.bi != nil }}
				if code := a.run(t.Context(), args); code != 0 || out.String() != tc.want {
					t.Errorf("queuey %s: exit %d\n%q\nwant\n%q\n%s", args[0], code, out.String(), tc.want, errOut.String())
				}
			}
		})
	}
	var out strings.Builder
	a := &app{stdout: &out, stderr: &out, getenv: func(string) string { return "" },
		buildInfo: func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/queuey/queuey", Version: "v1.4.0"}}, true
		}}
	var v versionInfo
	if code := a.run(t.Context(), []string{"version", "--json"}); code != 0 || json.Unmarshal([]byte(out.String()), &v) != nil || v.Version != "v1.4.0" || v.Go != "go1.26.0" {
		t.Fatalf("version --json: exit %d\n%s", code, out.String())
	}
}

// An empty listing, or nothing to redrive or purge, is a success.
func TestNothingToDoIsASuccess(t *testing.T) {
	d := newDeployment(t)
	env := map[string]string{"AMQP_URL": memURL}
	for _, step := range []struct {
		args   []string
		stdout string
	}{
		{[]string{"dead", "purge", "jobs", "--yes"}, "purged 6 dead letters from jobs.dead\n"},
		{[]string{"dead", "purge", "jobs", "--yes"}, "nothing to purge: jobs.dead is empty\n"},
		{[]string{"dead", "purge", "jobs", "--json"}, `"purged": 0`},
		{[]string{"dead", "ls", "jobs"}, "jobs has no dead letters, apart from any malformed ones (--malformed includes those)\n"},
		{[]string{"dead", "ls", "jobs", "--malformed"}, "jobs has no dead letters\n"},
		{[]string{"dead", "ls", "jobs", "--json"}, "[]\n"},
		{[]string{"dead", "redrive", "jobs"}, "nothing to redrive: jobs has no dead letters, apart from any malformed ones"},
	} {
		code, stdout, stderr := d.runCLI(t, env, "", false, step.args...)
		if code != 0 || !strings.Contains(stdout, step.stdout) {
			t.Errorf("queuey %s: exit %d\n%s%s\nwant 0 and %q", strings.Join(step.args, " "), code, stdout, stderr, step.stdout)
		}
	}
}

// dead show says when the job was dead-lettered: for the broker's dead
// letters, x-death's time; for queuey's, the message's timestamp when it
// has one.
func TestDeadShowSaysWhenTheJobDied(t *testing.T) {
	mock := clock.NewMock()
	died := time.Date(2026, 12, 1, 22, 13, 17, 0, time.UTC)
	mock.Set(died)
	d := &deployment{broker: membroker.New(membroker.Config{Clock: mock, Version: membroker.RabbitMQ40})}
	b := d.backend(t, rabbitmq.Topology{HoldWarmup: -1})
	ctx := t.Context()
	if err := b.Declare(ctx, queuey.QueueConfig{Name: "q", Type: queuey.Quorum}); err != nil {
		t.Fatal(err)
	}
	env := queuey.Envelope{ID: "poison", Kind: "email", Queue: "q", Payload: json.RawMessage(`{}`), Attempt: 1, EnqueuedAt: died.Add(-time.Hour)}
	if err := b.Publish(ctx, env, 0, queuey.HoldRetry); err != nil {
		t.Fatal(err)
	}
	ch := d.channel(t)
	for { // a worker crashing on every delivery, until the delivery limit
		m, ok, err := ch.Get("q", false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if err := ch.Reject(m.DeliveryTag, true); err != nil {
			t.Fatal(err)
		}
	}
	// One queuey dead-lettered, stamped by hand, as Backend.DeadLetter
	// would with a timestamp.
	stamped := queuey.Envelope{ID: "stamped", Kind: "email", Queue: "q", Payload: json.RawMessage(`{}`), Attempt: 3, EnqueuedAt: died.Add(-time.Hour)}
	body, err := stamped.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "q.dead", false, false, amqp.Publishing{Body: body, Timestamp: died.Add(time.Minute),
		Headers: amqp.Table{rabbitmq.HeaderDeathReason: queuey.ReasonAttemptsExhausted, rabbitmq.HeaderOriginalQueue: "q", rabbitmq.HeaderAttempts: int64(3)}}); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Hour) // the time shown is the death's, not the reading's
	for _, tc := range []struct{ id, want, json string }{
		{"poison", "reason:           broker: delivery_limit\nby:               the broker\n", `"dead_lettered_at": "2026-12-01T22:13:17Z"`},
		{"stamped", "by:               queuey\n", `"dead_lettered_at": "2026-12-01T22:14:17Z"`},
	} {
		at := "dead-lettered at: " + strings.Trim(strings.TrimPrefix(tc.json, `"dead_lettered_at": `), `"`) + "\n"
		code, stdout, stderr := d.runCLI(t, map[string]string{"AMQP_URL": memURL}, "", false, "dead", "show", "q", tc.id)
		if code != 0 || !strings.Contains(stdout, tc.want) || !strings.Contains(stdout, at) {
			t.Errorf("dead show %s: exit %d\n%s%s\nwant %q and %q", tc.id, code, stdout, stderr, tc.want, at)
		}
		code, stdout, stderr = d.runCLI(t, map[string]string{"AMQP_URL": memURL}, "", false, "dead", "show", "q", tc.id, "--json")
		if code != 0 || !strings.Contains(stdout, tc.json) {
			t.Errorf("dead show %s --json: exit %d\n%s%s\nwant %q", tc.id, code, stdout, stderr, tc.json)
		}
	}
}

// queuey delete removes a work queue's whole topology, and every message in
// it, once confirmed; nothing else.
func TestDelete(t *testing.T) {
	d := newDeployment(t)
	d.addMail(t)
	// What earlier releases and other settings leave beside jobs: a classic
	// hold, a quorum hold of the per-TTL kind, a ladder of its own (a rung
	// and its relay queue), and the warm marker.
	ch := d.channel(t)
	quorum := amqp.Table{"x-queue-type": "quorum"}
	for name, args := range map[string]amqp.Table{
		"jobs.deferred.7000":         {"x-queue-type": "classic", "x-message-ttl": int64(7000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs"},
		"jobs.deferred.quorum.4000":  {"x-queue-type": "quorum", "x-message-ttl": int64(4000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs"},
		"jobs.deferred.ladder.16000": quorum,
		"jobs.deferred.relay":        quorum,
		"jobs.deferred.warm":         quorum,
	} {
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"jobs.deferred.7000", "jobs.deferred.quorum.4000", "jobs.deferred.ladder.16000"} {
		if err := ch.Publish("", name, false, false, amqp.Publishing{Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	jobsQueues := d.queueNames("jobs")
	if len(jobsQueues) != 7 { // jobs, jobs.dead, and these 5
		t.Fatalf("jobs has %d queues: %v", len(jobsQueues), jobsQueues)
	}
	env := map[string]string{"AMQP_URL": memURL, "RABBITMQ_MANAGEMENT_URL": d.mgmt.URL}
	summary := "jobs has 7 queues (the work queue, its dead-letter queue, 4 hold queues and the warm marker) holding 11 messages: 2 waiting in jobs, 3 held for a retry or a deferral, 6 in jobs.dead\n"
	for _, tc := range []struct {
		name        string
		args        []string
		noAPI       bool
		stdin       string
		interactive bool
		code        int
		stderr      []string
	}{
		{name: "needs yes", args: []string{"delete", "jobs"}, code: 2, stderr: []string{summary,
			"queuey: not confirmed, so nothing was done: queuey would delete 7 queues of jobs and the 11 messages in them, but it cannot ask since stdin is not a terminal; pass --yes to go ahead"}},
		{name: "declined", args: []string{"delete", "jobs"}, interactive: true, stdin: "n\n", code: 1, stderr: []string{summary,
			"Delete jobs with its dead-letter and hold queues (7 queues) and the 11 messages in them, for good? [y/N] ", "cancelled: nothing was changed"}},
		{name: "a dead-letter queue", args: []string{"delete", "jobs.dead", "--yes"}, code: 1,
			stderr: []string{`queuey: rabbitmq: not a work queue: "jobs.dead" is the dead-letter queue of "jobs"; name the work queue "jobs" to delete its whole topology`}},
		{name: "a rung", args: []string{"delete", "jobs.deferred.ladder.16000", "--yes"}, code: 1, stderr: []string{`is a hold ladder rung of "jobs"`}},
		{name: "the relay queue", args: []string{"delete", "jobs.deferred.relay", "--yes"}, code: 1, stderr: []string{`is the relay queue of "jobs"`}},
		{name: "the warm marker", args: []string{"delete", "jobs.deferred.warm", "--yes"}, code: 1, stderr: []string{`is the warm marker of "jobs"`}},
		{name: "a rung of the shared ladder", args: []string{"delete", "queuey.ladder.16000", "--yes"}, code: 1, stderr: []string{`one of the hold ladder's queues`}},
		{name: "a classic hold", args: []string{"delete", "mail.deferred.5000", "--yes"}, code: 1, stderr: []string{`is a classic hold queue of "mail"`}},
		{name: "a quorum hold", args: []string{"delete", "jobs.deferred.quorum.4000", "--yes"}, code: 1, stderr: []string{`is a quorum hold queue of "jobs"`}},
		{name: "not queuey's", args: []string{"delete", "other", "--yes"}, code: 1,
			stderr: []string{`queuey: rabbitmq: not a work queue: "other" has no dead-letter or hold queue beside it ("other.dead"): it is not a queuey work queue`}},
		{name: "no such queue", args: []string{"delete", "nope", "--yes"}, code: 1, stderr: []string{`no such queue: "nope", nor any queue of its topology`}},
		{name: "without the management API", args: []string{"delete", "jobs", "--yes"}, noAPI: true, code: 2, stderr: []string{"delete needs the management API"}},
		{name: "two queues", args: []string{"delete", "jobs", "mail"}, code: 2, stderr: []string{"delete takes one queue, not 2 arguments"}},
		{name: "a filter", args: []string{"delete", "jobs", "--kind", "email"}, code: 2, stderr: []string{"delete does not take --kind"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.noAPI {
				e = map[string]string{"AMQP_URL": memURL}
			}
			code, stdout, stderr := d.runCLI(t, e, tc.stdin, tc.interactive, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			if got := len(d.queueNames("")); got != 7+3+1+23 { // jobs', mail's, other, the shared ladder's
				t.Errorf("%d queues left, want all 34", got)
			}
		})
	}

	// A worker still consuming: refused before anything is asked.
	cons := d.channel(t)
	if _, err := cons.Consume("jobs.deferred.relay", "worker", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := d.runCLI(t, env, "y\n", true, "delete", "jobs")
	if code != 1 || !strings.Contains(stderr, "1 consumer on the queues of jobs: stop its workers first") || strings.Contains(stderr, "[y/N]") {
		t.Fatalf("delete with a consumer: exit %d\n%s", code, stderr)
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := d.runCLI(t, env, "y\n", true, "delete", "jobs")
	if code != 0 || stdout != "deleted 7 queues of jobs and the 11 messages in them\n" || !strings.Contains(stderr, summary) {
		t.Fatalf("delete: exit %d\n%s%s", code, stdout, stderr)
	}
	if left := d.queueNames("jobs"); len(left) != 0 {
		t.Fatalf("left after delete: %v", left)
	}
	if got := len(d.queueNames("")); got != 4+23 {
		t.Fatalf("%d queues left, want mail's 3, other and the shared ladder's 23", got)
	}
	code, _, stderr = d.runCLI(t, env, "", false, "delete", "jobs", "--yes")
	if code != 1 || !strings.Contains(stderr, "no such queue") {
		t.Fatalf("delete again: exit %d\n%s", code, stderr)
	}

	code, stdout, stderr = d.runCLI(t, env, "", false, "delete", "mail", "--yes", "--json")
	var out deleteJSON
	if err := json.Unmarshal([]byte(stdout), &out); code != 0 || err != nil {
		t.Fatalf("delete --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	want := deleteJSON{Queue: "mail", Messages: 1, Deleted: []queueJSON{{"mail", "work", 0}, {"mail.deferred.5000", "classic", 1}, {"mail.dead", "dead", 0}}}
	if got, _ := json.Marshal(out); string(got) != string(must(json.Marshal(want))) {
		t.Fatalf("delete --json: %s\nwant %s", got, must(json.Marshal(want)))
	}
	if stderr != "" {
		t.Fatalf("delete --json wrote to stderr: %s", stderr)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The stats table's ladder line says how many held jobs the broker has
// expired and not yet moved on, which after a restart can take minutes.
func TestStatsTableSaysWhatTheLadderHasDue(t *testing.T) {
	var out strings.Builder
	a := &app{stdout: &out, stderr: &out}
	st := []rabbitmq.QueueStats{{Queue: "jobs", Listed: true, Holds: []rabbitmq.HoldStats{}, QuorumQueues: 2}}
	ladder := &rabbitmq.LadderStats{Name: "queuey", QuorumQueues: 24, Holds: []rabbitmq.HoldStats{
		{Name: "queuey.relay", Type: "relay"},
		{Name: "queuey.ladder.1000", TTL: time.Second, Type: "ladder", Messages: 41, Due: 40},
	}}
	if _, err := a.statsTable(st, ladder); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`the hold ladder "queuey", shared by every work queue: 2 hold queues, 41 jobs held`,
		"40 of them are due and not yet moved on by the broker: after a restart or a kill, a rung can hold them up to 3 minutes",
		"26 quorum queues for these work queues and the ladder",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}
