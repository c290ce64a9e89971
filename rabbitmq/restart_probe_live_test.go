package rabbitmq

// A probe of what a live broker does to held messages across a restart
// and a kill -9, with no queuey in the way: plain AMQP, a work queue and
// 100 hold queues dead-lettering into it, a publisher keeping them full
// with confirmed persistent messages, the fault in the middle. It counts
// every confirmed message that never reaches the work queue, and says when
// its hold would have expired relative to the fault. Its figures are what
// membroker's Crash is held to (docs/rabbitmq-semantics.md §13).
//
// It runs only when asked, since it restarts the broker for minutes:
// QUEUEY_PROBE_RUNS sets how many runs each arm makes, QUEUEY_PROBE_ARMS
// which arms run (default all: classic-restart, classic-kill,
// quorum-restart, quorum-kill: the holds' type and the fault), and
// QUEUEY_PROBE_WORK=quorum makes the work queue a quorum queue (else
// classic); it needs AMQP_URL and
// QUEUEY_RABBITMQ_SCRIPT, as the fault tests do (.ci/run). RABBITMQ_VERSION
// picks the broker the script restarts:
//
//	QUEUEY_PROBE_RUNS=10 QUEUEY_PROBE_ARMS=classic-kill QUEUEY_RABBITMQ_SCRIPT=$PWD/scripts/rabbitmq \
//	  go test -count=1 -v -timeout 60m ./rabbitmq/ -run TestLiveRestartHoldProbe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	probeHolds = 100
	probeTTL0  = 300 * time.Millisecond // the shortest hold; the i-th waits probeTTL0 + i × probeTTLStep
	probeStep  = 10 * time.Millisecond
)

func TestLiveRestartHoldProbe(t *testing.T) {
	url, s := os.Getenv("AMQP_URL"), os.Getenv("QUEUEY_PROBE_RUNS")
	if url == "" || s == "" || os.Getenv("QUEUEY_RABBITMQ_SCRIPT") == "" {
		t.Skip("AMQP_URL, QUEUEY_PROBE_RUNS or QUEUEY_RABBITMQ_SCRIPT not set: skipping a probe that restarts the broker for minutes")
	}
	runs, err := strconv.Atoi(s)
	if err != nil || runs < 1 {
		t.Fatalf("QUEUEY_PROBE_RUNS=%q: want a positive whole number", s)
	}
	arms := []string{"classic-restart", "classic-kill", "quorum-restart", "quorum-kill"}
	if s := os.Getenv("QUEUEY_PROBE_ARMS"); s != "" {
		arms = strings.Split(s, ",")
	}
	for _, arm := range arms {
		holdType, fault, ok := strings.Cut(arm, "-")
		if !ok || (holdType != "classic" && holdType != "quorum") || (fault != "restart" && fault != "kill") {
			t.Fatalf("QUEUEY_PROBE_ARMS: %q is not one of classic-restart, classic-kill, quorum-restart, quorum-kill", arm)
		}
		t.Run(arm, func(t *testing.T) {
			var lost, confirmed int
			for i := range runs {
				r := probeRestart(t, url, holdType == "quorum", os.Getenv("QUEUEY_PROBE_WORK") == "quorum", fault == "kill")
				lost += len(r.lost)
				confirmed += r.confirmed
				t.Logf("PROBE %s run %d: %s", arm, i+1, r)
			}
			t.Logf("PROBE %s total: %d runs, %d of %d confirmed lost", arm, runs, lost, confirmed)
		})
	}
}

// probeResult is one run of the probe.
type probeResult struct {
	confirmed, found, held int
	lost                   []time.Duration // each lost message's hold expiry, from the fault's start
	stopTook, startTook    time.Duration   // the fault's two halves
	firstQueue             time.Duration   // from the fault's return to the work queue's first declaration that succeeded
	lastArrival            time.Duration   // from the fault's return to the last message's arrival in the work queue
	late                   int             // messages that arrived over 10 s after the longest hold could have expired
}

func (r probeResult) String() string {
	slices.Sort(r.lost)
	return fmt.Sprintf("confirmed %d, reached the work queue %d, still held %d, lost %d; stop took %s, start %s, work queue back %s after, last arrival %s after (%d over 10 s late); lost messages' hold expiry from the fault: %s",
		r.confirmed, r.found, r.held, len(r.lost), r.stopTook.Round(time.Millisecond), r.startTook.Round(time.Millisecond),
		r.firstQueue.Round(time.Millisecond), r.lastArrival.Round(time.Millisecond), r.late, spanOf(r.lost))
}

// probeRestart runs the probe once: quorum picks the holds' type,
// quorumWork the work queue's, kill a kill -9 (else stop_app and
// start_app).
func probeRestart(t *testing.T, url string, quorum, quorumWork, kill bool) probeResult {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	work := "queuey-probe-" + hex.EncodeToString(rnd[:])
	holds := make([]string, probeHolds)
	ttls := make([]time.Duration, probeHolds)
	for i := range holds {
		ttls[i] = probeTTL0 + time.Duration(i)*probeStep
		holds[i] = fmt.Sprintf("%s.hold.%d", work, ttls[i].Milliseconds())
	}
	declare := func(conn *amqp.Connection) error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		var workArgs amqp.Table
		if quorumWork {
			workArgs = amqp.Table{"x-queue-type": "quorum"}
		}
		if _, err := ch.QueueDeclare(work, true, false, false, false, workArgs); err != nil {
			return err
		}
		for i, h := range holds {
			args := amqp.Table{"x-message-ttl": int32(ttls[i].Milliseconds()), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work}
			if quorum {
				args["x-queue-type"] = "quorum"
				args["x-dead-letter-strategy"] = "at-least-once"
				args["x-overflow"] = "reject-publish"
			}
			if _, err := ch.QueueDeclare(h, true, false, false, false, args); err != nil {
				return err
			}
		}
		return nil
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := declare(conn); err != nil {
		t.Fatal(err)
	}
	// Let the declarations age, so that a young quorum queue (semantics §13)
	// is not what this measures.
	time.Sleep(3 * time.Second)

	// The publisher: persistent messages round-robin into the holds, about
	// 2,000 a second, until the connection goes.
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 512))
	var mu sync.Mutex
	sentAt := map[uint64]time.Time{} // by delivery tag
	sentTo := map[uint64]int{}
	confirmedAt := map[uint64]time.Time{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range confirms {
			mu.Lock()
			if c.Ack {
				confirmedAt[c.DeliveryTag] = sentAt[c.DeliveryTag]
			}
			mu.Unlock()
		}
	}()
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; ctx.Err() == nil; i++ {
			if i%20 == 19 {
				time.Sleep(10 * time.Millisecond) // about 2,000 a second
			}
			h := i % probeHolds
			tag := ch.GetNextPublishSeqNo()
			mu.Lock()
			sentAt[tag], sentTo[tag] = time.Now(), h
			mu.Unlock()
			if err := ch.PublishWithContext(ctx, "", holds[h], false, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, Body: []byte(strconv.FormatUint(tag, 10)),
			}); err != nil {
				return
			}
		}
	}()
	time.Sleep(2 * time.Second)

	var res probeResult
	faultAt := time.Now()
	if kill {
		if err := command("QUEUEY_RABBITMQ_SCRIPT", "kill"); err != nil {
			t.Fatal(err)
		}
		res.stopTook = time.Since(faultAt)
		back := time.Now()
		if err := command("QUEUEY_RABBITMQ_SCRIPT", "start"); err != nil {
			t.Fatal(err)
		}
		res.startTook = time.Since(back)
	} else {
		if err := command("QUEUEY_RABBITMQ_SCRIPT", "ctl", "stop_app"); err != nil {
			t.Fatal(err)
		}
		res.stopTook = time.Since(faultAt)
		back := time.Now()
		if err := command("QUEUEY_RABBITMQ_SCRIPT", "ctl", "start_app"); err != nil {
			t.Fatal(err)
		}
		res.startTook = time.Since(back)
	}
	returned := time.Now()
	cancel()
	<-pubDone
	_ = conn.Close()
	<-done

	// Reconnect, wait for every hold to expire, and drain the work queue.
	for {
		c, err := amqp.Dial(url)
		if err == nil {
			conn = c
			break
		}
		if time.Since(returned) > time.Minute {
			t.Fatalf("the broker did not come back within a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close()
	ach, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// The work queue answers a declaration once it has recovered.
	for {
		if _, err := ach.QueueDeclarePassive(work, true, false, false, false, nil); err == nil {
			break
		}
		if ach, err = conn.Channel(); err != nil {
			t.Fatal(err)
		}
		if time.Since(returned) > time.Minute {
			t.Fatalf("the work queue did not recover within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.firstQueue = time.Since(returned)
	// Drain the work queue until every confirmed message has come, or none
	// has for 20 s past the longest hold; for quorum holds, 200 s: their
	// dead-letter worker sends a message again only after
	// dead_letter_worker_publisher_confirm_timeout, 180 s.
	seen := map[uint64]bool{}
	lastNew := time.Now()
	quiet := probeTTL0 + probeHolds*probeStep + 20*time.Second
	if quorum {
		quiet = 200 * time.Second
	}
	for time.Since(lastNew) < quiet && time.Since(returned) < 6*time.Minute {
		got := 0
		for {
			d, ok, err := ach.Get(work, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			tag, _ := strconv.ParseUint(string(d.Body), 10, 64)
			if !seen[tag] {
				seen[tag] = true
				got++
				if time.Since(returned) > probeTTL0+probeHolds*probeStep+10*time.Second {
					res.late++
				}
			}
		}
		if got > 0 {
			lastNew = time.Now()
			res.lastArrival = time.Since(returned)
		}
		mu.Lock()
		all := true
		for tag := range confirmedAt {
			if !seen[tag] {
				all = false
				break
			}
		}
		mu.Unlock()
		if all {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	res.found = len(seen)
	for _, h := range holds {
		q, err := ach.QueueDeclarePassive(h, true, false, false, false, nil)
		if err != nil {
			t.Errorf("hold %s: %v", h, err)
			if ach, err = conn.Channel(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		res.held += q.Messages
		_, _ = ach.QueueDelete(h, false, false, false)
	}
	_, _ = ach.QueueDelete(work, false, false, false)
	res.confirmed = len(confirmedAt)
	for tag, at := range confirmedAt {
		if !seen[tag] {
			res.lost = append(res.lost, at.Add(ttls[sentTo[tag]]).Sub(faultAt).Round(time.Millisecond))
		}
	}
	return res
}

// spanOf sums up sorted durations: how many, the least, the median and the
// greatest.
func spanOf(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d from %s (median %s) to %s", len(ds), ds[0], ds[len(ds)/2], ds[len(ds)-1])
}
