package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/queuey/queuey/rabbitmq"
)

func TestUIRefusesUnsafeOrIncompleteSettings(t *testing.T) {
	d := newDeployment(t)
	const url = "amqp://guest:guest@mem/"
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		stderr string
	}{
		{"every interface without a password", nil, []string{"ui", "--listen", ":8080"},
			"--listen :8080 reaches beyond this machine, so the dashboard needs a password: set QUEUEY_UI_PASSWORD"},
		{"a public address without a password", nil, []string{"ui", "--listen", "192.0.2.7:8080"}, "needs a password"},
		{"a user without a password", map[string]string{"QUEUEY_UI_USER": "ops"}, []string{"ui"}, "QUEUEY_UI_USER is set but QUEUEY_UI_PASSWORD is not"},
		{"no management API", map[string]string{"RABBITMQ_MANAGEMENT_URL": ""}, []string{"ui"}, "ui needs the management API"},
		{"an argument", nil, []string{"ui", "jobs"}, "ui takes no arguments"},
		{"--json", nil, []string{"ui", "--json"}, "ui does not take --json"},
		{"a flag it does not take", nil, []string{"ui", "--yes"}, "ui does not take --yes"},
		{"--listen elsewhere", nil, []string{"stats", "jobs", "--listen", "127.0.0.1:1"}, "stats does not take --listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"AMQP_URL": url, "RABBITMQ_MANAGEMENT_URL": d.mgmt.URL}
			for k, v := range tc.env {
				env[k] = v
			}
			code, _, stderr := d.runCLI(t, env, "", false, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr:\n%s\nwant 2 and %q", code, stderr, tc.stderr)
			}
		})
	}
}

// ui is a running `queuey ui` on a deployment.
type ui struct {
	base string // http://127.0.0.1:port
	out  *syncBuffer
	stop func() int
}

// syncBuffer is the command's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startUI runs `queuey ui` with env and args, the dial given (d's when
// nil), on a loopback port of its own whatever --listen says, until the
// test ends.
func startUI(t *testing.T, env map[string]string, dial func(context.Context, string) (opener, func() error, error), args ...string) *ui {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	a := &app{
		stdin: strings.NewReader(""), stdout: out, stderr: out,
		getenv: func(k string) string { return env[k] },
		dial:   dial,
		listen: func(string, string) (net.Listener, error) { return ln, nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	// Requests need not wait for the command to serve: the listener
	// exists, and queues connections until it does. A command that exits
	// first closes it, so they fail rather than hang.
	go func() {
		c := a.run(ctx, append([]string{"ui"}, args...))
		_ = ln.Close()
		done <- c
	}()
	code := -1
	stop := func() int {
		if code == -1 {
			cancel()
			code = <-done
		}
		return code
	}
	t.Cleanup(func() { stop() })
	return &ui{base: "http://" + ln.Addr().String(), out: out, stop: stop}
}

// get fetches path as user with password (none when empty).
func (u *ui) get(t *testing.T, path, user, password string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if password != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// token is the CSRF token of the confirmation page at path.
func (u *ui) token(t *testing.T, path, user, password string) string {
	t.Helper()
	_, page := u.get(t, path, user, password)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on %s:\n%s", path, page)
	}
	return m[1]
}

// post submits a confirmation's form, with token, to path as user with
// password.
func (u *ui) post(t *testing.T, path, token, user, password string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u.base+path, strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(user, password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The dashboard beyond loopback, with a password; the broker stopped and
// started under it: its pages say so, then recover, and the password is
// never printed.
func TestUIOutlivesABrokerOutage(t *testing.T) {
	d := newDeployment(t)
	const password = "pa55-for-the-ui"
	env := map[string]string{"AMQP_URL": "amqp://guest:guest@mem/", "RABBITMQ_MANAGEMENT_URL": d.mgmt.URL,
		"QUEUEY_UI_USER": "ops", "QUEUEY_UI_PASSWORD": password}
	var amqpDown atomic.Bool // AMQP refused, the management API up
	dial := func(ctx context.Context, url string) (opener, func() error, error) {
		if amqpDown.Load() {
			return nil, nil, fmt.Errorf("cannot reach the broker at %s: connection refused", rabbitmq.Redact(url))
		}
		return d.dial(ctx, url)
	}
	u := startUI(t, env, dial, "--listen", "0.0.0.0:0")
	if code, _ := u.get(t, "/", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no password: %d", code)
	}
	code, body := u.get(t, "/queues/jobs", "ops", password)
	if code != http.StatusOK || !strings.Contains(body, `data-reason="fatal: card declined"`) {
		t.Fatalf("queue page: %d\n%s", code, body)
	}

	token := u.token(t, "/queues/jobs/purge", "ops", password)
	// AMQP gone: every connection dropped, and dials refused.
	amqpDown.Store(true)
	d.broker.Restart()
	code, body = u.get(t, "/queues/jobs", "ops", password)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot reach the broker at amqp://xxxxx:xxxxx@mem/") { // guest is both user and password
		t.Fatalf("queue page with AMQP down: %d\n%s", code, body)
	}
	// The overview's figures come from the management API, which is up:
	// it shows them, and says AMQP is down.
	code, body = u.get(t, "/live", "ops", password)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "AMQP side cannot be reached") || !strings.Contains(body, `data-queue="jobs"`) {
		t.Fatalf("live with AMQP down: %d\n%s", code, body)
	}
	// An action that fails is logged, redacted.
	if code, _ := u.post(t, "/queues/jobs/purge", token, "ops", password); code != http.StatusServiceUnavailable {
		t.Fatalf("purge with AMQP down: %d", code)
	}
	if out := u.out.String(); !strings.Contains(out, "queuey ui: purge") || !strings.Contains(out, "amqp://xxxxx:xxxxx@mem/") {
		t.Fatalf("the failed purge is not logged:\n%s", out)
	}
	// The management API too.
	d.down.Store(true)
	for _, path := range []string{"/", "/live", "/queues/jobs"} {
		code, body := u.get(t, path, "ops", password)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `role="alert"`) || !strings.Contains(body, "503 Service Unavailable") {
			t.Fatalf("%s with the broker down: %d\n%s", path, code, body)
		}
	}

	d.down.Store(false)
	amqpDown.Store(false)
	code, body = u.get(t, "/live", "ops", password)
	if code != http.StatusOK || strings.Contains(body, `role="alert"`) || !strings.Contains(body, `data-queue="jobs"`) {
		t.Fatalf("live after the broker is back: %d\n%s", code, body)
	}
	if code, body := u.get(t, "/queues/jobs", "ops", password); code != http.StatusOK || !strings.Contains(body, `data-reason="fatal: card declined"`) {
		t.Fatalf("queue page after the broker is back: %d\n%s", code, body)
	}
	if code := u.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, u.out)
	}
	if out := u.out.String(); strings.Contains(out, password) || strings.Contains(out, "guest:guest") {
		t.Fatalf("the output shows a password:\n%s", out)
	}
}
