// Package handlertest is the handler that the README's "Testing your
// handlers" tests: a job that calls an HTTP API which can fail, refuse a
// request and rate-limit. Its test, handler_test.go (the README shows it
// whole), runs it with queueytest on the in-memory broker, against a fake
// transport, so that nothing touches the network.
package handlertest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/queuey/queuey/queuey"
)

// CallAPI is a job: a POST to one endpoint of the API.
type CallAPI struct {
	Endpoint string `json:"endpoint"`
}

func (CallAPI) Kind() string  { return "call-api" }
func (CallAPI) Queue() string { return "api" }

// DefaultRetryAfter is how long a job waits after a 429 Too Many Requests
// whose Retry-After is missing or unreadable.
const DefaultRetryAfter = time.Minute

// API runs CallAPI jobs against an HTTP API.
type API struct {
	// BaseURL is the API's URL, to which a job's endpoint is appended.
	BaseURL string
	// Client sends the requests. Defaults to http.DefaultClient.
	Client *http.Client
}

// Handle posts to the job's endpoint, with ctx. The API's answer decides
// what becomes of the job:
//
//   - 2xx: it is done;
//   - 429 Too Many Requests: it is deferred (queuey.Defer) for the
//     Retry-After in seconds, or DefaultRetryAfter without one, spending no
//     attempt;
//   - any other 4xx: it is dead-lettered (queuey.Fatal), since sending the
//     request again cannot fix it;
//   - anything else, or no answer: it is retried by its queue's policy.
func (a API) Handle(ctx context.Context, job *queuey.Job[CallAPI]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.BaseURL+job.Args.Endpoint, http.NoBody)
	if err != nil {
		return queuey.Fatal(err)
	}
	client := a.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests:
		wait := DefaultRetryAfter
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			wait = time.Duration(s) * time.Second
		}
		return queuey.Defer(wait, resp.Status)
	case code >= 400 && code < 500:
		return queuey.Fatal(fmt.Errorf("POST %s: %s", job.Args.Endpoint, resp.Status))
	}
	return fmt.Errorf("POST %s: %s", job.Args.Endpoint, resp.Status)
}
