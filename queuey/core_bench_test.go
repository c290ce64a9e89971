package queuey

import (
	"testing"
	"time"

	"github.com/queuey/queuey/internal/workercore"
)

// BenchmarkCoreSettleSuccess is the worker core's own cost per successful
// job with the worker's real types: a delivery taken, its handler's nil
// result decided, its ack. Worker.Run makes these calls (under its lock)
// for every job; the rest of a job's cost is decoding, the handler and the
// broker's.
func BenchmarkCoreSettleSuccess(b *testing.B) {
	qs := []QueueConfig{{Name: "q"}}
	c := workercore.New[Delivery](workercore.Rules[Envelope, decision](workerRules(qs)), workercore.Config{RequeueDelay: time.Second})
	c.ConnectionUp(1)
	env := Envelope{ID: "0123456789abcdef0123456789abcdef", Kind: "k", Queue: "q", Payload: []byte(`{}`), Attempt: 1, EnqueuedAt: time.Now()}
	var d Delivery
	b.ReportAllocs()
	for b.Loop() {
		var buf [2]coreAction
		acts := c.DeliverDecoded(buf[:0], 0, 1, d, env, nil)
		id := acts[0].ID
		dec, publish := c.Decide(0, acts[0].Job, nil, 0.5)
		var buf2 [2]coreAction
		c.HandlerDecided(buf2[:0], id, dec, publish)
	}
}
