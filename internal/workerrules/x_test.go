package workerrules
import ("testing"; "time"; "github.com/queuey/queuey/internal/workercore"; "github.com/queuey/queuey/queuey")
type m struct{ b []byte }
func (x *m) Body() []byte { return x.b }
func BenchmarkCore(b *testing.B) {
	env := queuey.Envelope{ID: "j1", Kind: "k", Queue: "q", Payload: []byte(`{}`), Attempt: 1, EnqueuedAt: time.Unix(1,0)}
	body, _ := env.Encode()
	c := New[*m]([]queuey.QueueConfig{{Name: "q"}}, workercore.Config{RequeueDelay: time.Second})
	c.ConnectionUp(1)
	d := &m{body}
	job, _ := c.Decode(0, body)
	var buf [2]Action[*m]
	b.ReportAllocs()
	for b.Loop() {
		acts := c.DeliverDecoded(buf[:0], 0, 1, d, job, nil)
		c.HandlerDone(buf[:0], acts[0].ID, nil, 0.5)
	}
}
