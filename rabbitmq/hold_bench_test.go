package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkHoldPublish measures the price of the hold ladder: holds per
// second through Backend.Publish (with classic holds: declare the hold
// queue, publish, wait for the confirm; on the ladder: publish into the
// first rung, wait for the confirm) from 1 and 8 goroutines on one backend,
// for a quorum work queue, on the live three-node cluster at
// AMQP_CLUSTER_URLS (connected to its first node), or on the one node at
// AMQP_URL. Each hold
// waits a minute, so none is released during the run, spread over 10 hold
// queues (TTLs of 60 to 69 s). ns/op is the wall time per confirmed hold;
// compare with benchstat -col /holds. Without AMQP_CLUSTER_URLS it skips.
func BenchmarkHoldPublish(b *testing.B) {
	urls := strings.Split(os.Getenv("AMQP_CLUSTER_URLS"), ",")
	if urls[0] == "" {
		urls[0] = os.Getenv("AMQP_URL") // one node
	}
	if urls[0] == "" {
		b.Skip("neither AMQP_CLUSTER_URLS nor AMQP_URL set: skipping the hold benchmark (scripts/rabbitmq start, or cluster start)")
	}
	for _, holds := range []string{"classic", "ladder"} {
		b.Run("holds="+holds, func(b *testing.B) {
			for _, par := range []int{1, 8} {
				b.Run(fmt.Sprintf("goroutines=%d", par), func(b *testing.B) {
					benchHolds(b, urls[0], holds, par)
				})
			}
		})
	}
}

func benchHolds(b *testing.B, url string, holds string, par int) {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	top := Topology{DeferredGranularity: time.Second, ClassicHolds: holds == "classic", HoldWarmup: -1}
	backend, err := New(Channels(conn.Channel), Options{Topology: top})
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Close()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	q := "queuey-holdbench-" + hex.EncodeToString(rnd[:])
	defer func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, name := range []string{q, top.DeadQueue(q)} {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
		for s := int64(60); s < 70; s++ {
			_, _ = ch.QueueDelete(top.HoldQueue(q, s*1000), false, false, false)
		}
		_, _ = ch.QueueDelete(top.WarmQueue(q), false, false, false) // the shared ladder stays
		_ = ch.Close()
	}()
	ctx := context.Background()
	if err := backend.Declare(ctx, queuey.QueueConfig{Name: q, Type: queuey.Quorum}); err != nil {
		b.Fatal(err)
	}
	// The hold queues exist before the timer starts: the benchmark times
	// holds, not the creation of ten queues.
	for s := int64(60); s < 70; s++ {
		env := queuey.Envelope{Version: queuey.EnvelopeVersion, ID: "warm", Kind: "bench", Queue: q, Payload: []byte(`{}`), Attempt: 1, EnqueuedAt: time.Now()}
		if err := backend.Publish(ctx, env, time.Duration(s)*time.Second, queuey.HoldDeferred); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, par)
	b.ResetTimer()
	for g := range par {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				env := queuey.Envelope{Version: queuey.EnvelopeVersion, ID: fmt.Sprintf("h%d-%d", g, i), Kind: "bench", Queue: q,
					Payload: []byte(`{"n":1}`), Attempt: 1, EnqueuedAt: time.Now()}
				delay := time.Duration(60+i%10) * time.Second
				if err := backend.Publish(ctx, env, delay, queuey.HoldDeferred); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "holds/s")
}
