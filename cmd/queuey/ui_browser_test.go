package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

var screenshotTo = flag.String("ui.screenshot", "", "write a screenshot of the overview, taken by TestBrowserDashboard on membroker, to this PNG (docs/dashboard.png)")

// chromium finds a Chromium to drive: $QUEUEY_CHROMIUM, or chromium,
// chromium-browser or google-chrome on the PATH. Without one the test
// skips, unless QUEUEY_BROWSER_REQUIRED is set, as CI sets it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("QUEUEY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("QUEUEY_BROWSER_REQUIRED") != "" {
		t.Fatal("QUEUEY_BROWSER_REQUIRED is set but no Chromium was found (apt-get install chromium, or set QUEUEY_CHROMIUM)")
	}
	t.Skip("no Chromium found (apt-get install chromium, or set QUEUEY_CHROMIUM): skipping the browser test of the dashboard")
	return ""
}

// browser is a headless Chromium on a fresh profile, with no network
// beyond what the page asks for, closed when the test ends. On a failure
// it saves a screenshot of the page and says where.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		if t.Failed() {
			shot, stop := context.WithTimeout(ctx, 10*time.Second)
			// Quality 100 makes a PNG.
			if png, err := chromedp.Run(shot, chromedp.FullScreenshot(100)); err == nil {
				dir, err := os.MkdirTemp("", "queuey-ui-failure-")
				if err == nil {
					path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".png")
					if os.WriteFile(path, png, 0o644) == nil {
						t.Logf("screenshot of the page at the failure: %s", path)
					}
				}
			}
			stop()
		}
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// run runs the browser actions, failing the test with what was doing.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text is the text of the element sel selects.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

// click clicks the element sel selects in one step of the page's own
// script, so that the overview's live refresh, which replaces its links
// every 2 s, cannot swap the element between finding it and clicking it.
func click(sel string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true; })()`, sel)
	eval := chromedp.Evaluate[bool](js)
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		ok, err := eval(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("nothing matches %s", sel)
		}
		return chromedp.Void{}, err
	}
}

// waitFor waits until the JavaScript expression is true on the page.
func waitFor(expr string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(50*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, t)
		return chromedp.Void{}, err
	}
}

// deadCell is the expression of queue's dead count on the overview.
func deadCell(queue string) string {
	return fmt.Sprintf(`(document.querySelector('tr[data-queue="%s"] td.dead') || {}).textContent`, queue)
}

// scenario is the walk an operator takes: the overview, a queue's page,
// a group redriven, the counts changed; a new dead letter seen by the
// live refresh; then the broker stopped and started under the page.
type scenario struct {
	base, queue string
	// addDeadLetter dead-letters one more job into queue.
	addDeadLetter func(t *testing.T)
	// stopBroker and startBroker stop and start the broker the dashboard
	// reads; nil skips that part.
	stopBroker, startBroker func(t *testing.T)
	// stage, when set, is called with -ui.screenshot before the overview's
	// screenshot is taken, to give the picture something to show.
	stage func(t *testing.T, ctx context.Context)
}

func (sc scenario) walk(t *testing.T, ctx context.Context) {
	q := sc.queue
	row := fmt.Sprintf(`tr[data-queue=%q]`, q)
	run(t, ctx, "loading the overview", chromedp.Navigate(sc.base+"/"), chromedp.WaitVisible(chromedp.CSS(row)),
		waitFor(deadCell(q)+` === "6"`))
	if *screenshotTo != "" && sc.stage != nil {
		sc.stage(t, ctx)
		png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("main")))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*screenshotTo, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	group := `tr[data-reason="fatal: card declined"]`
	run(t, ctx, "opening the queue and a group's redrive",
		click(row+` a`),
		chromedp.WaitVisible(chromedp.CSS(group)),
		chromedp.Click(chromedp.CSS(group+` a.redrive`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	question := text(t, ctx, `.question`)
	run(t, ctx, "confirming the redrive", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#report`)))
	report := text(t, ctx, `#report`)
	if !strings.Contains(question, "Redrive 2 of the dead letters") || report != "Redrove 2 dead letters to "+q+"." {
		t.Fatalf("confirmation %q, report %q", question, report)
	}
	run(t, ctx, "back to the queue", chromedp.Click(chromedp.CSS(`#back`)), chromedp.WaitVisible(chromedp.CSS(`#dead`)))
	if dead := text(t, ctx, `#dead`); dead != "4" {
		t.Fatalf("after the redrive the queue page shows %s dead letters, want 4", dead)
	}
	run(t, ctx, "the overview after the redrive", chromedp.Navigate(sc.base+"/"), waitFor(deadCell(q)+` === "4"`))
	// The live refresh, with no reload.
	sc.addDeadLetter(t)
	run(t, ctx, "the live refresh showing a new dead letter", waitFor(deadCell(q)+` === "5"`))
	if sc.stopBroker == nil {
		return
	}
	sc.stopBroker(t)
	run(t, ctx, "the overview saying the broker is down", waitFor(`document.getElementById("banner") !== null && document.getElementById("live").dataset.state === "broker-down"`))
	sc.startBroker(t)
	run(t, ctx, "the overview recovering", waitFor(`document.getElementById("banner") === null && `+deadCell(q)+` === "5"`))
}

// The dashboard in a real Chromium, served by `queuey ui` on membroker.
func TestBrowserDashboard(t *testing.T) {
	ctx := browser(t)
	d := newDeployment(t)
	env := map[string]string{"AMQP_URL": "amqp://guest:guest@mem/", "RABBITMQ_MANAGEMENT_URL": d.mgmt.URL}
	u := startUI(t, env, d.dial)
	b := d.backend(t, rabbitmq.Topology{HoldWarmup: -1})
	scenario{
		base: u.base, queue: "jobs", stage: func(t *testing.T, ctx context.Context) { stage(t, ctx, b) },
		addDeadLetter: func(t *testing.T) { deadLetterOne(t, b, "jobs") },
		stopBroker:    func(*testing.T) { d.down.Store(true); d.broker.Restart() },
		startBroker:   func(*testing.T) { d.down.Store(false) },
	}.walk(t, ctx)

	// A job the real worker failed three times says why: on its dead
	// letter's page, each attempt's error; in its queue's list, the last.
	id := failThreeTimes(t, d.backend(t, rabbitmq.Topology{HoldWarmup: -1, RetryGranularity: time.Millisecond}))
	run(t, ctx, "opening the dead letter of a job that failed three times",
		chromedp.Navigate(u.base+"/queues/api/dead/"+id), chromedp.WaitVisible(chromedp.CSS(`#errors`)))
	if got := text(t, ctx, `#errors tbody`); strings.Count(got, "upstream 503") != 3 {
		t.Fatalf("the dead letter's errors read %q, want upstream 503 three times", got)
	}
	run(t, ctx, "listing the queue's dead letters",
		chromedp.Navigate(u.base+"/queues/api/dead"), chromedp.WaitVisible(chromedp.CSS(`table`)))
	if got := text(t, ctx, `table tbody`); !strings.Contains(got, "attempts exhausted (last error: upstream 503)") {
		t.Fatalf("the dead-letter list reads %q", got)
	}

	// The queue's page puts its dead letters above its holds; the dead
	// letter is found by its ID, redriven alone, and runs again.
	ran := make(chan string, 1)
	stop := runOnce(t, d.backend(t, rabbitmq.Topology{HoldWarmup: -1, RetryGranularity: time.Millisecond}), ran)
	defer stop()
	run(t, ctx, "opening the queue's page", chromedp.Navigate(u.base+"/queues/api"), chromedp.WaitVisible(chromedp.CSS(`#find-id`)))
	if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`!!(document.getElementById("dead-letters").compareDocumentPosition(document.getElementById("holds")) & Node.DOCUMENT_POSITION_FOLLOWING)`)); err != nil || !ok {
		t.Fatalf("the dead letters come after the holds (%v)", err)
	}
	run(t, ctx, "finding the dead letter by its ID",
		chromedp.SendKeys(chromedp.CSS(`#find-id`), id), click(`#find`), chromedp.WaitVisible(chromedp.CSS(`#redrive-one`)))
	if h1 := text(t, ctx, `h1`); h1 != "Dead letter "+id {
		t.Fatalf("the search found %q", h1)
	}
	run(t, ctx, "redriving it alone", click(`#redrive-one`), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	if q := text(t, ctx, `.question`); q != fmt.Sprintf("Redrive the dead letter of job %q to api, keeping its attempt count?", id) {
		t.Fatalf("the confirmation asks %q", q)
	}
	run(t, ctx, "confirming", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#report`)))
	if report := text(t, ctx, `#report`); report != "Redrove 1 dead letter to api." {
		t.Fatalf("the report says %q", report)
	}
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("the worker ran %s, want the redriven %s", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the redriven job did not run again within 30 s")
	}
}

// stage gives the guide's screenshot (docs/dashboard.png) two more queues with jobs arriving
// and failing over a few of the overview's refreshes.
func stage(t *testing.T, ctx context.Context, b *rabbitmq.Backend) {
	for _, q := range []string{"emails", "payments"} {
		if err := b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for round := range 6 {
		for q, jobs := range map[string]int{"emails": 40 + 25*round - 8*round*round/2, "payments": 6 * round} {
			for range jobs {
				n++
				e := queuey.Envelope{ID: fmt.Sprintf("s-%d", n), Kind: "send", Queue: q, Payload: json.RawMessage(`{}`), Attempt: 1, EnqueuedAt: time.Now()}
				if err := b.Publish(t.Context(), e, 0, queuey.HoldRetry); err != nil {
					t.Fatal(err)
				}
				if n%9 == 0 {
					body, _ := e.Encode()
					if err := b.DeadLetter(t.Context(), q, body, queuey.ReasonAttemptsExhausted, 5); err != nil {
						t.Fatal(err)
					}
				}
				if n%4 == 0 {
					if err := b.Publish(t.Context(), e, time.Minute, queuey.HoldRetry); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		run(t, ctx, "letting the overview refresh", chromedp.Sleep(2100*time.Millisecond))
	}
}

// deadLetterOne dead-letters one more job into queue, through b, which
// declares queue first (a backend dead-letters only into queues it
// declared).
func deadLetterOne(t *testing.T, b *rabbitmq.Backend, queue string) {
	t.Helper()
	if err := b.Declare(t.Context(), queuey.QueueConfig{Name: queue}); err != nil {
		t.Fatal(err)
	}
	e := queuey.Envelope{ID: "late-1", Kind: "email", Queue: queue, Payload: json.RawMessage(`{}`), Attempt: 5, EnqueuedAt: time.Now()}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter(t.Context(), queue, body, queuey.ReasonAttemptsExhausted, e.Attempt); err != nil {
		t.Fatal(err)
	}
}

// The dashboard in a real Chromium, served by `queuey ui` on the live
// broker at AMQP_URL and its management API at RABBITMQ_MANAGEMENT_URL.
// With QUEUEY_RABBITMQCTL (CI's fault step sets it) the broker's
// application is stopped and started under the page.
func TestLiveBrowserDashboard(t *testing.T) {
	url, mgmt := os.Getenv("AMQP_URL"), os.Getenv("RABBITMQ_MANAGEMENT_URL")
	if url == "" || mgmt == "" {
		t.Skip("AMQP_URL or RABBITMQ_MANAGEMENT_URL not set: skipping the browser test against a live RabbitMQ (scripts/rabbitmq start)")
	}
	ctx := browser(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	q := "queuey-ui-" + hex.EncodeToString(rnd[:])
	seed := func() *rabbitmq.Backend {
		b, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b := seed()
	if err := b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteLive(url, q) })
	for i := range 6 {
		reason := queuey.ReasonAttemptsExhausted
		if i < 2 {
			reason = "fatal: card declined"
		}
		e := queuey.Envelope{ID: fmt.Sprintf("j-%d", i), Kind: "email", Queue: q, Payload: json.RawMessage(`{}`), Attempt: 3, EnqueuedAt: time.Now()}
		body, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.DeadLetter(t.Context(), q, body, reason, e.Attempt); err != nil {
			t.Fatal(err)
		}
	}
	u := startUI(t, map[string]string{"AMQP_URL": url, "RABBITMQ_MANAGEMENT_URL": mgmt}, dialAMQP)
	sc := scenario{base: u.base, queue: q,
		addDeadLetter: func(t *testing.T) {
			c, err := amqp.Dial(url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			b, err := rabbitmq.New(rabbitmq.Channels(c.Channel), rabbitmq.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Close() }()
			deadLetterOne(t, b, q)
		}}
	if ctl := os.Getenv("QUEUEY_RABBITMQCTL"); ctl != "" {
		sc.stopBroker = func(t *testing.T) { rabbitmqctl(t, ctl, "stop_app") }
		sc.startBroker = func(t *testing.T) { rabbitmqctl(t, ctl, "start_app") }
	} else {
		t.Log("QUEUEY_RABBITMQCTL not set: not stopping the broker under the page")
	}
	sc.walk(t, ctx)
}

// rabbitmqctl runs `$QUEUEY_RABBITMQCTL args...` (a command line, as
// scripts/rabbitmq ctl).
func rabbitmqctl(t *testing.T, ctl string, args ...string) {
	t.Helper()
	f := strings.Fields(ctl)
	out, err := exec.Command(f[0], append(f[1:], args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", ctl, strings.Join(args, " "), err, out)
	}
}

// deleteLive deletes queue and what queuey declared beside it, on a
// connection of its own (the test's may be gone with a broker restart).
func deleteLive(url, queue string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	top := rabbitmq.Topology{}
	for _, name := range []string{queue, top.DeadQueue(queue), top.WarmQueue(queue)} { // the shared ladder stays
		_, _ = ch.QueueDelete(name, false, false, false)
	}
}
