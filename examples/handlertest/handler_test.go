package handlertest_test

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/queuey/queuey/examples/handlertest"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
)

// queues is the handler's queue: three attempts in all.
var queues = []queuey.QueueConfig{{Name: "api", Retry: queuey.RetryPolicy{MaxAttempts: 3}}}

// A 429 defers the job for its Retry-After without spending an attempt; it
// is held, not pending, for those 30 s, then runs ahead of the backlog.
func TestRateLimitedCallWaitsRetryAfter(t *testing.T) {
	queueytest.Test(t, queueytest.Options{}, queues, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, newAPI(429, 200).Handle)
		h.Start()
		id, err := h.Producer.Enqueue(t.Context(), handlertest.CallAPI{Endpoint: "/orders/42/confirm"})
		if err != nil {
			t.Fatal(err)
		}
		h.Advance(29 * time.Second) // returns once everything due by then has run and settled
		if runs, held, pending := len(h.Log.RunsOf(id)), h.Held("api"), h.Pending("api"); runs != 1 || held != 1 || pending != 0 {
			t.Fatalf("after 29 s: %d runs, %d held, %d pending; want 1 run, the job held", runs, held, pending)
		}
		h.Advance(time.Second)
		want := []queueytest.Outcome{
			{Attempt: 1, Deferrals: 0, Priority: 0, Result: "defer 30s"},
			{Attempt: 1, Deferrals: 1, Priority: 10, Result: "ok"}, // the queue's top priority
		}
		if got := h.Log.OutcomesOf(id); !slices.Equal(got, want) {
			t.Errorf("runs:\n got %v\nwant %v", got, want)
		}
	})
}

// newAPI is the handler, on a fake transport made in the test's bubble: the
// API answers with each status code of answers in turn, then the last one
// for ever, with Retry-After: 30 on a 429. Nothing touches the network.
func newAPI(answers ...int) handlertest.API {
	fake := func(req *http.Request) (*http.Response, error) {
		code := answers[0]
		if len(answers) > 1 {
			answers = answers[1:]
		}
		resp := &http.Response{StatusCode: code, Status: strconv.Itoa(code) + " " + http.StatusText(code),
			Header: http.Header{}, Body: http.NoBody, Request: req}
		if code == http.StatusTooManyRequests {
			resp.Header.Set("Retry-After", "30")
		}
		return resp, nil
	}
	return handlertest.API{BaseURL: "https://api.example.com", Client: &http.Client{Transport: roundTripper(fake)}}
}

// roundTripper makes an http.RoundTripper of a function.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
