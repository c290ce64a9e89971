package main

// queuey queues and queuey stats: the work queues' figures, and the hold
// ladder they share.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/queuey/queuey/internal/dashboard"
	"github.com/queuey/queuey/rabbitmq"
)

// statsJSON is one queue of `stats --json`.
type statsJSON struct {
	Queue     string `json:"queue"`
	Ready     int    `json:"ready"`
	Unacked   *int   `json:"unacked"` // null without the management API
	Consumers int    `json:"consumers"`
	Dead      int    `json:"dead"`
	// Holds is null without the management API.
	Holds []holdJSON `json:"holds"`
	// QuorumQueues is null without the management API.
	QuorumQueues *int `json:"quorum_queues"`
}

type holdJSON struct {
	Name     string `json:"name"`
	TTLMs    int64  `json:"ttl_ms"`
	Type     string `json:"type"`
	Messages int    `json:"messages"`
}

// toStatsJSON is st as --json prints it.
func toStatsJSON(st []rabbitmq.QueueStats) []statsJSON {
	out := make([]statsJSON, len(st))
	for i, s := range st {
		out[i] = statsJSON{Queue: s.Queue, Ready: s.Ready, Consumers: s.Consumers, Dead: s.Dead}
		if s.Listed {
			out[i].Unacked = &s.Unacked
			out[i].QuorumQueues = &s.QuorumQueues
			out[i].Holds = []holdJSON{}
			for _, h := range s.Holds {
				out[i].Holds = append(out[i].Holds, holdJSON{h.Name, h.TTL.Milliseconds(), h.Type, h.Messages})
			}
		}
	}
	return out
}

// statsTable prints st as a table, one row a work queue, then the shared
// hold ladder, if ladder is not nil; it reports whether every row's
// unacked and hold figures are known (Listed).
func (a *app) statsTable(st []rabbitmq.QueueStats, ladder *rabbitmq.LadderStats) (listed bool, err error) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tREADY\tUNACKED\tCONSUMERS\tDEAD\tHOLD QUEUES\tHELD\tQUORUM QUEUES")
	listed = true
	quorum := 0
	for _, s := range st {
		unacked, holds, held, q := "-", "-", "-", "-"
		if s.Listed {
			n := 0
			for _, h := range s.Holds {
				n += h.Messages
			}
			unacked, holds, held, q = fmt.Sprint(s.Unacked), fmt.Sprint(len(s.Holds)), fmt.Sprint(n), fmt.Sprint(s.QuorumQueues)
			quorum += s.QuorumQueues
		}
		listed = listed && s.Listed
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Queue, s.Ready, unacked, s.Consumers, s.Dead, holds, held, q)
	}
	if err := tw.Flush(); err != nil {
		return listed, err
	}
	shared := ""
	if ladder != nil && len(ladder.Holds) > 0 {
		held, due := 0, 0
		for _, h := range ladder.Holds {
			held, due = held+h.Messages, due+h.Due
		}
		fmt.Fprintf(a.stdout, "\nthe hold ladder %q, shared by every work queue: %s, %s held\n",
			ladder.Name, plural(len(ladder.Holds), "1 hold queue", "%d hold queues"), plural(held, "1 job", "%d jobs"))
		if due > 0 {
			// What a restart leaves: a rung's dead letters refused at boot
			// wait for its resend (docs/hold-ladder.md, "Holds a fault
			// makes late").
			fmt.Fprintf(a.stdout, "  %s due and not yet moved on by the broker: after a restart or a kill, a rung can hold them up to 3 minutes (dead_letter_worker_publisher_confirm_timeout)\n",
				plural(due, "1 of them is", "%d of them are"))
		}
		quorum += ladder.QuorumQueues
		shared = " and the ladder"
	}
	if listed && quorum > 0 {
		// What a cluster pays: a Raft group per quorum queue, a member of
		// it on every node (docs/hold-ladder.md).
		fmt.Fprintf(a.stdout, "\n%s for these work queues%s (each a Raft group with a member on every node of a cluster)\n",
			plural(quorum, "1 quorum queue", "%d quorum queues"), shared)
	}
	return listed, nil
}

// ladder reads the shared hold ladder's stats, or nil if in cannot list
// queues or the ladder is not in use (ClassicHolds).
func (a *app) ladder(ctx context.Context, in *rabbitmq.Inspector) (*rabbitmq.LadderStats, error) {
	l, err := in.Ladder(ctx)
	if errors.Is(err, rabbitmq.ErrNoQueueLister) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// queues lists every work queue of the virtual host.
func (a *app) queues(ctx context.Context, o options, in *rabbitmq.Inspector) error {
	st, err := in.WorkQueues(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(a.stdout, toStatsJSON(st))
	}
	if len(st) == 0 {
		fmt.Fprintln(a.stdout, "no queuey work queues here: no queue of this virtual host has a dead-letter queue beside it (pass --dead-suffix if the workers use their own)")
		return nil
	}
	ladder, err := a.ladder(ctx, in)
	if err != nil {
		return err
	}
	if _, err := a.statsTable(st, ladder); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, "\n(every figure is the management API's, up to its statistics interval old; queuey stats QUEUE shows ready, consumers and dead as they are now, and each hold queue)")
	return nil
}

func (a *app) stats(ctx context.Context, o options, s *session, queues []string) error {
	apiErr := s.apiErr
	in := s.in
	if apiErr != nil {
		in = s.amqpOnly
	}
	st, err := in.Stats(ctx, queues...)
	if err != nil && errors.Is(err, rabbitmq.ErrManagement) && ctx.Err() == nil {
		// What AMQP alone shows beats nothing.
		apiErr = err
		st, err = s.amqpOnly.Stats(ctx, queues...)
	}
	if err != nil {
		return err
	}
	if apiErr != nil {
		fmt.Fprintf(a.stderr, "queuey: the management API failed, so unacked counts and hold queues are unknown: %s\n",
			oneLine(redactAPIErr(apiErr, o).Error()))
	}
	if o.json {
		return writeJSON(a.stdout, toStatsJSON(st))
	}
	var ladder *rabbitmq.LadderStats
	if apiErr == nil {
		if ladder, err = a.ladder(ctx, in); err != nil {
			return err
		}
	}
	listed, err := a.statsTable(st, ladder)
	if err != nil {
		return err
	}
	if ladder != nil {
		// The ladder's queues, listed as a work queue's own hold queues.
		st = append(st, rabbitmq.QueueStats{Queue: "the ladder " + strconv.Quote(ladder.Name), Holds: ladder.Holds})
	}
	for _, s := range st {
		if len(s.Holds) == 0 {
			continue
		}
		// The ladder's rungs are there whether used or not: list the ones
		// holding jobs (--json lists all).
		holding := 0
		for _, h := range s.Holds {
			if h.Messages > 0 {
				holding++
			}
		}
		if holding == 0 {
			fmt.Fprintf(a.stdout, "\nhold queues of %s: %s, all empty\n", s.Queue, plural(len(s.Holds), "1", "%d"))
			continue
		}
		fmt.Fprintf(a.stdout, "\nhold queues of %s holding jobs:\n", s.Queue)
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tTTL\tTYPE\tMESSAGES")
		empty := 0
		for _, h := range s.Holds {
			if h.Messages == 0 {
				empty++
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", h.Name, dashboard.Duration(h.TTL), h.Type, h.Messages)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if empty > 0 {
			fmt.Fprintf(a.stdout, "  (and %d empty)\n", empty)
		}
	}
	switch {
	case apiErr != nil:
		fmt.Fprintln(a.stdout, "\n(unacked and hold queues unknown: the management API failed)")
	case !listed:
		fmt.Fprintln(a.stdout, "\n(unacked and hold queues need the management API: --management-url or RABBITMQ_MANAGEMENT_URL)")
	default:
		fmt.Fprintln(a.stdout, "\n(unacked and hold queue counts are the management API's, up to its statistics interval old)")
	}
	return nil
}
