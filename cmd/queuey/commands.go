package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// deadJSON is one dead letter of `dead ls --json` and `dead show --json`.
type deadJSON struct {
	ID         string     `json:"id,omitempty"`
	Kind       string     `json:"kind,omitempty"`
	Queue      string     `json:"queue"`
	Reason     string     `json:"reason"`
	ByBroker   bool       `json:"by_broker"`
	Attempt    int        `json:"attempt,omitempty"`
	Deferrals  int        `json:"deferrals,omitempty"`
	EnqueuedAt *time.Time `json:"enqueued_at,omitempty"`
	// DeadAt is when it was dead-lettered, when the message says.
	DeadAt    *time.Time `json:"dead_lettered_at,omitempty"`
	Malformed bool       `json:"malformed"`
	Error     string     `json:"error,omitempty"`
	// Errors are the job's last failed attempts, oldest first.
	Errors   []queuey.AttemptError `json:"errors,omitempty"`
	Envelope json.RawMessage       `json:"envelope,omitempty"` // the body, when it is an envelope
	Body     string                `json:"body,omitempty"`     // the body, when it is malformed
}

func toJSON(dl rabbitmq.DeadLetter) deadJSON {
	d := deadJSON{ID: dl.ID, Kind: dl.Kind, Queue: dl.Queue, Reason: dl.Reason, ByBroker: dl.ByBroker,
		Attempt: dl.Attempt, Deferrals: dl.Deferrals, Malformed: dl.Malformed, Error: dl.Err, Errors: dl.Errors}
	if dl.Malformed {
		d.Body = string(dl.Body)
	} else {
		at := dl.EnqueuedAt.UTC()
		d.EnqueuedAt, d.Envelope = &at, dl.Body
	}
	if !dl.DeadLetteredAt.IsZero() {
		at := dl.DeadLetteredAt.UTC()
		d.DeadAt = &at
	}
	return d
}

// reasonWithError is dl's reason as dead ls shows it: with the last
// attempt's error after it, unless the reason already says it (a Fatal's).
func reasonWithError(dl rabbitmq.DeadLetter) string {
	if len(dl.Errors) == 0 || strings.HasPrefix(dl.Reason, "fatal: ") {
		return dl.Reason
	}
	last := dl.Errors[len(dl.Errors)-1].Error
	const most = 120
	if len(last) > most {
		cut := most
		for cut > 0 && !utf8.RuneStart(last[cut]) {
			cut--
		}
		last = last[:cut] + "…"
	}
	return dl.Reason + " (last error: " + last + ")"
}

// noneMatch says that no dead letter of queue matches the filter flags.
func noneMatch(o options, queue string) string {
	switch {
	case o.describe() != "":
		return fmt.Sprintf("no dead letters of %s match %s", queue, o.describe())
	case o.malformed:
		return fmt.Sprintf("%s has no dead letters", queue)
	}
	return fmt.Sprintf("%s has no dead letters, apart from any malformed ones (--malformed includes those)", queue)
}

func (a *app) deadList(ctx context.Context, o options, in *rabbitmq.Inspector, queue string) error {
	// Malformed ones are read too, so that a listing that leaves them out
	// can say how many it left out.
	f := o.filter()
	f.Malformed = true
	all, err := in.DeadLetters(ctx, queue, f, o.limit)
	if err != nil {
		return err
	}
	dls, hidden := all, 0
	if !o.malformed {
		dls = make([]rabbitmq.DeadLetter, 0, len(all))
		for _, dl := range all {
			if dl.Malformed {
				hidden++
				continue
			}
			dls = append(dls, dl)
		}
	}
	if o.json {
		out := make([]deadJSON, len(dls))
		for i, dl := range dls {
			out[i] = toJSON(dl)
		}
		return writeJSON(a.stdout, out)
	}
	if len(dls) == 0 && hidden > 0 {
		fmt.Fprintf(a.stdout, "%s has no dead letters to list but %s (--malformed lists them)\n", queue, plural(hidden, "1 malformed one", "%d malformed ones"))
		return nil
	}
	if len(dls) == 0 {
		fmt.Fprintln(a.stdout, noneMatch(o, queue))
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tATTEMPT\tENQUEUED\tREASON")
	for _, dl := range dls {
		if dl.Malformed {
			fmt.Fprintf(tw, "-\t-\t-\t-\t%s (%d bytes)\n", oneLine(dl.Reason), len(dl.Body))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", dl.ID, dl.Kind, dl.Attempt, dl.EnqueuedAt.UTC().Format(time.RFC3339), oneLine(reasonWithError(dl)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.limit > 0 && len(all) == o.limit {
		fmt.Fprintf(a.stdout, "(the first %d read; --limit 0 lists all)\n", o.limit)
	}
	if hidden > 0 {
		fmt.Fprintf(a.stdout, "(and %s not listed: --malformed lists them)\n", plural(hidden, "1 malformed dead letter", "%d malformed dead letters"))
	}
	return nil
}

func (a *app) deadShow(ctx context.Context, o options, in *rabbitmq.Inspector, queue, id string) error {
	dls, err := in.DeadLetters(ctx, queue, rabbitmq.DeadLetterFilter{IDs: []string{id}}, 1)
	if err != nil {
		return err
	}
	if len(dls) == 0 {
		return fmt.Errorf("%s has no dead letter with the job ID %q", queue, id)
	}
	dl := dls[0]
	if o.json {
		return writeJSON(a.stdout, toJSON(dl))
	}
	by := "queuey"
	if dl.ByBroker {
		by = "the broker"
	}
	deadAt := "unknown: not recorded in the dead letter"
	if !dl.DeadLetteredAt.IsZero() {
		deadAt = dl.DeadLetteredAt.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 1, ' ', 0)
	for _, row := range [][2]string{
		{"id", dl.ID}, {"kind", dl.Kind}, {"queue", dl.Queue}, {"reason", dl.Reason}, {"by", by},
		{"attempt", fmt.Sprint(dl.Attempt)}, {"deferrals", fmt.Sprint(dl.Deferrals)},
		{"enqueued at", dl.EnqueuedAt.UTC().Format(time.RFC3339Nano)}, {"dead-lettered at", deadAt},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(dl.Errors) > 0 {
		fmt.Fprintf(a.stdout, "errors (the last %d failed attempts, oldest first):\n", len(dl.Errors))
		for _, e := range dl.Errors {
			fmt.Fprintf(a.stdout, "  attempt %d at %s: %s\n", e.Attempt, e.At.UTC().Format(time.RFC3339Nano), oneLine(e.Error))
		}
	}
	fmt.Fprintln(a.stdout, "envelope:")
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
		if o.json {
			return writeJSON(a.stdout, reportJSON{Queue: queue, DryRun: o.dryRun, Read: count.Read, Skipped: count.Skipped, TooLarge: count.TooLarge})
		}
		if count.TooLarge > 0 {
			fmt.Fprintf(a.stdout, "nothing to redrive: %s matching, all too large to republish\n", plural(count.TooLarge, "the one dead letter", "the %d dead letters"))
		} else {
			fmt.Fprintf(a.stdout, "nothing to redrive: %s\n", noneMatch(o, queue))
		}
		return nil
	}
	attempts := "attempts kept"
	if o.resetAttempts {
		attempts = "attempts reset to 1"
	}
	if !o.dryRun {
		which := plural(matches, "the one dead letter", "all %d dead letters")
		if o.describe() != "" {
			which = plural(matches, "the one dead letter", "the %d dead letters") + " matching " + o.describe()
		} else if count.Skipped > 0 {
			which = fmt.Sprintf("%s (not the %s)", plural(matches, "the one dead letter", "the %d dead letters"), plural(count.Skipped, "malformed one", "%d malformed ones"))
		}
		keep := plural(matches, "keeping its attempt count", "keeping their attempt counts")
		if o.resetAttempts {
			keep = plural(matches, "starting its attempts over at 1", "starting their attempts over at 1")
		}
		action := fmt.Sprintf("redrive %s from %s to %s", plural(matches, "one dead letter", "%d dead letters"), dead, queue)
		if err := a.confirm(o, action, fmt.Sprintf("Redrive %s from %s to %s, %s?", which, dead, queue, keep)); err != nil {
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
		if rep.Moved == rep.Read {
			fmt.Fprintf(a.stdout, "%s %s from %s to %s (%s)", verb, plural(rep.Moved, "1 dead letter", "%d dead letters"), dead, queue, attempts)
		} else {
			fmt.Fprintf(a.stdout, "%s %d of the %s read from %s to %s (%s)", verb, rep.Moved, plural(rep.Read, "1 dead letter", "%d dead letters"), dead, queue, attempts)
		}
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
			fmt.Fprintf(a.stdout, "one job was republished, and its removal from %s not yet answered by the broker: it may run twice\n", dead)
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
		if o.json {
			return writeJSON(a.stdout, map[string]any{"queue": queue, "purged": 0})
		}
		fmt.Fprintf(a.stdout, "nothing to purge: %s is empty\n", dead)
		return nil
	}
	letters := plural(st[0].Dead, "the one dead letter", "all %d dead letters")
	if err := a.confirm(o, fmt.Sprintf("delete %s of %s", letters, dead),
		fmt.Sprintf("Delete %s of %s for good?", letters, dead)); err != nil {
		return err
	}
	n, err := in.Purge(ctx, queue)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(a.stdout, map[string]any{"queue": queue, "purged": n})
	}
	fmt.Fprintf(a.stdout, "purged %s from %s\n", plural(n, "1 dead letter", "%d dead letters"), dead)
	return nil
}

// deleteJSON is `delete --json`.
type deleteJSON struct {
	Queue    string      `json:"queue"`
	Messages int         `json:"messages"` // the messages the broker reported deleting, in every queue
	Deleted  []queueJSON `json:"deleted"`
	Error    string      `json:"error,omitempty"`
}

type queueJSON struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Messages int    `json:"messages"`
}

// deleteTopology deletes queue, its dead-letter queue and its hold queues,
// with every message in them.
func (a *app) deleteTopology(ctx context.Context, o options, in *rabbitmq.Inspector, queue string) error {
	found, err := in.TopologyQueues(ctx, queue)
	if err != nil {
		return err
	}
	byRole := map[string]int{}
	total, consumers := 0, 0
	for _, q := range found {
		byRole[q.Role] += q.Messages
		total += q.Messages
		consumers += q.Consumers
	}
	if consumers > 0 {
		// DeleteTopology would refuse: say so before asking.
		return fmt.Errorf("%w: %s on the queues of %s: stop its workers first, or they would declare its queues again",
			rabbitmq.ErrQueueInUse, plural(consumers, "1 consumer", "%d consumers"), queue)
	}
	queues, messages := plural(len(found), "1 queue", "%d queues"), plural(total, "1 message", "%d messages")
	if !o.json {
		fmt.Fprintf(a.stderr, "%s has %s (%s) holding %s: %d waiting in %s, %d held for a retry or a deferral, %d in %s\n",
			queue, queues, composition(found), messages, byRole["work"], queue, total-byRole["work"]-byRole["dead"], byRole["dead"], (rabbitmq.Topology{DeadSuffix: o.deadSuffix}).DeadQueue(queue))
	}
	question := fmt.Sprintf("Delete %s with its dead-letter and hold queues (%s) and the %s in them, for good?", queue, queues, messages)
	if err := a.confirm(o, fmt.Sprintf("delete %s of %s and the %s in them", queues, queue, messages), question); err != nil {
		return err
	}
	deleted, err := in.DeleteTopology(ctx, queue)
	n := 0
	for _, q := range deleted {
		n += q.Messages
	}
	if o.json {
		out := deleteJSON{Queue: queue, Messages: n, Deleted: []queueJSON{}}
		for _, q := range deleted {
			out.Deleted = append(out.Deleted, queueJSON{q.Name, q.Role, q.Messages})
		}
		if err != nil {
			out.Error = err.Error()
		}
		if jerr := writeJSON(a.stdout, out); jerr != nil {
			return jerr
		}
	} else if len(deleted) > 0 {
		fmt.Fprintf(a.stdout, "deleted %s of %s and the %s in them\n", plural(len(deleted), "1 queue", "%d queues"), queue, plural(n, "1 message", "%d messages"))
	}
	if err != nil && len(deleted) > 0 {
		return fmt.Errorf("delete stopped after %d queues; run it again for the rest: %w", len(deleted), err)
	}
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// plural is one when n is 1, else many with n in place of its %d.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return strings.ReplaceAll(many, "%d", fmt.Sprint(n))
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

// deleteScheduler deletes a scheduler group's election queue, once
// confirmed.
func (a *app) deleteScheduler(ctx context.Context, o options, in *rabbitmq.Inspector, group string) error {
	name := "queuey.scheduler." + group
	question := fmt.Sprintf("Delete %s, the election queue of scheduler group %q, and the tokens in it?", name, group)
	if err := a.confirm(o, "delete "+name, question); err != nil {
		return err
	}
	n, err := in.DeleteSchedulerGroup(ctx, group)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(a.stdout, deleteJSON{Queue: name, Messages: n, Deleted: []queueJSON{{name, "election", n}}})
	}
	fmt.Fprintf(a.stdout, "deleted %s and the %s in it\n", name, plural(n, "1 token", "%d tokens"))
	return nil
}

// composition says what a work queue's topology is made of, counting its
// hold queues as queuey stats does: "the work queue, its dead-letter
// queue, 23 hold queues and the warm marker".
func composition(found []rabbitmq.TopologyQueue) string {
	roles := map[string]int{}
	for _, q := range found {
		roles[q.Role]++
	}
	var parts []string
	if roles["work"] > 0 {
		parts = append(parts, "the work queue")
	}
	if roles["dead"] > 0 {
		parts = append(parts, "its dead-letter queue")
	}
	if n := len(found) - roles["work"] - roles["dead"] - roles["warm"]; n > 0 {
		parts = append(parts, plural(n, "1 hold queue", "%d hold queues"))
	}
	if roles["warm"] > 0 {
		parts = append(parts, "the warm marker")
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// deadDelete deletes the dead letters of queue with the job IDs of --id,
// once confirmed.
func (a *app) deadDelete(ctx context.Context, o options, in *rabbitmq.Inspector, queue string) error {
	f := rabbitmq.DeadLetterFilter{IDs: o.filter().IDs}
	found, err := in.DeadLetters(ctx, queue, f, 0)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return fmt.Errorf("%s has no dead letter with the job IDs %s", queue, strings.Join(f.IDs, ", "))
	}
	n := plural(len(found), "1 dead letter", "%d dead letters")
	if err := a.confirm(o, "delete "+n+" of "+queue, fmt.Sprintf("Delete %s of %s (%s), for good?", n, queue, strings.Join(f.IDs, ", "))); err != nil {
		return err
	}
	deleted, err := in.Delete(ctx, queue, f, 0)
	if o.json {
		out := map[string]any{"queue": queue, "deleted": deleted}
		if err != nil {
			out["error"] = err.Error()
		}
		if jerr := writeJSON(a.stdout, out); jerr != nil {
			return jerr
		}
	} else if deleted > 0 {
		fmt.Fprintf(a.stdout, "deleted %s from %s\n", plural(deleted, "1 dead letter", "%d dead letters"), (rabbitmq.Topology{DeadSuffix: o.deadSuffix}).DeadQueue(queue))
	}
	return err
}
