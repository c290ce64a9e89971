package queueytest_test

// A loss test of hold queues at a 1 ms granularity, end to end against the
// live RabbitMQ at AMQP_URL: a hold queue is deleted, with the messages in
// it, once nothing has declared it for its x-expires, and with
// x-expires = 2 × TTL that lost confirmed jobs. Like the other live tests
// it takes the live turn (newLiveRig), works on a fresh queue and deletes
// it, its dead queue and every hold queue it may create at the end.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// holdTally is what the handler saw of one job.
type holdTally struct {
	runs, successes int
}

// TestLiveNoConfirmedJobLostAtOneMillisecondGranularity runs 4,000 jobs
// through two workers, each on its own connection and backend, with retry
// and deferred granularities of 1 ms: half of the jobs fail their first
// three attempts (retried after up to 2, 4 and 8 ms) and every fifth defers
// itself once for 3 ms, so thousands of holds go through hold queues with
// TTLs of 1 to 8 ms. Every job Enqueue confirmed must succeed; none may be
// dead-lettered.
func TestLiveNoConfirmedJobLostAtOneMillisecondGranularity(t *testing.T) {
	const (
		jobs      = 4000
		producers = 4
		failures  = 3 // of every other job, before it succeeds
	)
	policy := queuey.RetryPolicy{Base: 2 * time.Millisecond, Cap: 8 * time.Millisecond, MaxAttempts: 10}
	cfg := queuey.QueueConfig{Prefetch: 20, Retry: policy}
	// Retries wait 0 to 8 ms, deferrals 3 ms: hold TTLs 1 to 8 ms.
	r := newLiveRig(t, cfg, 1, 2, 3, 4, 5, 6, 7, 8)
	// Classic holds: this is the regression test of their x-expires at
	// TTLs of a few milliseconds (docs/hold-queue-expiry.md).
	fine := rabbitmq.Options{Topology: rabbitmq.Topology{RetryGranularity: time.Millisecond, DeferredGranularity: time.Millisecond, ClassicHolds: true}}

	var (
		mu     sync.Mutex
		tally  = make(map[string]*holdTally, jobs)
		total  int
		lastOK time.Time
	)
	handle := queuey.HandlerFunc[LiveWork](func(ctx context.Context, job *queuey.Job[LiveWork]) error {
		i, err := strconv.Atoi(job.Args.Name)
		if err != nil {
			return queuey.Fatal(err)
		}
		var result error
		switch {
		case i%5 == 0 && job.Deferrals == 0:
			result = queuey.Defer(3*time.Millisecond, "every fifth job waits once")
		case i%2 == 0 && job.Attempt <= failures:
			result = fmt.Errorf("attempt %d of job %d fails", job.Attempt, i)
		}
		mu.Lock()
		defer mu.Unlock()
		n := tally[job.ID]
		if n == nil {
			n = &holdTally{}
			tally[job.ID] = n
		}
		n.runs++
		total++
		if result == nil {
			n.successes++
			lastOK = time.Now()
		}
		return result
	})

	// Two processes: each a connection, a backend on 1 ms granularities, a
	// producer and a worker.
	var producersOf []*queuey.Producer
	for w := range 2 {
		conn, err := amqp.Dial(r.url)
		if err != nil {
			t.Fatalf("dial %s: %v", r.url, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		backend, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), fine)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = backend.Close() })
		qcfg := cfg
		qcfg.Name = r.q
		producer, err := queuey.NewProducer(t.Context(), backend, []queuey.QueueConfig{qcfg}, queuey.ProducerConfig{})
		if err != nil {
			t.Fatalf("producer %d: %v", w, err)
		}
		producersOf = append(producersOf, producer)
		worker, err := queuey.NewWorker(t.Context(), backend, []queuey.QueueConfig{qcfg}, queuey.WorkerConfig{StopTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
		if err := queuey.Register(worker, handle); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- worker.Run(ctx) }()
		t.Cleanup(func() { // runs before the backend and connection close
			cancel()
			timer := time.NewTimer(10 * time.Second)
			defer timer.Stop()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
				}
			case <-timer.C:
				t.Errorf("worker %d: Run has not returned 10 s after its stop", w)
			}
		})
	}

	start := time.Now()
	enqueued := make([]string, jobs) // "" where Enqueue failed
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			p := producersOf[g%len(producersOf)]
			for i := g; i < jobs; i += producers {
				id, err := p.Enqueue(t.Context(), LiveWork{Name: strconv.Itoa(i)})
				if err != nil {
					t.Errorf("Enqueue job %d: %v", i, err)
					continue
				}
				enqueued[i] = id
			}
		})
	}
	wg.Wait()
	enqueueTime := time.Since(start)

	succeeded := func() (ok, missing int) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range enqueued {
			if id == "" {
				continue
			}
			if n := tally[id]; n != nil && n.successes > 0 {
				ok++
			} else {
				missing++
			}
		}
		return ok, missing
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, missing := succeeded(); missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	dead := r.deadIDs()
	mu.Lock()
	var confirmed, lost, duplicates int
	var lostIDs []string
	for i, id := range enqueued {
		if id == "" {
			continue
		}
		confirmed++
		n := tally[id]
		switch {
		case n != nil && n.successes > 1:
			duplicates++
		case (n == nil || n.successes == 0) && !dead[id]:
			lost++
			if len(lostIDs) < 10 {
				lostIDs = append(lostIDs, fmt.Sprintf("job %d (%s, %d runs)", i, id, n.runsOrZero()))
			}
		}
	}
	runs, wall := total, lastOK.Sub(start)
	mu.Unlock()

	t.Logf("%s: %d jobs confirmed (enqueued in %s by %d goroutines), %d lost, %d dead-lettered, %d succeeded more than once; %d runs; last success %s after the first enqueue",
		r.q, confirmed, enqueueTime.Round(time.Millisecond), producers, lost, len(dead), duplicates, runs, wall.Round(time.Millisecond))
	if confirmed != jobs {
		t.Errorf("only %d of %d Enqueue calls succeeded", confirmed, jobs)
	}
	if lost != 0 {
		t.Errorf("%d confirmed jobs neither succeeded nor were dead-lettered within 60 s, among them: %v", lost, lostIDs)
	}
	if len(dead) != 0 {
		t.Errorf("%d jobs in %s; none should be", len(dead), r.dead())
	}
}

func (n *holdTally) runsOrZero() int {
	if n == nil {
		return 0
	}
	return n.runs
}

// deadIDs takes everything off the dead queue and returns the job IDs
// found there.
func (r *liveRig) deadIDs() map[string]bool {
	r.t.Helper()
	ch := r.channel()
	defer func() { _ = ch.Close() }()
	ids := map[string]bool{}
	for {
		d, ok, err := ch.Get(r.dead(), true)
		if err != nil {
			r.t.Fatalf("get from %s: %v", r.dead(), err)
		}
		if !ok {
			return ids
		}
		env, err := queuey.DecodeEnvelope(d.Body)
		if err != nil {
			r.t.Errorf("dead letter %q: %v", d.Body, err)
			continue
		}
		ids[env.ID] = true
	}
}
