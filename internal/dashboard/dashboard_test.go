package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/internal/memapi"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
)

// fixture is a queuey deployment on membroker, read through the product's
// own Inspector and ManagementAPI client, with a dashboard over it.
type fixture struct {
	broker  *membroker.Broker
	api     *memapi.Server
	backend *rabbitmq.Backend
	insp    *rabbitmq.Inspector
	srv     *httptest.Server
	dash    *Server
}

// newFixture declares the work queues and dead-letters jobs into the
// first: for queue "jobs", three "email" jobs exhausted (e-0..e-2), two
// "charge" jobs failed fatally (c-0, c-1), one malformed body; plus two
// ready jobs.
func newFixture(t testing.TB, opts Options, queues ...string) *fixture {
	t.Helper()
	if len(queues) == 0 {
		queues = []string{"jobs"}
	}
	f := &fixture{broker: membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})}
	conn, err := f.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if f.backend, err = rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{Topology: rabbitmq.Topology{HoldWarmup: -1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.backend.Close() })
	ctx := context.Background()
	for _, q := range queues {
		if err := f.backend.Declare(ctx, queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	q := queues[0]
	for i := range 3 {
		f.deadLetter(t, q, fmt.Sprintf("e-%d", i), "email", queuey.ReasonAttemptsExhausted)
	}
	for i := range 2 {
		f.deadLetter(t, q, fmt.Sprintf("c-%d", i), "charge", "fatal: card declined")
	}
	if err := f.backend.DeadLetter(ctx, q, []byte("{oops"), queuey.ReasonMalformed, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		e := queuey.Envelope{ID: fmt.Sprintf("n-%d", i), Kind: "email", Queue: q, Payload: json.RawMessage(`{}`), Attempt: 1, EnqueuedAt: time.Now()}
		if err := f.backend.Publish(ctx, e, 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
	}
	f.api = memapi.New(f.broker, "guest", "guest")
	api := httptest.NewServer(f.api)
	t.Cleanup(api.Close)
	mgmt, err := rabbitmq.NewManagementAPI(api.URL, "amqp://guest:guest@mem/", nil)
	if err != nil {
		t.Fatal(err)
	}
	iconn, err := f.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = iconn.Close() })
	if f.insp, err = rabbitmq.NewInspector(iconn.Channel, rabbitmq.InspectorOptions{Queues: mgmt}); err != nil {
		t.Fatal(err)
	}
	if f.dash, err = New(f.insp, opts); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.dash)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) deadLetter(t testing.TB, queue, id, kind, reason string) {
	t.Helper()
	e := queuey.Envelope{ID: id, Kind: kind, Queue: queue, Payload: json.RawMessage(`{"to":"a@example.com"}`), Attempt: 3,
		EnqueuedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.backend.DeadLetter(context.Background(), queue, body, reason, e.Attempt); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) count(t *testing.T, queue string) int {
	t.Helper()
	q, ok := f.broker.Queue(queue)
	if !ok {
		t.Fatalf("no queue %s", queue)
	}
	return q.Ready + q.Unacked
}

// get fetches path and returns its status and body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) post(t *testing.T, path string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, body)
		}
	}
}

var hiddenField = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// formOf is the hidden fields of a confirmation page's form.
func formOf(t *testing.T, body string) url.Values {
	t.Helper()
	v := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(body, -1) {
		v.Set(m[1], htmlUnescape(m[2]))
	}
	if v.Get("csrf") == "" {
		t.Fatalf("no form with a CSRF token:\n%s", body)
	}
	return v
}

func htmlUnescape(s string) string { return html.UnescapeString(s) }

func TestOverviewListsWorkQueuesWithTheirCounts(t *testing.T) {
	f := newFixture(t, Options{}, "jobs", "mail")
	e := queuey.Envelope{ID: "held", Kind: "email", Queue: "jobs", Payload: json.RawMessage(`{}`), Attempt: 2, EnqueuedAt: time.Now()}
	if err := f.backend.Publish(context.Background(), e, 3*time.Second, queuey.HoldRetry); err != nil {
		t.Fatal(err)
	}
	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	mustContain(t, "overview", body, `<a href="/queues/jobs">jobs</a>`, `<a href="/queues/mail">mail</a>`,
		`<td class="n ready">2</td>`, `<td class="n dead alert"><a href="/queues/jobs#dead-letters">6</a></td>`, `id="live" data-refresh="2000"`, `/static/app.js`,
		`<p id="ladder">The hold ladder every work queue shares holds 1 job; a queue's Held counts its own hold queues only.</p>`)
	// The live part alone, as the script fetches it.
	code, body = f.get(t, "/live")
	if code != http.StatusOK || strings.Contains(body, "<html") || !strings.Contains(body, `data-queue="jobs"`) {
		t.Fatalf("live: %d\n%s", code, body)
	}
	for _, asset := range []string{"/static/app.js", "/static/style.css"} {
		if code, _ := f.get(t, asset); code != http.StatusOK {
			t.Fatalf("%s: %d", asset, code)
		}
	}
}

func TestQueuePageGroupsDeadLettersByReason(t *testing.T) {
	f := newFixture(t, Options{})
	code, body := f.get(t, "/queues/jobs")
	if code != http.StatusOK {
		t.Fatalf("queue page: %d\n%s", code, body)
	}
	mustContain(t, "queue page", body,
		`<tr data-reason="attempts exhausted">`, `<td class="n count">3</td>`,
		`<tr data-reason="fatal: card declined">`, `<td class="n count">2</td>`,
		`<tr data-reason="malformed envelope">`, "(malformed)",
		"queuey.ladder.1000", "within 1s of entering",
		`href="/queues/jobs/redrive?reason=fatal%3a%20card%20declined"`, "Purge all…")
	if strings.Index(body, "attempts exhausted") > strings.Index(body, "fatal: card declined") {
		t.Fatal("groups not largest first")
	}
	if n := f.count(t, "jobs.dead"); n != 6 {
		t.Fatalf("reading the groups left %d dead letters of 6", n)
	}
	if code, body := f.get(t, "/queues/nosuch"); code != http.StatusNotFound || !strings.Contains(body, "no such queue") {
		t.Fatalf("a queue that does not exist: %d\n%s", code, body)
	}
}

func TestDeadLettersArePaged(t *testing.T) {
	f := newFixture(t, Options{PageSize: 2})
	seen := map[string]bool{}
	next := "/queues/jobs/dead?reason=attempts+exhausted"
	for pages := 0; next != ""; pages++ {
		if pages > 3 {
			t.Fatal("more pages than dead letters")
		}
		code, body := f.get(t, next)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", next, code, body)
		}
		for _, m := range regexp.MustCompile(`/dead/(e-\d)"`).FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Fatalf("%s listed twice", m[1])
			}
			seen[m[1]] = true
		}
		if strings.Contains(body, "c-0") {
			t.Fatal("another group's dead letter listed")
		}
		next = ""
		if m := regexp.MustCompile(`<a href="([^"]+)">Next ›</a>`).FindStringSubmatch(body); m != nil {
			next = htmlUnescape(m[1])
		}
	}
	if len(seen) != 3 {
		t.Fatalf("pages listed %v, want e-0..e-2", seen)
	}
	if code, _ := f.get(t, "/queues/jobs/dead?page=0"); code != http.StatusBadRequest {
		t.Fatalf("page 0: %d", code)
	}
	for _, page := range []string{"3", "4611686018427387904", "9223372036854775807"} {
		if code, body := f.get(t, "/queues/jobs/dead?reason=attempts+exhausted&page="+page); code != http.StatusOK || !strings.Contains(body, "No dead letters here on page") {
			t.Fatalf("page %s, past the end: %d\n%s", page, code, body)
		}
	}
}

func TestDeadLetterPageShowsTheJob(t *testing.T) {
	f := newFixture(t, Options{})
	code, body := f.get(t, "/queues/jobs/dead/c-1")
	if code != http.StatusOK {
		t.Fatalf("dead letter: %d\n%s", code, body)
	}
	mustContain(t, "dead letter", body, "charge", `<td id="reason">fatal: card declined</td>`,
		rabbitmq.HeaderDeathReason, "&#34;to&#34;: &#34;a@example.com&#34;", "2026-12-01 09:00:00Z")
	if code, body := f.get(t, "/queues/jobs/dead/nope"); code != http.StatusNotFound || !strings.Contains(body, "no dead letter with the job ID") {
		t.Fatalf("unknown job: %d\n%s", code, body)
	}
}

// A group's redrive, as an operator does it: the confirmation, then its
// form posted; only that group moves.
func TestRedriveAGroup(t *testing.T) {
	f := newFixture(t, Options{})
	code, body := f.get(t, "/queues/jobs/redrive?reason=fatal%3A+card+declined&reset=1")
	if code != http.StatusOK {
		t.Fatalf("confirmation: %d\n%s", code, body)
	}
	mustContain(t, "confirmation", body, `Redrive 2 of the dead letters with reason &#34;fatal: card declined&#34; to jobs, starting their attempts over at 1?`)
	form := formOf(t, body)
	if form.Get("limit") != "6" || form.Get("reason") != "fatal: card declined" || form.Get("reset") != "1" {
		t.Fatalf("form %v", form)
	}
	if n := f.count(t, "jobs.dead"); n != 6 {
		t.Fatalf("the confirmation moved dead letters: %d left of 6", n)
	}

	// Without the token, or from another site, nothing moves.
	bad := url.Values{"limit": {"6"}, "reason": {"fatal: card declined"}}
	if code, _ := f.post(t, "/queues/jobs/redrive", bad, nil); code != http.StatusForbidden {
		t.Fatalf("no CSRF token: %d", code)
	}
	if code, _ := f.post(t, "/queues/jobs/redrive", form, http.Header{"Sec-Fetch-Site": {"cross-site"}}); code != http.StatusForbidden {
		t.Fatalf("cross-site POST: %d", code)
	}
	if n := f.count(t, "jobs.dead"); n != 6 {
		t.Fatalf("a refused POST moved dead letters: %d left", n)
	}

	code, body = f.post(t, "/queues/jobs/redrive", form, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	if code != http.StatusOK {
		t.Fatalf("redrive: %d\n%s", code, body)
	}
	mustContain(t, "report", body, "Redrove 2 dead letters to jobs.", "6 read", "4 left in place")
	if dead, work := f.count(t, "jobs.dead"), f.count(t, "jobs"); dead != 4 || work != 4 {
		t.Fatalf("after the redrive: %d dead, %d in jobs; want 4 and 4", dead, work)
	}
	_, body = f.get(t, "/queues/jobs")
	if strings.Contains(body, `data-reason="fatal: card declined"`) {
		t.Fatal("the redriven group is still shown")
	}
}

// "Redrive all" leaves malformed bodies, as the CLI does without
// --malformed; their own group moves them.
func TestRedriveAllLeavesMalformedBodies(t *testing.T) {
	f := newFixture(t, Options{})
	_, body := f.get(t, "/queues/jobs/redrive")
	mustContain(t, "confirmation", body, "Redrive 5 of every dead letter (malformed bodies aside")
	code, body := f.post(t, "/queues/jobs/redrive", formOf(t, body), nil)
	if code != http.StatusOK || !strings.Contains(body, "Redrove 5 dead letters to jobs.") {
		t.Fatalf("redrive: %d\n%s", code, body)
	}
	if dead := f.count(t, "jobs.dead"); dead != 1 {
		t.Fatalf("%d dead letters left, want the malformed one", dead)
	}
	_, body = f.get(t, "/queues/jobs/redrive?reason=malformed+envelope")
	mustContain(t, "confirmation", body, "Redrive 1 of the dead letters with reason &#34;malformed envelope&#34;")
}

func TestPurge(t *testing.T) {
	f := newFixture(t, Options{})
	code, body := f.get(t, "/queues/jobs/purge")
	if code != http.StatusOK {
		t.Fatalf("confirmation: %d\n%s", code, body)
	}
	mustContain(t, "confirmation", body, "Delete all 6 dead letters of jobs, for good?")
	code, body = f.post(t, "/queues/jobs/purge", formOf(t, body), nil)
	if code != http.StatusOK || !strings.Contains(body, "Purged 6 dead letters of jobs.") {
		t.Fatalf("purge: %d\n%s", code, body)
	}
	if n := f.count(t, "jobs.dead"); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}
	_, body = f.get(t, "/queues/jobs/purge")
	mustContain(t, "confirmation", body, "jobs has no dead letters.")
}

func TestReadOnlyHidesAndRefusesActions(t *testing.T) {
	f := newFixture(t, Options{ReadOnly: true})
	_, body := f.get(t, "/queues/jobs")
	mustContain(t, "queue page", body, "read-only")
	if strings.Contains(body, "Redrive") || strings.Contains(body, "Purge") {
		t.Fatalf("read-only page offers actions:\n%s", body)
	}
	_, body = f.get(t, "/queues/jobs/dead/e-1")
	if strings.Contains(body, "Redrive") || strings.Contains(body, "Delete…") {
		t.Fatalf("read-only dead letter page offers actions:\n%s", body)
	}
	for _, path := range []string{"/queues/jobs/redrive", "/queues/jobs/purge", "/queues/jobs/delete?id=e-1"} {
		if code, _ := f.get(t, path); code != http.StatusForbidden {
			t.Fatalf("GET %s: %d", path, code)
		}
		if code, _ := f.post(t, strings.TrimSuffix(path, "?id=e-1"), url.Values{"csrf": {f.dash.csrf}, "limit": {"6"}, "id": {"e-1"}}, nil); code != http.StatusForbidden {
			t.Fatalf("POST %s: %d", path, code)
		}
	}
	if n := f.count(t, "jobs.dead"); n != 6 {
		t.Fatalf("%d dead letters left of 6", n)
	}
}

// Without a password only loopback hosts are served (a DNS-rebinding page
// names its own host); with one, every request must carry it.
func TestHostsAndPasswords(t *testing.T) {
	f := newFixture(t, Options{})
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
	req.Host = "attacker.example:8080"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host without a password: %d", resp.StatusCode)
	}
	for host, want := range map[string]bool{"localhost:8080": true, "127.0.0.1": true, "[::1]:80": true, "127.1.2.3:9": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:8080": false, "example.com": false, "localhost.example.com": false} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v", host, got)
		}
	}

	// Another site may link to the overview, not make the dashboard read
	// dead letters.
	for path, want := range map[string]int{"/": 200, "/static/app.js": 200, "/queues/jobs": 403, "/queues/jobs/dead/c-0": 403, "/queues/jobs/redrive": 403} {
		for _, site := range []string{"cross-site", "same-site"} {
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
			req.Header.Set("Sec-Fetch-Site", site)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET %s from a %s page: %d, want %d", path, site, resp.StatusCode, want)
			}
		}
	}

	g := newFixture(t, Options{Password: "s3cret-pw"})
	req, _ = http.NewRequest(http.MethodGet, g.srv.URL+"/", nil)
	req.Host = "dashboard.example:8080"
	for _, tc := range []struct {
		user, pass string
		want       int
	}{{"", "", 401}, {"queuey", "wrong", 401}, {"admin", "s3cret-pw", 401}, {"queuey", "s3cret-pw", 200}} {
		r := req.Clone(context.Background())
		if tc.user != "" {
			r.SetBasicAuth(tc.user, tc.pass)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want || strings.Contains(string(b), "s3cret-pw") {
			t.Fatalf("%s:%s: %d, want %d", tc.user, tc.pass, resp.StatusCode, tc.want)
		}
	}
}

// A broker whose API and AMQP go away shows as such, and the overview
// recovers on its next refresh when they are back.
func TestBrokerDownThenBack(t *testing.T) {
	f := newFixture(t, Options{Redact: func(err error) error {
		return errors.New(strings.ReplaceAll(err.Error(), "guest", "xxxxx"))
	}})
	f.api.SetDown(true)
	for _, path := range []string{"/", "/live", "/queues/jobs"} {
		code, body := f.get(t, path)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `role="alert"`) || !strings.Contains(body, "503") {
			t.Fatalf("%s with the broker down: %d\n%s", path, code, body)
		}
		if strings.Contains(body, "guest") {
			t.Fatalf("%s shows an unredacted error:\n%s", path, body)
		}
	}
	_, body := f.get(t, "/queues/jobs")
	mustContain(t, "error page", body, `<meta http-equiv="refresh" content="5">`)
	f.api.SetDown(false)
	code, body := f.get(t, "/live")
	if code != http.StatusOK || strings.Contains(body, `role="alert"`) || !strings.Contains(body, `data-queue="jobs"`) {
		t.Fatalf("live after recovery: %d\n%s", code, body)
	}
}

// With the management API up and AMQP down (Options.Ping failing), the
// overview shows its figures under a banner.
func TestOverviewSaysWhenAMQPIsDown(t *testing.T) {
	var down error
	f := newFixture(t, Options{Ping: func(context.Context) error { return down }})
	down = errors.New("cannot reach the broker at amqp://guest:xxxxx@mem/: connection refused")
	code, body := f.get(t, "/live")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("live with AMQP down: %d\n%s", code, body)
	}
	mustContain(t, "live", body, `role="alert"`, "AMQP side cannot be reached", "connection refused", `data-queue="jobs"`)
	down = nil
	if code, body := f.get(t, "/live"); code != http.StatusOK || strings.Contains(body, `role="alert"`) {
		t.Fatalf("live with AMQP back: %d\n%s", code, body)
	}
}

// fakeSource is a Source whose work queues the test sets.
type fakeSource struct {
	Source
	stats []rabbitmq.QueueStats
}

func (s *fakeSource) WorkQueues(context.Context) ([]rabbitmq.QueueStats, error) { return s.stats, nil }

func (s *fakeSource) Ladder(context.Context) (rabbitmq.LadderStats, error) {
	return rabbitmq.LadderStats{}, nil
}

// Rates come from two readings a second or more apart; the chart spans
// the history, and readings closer than Refresh are not kept.
func TestRatesAndChart(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	src := &fakeSource{}
	d, err := New(src, Options{Now: func() time.Time { return now }, Refresh: 2 * time.Second, History: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	read := func(ready, dead int, enq, acked int64) string {
		src.stats = []rabbitmq.QueueStats{{Queue: "jobs", Ready: ready, Dead: dead, Listed: true, Enqueued: enq, Acked: acked}}
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/live", nil))
		return rec.Body.String()
	}
	body := read(10, 0, 100, 50)
	if !strings.Contains(body, `<td class="n">–</td>`) {
		t.Fatalf("one reading gives rates:\n%s", body)
	}
	now = now.Add(time.Second)
	read(99, 99, 999, 999) // under Refresh after the first: not kept
	now = now.Add(9 * time.Second)
	body = read(20, 5, 150, 60) // 10 s after the first
	for _, want := range []string{`<td class="n">5.0</td><td class="n">1.0</td><td class="n">0.5</td>`, `aria-label="peak 20"`, `points="133.3,16.0 160.0,1.0"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("live lacks %q:\n%s", want, body)
		}
	}
	// A counter that starts again (the queue declared again) counts its
	// rises only: 150 -> 20 -> 40 over 4 s is 20 since the reset.
	now = now.Add(2 * time.Minute)
	read(0, 0, 150, 60)
	now = now.Add(2 * time.Second)
	read(0, 0, 20, 0)
	now = now.Add(2 * time.Second)
	body = read(0, 0, 40, 8)
	if !strings.Contains(body, `<td class="n">5.0</td><td class="n">2.0</td><td class="n">0</td>`) {
		t.Fatalf("rates across a counter reset:\n%s", body)
	}
	if !strings.Contains(body, `aria-label="peak 0"`) {
		t.Fatalf("readings older than History kept:\n%s", body)
	}
}

// A queue's page leads with its dead letters and a search by job ID; its
// holds follow, summed up in a line, the rungs on request, their TTLs in
// words. The search goes to the dead letter's page, which offers its
// redrive alone.
func TestQueuePageLeadsWithDeadLettersAndFindsOneByID(t *testing.T) {
	f := newFixture(t, Options{})
	e := queuey.Envelope{ID: "held", Kind: "email", Queue: "jobs", Payload: json.RawMessage(`{}`), Attempt: 2, EnqueuedAt: time.Now()}
	if err := f.backend.Publish(context.Background(), e, 3*time.Second, queuey.HoldRetry); err != nil {
		t.Fatal(err)
	}
	_, body := f.get(t, "/queues/jobs")
	dead, holds := strings.Index(body, `id="dead-letters"`), strings.Index(body, `id="holds"`)
	if dead < 0 || holds < dead {
		t.Fatalf("dead letters at %d, holds at %d: want the dead letters first", dead, holds)
	}
	mustContain(t, "queue page", body, `<input id="find-id" name="id" required>`,
		`<p id="held">1 job held (on the hold ladder every work queue shares: not all need be this queue's); the next comes back within 2s.</p>`,
		"<details><summary>The shared ladder's and its own: 23 hold queues</summary>", "24.3 days")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(f.srv.URL + "/queues/jobs/dead?id=e-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/queues/jobs/dead/e-1" {
		t.Fatalf("the search answered %d to %q", resp.StatusCode, loc)
	}
	_, body = f.get(t, "/queues/jobs/dead/e-1")
	mustContain(t, "the dead letter's page", body, `id="redrive-one"`, `href="/queues/jobs/redrive?id=e-1"`)
	_, body = f.get(t, "/queues/jobs/redrive?id=e-1")
	mustContain(t, "the confirmation", body, `Redrive the dead letter of job &#34;e-1&#34; to jobs, keeping its attempt count?`, `name="id" value="e-1"`)
}

func TestDurationsReadAsWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		250 * time.Millisecond: "250ms", 12 * time.Second: "12s", 1500 * time.Millisecond: "1.5s",
		200 * time.Second: "3m 20s", time.Hour: "1h", 320 * time.Minute: "5h 20m",
		2147483647 * time.Millisecond: "24.9 days", 72 * time.Hour: "3 days",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
}

// One dead letter is deleted from its page, through the confirmation, and
// no other; asked again, the confirmation says it is gone.
func TestDeleteOneDeadLetter(t *testing.T) {
	f := newFixture(t, Options{})
	_, body := f.get(t, "/queues/jobs/dead/e-1")
	mustContain(t, "the dead letter's page", body, `id="delete-one"`, `href="/queues/jobs/delete?id=e-1"`)
	code, body := f.get(t, "/queues/jobs/delete?id=e-1")
	if code != http.StatusOK {
		t.Fatalf("confirmation: %d\n%s", code, body)
	}
	mustContain(t, "confirmation", body, "Delete the dead letter of job &#34;e-1&#34; from jobs, for good?", `class="danger"`)
	code, body = f.post(t, "/queues/jobs/delete", formOf(t, body), nil)
	if code != http.StatusOK || !strings.Contains(body, "Deleted the dead letter of job &#34;e-1&#34; from jobs.") {
		t.Fatalf("delete: %d\n%s", code, body)
	}
	if n := f.count(t, "jobs.dead"); n != 5 {
		t.Fatalf("%d dead letters left, want 5", n)
	}
	_, body = f.get(t, "/queues/jobs/delete?id=e-1")
	mustContain(t, "confirmation", body, "jobs has no dead letter of job &#34;e-1&#34;")
	if code, _ := f.get(t, "/queues/jobs/delete"); code != http.StatusBadRequest {
		t.Fatalf("a delete without an id: %d", code)
	}
}

// An empty rate reads one way: "0"; a rate too small for a decimal reads
// "<0.1", never "0.0"; "–" is no reading yet.
func TestRatesReadOneWayWhenEmpty(t *testing.T) {
	r := rates{ok: true}
	for v, want := range map[float64]string{0: "0", 0.01: "<0.1", 0.05: "0.1", 2.34: "2.3", 12.6: "13"} {
		if got := r.perSecond(v); got != want {
			t.Errorf("perSecond(%v) = %q, want %q", v, got, want)
		}
	}
	if got := (rates{}).perSecond(0); got != "–" {
		t.Errorf("no reading yet: %q", got)
	}
}
