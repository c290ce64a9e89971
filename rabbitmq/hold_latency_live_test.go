package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

type latencyJob struct{ N int }

func (latencyJob) Kind() string  { return "latency-job" }
func (latencyJob) Queue() string { return latencyQueue }

// latencyQueue is the queue of the running arm (one at a time).
var latencyQueue string

// TestLiveRetryLatency measures the end-to-end retry latency the ladder
// adds against classic holds, side by side on the broker at AMQP_URL (or
// the first node of AMQP_CLUSTER_URLS): 300 jobs, each failing once with a
// backoff of exactly 1 s (one rung) or 7 s (4 + 2 + 1: two relays), 2
// workers at prefetch 50. The latency is from the handler's failure to its
// retry's start, less the backoff; it prints p50 and p99 per arm in a
// RESULT line. It is a measurement, opt in with QUEUEY_RETRY_LATENCY=1;
// QUEUEY_RETRY_LATENCY_BACKOFFS replaces the backoffs (say "1s,30s": 30 s
// is 16 + 8 + 4 + 2 s, three relays).
func TestLiveRetryLatency(t *testing.T) {
	if os.Getenv("QUEUEY_RETRY_LATENCY") == "" {
		t.Skip("QUEUEY_RETRY_LATENCY not set: skipping the retry latency measurement (docs/performance.md)")
	}
	url := os.Getenv("AMQP_URL")
	if urls := os.Getenv("AMQP_CLUSTER_URLS"); urls != "" {
		url, _, _ = strings.Cut(urls, ",")
	}
	if url == "" {
		t.Skip("AMQP_URL not set")
	}
	backoffs := []time.Duration{time.Second, 7 * time.Second}
	if s := os.Getenv("QUEUEY_RETRY_LATENCY_BACKOFFS"); s != "" {
		backoffs = nil
		for _, f := range strings.Split(s, ",") {
			d, err := time.ParseDuration(f)
			if err != nil || d <= 0 {
				t.Fatalf("QUEUEY_RETRY_LATENCY_BACKOFFS: %q is not a positive duration", f)
			}
			backoffs = append(backoffs, d)
		}
	}
	for round := range 2 { // the arms alternate, so drift falls on both
		for _, holds := range []string{"classic", "ladder"} {
			for _, backoff := range backoffs {
				p50, p99 := retryLatency(t, url, holds == "classic", backoff)
				t.Logf("RESULT round %d, holds=%s, backoff %s: added latency p50 %s, p99 %s",
					round+1, holds, backoff, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond))
			}
		}
	}
}

func retryLatency(t *testing.T, url string, classic bool, backoff time.Duration) (p50, p99 time.Duration) {
	t.Helper()
	const jobs = 300
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	q := "queuey-latency-" + hex.EncodeToString(rnd[:])
	latencyQueue = q
	top := Topology{ClassicHolds: classic, HoldWarmup: -1} // nothing is killed here
	opts := Options{Topology: top}
	queues := []queuey.QueueConfig{{Name: q, Prefetch: 50,
		Retry: queuey.RetryPolicy{Base: backoff, Cap: backoff, MaxAttempts: 3, Jitter: queuey.NoJitter}}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	connect := func() *Backend {
		b, err := Connect(ctx, ConnectOptions{URLs: []string{url}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	producer, err := queuey.NewProducer(ctx, connect(), queues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		failed = map[int]time.Time{}
		added  []time.Duration
		done   = make(chan struct{})
	)
	for range 2 {
		w, err := queuey.NewWorker(ctx, connect(), queues, queuey.WorkerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		err = queuey.Register(w, queuey.HandlerFunc[latencyJob](func(ctx context.Context, j *queuey.Job[latencyJob]) error {
			mu.Lock()
			defer mu.Unlock()
			if j.Attempt == 1 {
				failed[j.Args.N] = time.Now()
				return errors.New("fails once")
			}
			if at, ok := failed[j.Args.N]; ok {
				added = append(added, time.Since(at)-backoff)
				delete(failed, j.Args.N)
				if len(added) == jobs {
					close(done)
				}
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = w.Run(ctx) }()
	}
	for n := range jobs {
		if _, err := producer.Enqueue(ctx, latencyJob{N: n}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(backoff + 2*time.Minute):
		t.Fatalf("%d of %d retries ran", len(added), jobs)
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(added)
	deleteLatencyQueues(url, top, q)
	return added[len(added)/2], added[len(added)*99/100]
}

func deleteLatencyQueues(url string, top Topology, q string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	names := []string{q, top.DeadQueue(q), top.WarmQueue(q)} // the shared ladder stays
	for s := int64(1); s <= 7; s++ {
		names = append(names, top.HoldQueue(q, s*1000))
	}
	for _, name := range names {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup:", err)
			if ch, err = conn.Channel(); err != nil {
				return
			}
		}
	}
}
