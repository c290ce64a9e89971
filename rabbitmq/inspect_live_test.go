package rabbitmq

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// dialKillable opens a connection to AMQP_URL over a TCP connection the
// test holds, so that it can cut it as a crash would, without a close
// handshake.
func dialKillable(t *testing.T) (*amqp.Connection, net.Conn) {
	t.Helper()
	url := os.Getenv("AMQP_URL")
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port)))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Open(nc, amqp.Config{SASL: []amqp.Authentication{uri.PlainAuth()}, Vhost: uri.Vhost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, nc
}

// A redrive on the live broker whose connection is cut halfway loses
// nothing; a second one moves the rest, and a worker then runs every job
// once (twice at most for the one job the cut may have caught between its
// republish and its removal).
func TestLiveInspectorRedriveSurvivesACutConnection(t *testing.T) {
	for _, typ := range []queuey.QueueType{queuey.Classic, queuey.Quorum} {
		t.Run(typ.String(), func(t *testing.T) {
			r := newLiveRig(t, Options{})
			q := r.queue()
			queues := []queuey.QueueConfig{{Name: q, Type: typ, Prefetch: 20}}
			if err := r.b.Declare(t.Context(), queues...); err != nil {
				t.Fatal(err)
			}
			const n = 300
			for i := range n {
				env := queuey.Envelope{ID: fmt.Sprintf("j-%d", i), Kind: "live-redrive", Queue: q,
					Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Attempt: 3, EnqueuedAt: time.Now()}
				body, err := env.Encode()
				if err != nil {
					t.Fatal(err)
				}
				if err := r.b.DeadLetter(t.Context(), q, body, queuey.ReasonAttemptsExhausted, 3); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.b.DeadLetter(t.Context(), q, []byte("{oops"), queuey.ReasonMalformed, 0); err != nil {
				t.Fatal(err)
			}

			conn, nc := dialKillable(t)
			insp, err := NewInspector(conn.Channel, InspectorOptions{})
			if err != nil {
				t.Fatal(err)
			}
			dls, err := insp.DeadLetters(t.Context(), q, DeadLetterFilter{Malformed: true}, 0)
			if err != nil || len(dls) != n+1 {
				t.Fatalf("listed %d dead letters (%v), want %d", len(dls), err, n+1)
			}
			start := time.Now()
			rep, err := insp.Redrive(t.Context(), q, RedriveOptions{ResetAttempts: true, Progress: func(read, _ int) {
				if read == n/2 {
					_ = nc.Close()
				}
			}})
			if err == nil {
				t.Fatalf("the redrive survived its cut connection: %+v", rep)
			}
			t.Logf("cut at %d of %d: report %+v, error: %v (%v)", n/2, n+1, rep, err, time.Since(start).Round(time.Millisecond))

			// The broker returns what the cut connection held; then a
			// second redrive moves the rest. If the broker never had the
			// cut channel's last acknowledgement (the report's
			// MaybeMoved), that job returns to the dead-letter queue,
			// perhaps only after the second redrive began: it is moved
			// twice, and a dead letter the second redrive did not count
			// is left. Redrives go on until the malformed one is left
			// alone, and one more moves nothing.
			conn2, err := amqp.Dial(os.Getenv("AMQP_URL"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn2.Close() })
			insp2, err := NewInspector(conn2.Channel, InspectorOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var more RedriveReport
			redrives := 0
			for deadline := time.Now().Add(30 * time.Second); ; {
				rep2, err := insp2.Redrive(t.Context(), q, RedriveOptions{ResetAttempts: true})
				if err != nil {
					t.Fatal(err)
				}
				redrives++
				more.Read += rep2.Read
				more.Moved += rep2.Moved
				more.Skipped += rep2.Skipped
				if rep.Moved+more.Moved >= n && rep2.Moved == 0 && r.ready(r.b.Topology().DeadQueue(q)) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 30 s of redrives, %d moved before the cut and %d after, %d dead letters ready", rep.Moved, more.Moved, r.ready(r.b.Topology().DeadQueue(q)))
				}
				time.Sleep(100 * time.Millisecond) // the broker has yet to return the cut channel's
			}
			t.Logf("%d more redrives: %+v", redrives, more)
			if extra := rep.Moved + more.Moved - n; extra > rep.MaybeMoved {
				t.Fatalf("%d jobs moved twice, but the cut redrive reported %d maybe moved", extra, rep.MaybeMoved)
			}

			runs := runLiveRedriven(t, r.b, queues, n)
			dups := 0
			for i := range n {
				switch runs[i] {
				case 1:
				case 2:
					dups++
				default:
					t.Errorf("job %d ran %d times", i, runs[i])
				}
			}
			t.Logf("RESULT %s: %d jobs, %d moved before the cut (%d maybe), %d after, 0 lost, %d duplicates", typ, n, rep.Moved, rep.MaybeMoved, more.Moved, dups)
			if dups > rep.MaybeMoved {
				t.Fatalf("%d duplicates: only the job the cut redrive reported maybe moved may run twice", dups)
			}
		})
	}
}

type liveRedriveJob struct {
	N int `json:"n"`
}

// liveRedriveQueue is liveRedriveJob's queue: a fresh one per test, set
// before anything reads it. The tests run one at a time.
var liveRedriveQueue string

func (liveRedriveJob) Kind() string  { return "live-redrive" }
func (liveRedriveJob) Queue() string { return liveRedriveQueue }

// runLiveRedriven runs a worker until each of the n jobs has run and the
// queue is empty, and returns the runs by job.
func runLiveRedriven(t *testing.T, b *Backend, queues []queuey.QueueConfig, n int) map[int]int {
	t.Helper()
	liveRedriveQueue = queues[0].Name
	w, err := queuey.NewWorker(t.Context(), b, queues, queuey.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[int]int{}
	all := make(chan struct{})
	if err := queuey.Register(w, queuey.HandlerFunc[liveRedriveJob](func(_ context.Context, j *queuey.Job[liveRedriveJob]) error {
		mu.Lock()
		defer mu.Unlock()
		if j.Attempt != 1 {
			t.Errorf("job %d ran at attempt %d, want 1 (attempts reset)", j.Args.N, j.Attempt)
		}
		runs[j.Args.N]++
		if len(runs) == n && runs[j.Args.N] == 1 {
			close(all)
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		t.Fatalf("after a minute %d of %d jobs had run", len(runs), n)
	}
	// A duplicate, if any, was published before the originals ran out.
	time.Sleep(500 * time.Millisecond)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return runs
}

// The broker's own dead letters (a quorum queue's delivery limit) read
// with one reason; with the management API, Stats finds hold queues.
func TestLiveInspectorBrokerDeadLettersAndStats(t *testing.T) {
	r := newLiveRig(t, Options{})
	q := r.queue(30_000)
	queues := []queuey.QueueConfig{{Name: q, Type: queuey.Quorum}}
	if err := r.b.Declare(t.Context(), queues...); err != nil {
		t.Fatal(err)
	}
	env := queuey.Envelope{ID: "poison", Kind: "live-redrive", Queue: q, Payload: json.RawMessage(`{"n":1}`), Attempt: 1, EnqueuedAt: time.Now()}
	if err := r.b.Publish(t.Context(), env, 0, queuey.HoldRetry); err != nil {
		t.Fatal(err)
	}
	ch := r.adminChannel()
	rejects := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		d, ok, err := ch.Get(q, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			if r.ready(r.b.Topology().DeadQueue(q)) == 1 {
				break
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		rejects++
		if err := ch.Reject(d.DeliveryTag, true); err != nil {
			t.Fatal(err)
		}
	}
	held := env
	held.ID = "held"
	if err := r.b.Publish(t.Context(), held, 30*time.Second, queuey.HoldDeferred); err != nil {
		t.Fatal(err)
	}

	opts := InspectorOptions{}
	if api := os.Getenv("RABBITMQ_MANAGEMENT_URL"); api != "" {
		m, err := NewManagementAPI(api, os.Getenv("AMQP_URL"), nil)
		if err != nil {
			t.Fatal(err)
		}
		opts.Queues = m
	} else {
		t.Log("RABBITMQ_MANAGEMENT_URL not set: Stats without hold queues (scripts/rabbitmq management-url)")
	}
	insp, err := NewInspector(r.admin.Channel, opts)
	if err != nil {
		t.Fatal(err)
	}
	dls, err := insp.DeadLetters(t.Context(), q, DeadLetterFilter{}, 0)
	if err != nil || len(dls) != 1 || dls[0].Reason != "broker: delivery_limit" || !dls[0].ByBroker || dls[0].ID != "poison" {
		t.Fatalf("after %d rejects: dead letters %+v (%v), want the poison job with reason broker: delivery_limit", rejects, dls, err)
	}
	// The management API's counts lag by its statistics interval (5 s).
	var st []QueueStats
	for deadline := time.Now().Add(30 * time.Second); ; {
		if st, err = insp.Stats(t.Context(), q); err != nil {
			t.Fatal(err)
		}
		if !st[0].Listed || time.Now().After(deadline) {
			break
		}
		if l, err := insp.Ladder(t.Context()); err != nil || heldAt(l) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("stats: %+v", st)
	if st[0].Ready != 0 || st[0].Dead != 1 {
		t.Fatalf("stats %+v: want 0 ready, 1 dead", st[0])
	}
	if st[0].Listed {
		// The 30 s hold waits in the 16 s rung of the shared ladder, then in
		// the relay queue or the 8 s rung (if a worker of another test
		// relays it). Other tests' jobs may wait there too.
		l, err := insp.Ladder(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !heldAt(l) {
			t.Fatalf("ladder %+v: want a job in the 16 s rung, the 8 s rung or the relay queue", l)
		}
		top := r.b.Topology()
		if n := len(l.Holds); n < len(top.Rungs())+1 || l.QuorumQueues < len(top.Rungs())+1 {
			t.Fatalf("%d hold queues listed, %d quorum queues; want at least the %d rungs and the relay queue", n, l.QuorumQueues, len(top.Rungs()))
		}
		if len(st[0].Holds) != 0 {
			t.Fatalf("holds of its own %+v: want none (the ladder is shared)", st[0].Holds)
		}
	}
}

// heldAt reports whether the ladder holds a job in its 16 s or 8 s rung or
// its relay queue, where a 30 s hold waits its first 16 s and the next step.
func heldAt(l LadderStats) bool {
	for _, h := range l.Holds {
		if (h.Type == "relay" || h.TTL == 16*time.Second || h.TTL == 8*time.Second) && h.Messages > 0 {
			return true
		}
	}
	return false
}
