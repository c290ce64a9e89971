package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queuey/queuey/rabbitmq"
)

// Timeouts of the Inspector calls: a page's reads; a confirmation's dry
// run, which reads the whole dead-letter queue; and an action, which goes
// on when the browser goes away (it is safe to stop, but better
// finished), so that a redrive of many dead letters can end. For queues
// larger than these allow, use `queuey dead redrive` (docs/dashboard.md).
const (
	readTimeout   = 30 * time.Second
	dryRunTimeout = 2 * time.Minute
	actionTimeout = 10 * time.Minute
)

// pageNames are the templates/*.html that are pages, each rendered in
// layout.html.
var pageNames = []string{"overview", "queue", "dead", "deadletter", "confirm", "report", "error"}

func (s *Server) parseTemplates() error {
	funcs := template.FuncMap{
		"esc":       url.PathEscape,
		"time":      fmtTime,
		"lastError": lastError,
		"dur":       Duration,
		"plural":    plural,
	}
	s.pages = map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("dashboard: templates: %w", err)
		}
		s.pages[name] = t
	}
	return nil
}

// plural writes "1 dead letter", "2 dead letters".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// lastError is the error of dl's last failed attempt, as a list shows it
// beside the reason: empty when dl carries none, or when its reason says
// it already (a Fatal's).
func lastError(dl rabbitmq.DeadLetter) string {
	if len(dl.Errors) == 0 || strings.HasPrefix(dl.Reason, "fatal: ") {
		return ""
	}
	return dl.Errors[len(dl.Errors)-1].Error
}

// page is what every template gets.
type page struct {
	Title    string
	ReadOnly bool
	CSRF     string
	// Error is what went wrong, redacted; Reload makes the page reload
	// itself, to recover when the broker does.
	Error     string
	Reload    bool
	RefreshMs int64
	Data      any
}

func (s *Server) newPage(title string, data any) page {
	return page{Title: title, ReadOnly: s.opts.ReadOnly, CSRF: s.csrf, RefreshMs: s.opts.Refresh.Milliseconds(), Data: data}
}

// render writes the page, or, failing that, a plain error.
func (s *Server) render(w http.ResponseWriter, status int, name, tmpl string, p page) {
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, tmpl, p); err != nil {
		s.opts.Logger.Error("queuey ui: rendering a page", "page", name, "err", err)
		http.Error(w, "queuey: cannot render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail renders the error page for err: 404 for a queue that does not
// exist, else 503, reloading itself until the broker answers again.
func (s *Server) fail(w http.ResponseWriter, title string, err error) {
	p := s.newPage(title, nil)
	p.Error = s.opts.Redact(err).Error()
	status := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, rabbitmq.ErrNoSuchQueue):
		status = http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		// Too much to read in time: reloading would only read it again.
		status = http.StatusGatewayTimeout
		p.Error += " (the queue is too large to read in time here: use the queuey command)"
	default:
		p.Reload = true
	}
	s.render(w, status, "error", "layout", p)
}

func (s *Server) context(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), readTimeout)
}

// overviewRow is one work queue on the overview.
type overviewRow struct {
	rabbitmq.QueueStats
	Held                    int
	Enqueued, Acked, DeadPS string
	Chart                   chart
}

// overviewData is the overview's live part.
type overviewData struct {
	Queues []overviewRow
	At     string
	Span   string // the charts' span
	// AMQPDown says why the broker's AMQP side failed Options.Ping, when
	// it did.
	AMQPDown string
	// LadderHeld is how many jobs the hold ladder every work queue shares
	// holds, and LadderDue how many of them are due and not yet moved on
	// by the broker (rabbitmq.HoldStats.Due); Ladder says it exists. A
	// queue's Held counts its own hold queues only.
	Ladder                bool
	LadderHeld, LadderDue int
}

// readOverview reads every work queue and records the reading.
func (s *Server) readOverview(r *http.Request) (overviewData, error) {
	ctx, cancel := s.context(r)
	defer cancel()
	stats, err := s.src.WorkQueues(ctx)
	now := s.opts.Now()
	d := overviewData{At: fmtTime(now)}
	if err != nil {
		return d, err
	}
	ladder, err := s.src.Ladder(ctx)
	if err != nil {
		return d, err
	}
	d.Ladder = len(ladder.Holds) > 0
	for _, h := range ladder.Holds {
		d.LadderHeld, d.LadderDue = d.LadderHeld+h.Messages, d.LadderDue+h.Due
	}
	if s.opts.Ping != nil {
		if err := s.opts.Ping(ctx); err != nil {
			d.AMQPDown = s.opts.Redact(err).Error()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history.add(now, stats)
	d.Span = s.history.span(now)
	for _, st := range stats {
		rt := s.history.rates(st.Queue)
		d.Queues = append(d.Queues, overviewRow{QueueStats: st, Held: held(st),
			Enqueued: rt.perSecond(rt.enqueued), Acked: rt.perSecond(rt.acked), DeadPS: rt.perSecond(rt.dead),
			Chart: s.history.chart(st.Queue, now)})
	}
	return d, nil
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	s.renderOverview(w, r, "Work queues", "layout")
}

// live is the overview's live part alone, which its script swaps in.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	s.renderOverview(w, r, "", "live")
}

// renderOverview reads the overview and renders it whole (tmpl "layout")
// or its live part ("live"), with status 503 when any part of the broker
// failed, so the overview's script knows.
func (s *Server) renderOverview(w http.ResponseWriter, r *http.Request, title, tmpl string) {
	d, err := s.readOverview(r)
	p := s.newPage(title, d)
	status := http.StatusOK
	if err != nil {
		p.Error = s.opts.Redact(err).Error()
	}
	if err != nil || d.AMQPDown != "" {
		status = http.StatusServiceUnavailable
	}
	s.render(w, status, "overview", tmpl, p)
}

// group is the dead letters of one reason.
type group struct {
	Reason      string
	Count       int
	First, Last time.Time
	Kinds       []string
	ByBroker    bool
}

// holdRow is one hold queue on a queue's page.
type holdRow struct {
	rabbitmq.HoldStats
	Back string
}

type queueData struct {
	Queue  string
	Stats  rabbitmq.QueueStats
	Holds  []holdRow
	Groups []group
	// Read is how many dead letters were grouped; Truncated says the
	// queue had more than GroupLimit.
	Read      int
	Truncated bool
	// Held is how many jobs the hold queues hold; Next says when the
	// first of them comes back, as far as the queues tell. Shared says
	// that the holds include the hold ladder every work queue shares, so
	// that not all of them need be this queue's.
	Held   int
	Next   string
	Shared bool
}

func (s *Server) queue(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	ctx, cancel := s.context(r)
	defer cancel()
	st, err := s.src.Stats(ctx, q)
	if err != nil {
		s.fail(w, q, err)
		return
	}
	dls, err := s.src.DeadLetters(ctx, q, rabbitmq.DeadLetterFilter{Malformed: true}, s.opts.GroupLimit+1)
	if err != nil {
		s.fail(w, q, err)
		return
	}
	truncated := len(dls) > s.opts.GroupLimit
	dls = dls[:min(len(dls), s.opts.GroupLimit)]
	ladder, err := s.src.Ladder(ctx)
	if err != nil {
		s.fail(w, q, err)
		return
	}
	d := queueData{Queue: q, Stats: st[0], Groups: groups(dls), Read: len(dls), Truncated: truncated, Shared: len(ladder.Holds) > 0}
	var soonest time.Duration = -1
	for _, h := range append(slices.Clip(st[0].Holds), ladder.Holds...) {
		back := "within " + Duration(h.TTL) + " of entering"
		if h.Type == "relay" {
			back = "at once: on their way between rungs or back to their queue"
		}
		d.Holds = append(d.Holds, holdRow{HoldStats: h, Back: back})
		if d.Held += h.Messages; h.Messages > 0 && (soonest < 0 || h.TTL < soonest) {
			soonest = h.TTL
		}
	}
	switch {
	case soonest == 0:
		d.Next = "now: some are on their way between rungs"
	case soonest > 0:
		d.Next = "within " + Duration(soonest)
	}
	s.render(w, http.StatusOK, "queue", "layout", s.newPage(q, d))
}

// groups groups dead letters by reason, the largest group first.
func groups(dls []rabbitmq.DeadLetter) []group {
	byReason := map[string]*group{}
	for _, dl := range dls {
		g := byReason[dl.Reason]
		if g == nil {
			g = &group{Reason: dl.Reason}
			byReason[dl.Reason] = g
		}
		g.Count++
		g.ByBroker = g.ByBroker || dl.ByBroker
		if at := dl.DeadLetteredAt; !at.IsZero() {
			if g.First.IsZero() || at.Before(g.First) {
				g.First = at
			}
			if at.After(g.Last) {
				g.Last = at
			}
		}
		kind := dl.Kind
		if dl.Malformed {
			kind = "(malformed)"
		}
		if !slices.Contains(g.Kinds, kind) {
			g.Kinds = append(g.Kinds, kind)
		}
	}
	out := make([]group, 0, len(byReason))
	for _, g := range byReason {
		slices.Sort(g.Kinds)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
	})
	return out
}

// filterOf is the dead letters a request's reason parameter selects: one
// group when it is given (the malformed bodies' group among them), else
// every dead letter but malformed bodies, which a redrive would only
// republish verbatim, as `queuey dead redrive` leaves them without
// --malformed.
func filterOf(form url.Values) rabbitmq.DeadLetterFilter {
	if form.Has("id") {
		return rabbitmq.DeadLetterFilter{IDs: []string{form.Get("id")}}
	}
	if form.Has("reason") {
		return rabbitmq.DeadLetterFilter{Reason: form.Get("reason"), ExactReason: true, Malformed: true}
	}
	return rabbitmq.DeadLetterFilter{}
}

type deadData struct {
	Queue      string
	Reason     string
	HasReason  bool
	Letters    []rabbitmq.DeadLetter
	Page       int
	Prev, Next string
	From, To   int
	// Truncated says the group had more than GroupLimit dead letters;
	// only those are paged.
	Truncated bool
	Limit     int
}

func (s *Server) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	form := r.URL.Query()
	if id := strings.TrimSpace(form.Get("id")); form.Has("id") {
		// Finding one by its job ID: its page, where it can be redriven.
		http.Redirect(w, r, "/queues/"+url.PathEscape(q)+"/dead/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	n := 1
	if v := form.Get("page"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			http.Error(w, "queuey: page must be a number from 1", http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := s.context(r)
	defer cancel()
	size := s.opts.PageSize
	// The whole group, up to GroupLimit, sorted: a quorum dead-letter
	// queue on RabbitMQ 4.0 puts what a read returns at its back
	// (docs/rabbitmq-semantics.md §12.6), so two reads of a first page's
	// worth need not agree on what page two is.
	filter := filterOf(form)
	filter.Malformed = true // a listing shows them all
	dls, err := s.src.DeadLetters(ctx, q, filter, s.opts.GroupLimit+1)
	if err != nil {
		s.fail(w, q, err)
		return
	}
	truncated := len(dls) > s.opts.GroupLimit
	dls = dls[:min(len(dls), s.opts.GroupLimit)]
	slices.SortStableFunc(dls, func(a, b rabbitmq.DeadLetter) int {
		return cmp.Or(a.DeadLetteredAt.Compare(b.DeadLetteredAt), a.EnqueuedAt.Compare(b.EnqueuedAt),
			strings.Compare(a.ID, b.ID), bytes.Compare(a.Body, b.Body))
	})
	d := deadData{Queue: q, Reason: form.Get("reason"), HasReason: form.Has("reason"), Page: n,
		Truncated: truncated, Limit: s.opts.GroupLimit}
	from, to := len(dls), len(dls)
	if n-1 <= len(dls)/size { // no overflow: n is at most one page past the end
		from, to = (n-1)*size, min(n*size, len(dls))
	}
	d.Letters, d.From, d.To = dls[from:to], from+1, to
	link := func(page int) string {
		v := url.Values{}
		if d.HasReason {
			v.Set("reason", d.Reason)
		}
		v.Set("page", strconv.Itoa(page))
		return "/queues/" + url.PathEscape(q) + "/dead?" + v.Encode()
	}
	if n > 1 {
		d.Prev = link(n - 1)
	}
	if len(dls) > to {
		d.Next = link(n + 1)
	}
	s.render(w, http.StatusOK, "dead", "layout", s.newPage("Dead letters of "+q, d))
}

type deadLetterData struct {
	rabbitmq.DeadLetter
	Headers [][2]string
	Body    string
	// ReadCount says the headers carry x-delivery-count, which counts
	// reads, not runs: the page says so.
	ReadCount bool
}

func (s *Server) deadLetter(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := s.context(r)
	defer cancel()
	dls, ok := s.deadLetterOf(ctx, w, q, id)
	if !ok {
		return
	}
	if len(dls) == 0 {
		p := s.newPage(q, nil)
		p.Error = fmt.Sprintf("%s has no dead letter with the job ID %q: redriven, purged, or never there", q, id)
		s.render(w, http.StatusNotFound, "error", "layout", p)
		return
	}
	dl := dls[0]
	d := deadLetterData{DeadLetter: dl, Body: string(dl.Body)}
	var pretty bytes.Buffer
	if json.Indent(&pretty, dl.Body, "", "  ") == nil {
		d.Body = pretty.String()
	}
	for k, v := range dl.Headers {
		d.Headers = append(d.Headers, [2]string{k, fmt.Sprint(v)})
		d.ReadCount = d.ReadCount || k == "x-delivery-count"
	}
	slices.SortFunc(d.Headers, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	s.render(w, http.StatusOK, "deadletter", "layout", s.newPage("Dead letter "+id, d))
}

// confirmData is a confirmation: what would happen, and the form that
// makes it happen.
type confirmData struct {
	Queue, Action, Question, Nothing string
	Fields                           [][2]string
	Submit                           string
}

// reportData is what an action did.
type reportData struct {
	Queue, Summary string
	Lines          []string
}

func (s *Server) confirmRedrive(w http.ResponseWriter, r *http.Request) {
	if s.opts.ReadOnly {
		http.Error(w, "queuey: this dashboard is read-only (--read-only)", http.StatusForbidden)
		return
	}
	q := r.PathValue("queue")
	form := r.URL.Query()
	reset := form.Get("reset") == "1"
	ctx, cancel := context.WithTimeout(r.Context(), dryRunTimeout)
	defer cancel()
	count, err := s.src.Redrive(ctx, q, rabbitmq.RedriveOptions{Filter: filterOf(form), DryRun: true})
	if err != nil {
		s.fail(w, q, err)
		return
	}
	which := "every dead letter (malformed bodies aside: redrive their group to move them)"
	switch {
	case form.Has("id"):
		which = fmt.Sprintf("the dead letter of job %q", form.Get("id"))
	case form.Has("reason"):
		which = fmt.Sprintf("the dead letters with reason %q", form.Get("reason"))
	}
	keep := "keeping their attempt counts"
	if reset {
		keep = "starting their attempts over at 1"
	}
	d := confirmData{Queue: q, Action: "redrive", Submit: "Redrive"}
	if count.Moved == 0 {
		d.Nothing = "Nothing to redrive: no dead letter of " + q + " matches."
		if count.TooLarge > 0 {
			d.Nothing = fmt.Sprintf("Nothing to redrive: the %d matching are too large to republish.", count.TooLarge)
		}
	} else if form.Has("id") {
		keep = "keeping its attempt count"
		if reset {
			keep = "starting its attempts over at 1"
		}
		d.Question = fmt.Sprintf("Redrive %s to %s, %s?", which, q, keep)
	} else {
		d.Question = fmt.Sprintf("Redrive %d of %s to %s, %s?", count.Moved, which, q, keep)
	}
	d.Fields = append(d.Fields, [2]string{"limit", strconv.Itoa(count.Read)})
	if form.Has("id") {
		d.Fields = append(d.Fields, [2]string{"id", form.Get("id")})
	} else if form.Has("reason") {
		d.Fields = append(d.Fields, [2]string{"reason", form.Get("reason")})
	}
	if reset {
		d.Fields = append(d.Fields, [2]string{"reset", "1"})
	}
	s.render(w, http.StatusOK, "confirm", "layout", s.newPage("Redrive "+q, d))
}

func (s *Server) redrive(w http.ResponseWriter, r *http.Request) {
	if !s.checkPOST(w, r) {
		return
	}
	q := r.PathValue("queue")
	limit, err := strconv.Atoi(r.PostForm.Get("limit"))
	if err != nil || limit < 1 {
		http.Error(w, "queuey: limit must be a number from 1, as the confirmation page gives it", http.StatusBadRequest)
		return
	}
	reset := r.PostForm.Get("reset") == "1"
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actionTimeout)
	defer cancel()
	// Only as many as the confirmation counted: dead letters that arrived
	// since queue behind them, and are left for the next redrive.
	rep, err := s.src.Redrive(ctx, q, rabbitmq.RedriveOptions{Filter: filterOf(r.PostForm), ResetAttempts: reset, Limit: limit})
	s.opts.Logger.Info("queuey ui: redrive", "queue", q, "reason", r.PostForm.Get("reason"), "reset_attempts", reset,
		"read", rep.Read, "moved", rep.Moved, "err", s.redacted(err))
	d := reportData{Queue: q, Summary: fmt.Sprintf("Redrove %s to %s.", plural(rep.Moved, "dead letter"), q)}
	for _, l := range []struct {
		n    int
		text string
	}{
		{rep.Read, "read"}, {rep.Skipped, "left in place: not in this group"},
		{rep.Recurred, "dead-lettered again during the redrive: left in place"},
		{rep.MaybeMoved, "may be both in the queue and still a dead letter (the redrive stopped after its republish, before the broker had answered its removal)"},
		{rep.TooLarge, "too large to republish: left in place"},
	} {
		if l.n > 0 {
			d.Lines = append(d.Lines, fmt.Sprintf("%d %s", l.n, l.text))
		}
	}
	p := s.newPage("Redrive "+q, d)
	status := http.StatusOK
	if err != nil {
		p.Error, status = "The redrive stopped: "+s.opts.Redact(err).Error(), http.StatusServiceUnavailable
	}
	s.render(w, status, "report", "layout", p)
}

func (s *Server) confirmPurge(w http.ResponseWriter, r *http.Request) {
	if s.opts.ReadOnly {
		http.Error(w, "queuey: this dashboard is read-only (--read-only)", http.StatusForbidden)
		return
	}
	q := r.PathValue("queue")
	ctx, cancel := s.context(r)
	defer cancel()
	st, err := s.src.Stats(ctx, q)
	if err != nil {
		s.fail(w, q, err)
		return
	}
	d := confirmData{Queue: q, Action: "purge", Submit: "Purge, for good"}
	if st[0].Dead == 0 {
		d.Nothing = q + " has no dead letters."
	} else {
		d.Question = fmt.Sprintf("Delete all %d dead letters of %s, for good? They cannot be redriven afterwards.", st[0].Dead, q)
	}
	s.render(w, http.StatusOK, "confirm", "layout", s.newPage("Purge "+q, d))
}

func (s *Server) purge(w http.ResponseWriter, r *http.Request) {
	if !s.checkPOST(w, r) {
		return
	}
	q := r.PathValue("queue")
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actionTimeout)
	defer cancel()
	n, err := s.src.Purge(ctx, q)
	s.opts.Logger.Info("queuey ui: purge", "queue", q, "purged", n, "err", s.redacted(err))
	if err != nil {
		s.fail(w, "Purge "+q, err)
		return
	}
	s.render(w, http.StatusOK, "report", "layout", s.newPage("Purge "+q,
		reportData{Queue: q, Summary: fmt.Sprintf("Purged %d dead letters of %s.", n, q)}))
}

// deadLetterOf reads queue q's dead letter of job id: none or one. On an
// error it has answered the request, and ok is false.
func (s *Server) deadLetterOf(ctx context.Context, w http.ResponseWriter, q, id string) (dls []rabbitmq.DeadLetter, ok bool) {
	dls, err := s.src.DeadLetters(ctx, q, rabbitmq.DeadLetterFilter{IDs: []string{id}}, 1)
	if err != nil {
		s.fail(w, q, err)
		return nil, false
	}
	return dls, true
}

// confirmDelete asks before one dead letter, ?id=ID, is deleted for good.
func (s *Server) confirmDelete(w http.ResponseWriter, r *http.Request) {
	if s.opts.ReadOnly {
		http.Error(w, "queuey: this dashboard is read-only (--read-only)", http.StatusForbidden)
		return
	}
	q, id := r.PathValue("queue"), r.URL.Query().Get("id")
	if id == "" {
		http.Error(w, "queuey: delete takes the id of one dead letter, as its page gives it", http.StatusBadRequest)
		return
	}
	ctx, cancel := s.context(r)
	defer cancel()
	dls, ok := s.deadLetterOf(ctx, w, q, id)
	if !ok {
		return
	}
	d := confirmData{Queue: q, Action: "delete", Submit: "Delete, for good", Fields: [][2]string{{"id", id}}}
	if len(dls) == 0 {
		d.Nothing = fmt.Sprintf("%s has no dead letter of job %q: redriven, purged or deleted meanwhile.", q, id)
	} else {
		d.Question = fmt.Sprintf("Delete the dead letter of job %q from %s, for good? It cannot be redriven afterwards.", id, q)
	}
	s.render(w, http.StatusOK, "confirm", "layout", s.newPage("Delete "+id, d))
}

// deleteOne deletes the dead letter the confirmation named.
func (s *Server) deleteOne(w http.ResponseWriter, r *http.Request) {
	if !s.checkPOST(w, r) {
		return
	}
	q, id := r.PathValue("queue"), r.PostForm.Get("id")
	if id == "" {
		http.Error(w, "queuey: delete takes the id of one dead letter, as the confirmation page gives it", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actionTimeout)
	defer cancel()
	n, err := s.src.Delete(ctx, q, rabbitmq.DeadLetterFilter{IDs: []string{id}}, 1)
	s.opts.Logger.Info("queuey ui: delete", "queue", q, "id", id, "deleted", n, "err", s.redacted(err))
	if err != nil {
		s.fail(w, "Delete "+id, err)
		return
	}
	summary := fmt.Sprintf("Deleted the dead letter of job %q from %s.", id, q)
	if n == 0 {
		summary = fmt.Sprintf("Deleted nothing: %s has no dead letter of job %q any more.", q, id)
	}
	s.render(w, http.StatusOK, "report", "layout", s.newPage("Delete "+id, reportData{Queue: q, Summary: summary}))
}

// redacted is err through Options.Redact, for the log; nil stays nil.
func (s *Server) redacted(err error) error {
	if err == nil {
		return nil
	}
	return s.opts.Redact(err)
}

// fmtTime shows an instant in UTC to the second, or "–" when unknown.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
