package rabbitmq

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The backend's behaviour toward a broker, written once (the TestBackend…
// functions of this file) and run on both: membroker, always, on the real
// clock, so that holds wait as they would on RabbitMQ; and the live broker
// at AMQP_URL, when set. What only the model can show (exact timing under
// a mock clock, the broker's inner state) is in backend_test.go.

// suiteRig is a Backend on a connection of its own to one broker, plus an
// admin connection for looking at queues. On the live broker every queue
// named through it is deleted at the end, hold queues included.
type suiteRig struct {
	t *testing.T
	b *Backend
	// channels opens a channel on the backend's connection; connClosed
	// says whether that connection is closed.
	channels   func() (Channel, error)
	connClosed func() bool
	admin      func() (suiteAdmin, error)
	queues     []string
}

// suiteAdmin is what a test does on the admin connection.
type suiteAdmin interface {
	InspectChannel
	QueueDelete(name string, ifUnused, ifEmpty, noWait bool) (int, error)
}

// forEachBroker runs test on membroker, and on the live broker at AMQP_URL
// (a subtest that skips, with a notice, without it), with the default hold
// ladder, but no warm-up: nothing here kills the broker.
func forEachBroker(t *testing.T, test func(t *testing.T, r *suiteRig)) {
	forEachBrokerWith(t, Options{Topology: Topology{HoldWarmup: -1}}, test)
}

// forEachBrokerWith is forEachBroker with opts.
func forEachBrokerWith(t *testing.T, opts Options, test func(t *testing.T, r *suiteRig)) {
	t.Run("broker=membroker", func(t *testing.T) {
		b := membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})
		conn, err := b.Dial()
		if err != nil {
			t.Fatal(err)
		}
		admin, err := b.Dial()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(); _ = admin.Close() })
		test(t, newSuiteRig(t, opts, Channels(conn.Channel), conn.IsClosed,
			func() (suiteAdmin, error) { return admin.Channel() }, nil))
	})
	t.Run("broker=live", func(t *testing.T) {
		test(t, newLiveRig(t, opts).suiteRig)
	})
}

// newSuiteRig makes a Backend with opts on channels. closeConns, if set,
// closes the connections at the end, after the queues named through the
// rig are deleted (a live broker keeps them; membroker's go with it).
func newSuiteRig(t *testing.T, opts Options, channels func() (Channel, error), connClosed func() bool,
	admin func() (suiteAdmin, error), closeConns func()) *suiteRig {
	b, err := New(channels, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := &suiteRig{t: t, b: b, channels: channels, connClosed: connClosed, admin: admin}
	t.Cleanup(func() {
		_ = b.Close()
		if closeConns == nil {
			return
		}
		defer closeConns()
		ch, err := admin()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, q := range r.queues {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("cleanup: delete %s: %v", q, err)
				return
			}
		}
	})
	return r
}

// queue returns a fresh work queue name, with its dead-letter queue and
// the hold queues for ttls (in ms) down for deletion at the end.
func (r *suiteRig) queue(ttls ...int64) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	q := "queuey-backend-" + hex.EncodeToString(b[:])
	top := r.b.Topology()
	r.queues = append(r.queues, q, top.DeadQueue(q))
	for _, ttl := range ttls {
		r.queues = append(r.queues, top.HoldQueue(q, ttl))
	}
	if !top.ClassicHolds {
		// The ladder is shared, and stays: only the queue's own marker goes.
		r.queues = append(r.queues, top.WarmQueue(q))
	}
	return q
}

// adminChannel is a fresh channel on the admin connection, closed at the
// end of the test: a refused passive declaration closes only it.
func (r *suiteRig) adminChannel() suiteAdmin {
	r.t.Helper()
	ch, err := r.admin()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// ready is how many messages wait on queue; -1 if it does not exist.
func (r *suiteRig) ready(queue string) int {
	r.t.Helper()
	q, err := r.adminChannel().QueueDeclarePassive(queue, true, false, false, false, nil)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return -1
	}
	if err != nil {
		r.t.Fatalf("passive declare %s: %v", queue, err)
	}
	return q.Messages
}

// sameArgs checks that queue was declared with args: RabbitMQ accepts an
// equivalent re-declaration and refuses any other with 406.
func (r *suiteRig) sameArgs(queue string, args amqp.Table) {
	r.t.Helper()
	if _, err := r.adminChannel().QueueDeclare(queue, true, false, false, false, args); err != nil {
		r.t.Fatalf("%s was not declared with %v: %v", queue, args, err)
	}
}

// eventually waits, up to 5 s, for cond: what membroker does at once, a
// live broker may do a moment later.
func (r *suiteRig) eventually(what string, cond func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (r *suiteRig) get(queue string) amqp.Delivery {
	r.t.Helper()
	d, ok, err := r.adminChannel().Get(queue, true)
	if err != nil || !ok {
		r.t.Fatalf("get from %s: ok=%v err=%v", queue, ok, err)
	}
	return d
}

func TestBackendDeclareCreatesWorkAndDeadQueues(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		classic, plain, quorum := r.queue(), r.queue(), r.queue()
		if err := r.b.Declare(t.Context(),
			queuey.QueueConfig{Name: classic},
			queuey.QueueConfig{Name: plain, MaxPriority: new(uint8(0))},
			queuey.QueueConfig{Name: quorum, Type: queuey.Quorum},
		); err != nil {
			t.Fatal(err)
		}
		r.sameArgs(classic, amqp.Table{"x-max-priority": int32(10)})
		r.sameArgs(plain, amqp.Table{"x-queue-type": "classic"})
		r.sameArgs(quorum, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": quorum + ".dead"})
		for _, q := range []string{classic, plain, quorum} {
			r.sameArgs(q+".dead", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(-1)})
		}
		top := r.b.Topology()
		r.sameArgs(top.RelayQueue(), relayQueueArgs())
		for _, ttl := range top.Rungs() {
			r.sameArgs(top.LadderQueue(ttl), ladderQueueArgs(ttl, top))
		}
		// The plain queue really has no priorities.
		if _, err := r.adminChannel().QueueDeclare(plain, true, false, false, false, amqp.Table{"x-max-priority": int32(10)}); err == nil {
			t.Fatal("the plain queue accepted x-max-priority: it was declared with priorities")
		}
	})
}

func TestBackendPublishNowAndDeadLetter(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		q := r.queue()
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		env := testJob(q, "job-1", 7)
		if err := r.b.Publish(t.Context(), env, 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		d := r.get(q)
		body, _ := env.Encode()
		if !bytes.Equal(d.Body, body) || d.Priority != 7 || d.ContentType != "application/json" ||
			d.DeliveryMode != amqp.Persistent || d.MessageId != "job-1" || d.Type != "send_email" ||
			!d.Timestamp.Equal(testEnqueuedAt) || d.Expiration != "" {
			t.Fatalf("published message: %+v", d)
		}

		raw := []byte("not an envelope")
		if err := r.b.DeadLetter(t.Context(), q, raw, "malformed envelope", 3); err != nil {
			t.Fatal(err)
		}
		d = r.get(q + ".dead")
		got := amqp.Table{}
		for _, k := range []string{HeaderDeathReason, HeaderOriginalQueue, HeaderAttempts} {
			got[k] = d.Headers[k]
		}
		want := amqp.Table{"x-death-reason": "malformed envelope", "x-original-queue": q, "x-attempts": int64(3)}
		if diff := cmp.Diff(want, got); diff != "" || !bytes.Equal(d.Body, raw) {
			t.Fatalf("dead letter body %q, headers (-want +got):\n%s", d.Body, diff)
		}

		missing := r.queue()
		if err := r.b.Publish(t.Context(), testJob(missing, "j2", 0), 0, queuey.HoldRetry); !errors.Is(err, ErrReturned) {
			t.Fatalf("publish to a missing queue: %v; want ErrReturned", err)
		}
		if err := r.b.DeadLetter(t.Context(), missing, raw, "x", 1); !errors.Is(err, queuey.ErrUnknownQueue) {
			t.Fatalf("DeadLetter on an undeclared queue: %v; want ErrUnknownQueue", err)
		}
	})
}

// One real wait: a 1 s hold published after a 60 s one comes back after

// 1 s, not before, and not behind the long one.

func TestBackendHolds(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		q := r.queue(1000, 60000)
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Publish(t.Context(), testJob(q, "long", 0), time.Minute, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := r.b.Publish(t.Context(), testJob(q, "short", 10), 999*time.Millisecond, queuey.HoldDeferred); err != nil {
			t.Fatal(err)
		}
		// 60 s is 32 + 16 + 8 + 4: it waits in the 32 s rung first; the
		// short one, 999 ms rounded up to 1 s, in the 1 s rung.
		r.sameArgs("queuey.ladder.1000", ladderQueueArgs(1000, r.b.Topology()))

		c, err := r.b.Consume(t.Context(), q, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		d := receiveDelivery(t, c)
		if elapsed := time.Since(start); elapsed < time.Second {
			t.Fatalf("released after %s, before its 1 s hold", elapsed)
		}
		if id := testJobID(t, d.Body()); id != "short" || d.Priority() != 10 {
			t.Fatalf("released %s at priority %d; want short at 10", id, d.Priority())
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		// (On a live broker the ladder is shared with other tests' jobs.)
		if n := r.ready("queuey.ladder.32000"); n < 1 {
			t.Fatalf("the long hold's first rung has %d, want its job", n)
		}

		if err := r.b.Publish(t.Context(), testJob(q, "x", 0), 30*24*time.Hour, queuey.HoldDeferred); !errors.Is(err, queuey.ErrDelayTooLong) {
			t.Fatalf("a 30-day hold: %v; want ErrDelayTooLong", err)
		}
		undeclared := r.queue(1000)
		if _, err := r.adminChannel().QueueDeclare(undeclared, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Publish(t.Context(), testJob(undeclared, "x", 0), time.Second, queuey.HoldRetry); !errors.Is(err, queuey.ErrUnknownQueue) {
			t.Fatalf("a hold on an undeclared queue: %v; want ErrUnknownQueue", err)
		}
	})
}

func TestBackendRefusedDeclarationsLeaveBackendWorking(t *testing.T) {
	forEachBrokerWith(t, Options{Topology: Topology{ClassicHolds: true}}, func(t *testing.T, r *suiteRig) {
		q := r.queue(1000, 2000, 3000)
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Publish(t.Context(), testJob(q, "before", 0), time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q, Type: queuey.Quorum})
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), fmt.Sprintf("%q", q)) {
			t.Fatalf("redeclaring as quorum: %v; want a 406 naming the queue", err)
		}
		// A conflicting hold queue: its hold is refused, the next one works.
		if _, err := r.adminChannel().QueueDeclare(q+".deferred.2000", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Publish(t.Context(), testJob(q, "refused", 0), 2*time.Second, queuey.HoldRetry); !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
			t.Fatalf("hold into a conflicting hold queue: %v; want a 406", err)
		}
		for _, p := range []struct {
			id   string
			hold time.Duration
		}{{"now", 0}, {"held", time.Second}, {"held3", 3 * time.Second}} {
			if err := r.b.Publish(t.Context(), testJob(q, p.id, 0), p.hold, queuey.HoldRetry); err != nil {
				t.Fatalf("publish %s after refusals: %v", p.id, err)
			}
		}
		if err := r.b.DeadLetter(t.Context(), q, []byte("x"), "fatal", 1); err != nil {
			t.Fatal(err)
		}
		if r.ready(q+".deferred.3000") != 1 || r.ready(q+".dead") != 1 {
			t.Fatal("publishing after refused declarations did not land")
		}
	})
}

// A hold queue an older queuey declared (x-expires 2 × TTL) is refused by

// the live broker in the text the backend recognises: the error says an

// older build made it, and what to do.

func TestBackendHoldQueueOfAnOlderBuildIsExplained(t *testing.T) {
	forEachBrokerWith(t, Options{Topology: Topology{ClassicHolds: true}}, func(t *testing.T, r *suiteRig) {
		q := r.queue(1000)
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		old := holdQueueArgs(q, 1000)
		old["x-expires"] = int64(2000)
		if _, err := r.adminChannel().QueueDeclare(q+".deferred.1000", true, false, false, false, old); err != nil {
			t.Fatal(err)
		}
		err := r.b.Publish(t.Context(), testJob(q, "j", 0), time.Second, queuey.HoldRetry)
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
			t.Fatalf("hold into an older build's hold queue: %v; want a 406", err)
		}
		for _, want := range []string{fmt.Sprintf("%q", q+".deferred.1000"), "x-expires 2000 ms (2 × TTL)", "older queuey",
			"this build declares 61000 ms", "Upgrade every process", "Hold-queue expiry", "inequivalent arg 'x-expires'"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not say %q:\n%v", want, err)
			}
		}
		// Another mismatch is not blamed on an older build.
		if _, err := r.adminChannel().QueueDeclare(q+".deferred.2000", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		r.queues = append(r.queues, q+".deferred.2000")
		err = r.b.Publish(t.Context(), testJob(q, "j2", 0), 2*time.Second, queuey.HoldRetry)
		if err == nil || strings.Contains(err.Error(), "older queuey") {
			t.Fatalf("hold into a hold queue declared without arguments: %v; want the plain 406", err)
		}
	})
}

// One job over the broker's max_message_size never breaks publishing: with

// the default MaxMessageSize it is refused before it is sent; with a limit

// above the broker's, RabbitMQ 4.0.5 closes the publishing channel (406),

// only that publish fails, and the next ones go out on a fresh channel.

func TestBackendJobOverTheBrokersLimitLeavesPublishingWorking(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		q := r.queue(1000)
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Publish(t.Context(), bigJob(q, "big"), 0, queuey.HoldRetry); !errors.Is(err, queuey.ErrJobTooLarge) {
			t.Fatalf("a 16 MiB job with the default MaxMessageSize: %v; want queuey.ErrJobTooLarge", err)
		}

		lax, err := New(r.channels, Options{MaxMessageSize: 32 << 20, Topology: Topology{HoldWarmup: -1}})
		if err != nil {
			t.Fatal(err)
		}
		defer lax.Close()
		if err := lax.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		err = lax.Publish(t.Context(), bigJob(q, "big"), 0, queuey.HoldRetry)
		var amqpErr *amqp.Error
		if !errors.Is(err, ErrPublisherClosed) || !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
			t.Fatalf("a 16 MiB job over the broker's limit: %v; want the broker's 406", err)
		}
		t.Logf("the broker's refusal: %v", err)
		for i, hold := range []time.Duration{0, time.Second, 0} {
			if err := lax.Publish(t.Context(), testJob(q, fmt.Sprint("after-", i), 0), hold, queuey.HoldRetry); err != nil {
				t.Fatalf("publish %d after the refusal: %v", i, err)
			}
		}
		select {
		case <-lax.Done():
			t.Fatal("Done closed after a channel exception")
		default:
		}
		if r.ready(q) != 2 || r.ready("queuey.ladder.1000") < 1 { // the ladder is shared on a live broker
			t.Fatal("the publishes after the refusal did not land")
		}
	})
}

func TestBackendOverLongNamesNeverReachTheClient(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		long := strings.Repeat("q", 250)
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: long}); err == nil || !strings.Contains(err.Error(), "name too long") {
			t.Fatalf("Declare of a 250-byte name: %v", err)
		}
		tooLong := strings.Repeat("q", 300)
		if err := r.b.Publish(t.Context(), testJob(tooLong, "x", 0), 0, queuey.HoldRetry); err == nil || !strings.Contains(err.Error(), "300 bytes") {
			t.Fatalf("Publish to a 300-byte name: %v", err)
		}
		if _, err := r.b.Consume(t.Context(), tooLong, 1); err == nil || !strings.Contains(err.Error(), "300 bytes") {
			t.Fatalf("Consume of a 300-byte name: %v", err)
		}
		// amqp091 would have left the connection unusable; it is fine.
		q := r.queue()
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatalf("Declare after refused names: %v", err)
		}
		if err := r.b.Publish(t.Context(), testJob(q, "x", 0), 0, queuey.HoldRetry); err != nil {
			t.Fatalf("Publish after refused names: %v", err)
		}
	})
}

func TestBackendConsumeAckRequeue(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		classic, quorum := r.queue(), r.queue()
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: classic}, queuey.QueueConfig{Name: quorum, Type: queuey.Quorum}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := r.b.Publish(t.Context(), testJob(classic, fmt.Sprint("j", i), 0), 0, queuey.HoldRetry); err != nil {
				t.Fatal(err)
			}
		}
		c, err := r.b.Consume(t.Context(), classic, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		first, second := receiveDelivery(t, c), receiveDelivery(t, c)
		if n := r.ready(classic); n != 1 {
			t.Fatalf("with prefetch 2 and 2 unacked, %d ready; want 1", n)
		}
		if err := first.Ack(); err != nil {
			t.Fatal(err)
		}
		third := receiveDelivery(t, c)
		if err := second.Requeue(); err != nil {
			t.Fatal(err)
		}
		again := receiveDelivery(t, c)
		if testJobID(t, again.Body()) != testJobID(t, second.Body()) || !again.Redelivered() {
			t.Fatalf("after Requeue got %s redelivered=%v", testJobID(t, again.Body()), again.Redelivered())
		}
		for _, d := range []queuey.Delivery{third, again} {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Cancel(); err != nil {
			t.Fatal(err)
		}
		awaitEnded(t, c)
		if c.Err() != nil {
			t.Fatalf("Err after Cancel: %v", c.Err())
		}

		// On a quorum queue Requeue (basic.reject) counts as a failed delivery.
		if err := r.b.Publish(t.Context(), testJob(quorum, "q1", 0), 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		qc, err := r.b.Consume(t.Context(), quorum, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer qc.Close()
		if err := receiveDelivery(t, qc).Requeue(); err != nil {
			t.Fatal(err)
		}
		d := receiveDelivery(t, qc)
		if n := d.(*consume.Delivery).D.Headers["x-delivery-count"]; n != int64(1) {
			t.Fatalf("x-delivery-count after Requeue: %v, want 1", n)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	})
}

// A connection exception (540 NOT_IMPLEMENTED, provoked on another channel

// of the backend's connection) ends the consumer with the *amqp.Error, and

// publishing fails clearly.

func TestBackendConnectionDropEndsConsumer(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		q := r.queue()
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		c, err := r.b.Consume(t.Context(), q, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		other, err := r.channels()
		if err != nil {
			t.Fatal(err)
		}
		_ = other.Qos(0, 1, false) // prefetch_size != 0: a connection exception
		awaitEnded(t, c)
		var amqpErr *amqp.Error
		if !errors.As(c.Err(), &amqpErr) || amqpErr.Code != amqp.NotImplemented {
			t.Fatalf("consumer Err: %v; want the 540 *amqp.Error", c.Err())
		}
		timer := time.NewTimer(5 * time.Second)
		defer timer.Stop()
		select {
		case <-r.b.pub.Done():
		case <-timer.C:
			t.Fatal("publisher still open 5 s after the connection closed")
		}
		err = r.b.Publish(t.Context(), testJob(q, "x", 0), 0, queuey.HoldRetry)
		if !errors.Is(err, ErrPublisherClosed) || !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotImplemented {
			t.Fatalf("Publish after the connection closed: %v", err)
		}
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); !errors.Is(err, amqp.ErrClosed) {
			t.Fatalf("Declare after the connection closed: %v", err)
		}
	})
}

func TestBackendCloseClosesChannelsNotConnection(t *testing.T) {
	forEachBroker(t, func(t *testing.T, r *suiteRig) {
		q := r.queue(1000)
		if err := r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Publish(t.Context(), testJob(q, "held", 0), time.Second, queuey.HoldRetry); err != nil {
			t.Fatal(err) // opens the hold channel
		}
		if err := r.b.Publish(t.Context(), testJob(q, "now", 0), 0, queuey.HoldRetry); err != nil {
			t.Fatal(err)
		}
		c, err := r.b.Consume(t.Context(), q, 1)
		if err != nil {
			t.Fatal(err)
		}
		d := receiveDelivery(t, c)
		if err := r.b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.b.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if awaitEnded(t, c); c.Err() != nil {
			t.Fatalf("consumer Err after Close: %v", c.Err())
		}
		if err := d.Ack(); err == nil {
			t.Fatal("Ack after Backend.Close succeeded")
		}
		// The delivery went back with the consumer's channel (on RabbitMQ,
		// asynchronously).
		r.eventually("the unsettled delivery to be requeued", func() bool { return r.ready(q) == 1 })
		if r.connClosed() {
			t.Fatal("Close closed the connection")
		}
		for name, err := range map[string]error{
			"Declare":    r.b.Declare(t.Context(), queuey.QueueConfig{Name: q}),
			"Publish":    r.b.Publish(t.Context(), testJob(q, "x", 0), 0, queuey.HoldRetry),
			"DeadLetter": r.b.DeadLetter(t.Context(), q, []byte("x"), "fatal", 1),
			"Consume":    func() error { _, err := r.b.Consume(t.Context(), q, 1); return err }(),
		} {
			if !errors.Is(err, ErrBackendClosed) {
				t.Errorf("%s after Close: %v; want ErrBackendClosed", name, err)
			}
		}
		// The connection serves a new backend.
		b2, err := New(r.channels, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if err := b2.Publish(t.Context(), testJob(q, "after", 0), 0, queuey.HoldRetry); err != nil {
			t.Fatalf("a new backend on the connection after Close: %v", err)
		}
	})
}
