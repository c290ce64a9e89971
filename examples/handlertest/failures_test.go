package handlertest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/queuey/queuey/examples/handlertest"
	"github.com/queuey/queuey/queueytest"
)

// A server error is retried until the attempts run out; a client error is
// dead-lettered at once.
func TestFailedCalls(t *testing.T) {
	for _, tc := range []struct {
		answers []int // the API's status codes, in turn
		want    []queueytest.Outcome
		dead    int
	}{
		{[]int{503, 200}, []queueytest.Outcome{{Attempt: 1, Result: "retry"}, {Attempt: 2, Result: "ok"}}, 0},
		{[]int{503}, []queueytest.Outcome{{Attempt: 1, Result: "retry"}, {Attempt: 2, Result: "retry"},
			{Attempt: 3, Result: "dead-letter: attempts exhausted"}}, 1},
		{[]int{400}, []queueytest.Outcome{{Attempt: 1, Result: "dead-letter: fatal: POST /orders/42/confirm: 400 Bad Request"}}, 1},
	} {
		queueytest.Test(t, queueytest.Options{}, queues, func(t *testing.T, h *queueytest.Harness) {
			queueytest.Handle(h, newAPI(tc.answers...).Handle)
			h.Start()
			id, err := h.Producer.Enqueue(t.Context(), handlertest.CallAPI{Endpoint: "/orders/42/confirm"})
			if err != nil {
				t.Fatal(err)
			}
			h.Advance(time.Hour) // every retry's backoff is over by then
			if got := h.Log.OutcomesOf(id); !slices.Equal(got, tc.want) || h.Dead("api") != tc.dead {
				t.Errorf("answers %v: runs %v, %d dead; want %v, %d dead", tc.answers, got, h.Dead("api"), tc.want, tc.dead)
			}
		})
	}
}
