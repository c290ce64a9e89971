package redial

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func show(acts []Action) string {
	var parts []string
	for _, a := range acts {
		switch a.Kind {
		case Dial:
			parts = append(parts, fmt.Sprintf("dial %d", a.URL))
		case Wait:
			parts = append(parts, "wait "+a.Delay.String())
		case Report:
			e := a.Event
			parts = append(parts, fmt.Sprintf("%s(url %d, gen %d, attempt %d, after %s)", e.State, e.URL, e.Gen, e.Attempt, e.Delay))
		}
	}
	return strings.Join(parts, "; ")
}

func expect(t *testing.T, step string, got []Action, want string) {
	t.Helper()
	if s := show(got); s != want {
		t.Fatalf("%s:\n got %s\nwant %s", step, s, want)
	}
}

var errRefused = errors.New("connection errRefused")

// The loop dials the URLs in turn, waits the full-jitter backoff between
// attempts (capped), and starts over after each connection it loses.
func TestTheLoop(t *testing.T) {
	c := New(2, Backoff{Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond}, func() float64 { return 0.5 })
	expect(t, "start", c.Start(), "connecting(url 0, gen 0, attempt 1, after 0s); dial 0")
	expect(t, "errRefused", c.DialDone(errRefused, false), "wait 100ms")
	expect(t, "timer", c.TimerFired(), "connecting(url 1, gen 0, attempt 2, after 100ms); dial 1")
	expect(t, "errRefused", c.DialDone(errRefused, false), "wait 150ms")
	c.TimerFired()
	expect(t, "errRefused, capped", c.DialDone(errRefused, false), "wait 150ms")
	c.TimerFired()
	expect(t, "up", c.DialDone(nil, false), "connected(url 1, gen 1, attempt 0, after 0s)")
	expect(t, "lost", c.Lost(errRefused), "disconnected(url 0, gen 1, attempt 0, after 0s); wait 50ms")
	expect(t, "timer", c.TimerFired(), "connecting(url 0, gen 0, attempt 1, after 50ms); dial 0")
	expect(t, "up again", c.DialDone(nil, false), "connected(url 0, gen 2, attempt 0, after 0s)")
	expect(t, "close", c.Close(), "closed(url 0, gen 2, attempt 0, after 0s)")
	expect(t, "close again", c.Close(), "")
}

func TestAFatalRefusalEndsTheLoop(t *testing.T) {
	c := New(1, Backoff{Initial: time.Second, Max: time.Minute}, func() float64 { return 0 })
	c.Start()
	expect(t, "fatal", c.DialDone(errors.New("ACCESS_REFUSED"), true), "failed(url 0, gen 0, attempt 0, after 0s)")
	expect(t, "close after", c.Close(), "")
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
	for n, want := range map[int]time.Duration{0: 50 * time.Millisecond, 1: 50 * time.Millisecond, 2: 100 * time.Millisecond,
		9: 12800 * time.Millisecond, 10: 15 * time.Second, 100: 15 * time.Second} {
		if got := b.Delay(n, 0.5); got != want {
			t.Errorf("Delay(%d, 0.5) = %s, want %s", n, got, want)
		}
	}
	if got := b.Delay(5, 0); got != 0 {
		t.Errorf("Delay(5, 0) = %s", got)
	}
}

// script is a Shell whose dials answer in turn from its list, recording
// what Drive asks of it.
type script struct {
	answers []error
	fatal   bool
	did     []string
}

func (s *script) Dial(url int) (bool, error) {
	err := s.answers[0]
	s.answers = s.answers[1:]
	s.did = append(s.did, fmt.Sprintf("dial %d: %v", url, err))
	return s.fatal && err != nil, err
}

func (s *script) Report(ev Event) { s.did = append(s.did, ev.State.String()) }

// TestDrive: the loop's actions run through the shell until it waits or a
// run ends; the shell waits, then drives on from TimerFired.
func TestDrive(t *testing.T) {
	c := New(2, Backoff{Initial: 100 * time.Millisecond, Max: time.Second}, func() float64 { return 0.5 })
	sh := &script{answers: []error{errRefused, nil}}
	delay, wait, end := Drive(c, c.Start(), sh)
	if !wait || delay != 100*time.Millisecond || end != (Event{}) {
		t.Fatalf("first run: wait %v %s, end %+v", wait, delay, end)
	}
	delay, wait, end = Drive(c, c.TimerFired(), sh)
	if wait || delay != 0 || end.State != Connected || end.URL != 1 || end.Gen != 1 {
		t.Fatalf("second run: wait %v %s, end %+v", wait, delay, end)
	}
	if got, want := strings.Join(sh.did, "; "), "connecting; dial 0: connection errRefused; connecting; dial 1: <nil>"; got != want {
		t.Fatalf("the shell did %q, want %q", got, want)
	}

	f := New(1, Backoff{Initial: time.Second, Max: time.Minute}, func() float64 { return 0 })
	fatal := &script{answers: []error{errors.New("403 ACCESS_REFUSED")}, fatal: true}
	if _, wait, end := Drive(f, f.Start(), fatal); wait || end.State != Failed || end.Err == nil {
		t.Fatalf("a fatal refusal: wait %v, end %+v", wait, end)
	}
}
