package conformance_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/membroker/conformance"
	amqp "github.com/rabbitmq/amqp091-go"
)

// twoWaits publishes a message to a classic queue and waits twice.
func twoWaits(r *conformance.Run) {
	ch := r.Channel(r.Dial())
	q := r.Q("settle")
	r.Declare(ch, q, false, false, false, nil)
	r.Publish(ch, q, "m", amqp.Publishing{})
	r.Wait(50 * time.Millisecond)
	r.Get(ch, q, false)
	r.Wait(50 * time.Millisecond)
}

// The model records, after each wait, what a passive declare of each of the
// run's queues answers: the counts a live run waits for.
func TestModelRecordsCountsAfterEachWait(t *testing.T) {
	_, e, err := runModel(membroker.RabbitMQ40, twoWaits)
	if err != nil {
		t.Fatal(err)
	}
	// The get leaves the message unacknowledged: not ready, and no consumer
	// on a classic queue.
	if want := []string{"settle=1/0 ", "settle=0/0 "}; !slices.Equal(e.Counts, want) {
		t.Errorf("counts after the waits: %q, want %q", e.Counts, want)
	}
}

// A live run whose queues never reach the model's counts says so in its
// trace, after waiting out the target's patience: a wait never hides a
// difference, it only gives the broker time to finish what it was doing.
func TestLiveWaitReportsCountsThatNeverCome(t *testing.T) {
	url := releases[0].url()
	if url == "" {
		t.Skipf("%s not set", releases[0].urlVar)
	}
	t.Parallel()
	_, e, err := runModel(membroker.RabbitMQ40, twoWaits)
	if err != nil {
		t.Fatal(err)
	}
	e.Counts[0] = "settle=2/0 " // a model that had seen two messages
	run := conformance.NewRun(&conformance.Live{URL: url}, uniquePrefix())
	run.Expect(e)
	start := time.Now()
	trace, err := run.Execute(twoWaits)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < (&conformance.Live{}).Patience() {
		t.Errorf("the run took %s: it did not wait for the counts", took)
	}
	want := "counts after the wait: settle=1/0  (the model's: settle=2/0 )"
	if !slices.Contains(trace, want) {
		t.Errorf("trace has no %q:\n%s", want, strings.Join(trace, "\n"))
	}
	if got := strings.Count(strings.Join(trace, "\n"), "counts after the wait"); got != 1 {
		t.Errorf("%d waits reported counts, want 1 (the second agreed):\n%s", got, strings.Join(trace, "\n"))
	}
}
