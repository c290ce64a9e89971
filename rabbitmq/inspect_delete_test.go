package rabbitmq

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// deleteRig is a broker with two work queues declared by a Backend with
// the hold ladder, "jobs" and "jobs2", and an Inspector listing its queues.
type deleteRig struct {
	broker *membroker.Broker
	conn   *membroker.Connection
	ch     *membroker.Channel
	insp   *Inspector
}

func newDeleteRig(t *testing.T) *deleteRig {
	t.Helper()
	r := &deleteRig{broker: membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})}
	conn, err := r.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r.conn = conn
	b, err := New(Channels(conn.Channel), Options{Topology: Topology{HoldWarmup: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	for _, q := range []string{"jobs", "jobs2"} {
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	if r.ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	if r.insp, err = NewInspector(conn.Channel, InspectorOptions{Queues: memLister{r.broker}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// declare declares name with args, and publishes messages into it.
func (r *deleteRig) declare(t *testing.T, name string, args amqp.Table, messages int) {
	t.Helper()
	if _, err := r.ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	r.publish(t, name, messages)
}

// publish publishes messages into name.
func (r *deleteRig) publish(t *testing.T, name string, messages int) {
	t.Helper()
	for range messages {
		if err := r.ch.Publish("", name, false, false, amqp.Publishing{Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (r *deleteRig) names() []string {
	var names []string
	for _, q := range r.broker.Queues() {
		names = append(names, q.Name)
	}
	return names
}

func TestInspectorDeleteTopology(t *testing.T) {
	r := newDeleteRig(t)
	var top Topology
	// Besides what the Backend declared (the work queue, its dead-letter
	// queue, and the shared ladder, which is no work queue's): messages in
	// the work queue and the dead-letter queue; a ladder of its own as
	// earlier releases declared it, with a message in a rung and in its
	// relay queue, and a rung of a finer granularity than the default; a
	// classic hold; a quorum hold of earlier releases; the warm marker; and
	// queues whose names only look related.
	r.publish(t, "jobs", 2)
	r.publish(t, top.DeadQueue("jobs"), 3)
	quorum := amqp.Table{"x-queue-type": "quorum"}
	r.declare(t, "jobs.deferred.ladder.16000", quorum, 1)
	r.declare(t, "jobs.deferred.relay", quorum, 1)
	r.declare(t, top.HoldQueue("jobs", 7000), holdQueueArgs("jobs", 7000), 1)
	r.declare(t, "jobs.deferred.quorum.p3.4000", quorum, 1)
	r.declare(t, "jobs.deferred.ladder.500", quorum, 0)
	r.declare(t, top.WarmQueue("jobs"), quorum, 0)
	for _, name := range []string{"jobsx", "jobs.deferredx.1000", "jobs.deferred.x", "jobs.deadx"} {
		r.declare(t, name, nil, 1)
	}
	others := slices.DeleteFunc(r.names(), func(n string) bool {
		return n == "jobs" || n == "jobs.dead" || strings.HasPrefix(n, "jobs.deferred.") && n != "jobs.deferred.x"
	})

	found, err := r.insp.TopologyQueues(t.Context(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	// The warm marker first, the work queue, the old rungs it knows, the
	// old relay queue, what only the listing shows, and the dead-letter
	// queue last.
	want := []TopologyQueue{{Name: "jobs.deferred.warm", Role: "warm"}, {Name: "jobs", Role: "work", Messages: 2},
		{Name: "jobs.deferred.ladder.16000", Role: "ladder", Messages: 1},
		{Name: "jobs.deferred.relay", Role: "relay", Messages: 1},
	}
	want = append(want,
		TopologyQueue{Name: "jobs.deferred.7000", Role: "classic", Messages: 1},
		TopologyQueue{Name: "jobs.deferred.ladder.500", Role: "ladder"},
		TopologyQueue{Name: "jobs.deferred.quorum.p3.4000", Role: "quorum", Messages: 1},
		TopologyQueue{Name: "jobs.dead", Role: "dead", Messages: 3},
	)
	// The listing's order of what only it shows is the lister's: compare
	// that part as a set.
	n := len(want)
	if len(found) != n || !slices.Equal(found[:n-4], want[:n-4]) || found[n-1] != want[n-1] ||
		!sameSet(found[n-4:n-1], want[n-4:n-1]) {
		t.Fatalf("TopologyQueues:\n%v\nwant\n%v", found, want)
	}

	// A consumer anywhere in it: refused, nothing deleted.
	cons, err := r.insp.open()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cons.(*membroker.Channel).Consume("jobs.dead", "tool", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.insp.DeleteTopology(t.Context(), "jobs"); !errors.Is(err, ErrQueueInUse) || !strings.Contains(err.Error(), `"jobs.dead" has 1 consumer:`) {
		t.Fatalf("DeleteTopology with a consumer: %v, want ErrQueueInUse", err)
	}
	if got := len(r.names()); got != len(others)+len(want) {
		t.Fatalf("a refused DeleteTopology left %d queues of %d", got, len(others)+len(want))
	}
	_ = cons.Close()

	deleted, err := r.insp.DeleteTopology(t.Context(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if len(deleted) != len(found) {
		t.Fatalf("deleted %v\nwant %v", deleted, found)
	}
	total := 0
	for i, q := range deleted {
		// The broker's count of ready messages deleted: all of them, with
		// nothing unacknowledged.
		if q.Name != found[i].Name || q.Messages != found[i].Messages {
			t.Errorf("deleted %v, want %v", q, found[i])
		}
		total += q.Messages
	}
	if total != 9 {
		t.Errorf("deleted %d messages, want 9", total)
	}
	if got := r.names(); !slices.Equal(got, others) {
		t.Fatalf("left %v\nwant %v", got, others)
	}
	if _, err := r.insp.DeleteTopology(t.Context(), "jobs"); !errors.Is(err, ErrNoSuchQueue) {
		t.Fatalf("DeleteTopology of what is gone: %v, want ErrNoSuchQueue", err)
	}
}

// A deletion that stopped partway (here, the work queue deleted by hand)
// is finished by a second.
func TestInspectorDeleteTopologyFinishesAPartialDeletion(t *testing.T) {
	r := newDeleteRig(t)
	if _, err := r.ch.QueueDelete("jobs", false, false, false); err != nil {
		t.Fatal(err)
	}
	deleted, err := r.insp.DeleteTopology(t.Context(), "jobs")
	if err != nil || len(deleted) != 1 || deleted[0].Name != "jobs.dead" {
		t.Fatalf("DeleteTopology: %v, %v; want the dead-letter queue", deleted, err)
	}
	for _, name := range r.names() {
		if !strings.HasPrefix(name, "jobs2") && !strings.HasPrefix(name, "queuey.") {
			t.Errorf("left %s", name)
		}
	}
}

func TestInspectorDeleteTopologyRefuses(t *testing.T) {
	r := newDeleteRig(t)
	r.declare(t, "plain", nil, 1)
	var top Topology
	ctx := t.Context()
	for _, tc := range []struct {
		queue string
		is    error
		msg   string
	}{
		{"jobs.dead", ErrNotWorkQueue, `"jobs.dead" is the dead-letter queue of "jobs"; name the work queue "jobs"`},
		{"jobs.deferred.ladder.1000", ErrNotWorkQueue, `is a hold ladder rung of "jobs"`},
		{"jobs.deferred.relay", ErrNotWorkQueue, `is the relay queue of "jobs"`},
		{top.LadderQueue(1000), ErrNotWorkQueue, `one of the hold ladder's queues`},
		{top.RelayQueue(), ErrNotWorkQueue, `one of the hold ladder's queues`},
		{top.WarmQueue("jobs"), ErrNotWorkQueue, `is the warm marker of "jobs"`},
		{top.HoldQueue("jobs", 7000), ErrNotWorkQueue, `is a classic hold queue of "jobs"`},
		{"jobs.deferred.quorum.4000", ErrNotWorkQueue, `is a quorum hold queue of "jobs"`},
		{"gone.dead", ErrNotWorkQueue, `is the dead-letter queue of "gone"`}, // by its name, whether gone exists or not
		{"plain", ErrNotWorkQueue, `"plain" has no dead-letter or hold queue beside it ("plain.dead"): it is not a queuey work queue`},
		{"amq.x", ErrNotWorkQueue, "reserved"},
		{"nope", ErrNoSuchQueue, `"nope", nor any queue of its topology`},
	} {
		_, err := r.insp.DeleteTopology(ctx, tc.queue)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("DeleteTopology(%q): %v; want %v saying %s", tc.queue, err, tc.is, tc.msg)
		}
	}
	unlisted, err := NewInspector(r.conn.Channel, InspectorOptions{})
	if err == nil {
		_, err = unlisted.DeleteTopology(ctx, "jobs")
	}
	if !errors.Is(err, ErrNoQueueLister) {
		t.Errorf("DeleteTopology without a lister: %v, want ErrNoQueueLister", err)
	}
	// jobs and jobs2 with their dead-letter queues, the shared ladder's
	// rungs and relay queue, and plain.
	if got, want := len(r.names()), 2*2+len(top.Rungs())+1+1; got != want {
		t.Errorf("refusals left %d queues, want %d", got, want)
	}
}

func sameSet(a, b []TopologyQueue) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y TopologyQueue) int { return strings.Compare(x.Name, y.Name) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}
