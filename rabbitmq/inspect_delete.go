package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"github.com/queuey/queuey/internal/schedshell"
	"log/slog"
	"slices"
	"strconv"
)

// ErrNotWorkQueue is the error of TopologyQueues and DeleteTopology for a
// name that is not a work queue: a dead-letter, hold, relay or warm-marker
// queue of one, or a queue standing alone with nothing of queuey's beside
// it.
var ErrNotWorkQueue = errors.New("rabbitmq: not a work queue")

// ErrQueueInUse is the error of DeleteTopology when a queue of the
// topology has consumers: workers consuming the work queue or its relay
// queue, or an operator's tool reading the dead-letter queue.
var ErrQueueInUse = errors.New("rabbitmq: queue in use")

// TopologyQueue is one queue of a work queue's topology.
type TopologyQueue struct {
	Name string
	// Role is "work" (the work queue), "dead" (its dead-letter queue),
	// "warm" (its warm marker), or a hold queue's HoldStats.Type:
	// "ladder", "relay", "classic" or "quorum".
	Role string
	// Messages counts the queue's messages, ready and unacknowledged: what
	// deleting it drops. DeleteTopology reports the broker's count at the
	// deletion.
	Messages  int
	Consumers int
}

// queueDeleter is what DeleteTopology needs of a channel besides an
// InspectChannel: *amqp091.Channel and *membroker.Channel have it.
type queueDeleter interface {
	QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
}

// TopologyQueues finds the queues of queue's topology that exist now, in
// the order DeleteTopology deletes them, with their counts: the warm
// marker, the work queue, its hold queues (classic hold queues
// q.deferred.TTL, and from earlier releases a ladder of its own, rungs
// then relay queue, and per-TTL quorum hold queues), then its
// dead-letter queue. The shared ladder (Topology.Ladder) is not part of
// any work queue's topology: jobs of a deleted work queue still waiting
// there are dropped when their wait is over (ErrWorkQueueGone). It needs a QueueLister
// (an error wrapping ErrNoQueueLister otherwise) to find the hold queues
// whose names it cannot know (a classic hold's TTL, the rungs of other
// granularities); each queue it finds is then declared passively for
// exact ready and consumer counts, with the lister's unacknowledged count
// added.
//
// A name that is a dead-letter, hold, relay or warm-marker queue itself,
// or a queue with no other queue of a topology beside it (not a queuey
// work queue), is an error wrapping ErrNotWorkQueue; a name of which no
// queue exists, one wrapping ErrNoSuchQueue. The work queue itself may be
// missing, after a deletion that stopped partway.
func (in *Inspector) TopologyQueues(ctx context.Context, queue string) ([]TopologyQueue, error) {
	if parent, role, ok := in.auxiliaryOf(queue); ok {
		return nil, fmt.Errorf("%w: %q is %s of %q; name the work queue %q to delete its whole topology",
			ErrNotWorkQueue, queue, roleName(role), parent, parent)
	}
	if err := in.top.CheckQueueName(queue); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotWorkQueue, err)
	}
	if in.list == nil {
		return nil, ErrNoQueueLister
	}
	listing, err := in.list.ListQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: listing queues: %w", err)
	}
	unacked := map[string]int{}
	var holds []QueueListing
	for _, l := range listing {
		unacked[l.Name] = l.Unacked
		if _, ok := in.holdOf(queue, l); ok {
			holds = append(holds, l)
		}
	}
	// The names it knows, then those only the listing shows.
	legacy := in.top.legacyLadderQueues(queue) // its relay queue first
	names := append([]string{in.top.WarmQueue(queue), queue}, legacy[1:]...)
	names = append(names, legacy[0])
	for _, h := range holds {
		if !slices.Contains(names, h.Name) {
			names = append(names, h.Name)
		}
	}
	names = append(names, in.top.DeadQueue(queue))
	var found []TopologyQueue
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		q, err := in.declarePassive(name)
		if errors.Is(err, ErrNoSuchQueue) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found = append(found, TopologyQueue{Name: name, Role: in.roleOf(queue, name), Messages: q.Messages + unacked[name], Consumers: q.Consumers})
	}
	switch {
	case len(found) == 0:
		return nil, fmt.Errorf("%w: %q, nor any queue of its topology", ErrNoSuchQueue, queue)
	case len(found) == 1 && found[0].Name == queue:
		return nil, fmt.Errorf("%w: %q has no dead-letter or hold queue beside it (%q): it is not a queuey work queue",
			ErrNotWorkQueue, queue, in.top.DeadQueue(queue))
	}
	return found, nil
}

// roleOf is the TopologyQueue.Role of name, one of queue's topology.
func (in *Inspector) roleOf(queue, name string) string {
	if name == queue {
		return "work"
	}
	_, role, _ := in.auxiliaryOf(name)
	return role
}

// roleName says in words what a queue of a role is to its work queue.
func roleName(role string) string {
	switch role {
	case "dead":
		return "the dead-letter queue"
	case "warm":
		return "the warm marker"
	case "relay":
		return "the relay queue"
	case "ladder":
		return "a hold ladder rung"
	}
	return "a " + role + " hold queue"
}

// DeleteTopology deletes queue's whole topology for good, as
// TopologyQueues finds it when called: the work queue, its dead-letter
// queue, its warm marker, its classic hold queues, and from earlier
// releases a ladder of its own and quorum hold queues per TTL; never the
// shared ladder. It returns
// the queues it deleted, each with the count of messages the broker
// reported deleting, and after an error those it had deleted before.
//
// Every message still in those queues is lost: waiting jobs, jobs held
// for a retry or a deferral, and dead letters. The broker drops them; it
// does not dead-letter them. Count them first with TopologyQueues.
//
// It refuses, with an error wrapping ErrQueueInUse and deleting nothing,
// while any of these queues has consumers: a worker still running would
// declare its queues again, and one that is starting may still do so, so
// stop producers and workers first. Its errors are TopologyQueues', and
// after a failure partway, running it again deletes the rest. The warm
// marker goes first: a ladder left without its marker makes the next
// process to declare it wait out its warm-up, where a marker left without
// its ladder would let a ladder declared afresh hold jobs at once.
//
// On RabbitMQ 4.0.x, do not call it within seconds of the node's boot or
// of the ladder's declaration: deleting rungs while their dead-letter
// workers start can stop the node's supervisor of those workers until the
// node restarts (docs/hold-ladder.md, "Deleting a ladder").
//
// The channels the Inspector opens must have QueueDelete, as
// *amqp091.Channel and *membroker.Channel do.
func (in *Inspector) DeleteTopology(ctx context.Context, queue string) ([]TopologyQueue, error) {
	found, err := in.TopologyQueues(ctx, queue)
	if err != nil {
		return nil, err
	}
	for _, q := range found {
		if q.Consumers > 0 {
			n := "1 consumer"
			if q.Consumers > 1 {
				n = strconv.Itoa(q.Consumers) + " consumers"
			}
			return nil, fmt.Errorf("%w: %q has %s: stop the workers of %q first, or they would declare its queues again",
				ErrQueueInUse, q.Name, n, queue)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch, err := in.open()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	del, ok := ch.(queueDeleter)
	if !ok {
		return nil, fmt.Errorf("rabbitmq: deleting the queues of %q: the channel (%T) has no QueueDelete", queue, ch)
	}
	var deleted []TopologyQueue
	total := 0
	for _, q := range found {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		n, err := del.QueueDelete(q.Name, false, false, false)
		if err != nil {
			return deleted, fmt.Errorf("rabbitmq: deleting queue %q of %q (%d of %d deleted): %w", q.Name, queue, len(deleted), len(found), err)
		}
		q.Messages = n
		deleted = append(deleted, q)
		total += n
	}
	in.log.InfoContext(ctx, "queuey: deleted a work queue's topology", slog.String("queue", queue),
		slog.Int("queues", len(deleted)), slog.Int("messages", total))
	return deleted, nil
}

// DeleteSchedulerGroup deletes the election queue of a Scheduler group
// (SchedulerOptions.Group), "queuey.scheduler." + group, and returns how
// many tokens it held, which the broker drops. It is what to do once no
// process runs the group any more: a work queue's DeleteTopology does not
// touch it. It refuses, with an error wrapping ErrQueueInUse and deleting
// nothing, while the queue has consumers (a running Scheduler would
// declare it again), and with ErrNoSuchQueue when it does not exist. The
// channels the Inspector opens must have QueueDelete.
func (in *Inspector) DeleteSchedulerGroup(ctx context.Context, group string) (int, error) {
	name := schedshell.Queue(group)
	q, err := in.declarePassive(name)
	if err != nil {
		return 0, err
	}
	if q.Consumers > 0 {
		return 0, fmt.Errorf("%w: %q has %d consumers: stop the schedulers of group %q first, or they would declare it again",
			ErrQueueInUse, name, q.Consumers, group)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ch, err := in.open()
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	del, ok := ch.(queueDeleter)
	if !ok {
		return 0, fmt.Errorf("rabbitmq: deleting %q: the channel (%T) has no QueueDelete", name, ch)
	}
	n, err := del.QueueDelete(name, false, false, false)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: deleting %q: %w", name, err)
	}
	in.log.InfoContext(ctx, "queuey: deleted a scheduler group's election queue", slog.String("group", group), slog.Int("tokens", n))
	return n, nil
}
