package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

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
}

type holdJSON struct {
	Name     string `json:"name"`
	TTLMs    int64  `json:"ttl_ms"`
	Type     string `json:"type"`
	Messages int    `json:"messages"`
}

func (a *app) stats(ctx context.Context, o options, in *rabbitmq.Inspector, queues []string) error {
	st, err := in.Stats(ctx, queues...)
	if err != nil {
		return err
	}
	if o.json {
		out := make([]statsJSON, len(st))
		for i, s := range st {
			out[i] = statsJSON{Queue: s.Queue, Ready: s.Ready, Consumers: s.Consumers, Dead: s.Dead}
			if s.Listed {
				out[i].Unacked = &s.Unacked
				out[i].Holds = []holdJSON{}
				for _, h := range s.Holds {
					out[i].Holds = append(out[i].Holds, holdJSON{h.Name, h.TTL.Milliseconds(), h.Type, h.Messages})
				}
			}
		}
		return writeJSON(a.stdout, out)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tREADY\tUNACKED\tCONSUMERS\tDEAD\tHOLD QUEUES\tHELD")
	listed := true
	for _, s := range st {
		unacked, holds, held := "-", "-", "-"
		if s.Listed {
			n := 0
			for _, h := range s.Holds {
				n += h.Messages
			}
			unacked, holds, held = fmt.Sprint(s.Unacked), fmt.Sprint(len(s.Holds)), fmt.Sprint(n)
		}
		listed = listed && s.Listed
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%s\n", s.Queue, s.Ready, unacked, s.Consumers, s.Dead, holds, held)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range st {
		if len(s.Holds) == 0 {
			continue
		}
		// The ladder's rungs are there whether used or not: list the ones
		// holding jobs (--json lists all).
		fmt.Fprintf(a.stdout, "\nhold queues of %s holding jobs:\n", s.Queue)
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tTTL\tTYPE\tMESSAGES")
		empty := 0
		for _, h := range s.Holds {
			if h.Messages == 0 {
				empty++
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", h.Name, h.TTL, h.Type, h.Messages)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if empty > 0 {
			fmt.Fprintf(a.stdout, "  (and %d empty)\n", empty)
		}
	}
	if !listed {
		fmt.Fprintln(a.stdout, "\n(unacked and hold queues need the management API: --management-url or RABBITMQ_MANAGEMENT_URL)")
	} else {
		fmt.Fprintln(a.stdout, "\n(unacked and hold queue counts are the management API's, up to its statistics interval old)")
	}
	return nil
}

// deadJSON is one dead letter of `dead ls --json` and `dead show --json`.
type deadJSON struct {
	ID         string          `json:"id,omitempty"`
	Kind       string          `json:"kind,omitempty"`
	Queue      string          `json:"queue"`
	Reason     string          `json:"reason"`
	ByBroker   bool            `json:"by_broker"`
	Attempt    int             `json:"attempt,omitempty"`
	Deferrals  int             `json:"deferrals,omitempty"`
	EnqueuedAt *time.Time      `json:"enqueued_at,omitempty"`
	Malformed  bool            `json:"malformed"`
	Error      string          `json:"error,omitempty"`
	Envelope   json.RawMessage `json:"envelope,omitempty"` // the body, when it is an envelope
	Body       string          `json:"body,omitempty"`     // the body, when it is malformed
}

func toJSON(dl rabbitmq.DeadLetter) deadJSON {
	d := deadJSON{ID: dl.ID, Kind: dl.Kind, Queue: dl.Queue, Reason: dl.Reason, ByBroker: dl.ByBroker,
		Attempt: dl.Attempt, Deferrals: dl.Deferrals, Malformed: dl.Malformed, Error: dl.Err}
	if dl.Malformed {
		d.Body = string(dl.Body)
	} else {
		at := dl.EnqueuedAt.UTC()
		d.EnqueuedAt, d.Envelope = &at, dl.Body
	}
	return d
}

func (a *app) deadList(ctx context.Context, o options, in *rabbitmq.Inspector, queue string) error {
	dls, err := in.DeadLetters(ctx, queue, o.filter(), o.limit)
	if err != nil {
		return err
	}
	if len(dls) == 0 && o.describe() != "any" {
		return fmt.Errorf("no dead letter of %s matches %s", queue, o.describe())
	}
	if o.json {
		out := make([]deadJSON, len(dls))
		for i, dl := range dls {
			out[i] = toJSON(dl)
		}
		return writeJSON(a.stdout, out)
	}
	if len(dls) == 0 {
		fmt.Fprintf(a.stdout, "%s has no dead letters\n", queue)
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tATTEMPT\tENQUEUED\tREASON")
	for _, dl := range dls {
		if dl.Malformed {
			fmt.Fprintf(tw, "-\t-\t-\t-\t%s (%d bytes)\n", oneLine(dl.Reason), len(dl.Body))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", dl.ID, dl.Kind, dl.Attempt, dl.EnqueuedAt.UTC().Format(time.RFC3339), oneLine(dl.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.limit > 0 && len(dls) == o.limit {
		fmt.Fprintf(a.stdout, "(the first %d; --limit 0 lists all)\n", o.limit)
	}
	return nil
}

func (a *app) deadShow(ctx context.Context, o options, in *rabbitmq.Inspector, queue, id string) error {
	dls, err := in.DeadLetters(ctx, queue, rabbitmq.DeadLetterFilter{IDs: []string{id}}, 1)
	if err != nil {
		return err
	}
	if len(dls) == 0 {
		return fmt.Errorf("no dead letter of %s has the job ID %q", queue, id)
	}
	dl := dls[0]
	if o.json {
		return writeJSON(a.stdout, toJSON(dl))
	}
	by := "queuey"
	if dl.ByBroker {
		by = "the broker"
	}
	fmt.Fprintf(a.stdout, "id:          %s\nkind:        %s\nqueue:       %s\nreason:      %s\nby:          %s\nattempt:     %d\ndeferrals:   %d\nenqueued at: %s\nenvelope:\n",
		dl.ID, dl.Kind, dl.Queue, dl.Reason, by, dl.Attempt, dl.Deferrals, dl.EnqueuedAt.UTC().Format(time.RFC3339Nano))
	var pretty strings.Builder
	enc := json.NewEncoder(&pretty)
	enc.SetIndent("  ", "  ")
	if err := enc.Encode(json.RawMessage(dl.Body)); err != nil {
		return err
	}
	fmt.Fprint(a.stdout, "  "+pretty.String())
	return nil
}

// reportJSON is `dead redrive --json`.
type reportJSON struct {
	Queue      string `json:"queue"`
	DryRun     bool   `json:"dry_run"`
	Read       int    `json:"read"`
	Moved      int    `json:"moved"`
	Skipped    int    `json:"skipped"`
	Recurred   int    `json:"recurred"`
	MaybeMoved int    `json:"maybe_moved"`
	TooLarge   int    `json:"too_large"`
	Error      string `json:"error,omitempty"`
}

func (a *app) redrive(ctx context.Context, o options, in *rabbitmq.Inspector, queue string) error {
	dead := (rabbitmq.Topology{DeadSuffix: o.deadSuffix}).DeadQueue(queue)
	// Count first, with a dry run that keeps no bodies: the question names
	// the number, and a filter that matches nothing is an error before
	// anything is asked.
	count, err := in.Redrive(ctx, queue, rabbitmq.RedriveOptions{Filter: o.filter(), DryRun: true})
	if err != nil {
		return err
	}
	matches := count.Moved
	if matches == 0 {
		return fmt.Errorf("nothing to redrive: no dead letter of %s matches %s", queue, o.describe())
	}
	attempts := "attempts kept"
	if o.resetAttempts {
		attempts = "attempts reset to 1"
	}
	if !o.dryRun {
		if err := a.confirm(o, fmt.Sprintf("Redrive %d dead letters (%s) from %s to %s, %s?", matches, o.describe(), dead, queue, attempts)); err != nil {
			return err
		}
	}
	bar := newProgressBar(a.stderr, a.interactive && !o.json, "redriving")
	// Only those the count read, so no more are moved than were
	// confirmed: dead letters that arrived since queue behind them.
	rep, err := in.Redrive(ctx, queue, rabbitmq.RedriveOptions{
		Filter: o.filter(), ResetAttempts: o.resetAttempts, DryRun: o.dryRun, Limit: count.Read, Progress: bar.set,
	})
	bar.finish()
	if o.json {
		out := reportJSON{Queue: queue, DryRun: o.dryRun, Read: rep.Read, Moved: rep.Moved, Skipped: rep.Skipped,
			Recurred: rep.Recurred, MaybeMoved: rep.MaybeMoved, TooLarge: rep.TooLarge}
		if err != nil {
			out.Error = err.Error()
		}
		if jerr := writeJSON(a.stdout, out); jerr != nil {
			return jerr
		}
	} else {
		verb := "redrove"
		if o.dryRun {
			verb = "dry run: would redrive"
		}
		fmt.Fprintf(a.stdout, "%s %d of %d dead letters read from %s to %s (%s)", verb, rep.Moved, rep.Read, dead, queue, attempts)
		if rep.Skipped+rep.Recurred+rep.TooLarge > 0 {
			fmt.Fprintf(a.stdout, "; left in place: %d not matching", rep.Skipped)
			if rep.Recurred > 0 {
				fmt.Fprintf(a.stdout, ", %d dead-lettered again meanwhile", rep.Recurred)
			}
			if rep.TooLarge > 0 {
				fmt.Fprintf(a.stdout, ", %d too large to republish", rep.TooLarge)
			}
		}
		fmt.Fprintln(a.stdout)
		if rep.MaybeMoved > 0 {
			fmt.Fprintf(a.stdout, "one job was republished but not yet removed from %s: it may run twice\n", dead)
		}
	}
	if err != nil {
		return fmt.Errorf("redrive stopped after %d of %d moved; nothing was lost, run it again for the rest: %w", rep.Moved, matches, err)
	}
	return nil
}

func (a *app) purge(ctx context.Context, o options, in *rabbitmq.Inspector, queue string) error {
	st, err := in.Stats(ctx, queue)
	if err != nil {
		return err
	}
	dead := (rabbitmq.Topology{DeadSuffix: o.deadSuffix}).DeadQueue(queue)
	if st[0].Dead == 0 {
		return fmt.Errorf("nothing to purge: %s is empty", dead)
	}
	if err := a.confirm(o, fmt.Sprintf("Delete all %d dead letters of %s? This cannot be undone.", st[0].Dead, dead)); err != nil {
		return err
	}
	n, err := in.Purge(ctx, queue)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(a.stdout, map[string]any{"queue": queue, "purged": n})
	}
	fmt.Fprintf(a.stdout, "purged %d dead letters from %s\n", n, dead)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// oneLine keeps a table row on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// progressBar shows a redrive's progress on a terminal, redrawn at most
// every tenth of a second.
type progressBar struct {
	w     io.Writer
	on    bool
	label string
	last  time.Time
	drawn bool
}

func newProgressBar(w io.Writer, on bool, label string) *progressBar {
	return &progressBar{w: w, on: on, label: label}
}

func (p *progressBar) set(read, total int) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	total = max(total, read)
	const width = 30
	fill := width * read / max(total, 1)
	fmt.Fprintf(p.w, "\r\x1b[K%s [%s%s] %d/%d", p.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), read, total)
	p.drawn = true
}

func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
