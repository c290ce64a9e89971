package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// manyJob's Fate tells scriptedBackend what to do with it.
type manyJob struct {
	N    int    `json:"n"`
	Fate string `json:"fate"` // "ok", "refused", "maybe", or "hang" (until ctx ends)
}

func (manyJob) Kind() string  { return "many" }
func (manyJob) Queue() string { return "jobs" }

// scriptedBackend publishes each job after a millisecond, as its Fate
// says, and counts how many publishes are in flight at once.
type scriptedBackend struct {
	failingBackend
	mu             sync.Mutex
	inFlight, peak int
	published      []int
}

var errRefused = errors.New("returned: no such queue")

func (b *scriptedBackend) Publish(ctx context.Context, env Envelope, _ time.Duration, _ HoldKind) error {
	var j manyJob
	if err := json.Unmarshal(env.Payload, &j); err != nil {
		return err
	}
	b.mu.Lock()
	b.inFlight++
	b.peak = max(b.peak, b.inFlight)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	if j.Fate == "hang" {
		<-ctx.Done()
		return fmt.Errorf("%w: %w", ErrMaybeEnqueued, ctx.Err())
	}
	time.Sleep(time.Millisecond) // a confirm's round trip
	switch j.Fate {
	case "refused":
		return errRefused
	case "maybe":
		return fmt.Errorf("%w: the channel closed", ErrMaybeEnqueued)
	}
	b.mu.Lock()
	b.published = append(b.published, j.N)
	b.mu.Unlock()
	return nil
}

func newManyProducer(t *testing.T, b Backend, maxInFlight int) *Producer {
	t.Helper()
	n := 0
	var mu sync.Mutex
	p, err := NewProducer(t.Context(), b, []QueueConfig{{Name: "jobs"}}, ProducerConfig{MaxInFlight: maxInFlight,
		NewID: func() string { mu.Lock(); defer mu.Unlock(); n++; return fmt.Sprintf("id-%d", n) }})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Each job's result is at its index, whatever the others' fates, and at
// most MaxInFlight publishes wait at once.
func TestEnqueueManyReportsEachJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBackend{}
		p := newManyProducer(t, b, 8)
		fates := []string{"ok", "refused", "maybe"}
		var jobs []JobArgs
		for i := range 300 {
			jobs = append(jobs, manyJob{N: i, Fate: fates[i%3]})
		}
		jobs[7] = nil
		start := time.Now()
		res := p.EnqueueMany(t.Context(), jobs)
		if len(res) != len(jobs) {
			t.Fatalf("%d results for %d jobs", len(res), len(jobs))
		}
		for i, r := range res {
			fate := fates[i%3]
			if i == 7 {
				fate = "nil"
			}
			switch fate {
			case "ok":
				if r.Err != nil || r.ID == "" {
					t.Fatalf("job %d (ok): %+v", i, r)
				}
			case "refused":
				if !errors.Is(r.Err, errRefused) || errors.Is(r.Err, ErrMaybeEnqueued) || r.ID != "" {
					t.Fatalf("job %d (refused): %+v", i, r)
				}
			case "maybe":
				if !errors.Is(r.Err, ErrMaybeEnqueued) || r.ID == "" {
					t.Fatalf("job %d (maybe): %+v", i, r)
				}
			case "nil":
				if r.Err == nil || r.ID != "" {
					t.Fatalf("job %d (nil): %+v", i, r)
				}
			}
		}
		if b.peak != 8 {
			t.Fatalf("at most %d publishes in flight, want 8", b.peak)
		}
		// 300 publishes of 1 ms, 8 at a time.
		if took := time.Since(start); took != 38*time.Millisecond {
			t.Fatalf("took %v, want 38ms", took)
		}
		err := EnqueueManyErr(res)
		var me *EnqueueManyError
		if !errors.As(err, &me) || me.Jobs != 300 || me.Refused != 100 || me.Maybe != 100 || !errors.Is(err, ErrMaybeEnqueued) || !errors.Is(err, errRefused) {
			t.Fatalf("EnqueueManyErr: %v (%+v)", err, me)
		}
		if err := EnqueueManyErr(res[:1]); err != nil {
			t.Fatalf("EnqueueManyErr of a confirmed job: %v", err)
		}
	})
}

// When ctx ends, jobs awaiting their confirm may have been enqueued and the
// rest were never sent.
func TestEnqueueManyStopsSendingWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBackend{}
		p := newManyProducer(t, b, 4)
		var jobs []JobArgs
		for i := range 10 {
			jobs = append(jobs, manyJob{N: i, Fate: "hang"})
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		res := p.EnqueueMany(ctx, jobs)
		for i, r := range res {
			sent := i < 4
			if sent != errors.Is(r.Err, ErrMaybeEnqueued) || !errors.Is(r.Err, context.DeadlineExceeded) || sent != (r.ID != "") {
				t.Fatalf("job %d: %+v", i, r)
			}
		}
		err := EnqueueManyErr(res)
		var me *EnqueueManyError
		if !errors.As(err, &me) || me.Maybe != 4 || me.Refused != 6 {
			t.Fatalf("EnqueueManyErr: %v", err)
		}
	})
}
