package settle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

// A job that fails three times with "upstream 503" carries the three
// failures, in order, with their attempts and times, to its dead letter; a
// deferral between them adds none; the job that ran keeps its own Ext.
func TestRecordCarriesEachFailure(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs", Retry: contract.RetryPolicy{MaxAttempts: 3}}
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	env := envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "k", Queue: "jobs", Payload: []byte(`{}`), Attempt: 1, EnqueuedAt: at}
	var decs []Decision
	for i, result := range []error{errors.New("upstream 503"), contract.Defer(time.Second, "429"), errors.New("upstream 503"), errors.New("upstream 503")} {
		ran := env
		dec := Record(Decide(env, result, q, 0.5), env.Attempt, at.Add(time.Duration(i)*time.Second))
		if _, ok := ran.Ext[contract.ExtErrors]; ok && i == 0 {
			t.Fatal("Record wrote into the Ext of the job that ran")
		}
		decs = append(decs, dec)
		env = dec.Successor
	}
	if last := decs[len(decs)-1]; last.Action != contract.ActionDeadLetter || last.Reason != contract.ReasonAttemptsExhausted {
		t.Fatalf("the last decision: %+v", last)
	}
	errs, err := contract.AttemptErrors(env)
	if err != nil {
		t.Fatal(err)
	}
	want := []contract.AttemptError{
		{Attempt: 1, At: at, Error: "upstream 503"},
		{Attempt: 2, At: at.Add(2 * time.Second), Error: "upstream 503"},
		{Attempt: 3, At: at.Add(3 * time.Second), Error: "upstream 503"},
	}
	if fmt.Sprint(errs) != fmt.Sprint(want) {
		t.Fatalf("carried %v, want %v", errs, want)
	}
	if _, err := env.Encode(); err != nil {
		t.Fatalf("the dead letter does not encode: %v", err)
	}
}

// Only the latest MaxAttemptErrors failures are kept, each text cut to
// MaxErrorText at a character boundary.
func TestRecordKeepsTheLatestAndCutsLongTexts(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs", Retry: contract.RetryPolicy{MaxAttempts: -1}}
	env := envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "k", Queue: "jobs", Payload: []byte(`{}`), Attempt: 1}
	long := strings.Repeat("é", contract.MaxErrorText) // 2 bytes each
	for range 8 {
		env = Record(Decide(env, errors.New(long), q, 0), env.Attempt, time.Unix(0, 0)).Successor
	}
	errs, err := contract.AttemptErrors(env)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != contract.MaxAttemptErrors || errs[0].Attempt != 4 || errs[len(errs)-1].Attempt != 8 {
		t.Fatalf("kept %d, attempts %d to %d; want %d, 4 to 8", len(errs), errs[0].Attempt, errs[len(errs)-1].Attempt, contract.MaxAttemptErrors)
	}
	for _, e := range errs {
		if len(e.Error) > contract.MaxErrorText || !utf8.ValidString(e.Error) || !strings.HasSuffix(e.Error, "…") {
			t.Fatalf("a text of %d bytes, valid UTF-8 %v, ending %q", len(e.Error), utf8.ValidString(e.Error), e.Error[len(e.Error)-4:])
		}
	}
	if got := cutText("a\xffb", 10); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 cut to %q", got)
	}
}

// An ack and a deferral record nothing; a fatal error and a timeout do.
func TestRecordOnlyFailures(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs"}
	env := envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "k", Queue: "jobs", Payload: []byte(`{}`), Attempt: 1}
	for _, c := range []struct {
		result error
		want   bool
	}{
		{nil, false},
		{contract.Defer(time.Second, "429"), false},
		{contract.Fatal(errors.New("550 mailbox unavailable")), true},
		{&contract.TimeoutError{Timeout: time.Second}, true},
	} {
		dec := Record(Decide(env, c.result, q, 0), 1, time.Unix(0, 0))
		if _, got := dec.Successor.Ext[contract.ExtErrors]; got != c.want {
			t.Errorf("%v: recorded %v, want %v", c.result, got, c.want)
		}
	}
}

// tooLarge refuses every publish of an envelope that carries an error
// history, as a backend whose limit the history crosses would.
type tooLarge struct {
	contract.Backend
	published []envelope.Envelope
}

func (b *tooLarge) Publish(_ context.Context, env envelope.Envelope, _ time.Duration, _ contract.HoldKind) error {
	if _, ok := env.Ext[contract.ExtErrors]; ok {
		return contract.ErrJobTooLarge
	}
	b.published = append(b.published, env)
	return nil
}

// A retry made too large by its error history goes on without it, rather
// than being dead-lettered as too large.
func TestASuccessorTooLargeForItsHistoryGoesWithout(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs"}
	env := envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "k", Queue: "jobs", Payload: []byte(`{}`), Attempt: 1}
	dec := Record(Decide(env, errors.New("boom"), q, 0), 1, time.Unix(0, 0))
	b := &tooLarge{}
	rerouted, err := PublishSuccessor(t.Context(), b, q, dec, nil)
	if err != nil || rerouted != "" || len(b.published) != 1 || b.published[0].Attempt != 2 {
		t.Fatalf("rerouted %q, err %v, published %+v", rerouted, err, b.published)
	}
}

// A history that is not an array of objects starts afresh; one that is
// keeps its entries byte for byte, whatever their spacing or escapes.
func TestRecordOnAHistoryAsItStands(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs", Retry: contract.RetryPolicy{MaxAttempts: -1}}
	for _, c := range []struct{ history, want string }{
		{`nope`, `[{"attempt":2,"at":"1970-01-01T00:00:00Z","error":"boom"}]`},
		{`{"attempt":1}`, `[{"attempt":2,"at":"1970-01-01T00:00:00Z","error":"boom"}]`},
		{`["a string"]`, `[{"attempt":2,"at":"1970-01-01T00:00:00Z","error":"boom"}]`},
		{`[1, 2]`, `[{"attempt":2,"at":"1970-01-01T00:00:00Z","error":"boom"}]`},
		{`[]`, `[{"attempt":2,"at":"1970-01-01T00:00:00Z","error":"boom"}]`},
		{`[ {"attempt":1,"error":"a \"}]{[\\"} ]`, `[{"attempt":1,"error":"a \"}]{[\\"},{"attempt":2,"at":"1970-01-01T00:00:00Z","error":"boom"}]`},
	} {
		env := envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "k", Queue: "jobs", Payload: []byte(`{}`), Attempt: 2,
			Ext: map[string]json.RawMessage{contract.ExtErrors: json.RawMessage(c.history)}}
		got := Record(Decide(env, errors.New("boom"), q, 0), 2, time.Unix(0, 0)).Successor.Ext[contract.ExtErrors]
		if string(got) != c.want {
			t.Errorf("after %s: %s, want %s", c.history, got, c.want)
		}
		if _, err := contract.AttemptErrors(envelope.Envelope{Ext: map[string]json.RawMessage{contract.ExtErrors: got}}); err != nil {
			t.Errorf("after %s: the history does not read: %v", c.history, err)
		}
	}
}

// Each entry reads back as encoding/json would have written it: control
// characters and quotes escaped, the time in RFC 3339 with nanoseconds.
func TestRecordedEntriesReadBack(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs"}
	env := envelope.Envelope{Version: envelope.Version, ID: "j1", Kind: "k", Queue: "jobs", Payload: []byte(`{}`), Attempt: 1, EnqueuedAt: time.Unix(1, 0)}
	at := time.Date(2026, 12, 6, 9, 30, 1, 123456789, time.FixedZone("CET", 3600))
	text := "line 1\nline \"2\"\t<tab> \u2028 é"
	dec := Record(Decide(env, errors.New(text), q, 0), 1, at)
	errs, err := contract.AttemptErrors(dec.Successor)
	if err != nil || len(errs) != 1 || errs[0].Error != text || !errs[0].At.Equal(at) || errs[0].Attempt != 1 {
		t.Fatalf("read back %+v, %v", errs, err)
	}
	if _, err := dec.Successor.Encode(); err != nil {
		t.Fatal(err)
	}
}
