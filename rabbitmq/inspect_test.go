package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// inspectJob is the job of the inspector's tests: Fail says how its
// handler ends (ok, fatal, retry).
type inspectJob struct {
	N    int    `json:"n"`
	Fail string `json:"fail,omitempty"`
}

func (inspectJob) Kind() string  { return "inspect" }
func (inspectJob) Queue() string { return "jobs" }

// otherKindJob is a second kind on the same queue, for filters.
type otherKindJob struct {
	N int `json:"n"`
}

func (otherKindJob) Kind() string  { return "other" }
func (otherKindJob) Queue() string { return "jobs" }

// inspectRig is a deployment on membroker: the work queue "jobs" (classic
// or quorum) declared by a Backend, a Producer, and an Inspector on a
// connection of its own, whose Queues lister reads membroker's state.
type inspectRig struct {
	broker   *membroker.Broker
	backend  *Backend
	producer *queuey.Producer
	queues   []queuey.QueueConfig
	insp     *Inspector
	inspConn *membroker.Connection
}

// memLister lists a membroker broker's queues as the management API would.
type memLister struct{ b *membroker.Broker }

func (l memLister) ListQueues(context.Context) ([]QueueListing, error) {
	var out []QueueListing
	for _, q := range l.b.Queues() {
		out = append(out, QueueListing{Name: q.Name, Type: q.Type, Ready: q.Ready, Unacked: q.Unacked, DeadLettering: q.DeadLettering, Consumers: len(q.Consumers)})
	}
	return out, nil
}

func newInspectRig(t *testing.T, typ queuey.QueueType, listed bool) *inspectRig {
	t.Helper()
	r := &inspectRig{broker: membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})}
	conn, err := r.broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if r.backend, err = New(Channels(conn.Channel), Options{Topology: Topology{ClassicHolds: true}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.backend.Close() })
	r.queues = []queuey.QueueConfig{{Name: "jobs", Type: typ, Prefetch: 4,
		Retry: queuey.RetryPolicy{MaxAttempts: 2, Base: time.Second, Cap: time.Second}}}
	if r.producer, err = queuey.NewProducer(t.Context(), r.backend, r.queues, queuey.ProducerConfig{}); err != nil {
		t.Fatal(err)
	}
	if r.inspConn, err = r.broker.Dial(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.inspConn.Close() })
	opts := InspectorOptions{}
	if listed {
		opts.Queues = memLister{r.broker}
	}
	if r.insp, err = NewInspector(r.inspConn.Channel, opts); err != nil {
		t.Fatal(err)
	}
	return r
}

// work runs a worker until every job is settled (the bubble is idle), and
// returns how many times each job ran, by N, and the attempt of its last
// run.
func (r *inspectRig) work(t *testing.T) (runs, attempts map[int]int) {
	t.Helper()
	w, err := queuey.NewWorker(t.Context(), r.backend, r.queues, queuey.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs, attempts = map[int]int{}, map[int]int{}
	if err := queuey.Register(w, queuey.HandlerFunc[inspectJob](func(_ context.Context, j *queuey.Job[inspectJob]) error {
		mu.Lock()
		defer mu.Unlock()
		runs[j.Args.N]++
		attempts[j.Args.N] = j.Attempt
		switch j.Args.Fail {
		case "fatal":
			return queuey.Fatal(errors.New("card declined"))
		case "retry":
			return errors.New("vendor down")
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := queuey.Register(w, queuey.HandlerFunc[otherKindJob](func(context.Context, *queuey.Job[otherKindJob]) error {
		return queuey.Fatal(errors.New("other"))
	})); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	time.Sleep(time.Hour) // virtual: every retry's hold has long expired
	synctest.Wait()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return runs, attempts
}

// deadLetterSome makes dead letters of every shape in "jobs.dead": n fatal
// jobs (N 0..n-1), n exhausted ones (N 100..), one of another kind, and
// one malformed body.
func (r *inspectRig) deadLetterSome(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if _, err := r.producer.Enqueue(t.Context(), inspectJob{N: i, Fail: "fatal"}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.producer.Enqueue(t.Context(), inspectJob{N: 100 + i, Fail: "retry"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.producer.Enqueue(t.Context(), otherKindJob{N: 7}); err != nil {
		t.Fatal(err)
	}
	ch := r.rawChannel(t)
	if err := ch.Publish("", "jobs", false, false, amqp.Publishing{Body: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	r.work(t)
}

func (r *inspectRig) rawChannel(t *testing.T) *membroker.Channel {
	t.Helper()
	ch, err := r.inspConn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

func (r *inspectRig) count(t *testing.T, queue string) int {
	t.Helper()
	q, ok := r.broker.Queue(queue)
	if !ok {
		t.Fatalf("no queue %q", queue)
	}
	return q.Ready + q.Unacked
}

func TestInspectorListsDeadLettersOfEveryShapeAndLeavesThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		r.deadLetterSome(t, 3)
		all, err := r.insp.DeadLetters(t.Context(), "jobs", DeadLetterFilter{Malformed: true}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, dl := range all {
			got = append(got, fmt.Sprintf("%s|%s|%d|%s|%v", dl.Kind, dl.Reason, dl.Attempt, dl.Queue, dl.Malformed))
			if dl.Headers[HeaderDeathReason] != dl.Reason {
				t.Errorf("dead letter %q: headers %v, want its x-death-reason among them", dl.ID, dl.Headers)
			}
		}
		slices.Sort(got)
		want := []string{
			"inspect|attempts exhausted|2|jobs|false", "inspect|attempts exhausted|2|jobs|false", "inspect|attempts exhausted|2|jobs|false",
			"inspect|fatal: card declined|1|jobs|false", "inspect|fatal: card declined|1|jobs|false", "inspect|fatal: card declined|1|jobs|false",
			"other|fatal: other|1|jobs|false",
			"|malformed envelope|0|jobs|true",
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("dead letters:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if n := r.count(t, "jobs.dead"); n != 8 {
			t.Fatalf("listing left %d dead letters of 8", n)
		}
		// Filters and the limit.
		for _, tc := range []struct {
			f     DeadLetterFilter
			limit int
			want  int
		}{
			{DeadLetterFilter{}, 0, 7},
			{DeadLetterFilter{Reason: "fatal"}, 0, 4},
			{DeadLetterFilter{Reason: "fatal", ExactReason: true}, 0, 0},
			{DeadLetterFilter{Reason: "fatal: card declined", ExactReason: true}, 0, 3},
			{DeadLetterFilter{Reason: "fatal: card", ExactReason: true}, 0, 0},
			{DeadLetterFilter{Reason: "exhausted"}, 0, 3},
			{DeadLetterFilter{Kind: "other"}, 0, 1},
			{DeadLetterFilter{IDs: []string{all[0].ID, all[1].ID}}, 0, 2},
			{DeadLetterFilter{Reason: "no such reason"}, 0, 0},
			{DeadLetterFilter{}, 2, 2},
		} {
			dls, err := r.insp.DeadLetters(t.Context(), "jobs", tc.f, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(dls) != tc.want {
				t.Errorf("filter %+v limit %d: %d dead letters, want %d", tc.f, tc.limit, len(dls), tc.want)
			}
		}
		if n := r.count(t, "jobs.dead"); n != 8 {
			t.Fatalf("filtered listings left %d dead letters of 8", n)
		}
	})
}

// A poison job on a quorum queue is dead-lettered by the broker, with no
// queuey headers: it is listed with the broker's reason.
func TestInspectorReadsTheBrokersDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Quorum, false)
		if _, err := r.producer.Enqueue(t.Context(), inspectJob{N: 1}); err != nil {
			t.Fatal(err)
		}
		ch := r.rawChannel(t)
		for i := 0; ; i++ { // a worker crashing on every delivery
			d, ok, err := ch.Get("jobs", false)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if err := ch.Reject(d.DeliveryTag, true); err != nil {
				t.Fatal(err)
			}
		}
		dls, err := r.insp.DeadLetters(t.Context(), "jobs", DeadLetterFilter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != 1 || dls[0].Reason != "broker: delivery_limit" || !dls[0].ByBroker || dls[0].Queue != "jobs" || dls[0].Kind != "inspect" {
			t.Fatalf("dead letters %+v, want one inspect job with reason broker: delivery_limit", dls)
		}
		rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Filter: DeadLetterFilter{Reason: "delivery_limit"}})
		if err != nil || rep.Moved != 1 {
			t.Fatalf("redrive: %+v, %v", rep, err)
		}
		if runs, _ := r.work(t); runs[1] != 1 {
			t.Fatalf("the redriven poison job ran %d times, want 1", runs[1])
		}
	})
}

// Redriven jobs run exactly once each; what the filter leaves stays.
func TestInspectorRedriveRunsEachJobOnce(t *testing.T) {
	for _, typ := range []queuey.QueueType{queuey.Classic, queuey.Quorum} {
		t.Run(typ.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newInspectRig(t, typ, false)
				const n = 25
				r.deadLetterSome(t, n)
				// The fatal jobs would fail again: make them succeed now, as
				// if the card were fixed, by redriving only exhausted ones
				// with their attempts reset, then the fatal ones.
				var progress []int
				rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{
					Filter: DeadLetterFilter{Reason: "attempts exhausted"}, ResetAttempts: true,
					Progress: func(read, total int) { progress = append(progress, read, total) },
				})
				if err != nil {
					t.Fatal(err)
				}
				if rep != (RedriveReport{Read: 2*n + 2, Moved: n, Skipped: n + 2}) {
					t.Fatalf("report %+v", rep)
				}
				if len(progress) != 2*(2*n+2) || progress[len(progress)-2] != 2*n+2 || progress[len(progress)-1] != 2*n+2 {
					t.Fatalf("progress %v", progress)
				}
				if got := r.count(t, "jobs.dead"); got != n+2 {
					t.Fatalf("%d dead letters left, want %d", got, n+2)
				}
				runs, attempts := r.work(t)
				for i := range n {
					// Each retries again (its Fail is still "retry"): two
					// runs, from attempt 1, then dead-lettered again.
					if runs[100+i] != 2 || attempts[100+i] != 2 {
						t.Fatalf("job %d ran %d times, last at attempt %d; want 2 runs from attempt 1", 100+i, runs[100+i], attempts[100+i])
					}
				}
				if len(runs) != n {
					t.Fatalf("%d jobs ran, want the %d redriven ones: %v", len(runs), n, runs)
				}
			})
		})
	}
}

// A dry run counts and moves nothing; a redrive keeping attempts gives an
// exhausted job one more run.
func TestInspectorRedriveDryRunAndKeptAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		r.deadLetterSome(t, 2)
		rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{DryRun: true})
		if err != nil || rep != (RedriveReport{Read: 6, Moved: 5, Skipped: 1}) {
			t.Fatalf("dry run: %+v, %v", rep, err)
		}
		if got := r.count(t, "jobs.dead"); got != 6 {
			t.Fatalf("a dry run left %d of 6 dead letters", got)
		}
		if _, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Filter: DeadLetterFilter{Reason: "exhausted"}}); err != nil {
			t.Fatal(err)
		}
		runs, attempts := r.work(t)
		if runs[100] != 1 || attempts[100] != 2 {
			t.Fatalf("kept attempts: job ran %d times at attempt %d, want once at 2", runs[100], attempts[100])
		}
		if got := r.count(t, "jobs.dead"); got != 6 {
			t.Fatalf("%d dead letters, want the 6 again", got)
		}
	})
}

// A malformed body stays unless asked for, and then goes back verbatim.
func TestInspectorRedriveMalformedOnlyWhenAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		r.deadLetterSome(t, 1)
		rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Filter: DeadLetterFilter{Reason: "malformed"}})
		if err != nil || rep.Moved != 0 || rep.Skipped != 4 {
			t.Fatalf("without Malformed: %+v, %v", rep, err)
		}
		rep, err = r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Filter: DeadLetterFilter{Reason: "malformed", Malformed: true}})
		if err != nil || rep.Moved != 1 {
			t.Fatalf("with Malformed: %+v, %v", rep, err)
		}
		ch := r.rawChannel(t)
		d, ok, err := ch.Get("jobs", true)
		if err != nil || !ok || string(d.Body) != "{not json" {
			t.Fatalf("work queue holds %q (%v, %v), want the malformed body verbatim", d.Body, ok, err)
		}
	})
}

// A redrive whose connection is killed partway loses nothing, and its
// report says what it did.
func TestInspectorInterruptedRedriveLosesNothing(t *testing.T) {
	for _, at := range []int{1, 7, 20} {
		t.Run(fmt.Sprintf("after=%d", at), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newInspectRig(t, queuey.Classic, false)
				const n = 10
				r.deadLetterSome(t, n)
				rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Progress: func(read, _ int) {
					if read == at {
						r.broker.CloseConnection(r.inspConn, &amqp.Error{Code: amqp.ConnectionForced, Reason: "killed by the test"})
					}
				}})
				if err == nil {
					t.Fatalf("redrive survived its connection: %+v", rep)
				}
				// The kill came after the last read's removal, if it moved
				// one, and before the broker answered on the channel again:
				// that job is reported maybe moved.
				if rep.Read != at || rep.Moved+rep.Skipped != at || rep.MaybeMoved > min(rep.Moved, 1) {
					t.Fatalf("report %+v, want %d read, each moved or skipped, at most the last maybe moved (%v)", rep, at, err)
				}
				work, dead := r.count(t, "jobs"), r.count(t, "jobs.dead")
				if work != rep.Moved || work+dead != 2*n+2 {
					t.Fatalf("after the kill: %d in jobs, %d dead, report %+v; want %d jobs in all, none lost", work, dead, rep, 2*n+2)
				}
			})
		})
	}
}

func TestInspectorPurge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		r.deadLetterSome(t, 2)
		n, err := r.insp.Purge(t.Context(), "jobs")
		if err != nil || n != 6 {
			t.Fatalf("purge: %d, %v; want 6", n, err)
		}
		if got := r.count(t, "jobs.dead"); got != 0 {
			t.Fatalf("%d dead letters left", got)
		}
	})
}

// Delete removes the dead letters its filter selects, and no other: one by
// its job ID, then every "fatal" one.
func TestInspectorDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		r.deadLetterSome(t, 2)
		dls, err := r.insp.DeadLetters(t.Context(), "jobs", DeadLetterFilter{}, 0)
		if err != nil || len(dls) != 5 {
			t.Fatalf("%d dead letters, %v", len(dls), err)
		}
		one := dls[0].ID
		if n, err := r.insp.Delete(t.Context(), "jobs", DeadLetterFilter{IDs: []string{one}}, 1); err != nil || n != 1 {
			t.Fatalf("deleting %s: %d, %v", one, n, err)
		}
		if left, _ := r.insp.DeadLetters(t.Context(), "jobs", DeadLetterFilter{IDs: []string{one}}, 0); len(left) != 0 {
			t.Fatalf("%s is still there", one)
		}
		if got := r.count(t, "jobs.dead"); got != 5 {
			t.Fatalf("%d dead letters left, want 5", got)
		}
		if n, err := r.insp.Delete(t.Context(), "jobs", DeadLetterFilter{IDs: []string{"no such job"}}, 0); err != nil || n != 0 {
			t.Fatalf("deleting an unknown ID: %d, %v", n, err)
		}
		if got := r.count(t, "jobs.dead"); got != 5 {
			t.Fatalf("%d dead letters left after deleting nothing, want 5", got)
		}
	})
}

func TestInspectorStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, true)
		r.deadLetterSome(t, 1)
		for i := range 3 {
			if _, err := r.producer.Enqueue(t.Context(), inspectJob{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.producer.EnqueueAfter(t.Context(), inspectJob{N: 9}, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		env := queuey.Envelope{ID: "r", Kind: "inspect", Queue: "jobs", Payload: []byte(`{}`), Attempt: 2, EnqueuedAt: time.Now()}
		if err := r.backend.Publish(t.Context(), env, 4*time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		st, err := r.insp.Stats(t.Context(), "jobs")
		if err != nil {
			t.Fatal(err)
		}
		want := QueueStats{Queue: "jobs", Ready: 3, Dead: 4, Listed: true, Holds: []HoldStats{
			{Name: "jobs.deferred.4000", TTL: 4 * time.Second, Type: "classic", Messages: 1},
			{Name: "jobs.deferred.30000", TTL: 30 * time.Second, Type: "classic", Messages: 1},
		}}
		if fmt.Sprint(st) != fmt.Sprint([]QueueStats{want}) {
			t.Fatalf("stats %+v\nwant %+v", st, want)
		}
		// Without a lister: what AMQP can say.
		plain, err := NewInspector(r.inspConn.Channel, InspectorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, err = plain.Stats(t.Context(), "jobs")
		if err != nil || fmt.Sprint(st) != fmt.Sprint([]QueueStats{{Queue: "jobs", Ready: 3, Dead: 4}}) {
			t.Fatalf("stats without a lister: %+v, %v", st, err)
		}
	})
}

func TestInspectorUnknownQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		ctx := t.Context()
		_, errStats := r.insp.Stats(ctx, "nope")
		_, errList := r.insp.DeadLetters(ctx, "nope", DeadLetterFilter{}, 0)
		_, errRedrive := r.insp.Redrive(ctx, "nope", RedriveOptions{})
		_, errPurge := r.insp.Purge(ctx, "nope")
		for i, err := range []error{errStats, errList, errRedrive, errPurge} {
			if !errors.Is(err, ErrNoSuchQueue) || !strings.Contains(err.Error(), `"nope`) {
				t.Errorf("call %d: %v, want ErrNoSuchQueue naming the queue", i, err)
			}
		}
		if _, err := NewInspector[*membroker.Channel](nil, InspectorOptions{}); err == nil {
			t.Error("NewInspector(nil) succeeded")
		}
	})
}

// A job dead-lettered again while its redrive runs is left in place, not
// moved twice: a redrive reads only what the queue held when it began.
func TestInspectorRedriveNeverMovesAJobTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		r.deadLetterSome(t, 3)
		var again []string
		rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Progress: func(read, _ int) {
			// The worker ran the job just moved and it failed again.
			ch := r.rawChannel(t)
			d, ok, err := ch.Get("jobs", true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return // this one was not moved
			}
			if err := r.backend.DeadLetter(t.Context(), "jobs", d.Body, "fatal: again", 1); err != nil {
				t.Fatal(err)
			}
			again = append(again, d.MessageId)
		}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Moved != 7 || rep.Recurred != 0 || rep.Skipped != 1 || rep.Read != 8 {
			t.Fatalf("report %+v, want the 8 there at the start read: 7 moved, the malformed one skipped", rep)
		}
		if got := r.count(t, "jobs.dead"); got != 8 || len(again) != 7 {
			t.Fatalf("%d dead letters, %d failed again; want 8 and 7", got, len(again))
		}
	})
}

// Dead letters arriving as fast as the redrive reads them do not keep it
// going: it moves what the queue held when it began, and leaves the rest.
// A Limit bounds it further.
func TestInspectorRedriveEndsWhileDeadLettersKeepArriving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		r.deadLetterSome(t, 3) // 8 dead letters, one malformed
		fresh := 0
		inflow := func(int, int) {
			if fresh == 100 {
				return // an end, for a redrive that does not stop by itself
			}
			fresh++
			body := fmt.Sprintf(`{"v":1,"id":"fresh-%d","kind":"inspect","queue":"jobs","payload":{},"attempt":1,"enqueued_at":"2026-01-01T00:00:00Z"}`, fresh)
			if err := r.backend.DeadLetter(t.Context(), "jobs", []byte(body), "fatal: again", 1); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Progress: inflow})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Read != 8 || rep.Moved != 7 || fresh != 8 {
			t.Fatalf("report %+v with %d arrived meanwhile; want the 8 there at the start read, 7 moved", rep, fresh)
		}
		if got := r.count(t, "jobs.dead"); got != 9 {
			t.Fatalf("%d dead letters left, want the malformed one and the 8 that arrived", got)
		}
		rep, err = r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Limit: 3})
		if err != nil || rep.Read != 3 {
			t.Fatalf("redrive with Limit 3: %+v, %v; want 3 read", rep, err)
		}
		if _, err := r.insp.Redrive(t.Context(), "jobs", RedriveOptions{Limit: -1}); err == nil {
			t.Fatal("a negative Limit was taken")
		}
	})
}

// A redriven job no longer carries the release time of a hold it left
// long ago: an Observer would count everything since as the hold's added
// wait. Other extension fields stay.
func TestRedriveDropsTheOldReleaseTime(t *testing.T) {
	env := queuey.Envelope{Version: queuey.EnvelopeVersion, ID: "j1", Kind: "k", Queue: "jobs", Payload: []byte(`{}`),
		Attempt: 3, EnqueuedAt: time.Unix(1, 0).UTC(), Ext: map[string]json.RawMessage{
			queuey.ExtDueAt: []byte(`"2026-01-01T00:00:00Z"`), "trace": []byte(`"abc"`),
		}}
	body, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	msg, err := redriveMessage(DeadLetter{Body: body}, true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := queuey.DecodeEnvelope(msg.Body)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Ext[queuey.ExtDueAt]; ok || string(got.Ext["trace"]) != `"abc"` || got.Attempt != 1 {
		t.Fatalf("redriven: attempt %d, ext %s", got.Attempt, got.Ext)
	}
	if _, ok := env.Ext[queuey.ExtDueAt]; !ok {
		t.Fatal("the dead letter's own envelope was changed")
	}
}

// A dead letter the worker sent byte for byte because it could not grow
// (a terse job just under the size limit) would be too large once the
// redrive re-encodes it: it is left in place and counted, and the redrive
// goes on to the next. Before, the broker closed the channel over it and
// every redrive stopped there.
func TestInspectorRedriveLeavesADeadLetterTooLargeToRepublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newInspectRig(t, queuey.Classic, false)
		terse := []byte(`{"v":1,"id":"terse-1","kind":"inspect","queue":"jobs","payload":{"n":1,"fail":"` + strings.Repeat("x", 200) +
			`"},"attempt":3,"enqueued_at":"2025-01-02T03:04:05Z"}`)
		small, err := queuey.Envelope{Version: queuey.EnvelopeVersion, ID: "small-1", Kind: "inspect", Queue: "jobs",
			Payload: []byte(`{"n":2}`), Attempt: 3, EnqueuedAt: time.Unix(1, 0).UTC()}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		ch, err := r.inspConn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range [][]byte{terse, small} {
			err := ch.Publish("", "jobs.dead", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body,
				Headers: amqp.Table{HeaderDeathReason: queuey.ReasonJobTooLarge, HeaderOriginalQueue: "jobs", HeaderAttempts: int64(3)}})
			if err != nil {
				t.Fatal(err)
			}
		}
		// A limit at the terse job's size stands for RabbitMQ's 16 MiB,
		// which takes seconds to fill under the race detector.
		insp, err := NewInspector(r.inspConn.Channel, InspectorOptions{MaxMessageSize: len(terse)})
		if err != nil {
			t.Fatal(err)
		}
		want := RedriveReport{Read: 2, Moved: 1, TooLarge: 1}
		if rep, err := insp.Redrive(t.Context(), "jobs", RedriveOptions{DryRun: true}); err != nil || rep != want {
			t.Fatalf("dry run: %+v, %v; want %+v", rep, err, want)
		}
		if rep, err := insp.Redrive(t.Context(), "jobs", RedriveOptions{}); err != nil || rep != want {
			t.Fatalf("redrive: %+v, %v; want %+v", rep, err, want)
		}
		d := takeDeadLetter(t, ch)
		if string(d.Body) != string(terse) || r.count(t, "jobs.dead") != 0 || r.count(t, "jobs") != 1 {
			t.Fatalf("left in jobs.dead: %.60s…; %d more there, %d on jobs", d.Body, r.count(t, "jobs.dead"), r.count(t, "jobs"))
		}
	})
}

func TestNewInspectorRefusesANegativeMaxMessageSize(t *testing.T) {
	b := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := NewInspector(conn.Channel, InspectorOptions{MaxMessageSize: -1}); err == nil || !strings.Contains(err.Error(), "MaxMessageSize -1 is negative") {
		t.Fatalf("NewInspector with MaxMessageSize -1: %v", err)
	}
}

// holdOf knows every name Topology.hold gives a hold queue, and nothing
// else.
func TestInspectorHoldOf(t *testing.T) {
	in := &Inspector{top: Topology{}.WithDefaults()}
	for _, c := range []struct {
		name string
		ttl  time.Duration
		typ  string
		ok   bool
	}{
		{"jobs.deferred.4000", 4 * time.Second, "classic", true},
		{"jobs.deferred.quorum.4000", 4 * time.Second, "quorum", true},
		{"jobs.deferred.quorum.p10.30000", 30 * time.Second, "quorum", true},
		{"jobs.deferred.quorum.p.30000", 0, "", false},
		{"jobs.deferred.quorum.p256.30000", 0, "", false},
		{"jobs.deferred.quorum.p010.30000", 0, "", false},
		{"jobs.deferred.p10.30000", 0, "", false},
		{"jobs.deferred.x", 0, "", false},
		{"other.deferred.4000", 0, "", false},
	} {
		h, ok := in.holdOf("jobs", QueueListing{Name: c.name, Ready: 1})
		if ok != c.ok || (ok && (h.TTL != c.ttl || h.Type != c.typ || h.Messages != 1)) {
			t.Errorf("holdOf(%q) = %+v, %t; want TTL %s, type %q, %t", c.name, h, ok, c.ttl, c.typ, c.ok)
		}
	}
	// A ladder of its own, as earlier releases declared it.
	var top Topology
	for _, name := range top.legacyLadderQueues("jobs")[1:] {
		h, ok := in.holdOf("jobs", QueueListing{Name: name})
		if ttl, _ := strconv.ParseInt(name[strings.LastIndexByte(name, '.')+1:], 10, 64); !ok || h.Type != "ladder" || h.TTL != time.Duration(ttl)*time.Millisecond {
			t.Errorf("holdOf(%s) = %+v, %t; want a ladder rung of %d ms", name, h, ok, ttl)
		}
	}
	if h, ok := in.holdOf("jobs", QueueListing{Name: "jobs.deferred.relay", Ready: 2}); !ok || h.Type != "relay" || h.Messages != 2 {
		t.Errorf("holdOf(relay queue) = %+v, %t", h, ok)
	}
	// The shared ladder is no work queue's.
	for _, name := range top.LadderQueues() {
		if h, ok := in.holdOf("jobs", QueueListing{Name: name}); ok {
			t.Errorf("holdOf(%s) = %+v: the shared ladder's queue counted as one of jobs's", name, h)
		}
	}
}

// A job held once (its first death an expiry in a hold queue) that then hit
// its quorum work queue's delivery limit is listed by its last death.
func TestReadDeadLetterNamesTheLastDeath(t *testing.T) {
	d := amqp.Delivery{Body: []byte("{oops"), Headers: amqp.Table{
		"x-first-death-reason": "expired", "x-first-death-queue": "jobs.deferred.2000",
		"x-last-death-reason": "delivery_limit", "x-last-death-queue": "jobs",
	}}
	dl := readDeadLetter("jobs.dead", d)
	if dl.Reason != "broker: delivery_limit" || dl.Queue != "jobs" || !dl.ByBroker {
		t.Fatalf("read %+v; want broker: delivery_limit from jobs", dl)
	}
	delete(d.Headers, "x-last-death-reason")
	delete(d.Headers, "x-last-death-queue")
	if dl := readDeadLetter("jobs.dead", d); dl.Reason != "broker: expired" || dl.Queue != "jobs.deferred.2000" {
		t.Fatalf("without x-last-death-*, read %+v; want the first death", dl)
	}
}

// fixedLister lists what it holds.
type fixedLister []QueueListing

func (f fixedLister) ListQueues(context.Context) ([]QueueListing, error) { return f, nil }

// The shared ladder's stats: its rungs and relay queue, whatever work
// queue they hold jobs for, a job the broker has expired and not yet moved
// on counted as held and as due; other queues left out.
func TestInspectorLadder(t *testing.T) {
	broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
	conn, err := broker.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	in, err := NewInspector(conn.Channel, InspectorOptions{Queues: fixedLister{
		{Name: "queuey.relay", Type: "quorum", Ready: 2},
		{Name: "queuey.warm", Type: "quorum"},
		{Name: "queuey.ladder.1000", Type: "quorum", Ready: 1, DeadLettering: 40},
		{Name: "queuey.ladder.2000", Type: "quorum", Unacked: 1},
		{Name: "queuey.ladder.x", Type: "quorum", Ready: 9},
		{Name: "jobs", Type: "classic", Ready: 5},
		{Name: "jobs.deferred.ladder.1000", Type: "quorum", Ready: 3},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := in.Ladder(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := LadderStats{Name: "queuey", QuorumQueues: 4, Holds: []HoldStats{
		{Name: "queuey.relay", Type: "relay", Messages: 2},
		{Name: "queuey.ladder.1000", TTL: time.Second, Type: "ladder", Messages: 41, Due: 40},
		{Name: "queuey.ladder.2000", TTL: 2 * time.Second, Type: "ladder", Messages: 1},
	}}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Fatalf("Ladder (-want +got):\n%s", diff)
	}
	if _, err := (&Inspector{top: Topology{}.WithDefaults()}).Ladder(t.Context()); !errors.Is(err, ErrNoQueueLister) {
		t.Fatalf("Ladder without a lister: %v", err)
	}
}
