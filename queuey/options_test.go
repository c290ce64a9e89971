package queuey

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// envelopeBackend records every envelope published, with its hold.
type envelopeBackend struct {
	failingBackend
	mu   sync.Mutex
	envs []Envelope
	hold []time.Duration
}

func (b *envelopeBackend) Publish(_ context.Context, env Envelope, hold time.Duration, _ HoldKind) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.envs = append(b.envs, env)
	b.hold = append(b.hold, hold)
	return nil
}

// optionQueues are the queues of the options' tests: "jobs" (classic,
// MaxPriority 10), "other" (classic, MaxPriority 3), "plain" (no
// priorities) and "replicated" (quorum).
var optionQueues = []QueueConfig{{Name: "jobs"}, {Name: "other", MaxPriority: new(uint8(3))},
	{Name: "plain", MaxPriority: new(uint8(0))}, {Name: "replicated", Type: Quorum}}

func newOptionsProducer(t *testing.T) (*Producer, *envelopeBackend) {
	t.Helper()
	b := &envelopeBackend{}
	p, err := NewProducer(t.Context(), b, optionQueues, ProducerConfig{NewID: func() string { return "fresh" }})
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

// Each option lands in the envelope: the queue and ID in their fields,
// the priority in the message's and in Ext, the attempts in Ext; a job
// without options has no Ext at all.
func TestEnqueueOptionsReachTheEnvelope(t *testing.T) {
	p, b := newOptionsProducer(t)
	if _, err := p.Enqueue(t.Context(), producerJob{}); err != nil {
		t.Fatal(err)
	}
	id, err := p.Enqueue(t.Context(), producerJob{}, WithQueue("other"), WithID("order-42"), WithMaxAttempts(3), WithPriority(2))
	if err != nil || id != "order-42" {
		t.Fatalf("Enqueue: %q, %v", id, err)
	}
	if _, err := p.EnqueueAfter(t.Context(), producerJob{}, time.Minute, WithPriority(9), WithMaxAttempts(-1)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Defer(t.Context(), producerJob{}, time.Minute, WithMaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		queue, id string
		priority  uint8
		ext       string
		hold      time.Duration
	}{
		{"jobs", "fresh", 0, `null`, 0},
		{"other", "order-42", 2, `{"queuey_max_attempts":3,"queuey_priority":2}`, 0},
		{"jobs", "fresh", 9, `{"queuey_max_attempts":-1,"queuey_priority":9}`, time.Minute},
		{"jobs", "fresh", 10, `{"queuey_max_attempts":1}`, time.Minute},
	}
	if len(b.envs) != len(want) {
		t.Fatalf("%d publishes, want %d", len(b.envs), len(want))
	}
	for i, w := range want {
		env := b.envs[i]
		ext, _ := json.Marshal(env.Ext)
		if env.Queue != w.queue || env.ID != w.id || env.Priority != w.priority || string(ext) != w.ext || b.hold[i] != w.hold {
			t.Errorf("publish %d: queue %q id %q priority %d ext %s hold %v; want %+v", i, env.Queue, env.ID, env.Priority, ext, b.hold[i], w)
		}
	}
}

// Every option the job or its queue cannot honour is refused before
// anything is sent, with an error that matches ErrInvalidOption and says
// which.
func TestEnqueueRefusesOptionsItCannotHonour(t *testing.T) {
	p, b := newOptionsProducer(t)
	for _, tc := range []struct {
		name    string
		enqueue func() (string, error)
		says    string
	}{
		{"empty queue", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, WithQueue("")) }, `WithQueue(""): must not be empty`},
		{"long queue", func() (string, error) {
			return p.Enqueue(t.Context(), producerJob{}, WithQueue(strings.Repeat("q", 256)))
		}, "WithQueue: 256 bytes"},
		{"empty ID", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, WithID("")) }, `WithID(""): must not be empty`},
		{"long ID", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, WithID(strings.Repeat("i", 300))) }, "WithID: 300 bytes"},
		{"ID not UTF-8", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, WithID("\xff")) }, "not valid UTF-8"},
		{"no attempts", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, WithMaxAttempts(0)) }, "WithMaxAttempts(0)"},
		{"negative attempts", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, WithMaxAttempts(-2)) }, "WithMaxAttempts(-2)"},
		{"zero option", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, EnqueueOption{}) }, "the zero EnqueueOption"},
		{"top priority", func() (string, error) { return p.Enqueue(t.Context(), producerJob{}, WithPriority(10)) }, `"jobs" takes 0 to 9`},
		{"over the queue's", func() (string, error) {
			return p.Enqueue(t.Context(), producerJob{}, WithQueue("other"), WithPriority(3))
		}, `"other" takes 0 to 2`},
		{"no priorities", func() (string, error) {
			return p.Enqueue(t.Context(), producerJob{}, WithQueue("plain"), WithPriority(1))
		}, "without priorities"},
		{"quorum", func() (string, error) {
			return p.Enqueue(t.Context(), producerJob{}, WithQueue("replicated"), WithPriority(1))
		}, "quorum queue"},
		{"undeclared", func() (string, error) {
			return p.Enqueue(t.Context(), producerJob{}, WithQueue("elsewhere"), WithPriority(1))
		}, "not declared by this producer"},
		{"defer", func() (string, error) { return p.Defer(t.Context(), producerJob{}, time.Second, WithPriority(0)) }, "WithPriority with Defer"},
		{"in WithOptions", func() (string, error) {
			return p.Enqueue(t.Context(), WithOptions(producerJob{}, WithMaxAttempts(0)))
		}, "WithMaxAttempts(0)"},
	} {
		id, err := tc.enqueue()
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.says) || id != "" {
			t.Errorf("%s: %q, %v; want ErrInvalidOption saying %q", tc.name, id, err, tc.says)
		}
	}
	if len(b.envs) != 0 {
		t.Fatalf("%d jobs published", len(b.envs))
	}
	// A priority 0 is every queue's default; a queue the producer did not
	// declare takes Enqueue's other options, as it takes the job.
	if _, err := p.Enqueue(t.Context(), producerJob{}, WithQueue("replicated"), WithPriority(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(t.Context(), producerJob{}, WithQueue("elsewhere"), WithMaxAttempts(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnqueueAfter(t.Context(), producerJob{}, time.Second, WithQueue("elsewhere")); !errors.Is(err, ErrUnknownQueue) {
		t.Fatalf("EnqueueAfter to an undeclared queue: %v", err)
	}
	if _, err := p.Enqueue(t.Context(), WithOptions(nil)); err == nil || !strings.Contains(err.Error(), "nil job") {
		t.Fatalf("a nil job: %v", err)
	}
}

// In a batch, each job takes its own options, and a job's failure to
// take one is its own result alone. The call's options come after the
// job's: the later of one kind wins.
func TestEnqueueManyTakesOptionsPerJob(t *testing.T) {
	p, b := newOptionsProducer(t)
	res := p.EnqueueMany(t.Context(), []JobArgs{
		WithOptions(producerJob{}, WithID("a")),
		WithOptions(producerJob{}, WithID("b"), WithMaxAttempts(0)),
		WithOptions(WithOptions(producerJob{}, WithID("c")), WithQueue("other")),
		producerJob{},
	})
	if res[0].ID != "a" || res[0].Err != nil || res[2].ID != "c" || res[2].Err != nil || res[3].ID != "fresh" || res[3].Err != nil {
		t.Fatalf("results %+v", res)
	}
	if !errors.Is(res[1].Err, ErrInvalidOption) || res[1].ID != "" {
		t.Fatalf("job b: %+v", res[1])
	}
	queues := map[string]string{}
	for _, env := range b.envs {
		queues[env.ID] = env.Queue
		if string(env.Payload) != "{}" {
			t.Errorf("job %s: payload %s, want the arguments alone", env.ID, env.Payload)
		}
	}
	if queues["a"] != "jobs" || queues["c"] != "other" || len(queues) != 3 {
		t.Fatalf("published %v", queues)
	}
	if id, err := p.Enqueue(t.Context(), WithOptions(producerJob{}, WithID("job's")), WithID("call's")); err != nil || id != "call's" {
		t.Fatalf("the call's ID: %q, %v", id, err)
	}
}
