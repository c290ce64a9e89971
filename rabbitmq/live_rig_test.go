package rabbitmq

import (
	"os"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// liveRig is a suiteRig on the live broker at AMQP_URL, with its two
// connections at hand: the backend's and the admin one.
type liveRig struct {
	*suiteRig
	conn  *amqp.Connection // the backend's
	admin *amqp.Connection
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
	r := newSuiteRig(t, opts, Channels(conn.Channel), conn.IsClosed,
		func() (suiteAdmin, error) { return admin.Channel() },
		func() { _ = conn.Close(); _ = admin.Close() })
	return &liveRig{suiteRig: r, conn: conn, admin: admin}
}
