package queueytest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queueytest"
)

// lookupJob is a job whose handler resolves a host name, as a handler that
// calls a real service does.
type lookupJob struct {
	Host string `json:"host"`
}

func (lookupJob) Kind() string  { return "lookup" }
func (lookupJob) Queue() string { return "lookups" }

// lookupInBubble runs, in a bubble of its own, three jobs that resolve
// "localhost" and its "http" port, 10 s apart, so that the resolver's
// five-second reread of resolv.conf comes due. Two such tests in one binary
// crashed it ("send on synctest channel from outside bubble") until Test
// made the net package's channels outside the bubbles; run with -count=3
// they still must pass.
func lookupInBubble(t *testing.T) {
	queueytest.Test(t, queueytest.Options{}, []queuey.QueueConfig{{Name: "lookups"}}, func(t *testing.T, h *queueytest.Harness) {
		queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[lookupJob]) error {
			if _, err := net.DefaultResolver.LookupHost(ctx, job.Args.Host); err != nil {
				return err
			}
			_, err := net.DefaultResolver.LookupPort(ctx, "tcp", "http")
			return err
		})
		h.Start()
		for range 3 {
			if _, err := h.Producer.Enqueue(t.Context(), lookupJob{Host: "localhost"}); err != nil {
				t.Fatal(err)
			}
			h.Advance(10 * time.Second)
		}
		for _, r := range h.Log.Runs() {
			if r.Err != nil {
				t.Errorf("run %v: %v", r, r.Err)
			}
		}
		if got := len(h.Log.Runs()); got != 3 {
			t.Errorf("%d runs, want 3", got)
		}
	})
}

func TestLookupInBubbleA(t *testing.T) { lookupInBubble(t) }
func TestLookupInBubbleB(t *testing.T) { lookupInBubble(t) }
