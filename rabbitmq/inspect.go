package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// InspectChannel is what an Inspector needs of an AMQP channel: a
// Channel's publishing with confirms, plus reading, returning and purging
// messages and reading a queue's counts. *amqp091.Channel and
// *membroker.Channel both satisfy it.
type InspectChannel interface {
	Channel
	Get(queue string, autoAck bool) (amqp.Delivery, bool, error)
	Nack(tag uint64, multiple, requeue bool) error
	QueueDeclarePassive(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error)
	QueuePurge(name string, noWait bool) (int, error)
}

// InspectorOptions configure an Inspector. The zero value is ready to use.
type InspectorOptions struct {
	// Topology names the dead-letter and hold queues; it must be the
	// topology the workers run with. Each field documents its default.
	Topology

	// Queues lists every queue of the deployment, for Stats to find hold
	// queues and unacknowledged counts, which AMQP cannot report, and for
	// WorkQueues, TopologyQueues and DeleteTopology, which cannot work
	// without it. Use ManagementAPI on RabbitMQ with the management
	// plugin. Defaults to nil: Stats reports what AMQP can (ready
	// messages, consumers and dead letters) and leaves Unacked and Holds
	// unknown, and the others fail with ErrNoQueueLister.
	Queues QueueLister

	// Logger receives what redrives do, at INFO. Defaults to discarding.
	Logger *slog.Logger

	// MaxMessageSize is the largest message body a redrive publishes, as
	// Options.MaxMessageSize: a dead letter whose republished job would be
	// larger is left in place (RedriveReport.TooLarge). Defaults to
	// DefaultMaxMessageSize, RabbitMQ 4's default.
	MaxMessageSize int
}

// QueueLister lists the queues of a virtual host, with their counts.
type QueueLister interface {
	ListQueues(ctx context.Context) ([]QueueListing, error)
}

// QueueListing is one queue in a QueueLister's answer.
type QueueListing struct {
	Name    string
	Type    string // "classic", "quorum" or "stream"
	Ready   int    // messages waiting to be delivered
	Unacked int    // messages delivered and not yet settled
	// DeadLettering counts a quorum queue's messages that have expired
	// (or been rejected) and wait for its dead-letter worker to deliver
	// them (the management API's messages_dlx); zero for other types, or
	// when the lister does not count them.
	DeadLettering int
	Consumers     int
	// Published and Acked count the messages published to the queue and
	// acknowledged from it since it was created (the management API's
	// message_stats; it counts neither a dead-lettered message nor an
	// expired one as published), or are zero when the lister does not
	// count them.
	Published, Acked int64
}

// Inspector reads and repairs a deployment's queues for operators: work
// queues listed with their stats, dead letters listed, redriven and purged,
// and a work queue's whole topology deleted. It opens a fresh
// channel per call and closes it before returning, so a call that is
// interrupted (its process killed, its connection dropped) leaves every
// dead letter it had not finished with on the broker: the broker returns
// whatever a closed channel held unacknowledged. Safe for concurrent use.
//
// See docs/operating.md for the dead-letter formats and what each method
// does to the queues.
type Inspector struct {
	open    func() (InspectChannel, error)
	top     Topology
	list    QueueLister
	log     *slog.Logger
	maxSize int
}

// NewInspector returns an Inspector that opens its channels with open,
// e.g. conn.Channel of an *amqp091.Connection or of a membroker
// connection.
func NewInspector[C InspectChannel](open func() (C, error), opts InspectorOptions) (*Inspector, error) {
	if open == nil {
		return nil, errors.New("rabbitmq: NewInspector: open is nil")
	}
	if err := opts.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("rabbitmq: NewInspector: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	maxSize := opts.MaxMessageSize
	switch {
	case maxSize < 0:
		return nil, fmt.Errorf("rabbitmq: NewInspector: MaxMessageSize %d is negative", maxSize)
	case maxSize == 0:
		maxSize = DefaultMaxMessageSize
	}
	return &Inspector{
		open:    func() (InspectChannel, error) { return open() },
		top:     opts.Topology.WithDefaults(),
		list:    opts.Queues,
		log:     log,
		maxSize: maxSize,
	}, nil
}

// ErrNoSuchQueue is the error of an Inspector call naming a work queue
// that does not exist, or whose dead-letter queue does not.
var ErrNoSuchQueue = errors.New("rabbitmq: no such queue")

// ErrNoQueueLister is the error of an Inspector call that must list the
// virtual host's queues (WorkQueues, TopologyQueues, DeleteTopology) made
// on an Inspector without InspectorOptions.Queues: AMQP cannot list
// queues.
var ErrNoQueueLister = errors.New("rabbitmq: listing queues needs a QueueLister such as the management API (AMQP cannot list queues)")

// QueueStats is one work queue's state.
type QueueStats struct {
	Queue     string
	Ready     int // messages waiting in the work queue
	Consumers int
	Dead      int // messages in its dead-letter queue
	// Listed says that Unacked and Holds come from the QueueLister. Without
	// one they are unknown and zero.
	Listed  bool
	Unacked int // messages delivered from the work queue and not yet settled
	// Holds are its own hold queues, by TTL then type: classic holds, and
	// a ladder of its own left by an earlier release. Its jobs on the
	// shared ladder are counted there (Inspector.Ladder).
	Holds []HoldStats
	// Enqueued and Acked are the QueueLister's cumulative counts of the
	// work queue (QueueListing.Published and Acked): jobs published to it
	// by producers and redrives (not those back from a hold queue, which
	// the broker dead-letters there), and deliveries acknowledged, whatever
	// became of the job. Zero when the lister does not count them; a
	// dashboard turns two readings into rates.
	Enqueued, Acked int64
	// QuorumQueues counts the quorum queues the work queue brings, itself
	// included if it is one: its dead-letter queue and warm marker, and a
	// ladder of its own left by an earlier release (Listed only). On a
	// cluster each is a Raft group with a member on every node: 2 with the
	// defaults (3 for a quorum work queue). The shared ladder's are counted
	// once, by Ladder.
	QuorumQueues int
}

// LadderStats is the state of the hold ladder the work queues of a
// virtual host share (Topology.Ladder).
type LadderStats struct {
	Name string // Topology.Ladder
	// Holds are its rungs and relay queue, by TTL (the relay queue first),
	// with the jobs of every work queue they hold: which work queue a job
	// returns to is in its headers, which a listing does not read.
	Holds []HoldStats
	// QuorumQueues counts its quorum queues: rungs, relay queue and warm
	// marker. 24 with the default granularities.
	QuorumQueues int
}

// Ladder reports the shared hold ladder's queues, from one listing of the
// QueueLister (an error wrapping ErrNoQueueLister without one). A ladder
// no process has declared has no Holds.
func (in *Inspector) Ladder(ctx context.Context) (LadderStats, error) {
	if in.list == nil {
		return LadderStats{}, ErrNoQueueLister
	}
	listing, err := in.list.ListQueues(ctx)
	if err != nil {
		return LadderStats{}, fmt.Errorf("rabbitmq: listing queues: %w", err)
	}
	st := LadderStats{Name: in.top.Ladder, Holds: []HoldStats{}}
	relay, warm := in.top.RelayQueue(), in.top.LadderWarmQueue()
	for _, l := range listing {
		ttl, rung := in.top.ladderRungTTL(l.Name)
		switch {
		case rung:
			st.Holds = append(st.Holds, HoldStats{Name: l.Name, TTL: time.Duration(ttl) * time.Millisecond, Type: "ladder",
				Messages: l.Ready + l.Unacked + l.DeadLettering, Due: l.DeadLettering})
		case l.Name == relay:
			st.Holds = append(st.Holds, HoldStats{Name: l.Name, Type: "relay", Messages: l.Ready + l.Unacked})
		case l.Name != warm:
			continue
		}
		if l.Type == "quorum" {
			st.QuorumQueues++
		}
	}
	sortHolds(st.Holds)
	return st, nil
}

// HoldStats is one hold queue: jobs waiting out a retry backoff or a
// deferral before they return to their work queue.
type HoldStats struct {
	Name     string
	TTL      time.Duration
	Type     string // "ladder" (a rung), "relay" (TTL 0), "classic", or "quorum" (per TTL, from earlier releases)
	Messages int
	// Due counts, of Messages, the jobs whose wait in a rung is over and
	// that the broker has yet to move on (QueueListing.DeadLettering).
	// After a restart or a kill they can wait for the rung's dead-letter
	// resend, up to RabbitMQ's dead_letter_worker_publisher_confirm_timeout
	// (180 s by default; docs/hold-ladder.md, "Holds a fault makes
	// late").
	Due int
}

// Stats reports each named work queue's counts. A queue, or its dead-letter
// queue, that does not exist is an error wrapping ErrNoSuchQueue.
func (in *Inspector) Stats(ctx context.Context, queues ...string) ([]QueueStats, error) {
	var listing []QueueListing
	if in.list != nil {
		var err error
		if listing, err = in.list.ListQueues(ctx); err != nil {
			return nil, fmt.Errorf("rabbitmq: listing queues: %w", err)
		}
	}
	stats := make([]QueueStats, 0, len(queues))
	for _, q := range queues {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		st := QueueStats{Queue: q}
		work, err := in.declarePassive(q)
		if err != nil {
			return nil, err
		}
		dead, err := in.declarePassive(in.top.DeadQueue(q))
		if err != nil {
			return nil, err
		}
		st.Ready, st.Consumers, st.Dead = work.Messages, work.Consumers, dead.Messages
		if listing != nil {
			st.Listed = true
			st.Holds = []HoldStats{}
			for _, l := range listing {
				if l.Name == q {
					st.Unacked, st.Enqueued, st.Acked = l.Unacked, l.Published, l.Acked
				}
				if h, ok := in.holdOf(q, l); ok {
					st.Holds = append(st.Holds, h)
				}
				if in.bringsQuorum(q, l) {
					st.QuorumQueues++
				}
			}
			sortHolds(st.Holds)
		}
		stats = append(stats, st)
	}
	return stats, nil
}

// WorkQueues lists the virtual host's queuey work queues, by name, with
// their counts: every queue whose dead-letter queue (Topology.DeadQueue) is
// beside it, except queues whose names make them dead-letter, hold, relay
// or warm-marker queues themselves. Every figure comes from
// one listing of the QueueLister, Listed is true, and Dead counts the
// dead-letter queue's ready and unacknowledged messages; through the
// management API the figures are its statistics, which lag the queues by
// up to its collection interval. Without a QueueLister it returns an error
// wrapping ErrNoQueueLister; a failing one, its error.
func (in *Inspector) WorkQueues(ctx context.Context) ([]QueueStats, error) {
	if in.list == nil {
		return nil, ErrNoQueueLister
	}
	listing, err := in.list.ListQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: listing queues: %w", err)
	}
	byName := make(map[string]QueueListing, len(listing))
	for _, l := range listing {
		byName[l.Name] = l
	}
	var out []QueueStats
	for _, l := range listing {
		dead, ok := byName[in.top.DeadQueue(l.Name)]
		if !ok {
			continue
		}
		if _, _, aux := in.auxiliaryOf(l.Name); aux {
			continue
		}
		st := QueueStats{Queue: l.Name, Ready: l.Ready, Consumers: l.Consumers, Dead: dead.Ready + dead.Unacked,
			Listed: true, Unacked: l.Unacked, Holds: []HoldStats{}, Enqueued: l.Published, Acked: l.Acked}
		for _, h := range listing {
			if hs, ok := in.holdOf(l.Name, h); ok {
				st.Holds = append(st.Holds, hs)
			}
			if in.bringsQuorum(l.Name, h) {
				st.QuorumQueues++
			}
		}
		sortHolds(st.Holds)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b QueueStats) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}

// bringsQuorum reports whether l is a quorum queue that is queue itself or
// one of its auxiliaries (auxiliaryOf).
func (in *Inspector) bringsQuorum(queue string, l QueueListing) bool {
	if l.Type != "quorum" {
		return false
	}
	if l.Name == queue {
		return true
	}
	parent, _, ok := in.auxiliaryOf(l.Name)
	return ok && parent == queue
}

// sortHolds sorts hold queues by TTL, then type.
func sortHolds(holds []HoldStats) {
	slices.SortFunc(holds, func(a, b HoldStats) int {
		if a.TTL != b.TTL {
			return int(a.TTL - b.TTL)
		}
		return strings.Compare(a.Type, b.Type)
	})
}

// auxiliaryOf reports whether name is, by its name alone, a queue queuey
// adds beside a work queue: parent's dead-letter queue (role "dead"), one
// of its hold queues (role "ladder", "relay", "classic" or "quorum", as
// HoldStats.Type) or its warm marker (role "warm"). Whether parent exists
// is not checked.
func (in *Inspector) auxiliaryOf(name string) (parent, role string, ok bool) {
	if p, ok := strings.CutSuffix(name, in.top.DeadSuffix); ok && p != "" {
		return p, "dead", true
	}
	i := strings.LastIndex(name, in.top.DeferredSuffix+".")
	if i <= 0 {
		return "", "", false
	}
	parent = name[:i]
	if name == in.top.WarmQueue(parent) {
		return parent, "warm", true
	}
	if h, ok := in.holdOf(parent, QueueListing{Name: name}); ok {
		return parent, h.Type, true
	}
	return "", "", false
}

// holdOf reports whether l is one of queue's hold queues, and its stats.
func (in *Inspector) holdOf(queue string, l QueueListing) (HoldStats, bool) {
	rest, ok := strings.CutPrefix(l.Name, queue+in.top.DeferredSuffix+".")
	if !ok {
		return HoldStats{}, false
	}
	if rest == "relay" { // Topology.RelayQueue: jobs between two rungs, or on their way back
		return HoldStats{Name: l.Name, Type: "relay", Messages: l.Ready + l.Unacked}, true
	}
	typ := "classic"
	if r, ok := strings.CutPrefix(rest, "ladder."); ok { // Topology.LadderQueue
		rest, typ = r, "ladder"
	} else if r, ok := strings.CutPrefix(rest, "quorum."); ok { // the per-TTL quorum holds of earlier releases
		rest, typ = r, "quorum"
		if r, ok := strings.CutPrefix(rest, "p"); ok { // a priority's own
			prio, ttl, ok := strings.Cut(r, ".")
			if n, err := strconv.ParseUint(prio, 10, 8); !ok || err != nil || strconv.FormatUint(n, 10) != prio {
				return HoldStats{}, false
			}
			rest = ttl
		}
	}
	ttl, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || ttl <= 0 || strconv.FormatInt(ttl, 10) != rest {
		return HoldStats{}, false
	}
	return HoldStats{Name: l.Name, TTL: time.Duration(ttl) * time.Millisecond, Type: typ, Messages: l.Ready + l.Unacked + l.DeadLettering, Due: l.DeadLettering}, true
}

// declarePassive reads a queue's counts on a channel of its own (a
// missing queue closes the channel).
func (in *Inspector) declarePassive(name string) (amqp.Queue, error) {
	ch, err := in.open()
	if err != nil {
		return amqp.Queue{}, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(name, false, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return amqp.Queue{}, fmt.Errorf("%w: %q", ErrNoSuchQueue, name)
		}
		return amqp.Queue{}, fmt.Errorf("rabbitmq: queue %q: %w", name, err)
	}
	return q, nil
}
