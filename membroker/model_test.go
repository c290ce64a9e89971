package membroker

import (
	"slices"
	"strconv"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"pgregory.net/rapid"
)

// refMsg is a message in the reference model.
type refMsg struct {
	id          int
	level       int
	redelivered bool
}

// refHeld is an unacknowledged delivery in the reference model.
type refHeld struct {
	queue    string
	msg      refMsg
	consumer string // the consumer tag it was delivered to, "" for basic.get
}

// refChannel pairs a membroker channel with what the reference says it holds.
type refChannel struct {
	ch      *Channel
	unacked map[uint64]refHeld
}

// refModel is the simplest thing that could say where every message is: a
// set of ready messages per queue, served in (highest level, lowest id)
// order, which is what FIFO, strict priorities and classic requeue to the
// original position amount to.
type refModel struct {
	e        *env
	ready    map[string][]refMsg
	chans    []*refChannel // [0] may carry the consumer
	nextID   int
	consumer *refConsumer
}

type refConsumer struct {
	queue    string
	prefetch int
	tag      string
	c        <-chan amqp.Delivery
}

var refQueues = map[string]int{"plain": 0, "prio": 3} // queue -> x-max-priority

func (m *refModel) next(queue string) (refMsg, int) {
	best := -1
	for i, r := range m.ready[queue] {
		if best < 0 || r.level > m.ready[queue][best].level ||
			(r.level == m.ready[queue][best].level && r.id < m.ready[queue][best].id) {
			best = i
		}
	}
	if best < 0 {
		return refMsg{}, -1
	}
	return m.ready[queue][best], best
}

// take checks that a delivery of body from queue is the one the reference
// expects next, and moves it to rc's unacknowledged set (unless autoAck).
func (m *refModel) take(t *rapid.T, rc *refChannel, queue string, d amqp.Delivery, autoAck bool) {
	want, i := m.next(queue)
	if i < 0 {
		t.Fatalf("%s delivered %q but the reference has nothing ready", queue, d.Body)
	}
	if got := string(d.Body); got != strconv.Itoa(want.id) {
		t.Fatalf("%s delivered %s, reference expects %d (ready %v)", queue, got, want.id, m.ready[queue])
	}
	if d.Redelivered != want.redelivered {
		t.Fatalf("message %d: redelivered=%t, want %t", want.id, d.Redelivered, want.redelivered)
	}
	m.ready[queue] = slices.Delete(m.ready[queue], i, i+1)
	if !autoAck {
		rc.unacked[d.DeliveryTag] = refHeld{queue: queue, msg: want, consumer: d.ConsumerTag}
	}
}

func (m *refModel) requeue(h refHeld) {
	h.msg.redelivered = true
	m.ready[h.queue] = append(m.ready[h.queue], h.msg)
}

// drainConsumer takes every delivery already handed to the consumer.
func (m *refModel) drainConsumer(t *rapid.T) {
	if m.consumer == nil {
		return
	}
	for {
		select {
		case d, ok := <-m.consumer.c:
			if !ok {
				t.Fatal("consumer channel closed unexpectedly")
			}
			m.take(t, m.chans[0], m.consumer.queue, d, false)
		default:
			return
		}
	}
}

func (m *refModel) check(t *rapid.T) {
	m.drainConsumer(t)
	for q := range refQueues {
		info, ok := m.e.b.Queue(q)
		if !ok {
			t.Fatalf("queue %s vanished", q)
		}
		unacked := 0
		for _, rc := range m.chans {
			for _, h := range rc.unacked {
				if h.queue == q {
					unacked++
				}
			}
		}
		if info.Ready != len(m.ready[q]) || info.Unacked != unacked {
			t.Fatalf("%s: broker ready=%d unacked=%d, reference ready=%d unacked=%d",
				q, info.Ready, info.Unacked, len(m.ready[q]), unacked)
		}
	}
	if c := m.consumer; c != nil {
		held := 0
		for _, h := range m.chans[0].unacked {
			if h.consumer == c.tag {
				held++
			}
		}
		if held < c.prefetch && len(m.ready[c.queue]) > 0 {
			t.Fatalf("consumer on %s holds %d < prefetch %d while %d are ready", c.queue, held, c.prefetch, len(m.ready[c.queue]))
		}
		if held > c.prefetch {
			t.Fatalf("consumer on %s holds %d > prefetch %d", c.queue, held, c.prefetch)
		}
	}
}

func (m *refModel) pickHeld(t *rapid.T, label string) (*refChannel, uint64, bool) {
	var rcs []*refChannel
	for _, rc := range m.chans {
		if len(rc.unacked) > 0 {
			rcs = append(rcs, rc)
		}
	}
	if len(rcs) == 0 {
		return nil, 0, false
	}
	rc := rapid.SampledFrom(rcs).Draw(t, label+"Channel")
	tags := make([]uint64, 0, len(rc.unacked))
	for tag := range rc.unacked {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	return rc, rapid.SampledFrom(tags).Draw(t, label+"Tag"), true
}

// settled removes the deliveries a (possibly multiple) settlement covers.
func settled(rc *refChannel, tag uint64, multiple bool) []refHeld {
	var tags []uint64
	for t := range rc.unacked {
		if t == tag || (multiple && t < tag) {
			tags = append(tags, t)
		}
	}
	slices.Sort(tags)
	out := make([]refHeld, len(tags))
	for i, t := range tags {
		out[i] = rc.unacked[t]
		delete(rc.unacked, t)
	}
	return out
}

// TestClassicQueuesAgainstReferenceModel drives random sequences of publish,
// get, consume, ack, nack, reject, cancel and channel close against two
// classic queues (one with priorities) and checks after every step that no
// message is lost or duplicated, that each delivery is the one FIFO, priority
// and requeue-to-original-position say comes next, that redelivered flags
// are right, that counts agree, and that prefetch is honoured.
func TestClassicQueuesAgainstReferenceModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		e := newEnv(t, RabbitMQ40)
		for q, maxp := range refQueues {
			args := amqp.Table{}
			if maxp > 0 {
				args["x-max-priority"] = maxp
			}
			e.declare(q, args)
		}
		m := &refModel{e: e, ready: map[string][]refMsg{}}
		open := func() *refChannel {
			return &refChannel{ch: e.channel(), unacked: map[uint64]refHeld{}}
		}
		m.chans = []*refChannel{open(), open()}
		queues := []string{"plain", "prio"}

		rt.Repeat(map[string]func(*rapid.T){
			"": m.check,
			"publish": func(t *rapid.T) {
				q := rapid.SampledFrom(queues).Draw(t, "queue")
				p := rapid.IntRange(0, 5).Draw(t, "priority")
				m.nextID++
				if err := e.ch.Publish("", q, false, false, amqp.Publishing{Priority: uint8(p), Body: []byte(strconv.Itoa(m.nextID))}); err != nil {
					t.Fatal(err)
				}
				m.ready[q] = append(m.ready[q], refMsg{id: m.nextID, level: min(p, refQueues[q])})
				m.drainConsumer(t)
			},
			"get": func(t *rapid.T) {
				q := rapid.SampledFrom(queues).Draw(t, "queue")
				autoAck := rapid.Bool().Draw(t, "autoAck")
				rc := m.chans[1]
				d, ok, err := rc.ch.Get(q, autoAck)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					if len(m.ready[q]) != 0 {
						t.Fatalf("get %s empty, reference has %d ready", q, len(m.ready[q]))
					}
					return
				}
				m.take(t, rc, q, d, autoAck)
				if int(d.MessageCount) != len(m.ready[q]) {
					t.Fatalf("message count %d, reference %d", d.MessageCount, len(m.ready[q]))
				}
			},
			"consume": func(t *rapid.T) {
				if m.consumer != nil {
					t.Skip("already consuming")
				}
				q := rapid.SampledFrom(queues).Draw(t, "queue")
				prefetch := rapid.IntRange(1, 4).Draw(t, "prefetch")
				ch := m.chans[0].ch
				if err := ch.Qos(prefetch, 0, false); err != nil {
					t.Fatal(err)
				}
				c, err := ch.Consume(q, "", false, false, false, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				info := e.info(q)
				m.consumer = &refConsumer{queue: q, prefetch: prefetch, c: c, tag: info.Consumers[0]}
				m.drainConsumer(t)
			},
			"cancel": func(t *rapid.T) {
				if m.consumer == nil {
					t.Skip("no consumer")
				}
				m.drainConsumer(t)
				if err := m.chans[0].ch.Cancel(m.consumer.tag, false); err != nil {
					t.Fatal(err)
				}
				m.consumer = nil // its unacked deliveries stay unacked on channel 0
			},
			"ack": func(t *rapid.T) {
				rc, tag, ok := m.pickHeld(t, "ack")
				if !ok {
					t.Skip("nothing unacked")
				}
				multiple := rapid.Bool().Draw(t, "multiple")
				settled(rc, tag, multiple)
				if err := rc.ch.Ack(tag, multiple); err != nil {
					t.Fatal(err)
				}
			},
			"nack": func(t *rapid.T) {
				rc, tag, ok := m.pickHeld(t, "nack")
				if !ok {
					t.Skip("nothing unacked")
				}
				multiple := rapid.Bool().Draw(t, "multiple")
				requeue := rapid.Bool().Draw(t, "requeue")
				for _, h := range settled(rc, tag, multiple) {
					if requeue {
						m.requeue(h)
					}
				}
				if err := rc.ch.Nack(tag, multiple, requeue); err != nil {
					t.Fatal(err)
				}
			},
			"reject": func(t *rapid.T) {
				rc, tag, ok := m.pickHeld(t, "reject")
				if !ok {
					t.Skip("nothing unacked")
				}
				requeue := rapid.Bool().Draw(t, "requeue")
				for _, h := range settled(rc, tag, false) {
					if requeue {
						m.requeue(h)
					}
				}
				if err := rc.ch.Reject(tag, requeue); err != nil {
					t.Fatal(err)
				}
			},
			"closeChannel": func(t *rapid.T) {
				i := rapid.IntRange(0, 1).Draw(t, "channel")
				if i == 0 {
					m.drainConsumer(t)
					m.consumer = nil
				}
				rc := m.chans[i]
				tags := make([]uint64, 0, len(rc.unacked))
				for tag := range rc.unacked {
					tags = append(tags, tag)
				}
				slices.Sort(tags)
				for _, tag := range tags {
					m.requeue(rc.unacked[tag])
				}
				if err := rc.ch.Close(); err != nil {
					t.Fatal(err)
				}
				m.chans[i] = open()
			},
		})
	})
}
