package rabbitmq

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// liveRig is a Backend on its own connection to the broker at AMQP_URL,
// plus an admin connection for looking at queues and deleting them. Every
// queue a test names through it is deleted at the end, hold queues
// included.
type liveRig struct {
	t      *testing.T
	conn   *amqp.Connection // the backend's
	admin  *amqp.Connection
	b      *Backend
	queues []string
}

// newLiveRig skips the test, with a notice, when AMQP_URL is unset.
func newLiveRig(t *testing.T, opts Options) *liveRig {
	t.Helper()
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	admin, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	b, err := New(Channels(conn.Channel), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := &liveRig{t: t, conn: conn, admin: admin, b: b}
	t.Cleanup(func() {
		_ = b.Close()
		_ = conn.Close()
		ch, err := admin.Channel()
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
		_ = admin.Close()
	})
	return r
}

// queue returns a fresh work queue name, with its dead-letter queue and
// the hold queues for ttls (in ms) down for deletion at the end.
func (r *liveRig) queue(ttls ...int64) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	q := "queuey-backend-" + hex.EncodeToString(b[:])
	top := r.b.Topology()
	r.queues = append(r.queues, q, top.DeadQueue(q))
	for _, ttl := range ttls {
		r.queues = append(r.queues, top.HoldQueue(q, ttl))
	}
	return q
}

// adminChannel is a fresh channel on the admin connection, closed at the
// end of the test: a refused passive declaration closes only it.
func (r *liveRig) adminChannel() *amqp.Channel {
	r.t.Helper()
	ch, err := r.admin.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// ready is how many messages wait on queue; -1 if it does not exist.
func (r *liveRig) ready(queue string) int {
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
