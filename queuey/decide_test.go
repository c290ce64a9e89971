package queuey

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestDecide(t *testing.T) {
	policy := RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 3, Jitter: NoJitter}
	classic := QueueConfig{Name: "jobs", Retry: policy}
	plain := QueueConfig{Name: "jobs", Retry: policy, MaxPriority: new(uint8(0))}
	quorum := QueueConfig{Name: "jobs", Type: Quorum, Retry: policy}
	enqueued := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	job := func(attempt, deferrals int, priority uint8) Envelope {
		return Envelope{Version: EnvelopeVersion, ID: "j1", Kind: "call-api", Queue: "jobs",
			Payload: []byte(`{}`), Attempt: attempt, Deferrals: deferrals, Priority: priority, EnqueuedAt: enqueued}
	}
	boom := errors.New("boom")
	tests := []struct {
		name   string
		env    Envelope
		result error
		q      QueueConfig
		want   decision
	}{
		{"success acks", job(1, 0, 0), nil, classic, decision{Action: ActionAck}},
		{"defer spends no attempt and goes to the top", job(2, 1, 0), Defer(30*time.Second, "rate limited"), classic,
			decision{Action: ActionDefer, Successor: job(2, 2, 10), Delay: 30 * time.Second, Reason: "rate limited"}},
		{"defer on the last attempt still defers", job(3, 0, 0), Defer(time.Second, "429"), classic,
			decision{Action: ActionDefer, Successor: job(3, 1, 10), Delay: time.Second, Reason: "429"}},
		{"no built-in cap on deferrals", job(1, 1000, 0), Defer(time.Second, "still 429"), classic,
			decision{Action: ActionDefer, Successor: job(1, 1001, 10), Delay: time.Second, Reason: "still 429"}},
		{"wrapped defer", job(1, 0, 0), fmt.Errorf("calling api: %w", Defer(time.Second, "429")), classic,
			decision{Action: ActionDefer, Successor: job(1, 1, 10), Delay: time.Second, Reason: "429"}},
		{"defer on a plain queue comes back FIFO", job(1, 0, 0), Defer(time.Second, ""), plain,
			decision{Action: ActionDefer, Successor: job(1, 1, 0), Delay: time.Second}},
		{"defer on a quorum queue goes to the high tier", job(1, 0, 0), Defer(time.Second, ""), quorum,
			decision{Action: ActionDefer, Successor: job(1, 1, 10), Delay: time.Second}},
		{"negative defer publishes now", job(1, 0, 0), Defer(-time.Second, ""), classic,
			decision{Action: ActionDefer, Successor: job(1, 1, 10), Delay: 0}},
		{"error retries with backoff at priority 0", job(1, 1, 10), boom, classic,
			decision{Action: ActionRetry, Successor: job(2, 1, 0), Delay: time.Second}},
		{"second retry doubles", job(2, 0, 0), boom, classic,
			decision{Action: ActionRetry, Successor: job(3, 0, 0), Delay: 2 * time.Second}},
		{"panic retries", job(1, 0, 0), &PanicError{Value: "nil map"}, classic,
			decision{Action: ActionRetry, Successor: job(2, 0, 0), Delay: time.Second}},
		{"last attempt failing dead-letters", job(3, 4, 10), boom, classic,
			decision{Action: ActionDeadLetter, Successor: job(3, 4, 0), Reason: ReasonAttemptsExhausted}},
		{"fatal dead-letters at once", job(1, 0, 0), Fatal(boom), classic,
			decision{Action: ActionDeadLetter, Successor: job(1, 0, 0), Reason: "fatal: boom"}},
		{"wrapped fatal", job(1, 0, 0), fmt.Errorf("charge: %w", Fatal(errors.New("card declined"))), classic,
			decision{Action: ActionDeadLetter, Successor: job(1, 0, 0), Reason: "fatal: card declined"}},
		{"a FatalError built with no Err dead-letters, never panics", job(1, 0, 0), &FatalError{}, classic,
			decision{Action: ActionDeadLetter, Successor: job(1, 0, 0), Reason: "fatal: fatal"}},
		{"unknown kind dead-letters, never retries", job(1, 0, 0), &UnknownKindError{Kind: "nope"}, classic,
			decision{Action: ActionDeadLetter, Successor: job(1, 0, 0), Reason: ReasonUnknownKind}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.env, tc.result, tc.q, 0.5)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(decision{}, "Err")); diff != "" {
				t.Fatalf("Decide (-want +got):\n%s", diff)
			}
			if tc.result != nil && !errors.Is(got.Err, tc.result) {
				t.Fatalf("decision.Err = %v, want the handler's error %v", got.Err, tc.result)
			}
		})
	}
}

// TestDecideUsesTheJitterDraw checks that the retry delay comes from the
// policy with the caller's random draw, so a seeded simulation repeats.
func TestDecideUsesTheJitterDraw(t *testing.T) {
	q := QueueConfig{Name: "jobs", Retry: RetryPolicy{Base: 10 * time.Second, Cap: time.Hour, MaxAttempts: 5}}
	env := Envelope{Attempt: 2}
	for _, u := range []float64{0, 0.25, 0.999} {
		got := decide(env, errors.New("x"), q, u)
		if want := q.WithDefaults().Retry.Delay(3, u); got.Delay != want {
			t.Errorf("u=%v: delay %s, want %s", u, got.Delay, want)
		}
	}
}

func TestQueueConfig(t *testing.T) {
	def := QueueConfig{Name: "jobs"}.WithDefaults()
	if def.Prefetch != 10 || *def.MaxPriority != DefaultMaxPriority || def.Type != Classic {
		t.Fatalf("defaults: %+v", def)
	}
	if got := (QueueConfig{Name: "jobs", MaxPriority: new(uint8(0))}).TopPriority(); got != 0 {
		t.Fatalf("plain queue top priority %d", got)
	}
	tests := []struct {
		name string
		q    QueueConfig
		want string
	}{
		{"ok", QueueConfig{Name: "jobs"}, ""},
		{"no name", QueueConfig{}, "Name is empty"},
		{"bad type", QueueConfig{Name: "jobs", Type: 7}, `queue "jobs": Type 7`},
		{"negative prefetch", QueueConfig{Name: "jobs", Prefetch: -1}, `queue "jobs": Prefetch -1 is outside 1..65535`},
		{"prefetch past the wire's 16 bits", QueueConfig{Name: "jobs", Prefetch: 70000}, "Prefetch 70000"},
		{"bad retry", QueueConfig{Name: "jobs", Retry: RetryPolicy{Base: -time.Second}}, `queue "jobs": Retry:`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.q.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// A deferral always waits in a hold queue; a retry's hold is its delay.
func TestDecisionHold(t *testing.T) {
	for _, tc := range []struct {
		dec  decision
		want time.Duration
	}{
		{decision{Action: ActionDefer, Delay: 0}, time.Nanosecond},
		{decision{Action: ActionDefer, Delay: -time.Second}, time.Nanosecond},
		{decision{Action: ActionDefer, Delay: 30 * time.Second}, 30 * time.Second},
		{decision{Action: ActionRetry, Delay: 0}, 0},
		{decision{Action: ActionRetry, Delay: time.Second}, time.Second},
		{decision{Action: ActionAck}, 0},
	} {
		if got := hold(tc.dec); got != tc.want {
			t.Errorf("%s with delay %s: Hold() = %s, want %s", tc.dec.Action, tc.dec.Delay, got, tc.want)
		}
	}
}
