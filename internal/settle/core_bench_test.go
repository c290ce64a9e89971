package settle

import (
	"testing"
	"time"

	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

// BenchmarkCoreSettleSuccess is the worker core's own cost per successful
// job with the worker's real types: a delivery taken, its handler's nil
// result decided, its ack. Worker.Run makes these calls (under its lock)
// for every job; the rest of a job's cost is decoding, the handler and the
// broker's.
func BenchmarkCoreSettleSuccess(b *testing.B) {
	qs := []contract.QueueConfig{{Name: "q"}}
	c := New[contract.Delivery](qs, workercore.Config{RequeueDelay: time.Second})
	c.ConnectionUp(1)
	env := envelope.Envelope{ID: "0123456789abcdef0123456789abcdef", Kind: "k", Queue: "q", Payload: []byte(`{}`), Attempt: 1, EnqueuedAt: time.Now()}
	var d contract.Delivery
	b.ReportAllocs()
	for b.Loop() {
		var buf [2]Action[contract.Delivery]
		acts := c.DeliverDecoded(buf[:0], 0, 1, d, env, nil)
		id := acts[0].ID
		dec, publish := c.Decide(0, acts[0].Job, nil, 0.5)
		var buf2 [2]Action[contract.Delivery]
		c.HandlerDecided(buf2[:0], id, dec, publish)
	}
}
