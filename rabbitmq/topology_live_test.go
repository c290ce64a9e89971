package rabbitmq

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// liveChannel returns a channel on the broker at AMQP_URL, or skips the
// test with a notice when it is unset.
func liveChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func uniqueName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// TestTopologyOnLiveBroker declares a work queue and its extreme hold
// queues on a real RabbitMQ: the longest TTL (and twice it as x-expires)
// is accepted, and re-declaring every queue with the same arguments is
// equivalent. Everything is deleted at the end.
func TestTopologyOnLiveBroker(t *testing.T) {
	ch := liveChannel(t)
	var top Topology
	q := uniqueName("queuey-topology")
	queues := map[string]amqp.Table{
		q:                            WorkQueueArgs(false, 10, top.DeadQueue(q)),
		top.DeadQueue(q):             nil,
		top.HoldQueue(q, 1):          holdQueueArgs(q, 1),
		top.HoldQueue(q, MaxHoldTTL): holdQueueArgs(q, MaxHoldTTL),
	}
	t.Cleanup(func() {
		for name := range queues {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	})
	for round := range 2 {
		for name, args := range queues {
			if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
				t.Fatalf("round %d: declare %s %v: %v", round, name, args, err)
			}
		}
	}
}
