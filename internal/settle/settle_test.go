package settle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

func TestDecide(t *testing.T) {
	policy := contract.RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 3, Jitter: contract.NoJitter}
	classic := contract.QueueConfig{Name: "jobs", Retry: policy}
	plain := contract.QueueConfig{Name: "jobs", Retry: policy, MaxPriority: new(uint8(0))}
	quorum := contract.QueueConfig{Name: "jobs", Type: contract.Quorum, Retry: policy}
	enqueued := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	job := func(attempt, deferrals int, priority uint8) envelope.Envelope {
		return envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "call-api", Queue: "jobs",
			Payload: []byte(`{}`), Attempt: attempt, Deferrals: deferrals, Priority: priority, EnqueuedAt: enqueued}
	}
	boom := errors.New("boom")
	tests := []struct {
		name   string
		env    envelope.Envelope
		result error
		q      contract.QueueConfig
		want   Decision
	}{
		{"success acks", job(1, 0, 0), nil, classic, Decision{Action: contract.ActionAck}},
		{"defer spends no attempt and goes to the top", job(2, 1, 0), contract.Defer(30*time.Second, "rate limited"), classic,
			Decision{Action: contract.ActionDefer, Successor: job(2, 2, 10), Delay: 30 * time.Second, Reason: "rate limited"}},
		{"defer on the last attempt still defers", job(3, 0, 0), contract.Defer(time.Second, "429"), classic,
			Decision{Action: contract.ActionDefer, Successor: job(3, 1, 10), Delay: time.Second, Reason: "429"}},
		{"no built-in cap on deferrals", job(1, 1000, 0), contract.Defer(time.Second, "still 429"), classic,
			Decision{Action: contract.ActionDefer, Successor: job(1, 1001, 10), Delay: time.Second, Reason: "still 429"}},
		{"wrapped defer", job(1, 0, 0), fmt.Errorf("calling api: %w", contract.Defer(time.Second, "429")), classic,
			Decision{Action: contract.ActionDefer, Successor: job(1, 1, 10), Delay: time.Second, Reason: "429"}},
		{"defer on a plain queue comes back FIFO", job(1, 0, 0), contract.Defer(time.Second, ""), plain,
			Decision{Action: contract.ActionDefer, Successor: job(1, 1, 0), Delay: time.Second}},
		{"defer on a quorum queue goes to the high tier", job(1, 0, 0), contract.Defer(time.Second, ""), quorum,
			Decision{Action: contract.ActionDefer, Successor: job(1, 1, 10), Delay: time.Second}},
		{"negative defer publishes now", job(1, 0, 0), contract.Defer(-time.Second, ""), classic,
			Decision{Action: contract.ActionDefer, Successor: job(1, 1, 10), Delay: 0}},
		{"error retries with backoff at priority 0", job(1, 1, 10), boom, classic,
			Decision{Action: contract.ActionRetry, Successor: job(2, 1, 0), Delay: time.Second}},
		{"second retry doubles", job(2, 0, 0), boom, classic,
			Decision{Action: contract.ActionRetry, Successor: job(3, 0, 0), Delay: 2 * time.Second}},
		{"panic retries", job(1, 0, 0), &contract.PanicError{Value: "nil map"}, classic,
			Decision{Action: contract.ActionRetry, Successor: job(2, 0, 0), Delay: time.Second}},
		{"last attempt failing dead-letters", job(3, 4, 10), boom, classic,
			Decision{Action: contract.ActionDeadLetter, Successor: job(3, 4, 0), Reason: contract.ReasonAttemptsExhausted}},
		{"a timed-out run retries", job(1, 0, 0), &contract.TimeoutError{Timeout: time.Minute, Err: context.DeadlineExceeded}, classic,
			Decision{Action: contract.ActionRetry, Successor: job(2, 0, 0), Delay: time.Second}},
		{"a timed-out last attempt dead-letters as timed out", job(3, 0, 0), &contract.TimeoutError{Timeout: time.Minute}, classic,
			Decision{Action: contract.ActionDeadLetter, Successor: job(3, 0, 0), Reason: contract.ReasonTimedOut}},
		{"fatal dead-letters at once", job(1, 0, 0), contract.Fatal(boom), classic,
			Decision{Action: contract.ActionDeadLetter, Successor: job(1, 0, 0), Reason: "fatal: boom"}},
		{"wrapped fatal", job(1, 0, 0), fmt.Errorf("charge: %w", contract.Fatal(errors.New("card declined"))), classic,
			Decision{Action: contract.ActionDeadLetter, Successor: job(1, 0, 0), Reason: "fatal: card declined"}},
		{"a contract.FatalError built with no Err dead-letters, never panics", job(1, 0, 0), &contract.FatalError{}, classic,
			Decision{Action: contract.ActionDeadLetter, Successor: job(1, 0, 0), Reason: "fatal: fatal"}},
		{"unknown kind dead-letters, never retries", job(1, 0, 0), &contract.UnknownKindError{Kind: "nope"}, classic,
			Decision{Action: contract.ActionDeadLetter, Successor: job(1, 0, 0), Reason: contract.ReasonUnknownKind}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.env, tc.result, tc.q, 0.5)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Decision{}, "Err")); diff != "" {
				t.Fatalf("Decide (-want +got):\n%s", diff)
			}
			if tc.result != nil && !errors.Is(got.Err, tc.result) {
				t.Fatalf("Decision.Err = %v, want the handler's error %v", got.Err, tc.result)
			}
		})
	}
}

// A job's own options override its queue's: its attempts, and the
// priority a retry goes back at after a deferral's round at the top. The
// worker's decoder refuses options of the wrong shape as malformed.
func TestDecideObeysTheJobsOwnOptions(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs", Retry: contract.RetryPolicy{Base: time.Second, MaxAttempts: 3, Jitter: contract.NoJitter}}
	job := func(attempt int, priority uint8, ext string) envelope.Envelope {
		env := envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "call-api", Queue: "jobs",
			Payload: []byte(`{}`), Attempt: attempt, Priority: priority, EnqueuedAt: time.Unix(1, 0).UTC()}
		if ext != "" {
			env.Ext = map[string]json.RawMessage{}
			if err := json.Unmarshal([]byte(ext), &env.Ext); err != nil {
				t.Fatal(err)
			}
		}
		return env
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		env    envelope.Envelope
		result error
		action contract.Action
		next   uint8 // the successor's priority
	}{
		{"fewer attempts than the queue's", job(1, 0, `{"queuey_max_attempts":1}`), boom, contract.ActionDeadLetter, 0},
		{"more attempts than the queue's", job(3, 0, `{"queuey_max_attempts":5}`), boom, contract.ActionRetry, 0},
		{"attempts for ever", job(1000, 0, `{"queuey_max_attempts":-1}`), boom, contract.ActionRetry, 0},
		{"a retry keeps the job's priority", job(1, 4, `{"queuey_priority":4}`), boom, contract.ActionRetry, 4},
		{"a deferral goes to the top", job(1, 4, `{"queuey_priority":4}`), contract.Defer(time.Second, ""), contract.ActionDefer, 10},
		{"then its retry returns to the job's", job(1, 10, `{"queuey_priority":4}`), boom, contract.ActionRetry, 4},
		{"a dead letter goes at 0", job(3, 4, `{"queuey_priority":4}`), boom, contract.ActionDeadLetter, 0},
		{"never at the deferrals' level", job(1, 10, `{"queuey_priority":10}`), boom, contract.ActionRetry, 0},
		{"nor above it", job(1, 10, `{"queuey_priority":200}`), boom, contract.ActionRetry, 0},
	} {
		dec := Decide(tc.env, tc.result, q, 0.5)
		if quorum := (contract.QueueConfig{Name: "jobs", Type: contract.Quorum, Retry: q.Retry}); dec.Action == contract.ActionRetry {
			if d := Decide(tc.env, tc.result, quorum, 0.5); d.Successor.Priority != 0 {
				t.Errorf("%s: a quorum queue's retry at priority %d", tc.name, d.Successor.Priority)
			}
		}
		if dec.Action != tc.action || dec.Successor.Priority != tc.next {
			t.Errorf("%s: %v at priority %d; want %v at %d", tc.name, dec.Action, dec.Successor.Priority, tc.action, tc.next)
		}
		if dec.Action != contract.ActionAck && !maps.EqualFunc(dec.Successor.Ext, tc.env.Ext, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Errorf("%s: the successor's Ext %s, want the job's", tc.name, dec.Successor.Ext)
		}
	}
	for _, ext := range []string{`{"queuey_max_attempts":0}`, `{"queuey_max_attempts":-2}`, `{"queuey_max_attempts":"3"}`,
		`{"queuey_max_attempts":3.0}`, `{"queuey_priority":256}`, `{"queuey_priority":-1}`, `{"queuey_priority":null}`} {
		body, err := job(1, 0, ext).Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (Rules{q}).Decode(0, body); !errors.Is(err, envelope.ErrMalformed) {
			t.Errorf("ext %s: decoded with %v, want malformed", ext, err)
		}
	}
	body, _ := job(1, 0, `{"queuey_max_attempts":2,"queuey_priority":0,"other":[1]}`).Encode()
	if _, err := (Rules{q}).Decode(0, body); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
}

// TestDecideUsesTheJitterDraw checks that the retry delay comes from the
// policy with the caller's random draw, so a seeded simulation repeats.
func TestDecideUsesTheJitterDraw(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs", Retry: contract.RetryPolicy{Base: 10 * time.Second, Cap: time.Hour, MaxAttempts: 5}}
	env := envelope.Envelope{Attempt: 2}
	for _, u := range []float64{0, 0.25, 0.999} {
		got := Decide(env, errors.New("x"), q, u)
		if want := q.WithDefaults().Retry.Delay(3, u); got.Delay != want {
			t.Errorf("u=%v: delay %s, want %s", u, got.Delay, want)
		}
	}
}

func TestDecisionHold(t *testing.T) {
	for _, tc := range []struct {
		dec  Decision
		want time.Duration
	}{
		{Decision{Action: contract.ActionDefer, Delay: 0}, time.Nanosecond},
		{Decision{Action: contract.ActionDefer, Delay: -time.Second}, time.Nanosecond},
		{Decision{Action: contract.ActionDefer, Delay: 30 * time.Second}, 30 * time.Second},
		{Decision{Action: contract.ActionRetry, Delay: 0}, 0},
		{Decision{Action: contract.ActionRetry, Delay: time.Second}, time.Second},
		{Decision{Action: contract.ActionAck}, 0},
	} {
		if got := Hold(tc.dec); got != tc.want {
			t.Errorf("%s with delay %s: Hold() = %s, want %s", tc.dec.Action, tc.dec.Delay, got, tc.want)
		}
	}
}
