package execute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

// msg is a delivery that records its settlements.
type msg struct {
	body  []byte
	stale bool
	log   *[]string
}

func (m *msg) Body() []byte   { return m.body }
func (m *msg) Ack() error     { *m.log = append(*m.log, "ack"); return nil }
func (m *msg) Requeue() error { *m.log = append(*m.log, "requeue"); return nil }
func (m *msg) Stale() bool    { return m.stale }

// shell runs handlers when the test says, and timers when the test fires
// them.
type shell struct {
	log     []string
	running []Action[*msg]
	timers  []func() // each moves now to its instant, then fires
	now     time.Time
	again   time.Duration // After's answer to the next publish
}

func (s *shell) RunHandler(a Action[*msg])   { s.running = append(s.running, a) }
func (s *shell) Jitter(Action[*msg]) float64 { return 0.5 }
func (s *shell) Now() time.Time              { return s.now }
func (s *shell) AfterFunc(d time.Duration, f func()) Timer {
	at := s.now.Add(d)
	s.timers = append(s.timers, func() { s.now = at; f() })
	return noTimer{}
}

type noTimer struct{}

func (noTimer) Stop() bool             { return true }
func (s *shell) Before(a Action[*msg]) { s.log = append(s.log, "before "+a.Kind.String()) }
func (s *shell) After(a Action[*msg], _ string, err error) time.Duration {
	s.log = append(s.log, fmt.Sprintf("after %s: %v", a.Kind, err))
	if a.Kind == workercore.Publish && s.again > 0 {
		again := s.again
		s.again = 0
		return again
	}
	return 0
}

// backend confirms every publish, or fails it with err.
type backend struct {
	contract.Backend
	published int
	err       error
}

func (b *backend) Publish(context.Context, envelope.Envelope, time.Duration, contract.HoldKind) error {
	b.published++
	return b.err
}

func setup(t *testing.T) (*Executor[*msg], *shell, *backend, *msg) {
	t.Helper()
	q := contract.QueueConfig{Name: "jobs"}.WithDefaults()
	core := settle.New[*msg]([]contract.QueueConfig{q}, workercore.Config{RequeueDelay: time.Second})
	core.ConnectionUp(1)
	sh, be := &shell{}, &backend{}
	x := New[*msg](context.Background(), core, sh, be, []contract.QueueConfig{q})
	body, err := envelope.Envelope{ID: "j1", Kind: "k", Queue: "jobs", Attempt: 1, EnqueuedAt: time.Unix(1, 0), Payload: []byte("null")}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m := &msg{body: body, log: &sh.log}
	x.Deliver(0, 1, m)
	if len(sh.running) != 1 {
		t.Fatalf("%d handlers running, want 1", len(sh.running))
	}
	return x, sh, be, m
}

func requireLog(t *testing.T, sh *shell, want ...string) {
	t.Helper()
	if !slices.Equal(sh.log, want) {
		t.Fatalf("log:\n %q\nwant\n %q", sh.log, want)
	}
}

func TestARetryIsAcknowledgedAfterItsSuccessorIsConfirmed(t *testing.T) {
	x, sh, be, _ := setup(t)
	x.HandlerDone(&sh.running[0], errors.New("boom"), 0.5)
	requireLog(t, sh, "before publish", "after publish: <nil>", "before ack", "ack", "after ack: <nil>")
	if be.published != 1 {
		t.Fatalf("%d publishes", be.published)
	}
}

func TestAStaleDeliveryPublishesNothing(t *testing.T) {
	x, sh, be, m := setup(t)
	m.stale = true
	x.HandlerDone(&sh.running[0], errors.New("boom"), 0.5)
	requireLog(t, sh, "before drop")
	if be.published != 0 {
		t.Fatalf("published a successor of a stale delivery")
	}
}

func TestAFailedPublishRequeuesAfterTheDelay(t *testing.T) {
	x, sh, be, _ := setup(t)
	be.err = errors.New("nack")
	x.HandlerDone(&sh.running[0], errors.New("boom"), 0.5)
	requireLog(t, sh, "before publish", "after publish: nack", "before start-timer")
	sh.timers[1]() // [0] is the handler's deadline
	requireLog(t, sh, "before publish", "after publish: nack", "before start-timer", "before requeue", "requeue", "after requeue: <nil>")
}

func TestAPublishAskedAgainIsRetriedUnlessItWentStale(t *testing.T) {
	x, sh, be, _ := setup(t)
	sh.again = time.Second
	x.HandlerDone(&sh.running[0], errors.New("boom"), 0.5)
	sh.timers[1]() // published again, confirmed, acknowledged ([0] is the handler's deadline)
	if be.published != 2 || sh.log[len(sh.log)-2] != "ack" {
		t.Fatalf("%d publishes; log %q", be.published, sh.log)
	}

	x, sh, be, m := setup(t)
	sh.again = time.Second
	x.HandlerDone(&sh.running[0], errors.New("boom"), 0.5)
	m.stale = true
	sh.timers[1]() // the core hears ErrStale: the job waits to be requeued
	if be.published != 1 || sh.log[len(sh.log)-1] != "before start-timer" {
		t.Fatalf("%d publishes; log %q", be.published, sh.log)
	}
}

// A handler that overruns its timeout and grace is abandoned: its job is
// retried as timed out, and its late return settles nothing.
func TestAHandlerPastItsDeadlineIsAbandoned(t *testing.T) {
	x, sh, be, _ := setup(t)
	if len(sh.timers) != 1 {
		t.Fatalf("%d timers after RunHandler, want the deadline", len(sh.timers))
	}
	sh.timers[0]()
	requireLog(t, sh, "before abandon", "before publish", "after publish: <nil>", "before ack", "ack", "after ack: <nil>")
	if be.published != 1 {
		t.Fatalf("%d publishes", be.published)
	}
	x.HandlerDone(&sh.running[0], nil, 0.5)
	requireLog(t, sh, "before abandon", "before publish", "after publish: <nil>", "before ack", "ack", "after ack: <nil>", "before late")
}

// A handler abandoned after its channel closed publishes no successor:
// the broker has requeued its job, and a successor would run beside it.
// The abandonment drops the job instead, and the late return settles
// nothing.
func TestAnAbandonedStaleDeliveryPublishesNothing(t *testing.T) {
	x, sh, be, m := setup(t)
	m.stale = true
	sh.timers[0]()
	if be.published != 0 || slices.Contains(sh.log, "ack") {
		t.Fatalf("%d publishes after abandoning a stale delivery; log %q", be.published, sh.log)
	}
	x.HandlerDone(&sh.running[0], nil, 0.5)
	if be.published != 0 || slices.Contains(sh.log, "ack") {
		t.Fatalf("the late return settled it: log %q", sh.log)
	}
}

// A handler that returns in time stops its deadline: abandoning it later
// does nothing.
func TestAHandlerInTimeIsNeverAbandoned(t *testing.T) {
	x, sh, _, _ := setup(t)
	x.HandlerDone(&sh.running[0], nil, 0.5)
	n := len(sh.log)
	x.abandon(sh.running[0].ID)
	if len(sh.log) != n {
		t.Fatalf("abandoned a handler that returned: %q", sh.log[n:])
	}
}

// One timer watches a queue's handlers in the order they started: a
// handler that returned is skipped, only the one past its timeout and
// grace is abandoned, and the timer then waits for the next.
func TestOneTimerWatchesAQueuesHandlersInOrder(t *testing.T) {
	x, sh, _, m := setup(t) // j1 at 0
	timeout := contract.DefaultTimeout + contract.AbandonGrace
	sh.now = sh.now.Add(time.Minute)
	x.Deliver(0, 1, &msg{body: m.body, log: &sh.log}) // j2 at 1 min
	sh.now = sh.now.Add(time.Minute)
	x.Deliver(0, 1, &msg{body: m.body, log: &sh.log}) // j3 at 2 min
	if len(sh.timers) != 1 || len(sh.running) != 3 {
		t.Fatalf("%d timers for %d running handlers, want one", len(sh.timers), len(sh.running))
	}
	x.HandlerDone(&sh.running[1], nil, 0.5) // j2 returns; j1 and j3 hang
	sh.log = nil
	sh.timers[0]() // j1's time: abandoned
	if !sh.now.Equal((time.Time{}).Add(timeout)) {
		t.Fatalf("the timer fired at %s", sh.now)
	}
	if len(sh.log) == 0 || sh.log[0] != "before abandon" || len(sh.timers) != 2 {
		t.Fatalf("at j1's time: log %q, %d timers", sh.log, len(sh.timers))
	}
	sh.log = nil
	sh.timers[1]() // re-armed for j3, not j2 (returned): j3 abandoned at its own time
	if len(sh.log) == 0 || sh.log[0] != "before abandon" || !sh.now.Equal((time.Time{}).Add(2*time.Minute+timeout)) {
		t.Fatalf("at j3's time %s: log %q", sh.now, sh.log)
	}
	if len(x.finished) != 0 || len(x.overdueIDs) != 2 {
		t.Fatalf("%d finished, %d overdue kept", len(x.finished), len(x.overdueIDs))
	}
	x.HandlerDone(&sh.running[0], nil, 0.5) // late returns
	x.HandlerDone(&sh.running[2], nil, 0.5)
	if len(x.overdueIDs) != 0 || len(x.watches[0].run) != 0 {
		t.Fatalf("after the late returns: %d overdue, %d watched", len(x.overdueIDs), len(x.watches[0].run))
	}
}
