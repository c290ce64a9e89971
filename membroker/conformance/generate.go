package conformance

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"pgregory.net/rapid"
)

// Sequence is a generated scenario: some queues and a list of operations.
// It is plain data, so a failing one can be kept as JSON in testdata and
// replayed.
type Sequence struct {
	Queues []QueueSpec `json:"queues"`
	Ops    []Op        `json:"ops"`
}

// QueueSpec is a random valid argument set for one queue.
type QueueSpec struct {
	Quorum        bool   `json:"quorum,omitempty"`
	MaxPriority   int    `json:"max_priority,omitempty"`    // classic; 0 means none
	MessageTTL    int    `json:"message_ttl,omitempty"`     // ms; 0 means none
	DeliveryLimit *int   `json:"delivery_limit,omitempty"`  // quorum; nil means the default
	DeadLetter    bool   `json:"dead_letter,omitempty"`     // x-dead-letter-exchange ""
	DeadLetterKey string `json:"dead_letter_key,omitempty"` // "dead": route to the sequence's dead queue; "": keep the routing key
}

// Op is one operation of a Sequence. Which fields matter depends on Kind.
type Op struct {
	Kind       string `json:"op"`
	Queue      int    `json:"queue,omitempty"`
	Channel    int    `json:"channel,omitempty"` // 0: the consumer channel, 1: the get channel
	Priority   uint8  `json:"priority,omitempty"`
	Expiration string `json:"expiration,omitempty"`
	Persistent bool   `json:"persistent,omitempty"`
	Pick       int    `json:"pick,omitempty"` // which unacknowledged delivery, modulo their number
	Multiple   bool   `json:"multiple,omitempty"`
	Requeue    bool   `json:"requeue,omitempty"`
	AutoAck    bool   `json:"auto_ack,omitempty"`
	Prefetch   int    `json:"prefetch,omitempty"`
}

// Operation kinds.
const (
	OpPublish   = "publish"
	OpGet       = "get"
	OpAck       = "ack"
	OpNack      = "nack"
	OpReject    = "reject"
	OpConsume   = "consume"
	OpReceive   = "receive"
	OpCancel    = "cancel"
	OpClose     = "close"
	OpWait      = "wait"
	OpPurge     = "purge"
	OpPassive   = "passive"
	OpRedeclare = "redeclare"
)

// Timing of generated sequences. Waits are whole steps; TTLs sit a quarter
// step away from any wait boundary, so an expiry is never within 250 ms of
// an observation, on the model or (its schedule kept by Live.Wait) live.
const (
	step = 500 * time.Millisecond
)

var (
	ttlChoices        = []int{250, 1250}
	expirationChoices = []string{"", "", "", "250", "750"}
)

// Generator draws short sequences over one to three queues.
func Generator() *rapid.Generator[Sequence] {
	return rapid.Custom(func(t *rapid.T) Sequence {
		var s Sequence
		nq := rapid.IntRange(1, 3).Draw(t, "queues")
		for i := range nq {
			var q QueueSpec
			q.Quorum = rapid.Bool().Draw(t, fmt.Sprintf("q%d.quorum", i))
			if !q.Quorum && rapid.Bool().Draw(t, fmt.Sprintf("q%d.priority", i)) {
				q.MaxPriority = rapid.SampledFrom([]int{1, 5, 10}).Draw(t, fmt.Sprintf("q%d.maxPriority", i))
			}
			if rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("q%d.ttl?", i)) == 0 {
				q.MessageTTL = rapid.SampledFrom(ttlChoices).Draw(t, fmt.Sprintf("q%d.ttl", i))
			}
			if q.Quorum && rapid.Bool().Draw(t, fmt.Sprintf("q%d.limit?", i)) {
				l := rapid.SampledFrom([]int{-1, 0, 1, 2}).Draw(t, fmt.Sprintf("q%d.limit", i))
				q.DeliveryLimit = &l
			}
			q.DeadLetter = rapid.Bool().Draw(t, fmt.Sprintf("q%d.dlx", i))
			if q.DeadLetter && rapid.Bool().Draw(t, fmt.Sprintf("q%d.dlrk?", i)) {
				q.DeadLetterKey = "dead"
			}
			s.Queues = append(s.Queues, q)
		}
		n := rapid.IntRange(1, 24).Draw(t, "ops")
		waits := 0
		for i := range n {
			kind := rapid.SampledFrom([]string{
				OpPublish, OpPublish, OpPublish, OpPublish, OpGet, OpGet, OpAck, OpNack, OpReject,
				OpConsume, OpReceive, OpReceive, OpCancel, OpClose, OpWait, OpPurge, OpPassive, OpRedeclare,
			}).Draw(t, fmt.Sprintf("op%d", i))
			op := Op{Kind: kind, Queue: rapid.IntRange(0, nq-1).Draw(t, fmt.Sprintf("op%d.queue", i))}
			switch kind {
			case OpPublish:
				op.Priority = uint8(rapid.IntRange(0, 12).Draw(t, fmt.Sprintf("op%d.priority", i)))
				op.Expiration = rapid.SampledFrom(expirationChoices).Draw(t, fmt.Sprintf("op%d.expiration", i))
				op.Persistent = rapid.Bool().Draw(t, fmt.Sprintf("op%d.persistent", i))
			case OpGet:
				op.AutoAck = rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("op%d.autoAck", i)) == 0
			case OpAck, OpNack, OpReject:
				op.Channel = rapid.IntRange(0, 1).Draw(t, fmt.Sprintf("op%d.channel", i))
				op.Pick = rapid.IntRange(0, 7).Draw(t, fmt.Sprintf("op%d.pick", i))
				op.Requeue = rapid.Bool().Draw(t, fmt.Sprintf("op%d.requeue", i))
				if kind != OpReject {
					op.Multiple = rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("op%d.multiple", i)) == 0
				}
			case OpConsume:
				op.Prefetch = rapid.IntRange(1, 4).Draw(t, fmt.Sprintf("op%d.prefetch", i))
			case OpClose:
				op.Channel = rapid.IntRange(0, 1).Draw(t, fmt.Sprintf("op%d.channel", i))
			case OpWait:
				if waits == 4 {
					op.Kind = OpPassive
				}
				waits++
			}
			s.Ops = append(s.Ops, op)
		}
		return s
	})
}

// args builds a queue's declaration arguments.
func (q QueueSpec) args(dead string) amqp.Table {
	t := amqp.Table{}
	if q.Quorum {
		t["x-queue-type"] = "quorum"
		if q.DeliveryLimit != nil {
			t["x-delivery-limit"] = *q.DeliveryLimit
		}
	}
	if q.MaxPriority > 0 {
		t["x-max-priority"] = q.MaxPriority
	}
	if q.MessageTTL > 0 {
		t["x-message-ttl"] = q.MessageTTL
	}
	if q.DeadLetter {
		t["x-dead-letter-exchange"] = ""
		if q.DeadLetterKey != "" {
			t["x-dead-letter-routing-key"] = dead
		}
	}
	return t
}

// seqState is what the interpreter tracks while running a Sequence.
type seqState struct {
	r        *Run
	conn     Conn
	chans    [2]Channel
	unacked  [2][]uint64 // delivery tags, in delivery order
	consumer <-chan amqp.Delivery
	ctag     string
	consumed int
	names    []string
	dead     string
	seq      int
}

// Play runs the sequence on r.
func (s Sequence) Play(r *Run) {
	st := &seqState{r: r, conn: r.Dial(), dead: r.Q("dead")}
	st.chans[0], st.chans[1] = r.Channel(st.conn), r.Channel(st.conn)
	r.Declare(st.chans[1], st.dead, true, false, false, nil)
	for i, q := range s.Queues {
		name := r.Q("q" + strconv.Itoa(i))
		st.names = append(st.names, name)
		// Without a dead-letter routing key, dead letters keep their routing
		// key, the queue's own name: a rejection comes back, an expiry is a
		// cycle and is dropped.
		r.Declare(st.chans[1], name, true, false, false, q.args(st.dead))
	}
	for i, op := range s.Ops {
		r.Logf("# %d %s", i, op.Kind)
		st.play(s, op)
	}
	// Final state: every message left anywhere, then anything the consumer
	// was handed beyond what the model handed over.
	st.receive()
	r.Logf("# final")
	get := st.open(1)
	for _, name := range append(slices.Clone(st.names), st.dead) {
		for range 64 {
			if _, ok := r.Get(get, name, true); !ok {
				break
			}
		}
	}
	r.Checkpoint() // the final gets depend on which TTLs have run out
	if st.consumer != nil {
		r.Surplus(st.consumer)
	}
}

// open returns channel i, reopening it if it was closed.
func (st *seqState) open(i int) Channel {
	if st.chans[i] == nil || st.chans[i].IsClosed() {
		if i == 0 {
			st.consumer = nil
		}
		st.unacked[i] = nil
		st.chans[i] = st.r.Channel(st.conn)
	}
	return st.chans[i]
}

func (st *seqState) play(s Sequence, op Op) {
	r := st.r
	name := st.names[op.Queue]
	switch op.Kind {
	case OpPublish:
		st.seq++
		p := amqp.Publishing{Priority: op.Priority, Expiration: op.Expiration, MessageId: "m" + strconv.Itoa(st.seq)}
		if op.Persistent {
			p.DeliveryMode = amqp.Persistent
		}
		r.Publish(st.open(1), name, "m"+strconv.Itoa(st.seq), p)
	case OpGet:
		ch := st.open(1)
		if d, ok := r.Get(ch, name, op.AutoAck); ok && !op.AutoAck {
			st.unacked[1] = append(st.unacked[1], d.DeliveryTag)
		}
	case OpAck, OpNack, OpReject:
		if op.Channel == 0 {
			st.receive()
		}
		tags := st.unacked[op.Channel]
		if len(tags) == 0 || st.chans[op.Channel] == nil || st.chans[op.Channel].IsClosed() {
			return
		}
		k := op.Pick % len(tags)
		tag, ch := tags[k], st.chans[op.Channel]
		settled := []int{k}
		if op.Multiple {
			settled = nil
			for j := range tags {
				if tags[j] <= tag {
					settled = append(settled, j)
				}
			}
		}
		switch op.Kind {
		case OpAck:
			r.Ack(ch, tag, op.Multiple)
		case OpNack:
			r.Nack(ch, tag, op.Multiple, op.Requeue)
		case OpReject:
			r.Reject(ch, tag, op.Requeue)
		}
		for j := len(settled) - 1; j >= 0; j-- {
			tags = slices.Delete(tags, settled[j], settled[j]+1)
		}
		st.unacked[op.Channel] = tags
		if op.Channel == 0 {
			st.receive()
		}
	case OpConsume:
		if st.consumer != nil {
			return
		}
		ch := st.open(0)
		r.Qos(ch, op.Prefetch)
		st.consumed++
		st.ctag = "c" + strconv.Itoa(st.consumed)
		st.consumer = r.Consume(ch, name, st.ctag, false, false)
		st.receive()
	case OpReceive:
		st.receive()
	case OpCancel:
		if st.consumer == nil {
			return
		}
		st.receive()
		r.Cancel(st.chans[0], st.ctag)
		st.consumer = nil // its unacknowledged deliveries stay on channel 0
	case OpClose:
		if st.chans[op.Channel] == nil || st.chans[op.Channel].IsClosed() {
			return
		}
		if op.Channel == 0 {
			st.receive()
		}
		if err := st.chans[op.Channel].Close(); err != nil {
			r.Logf("close: %s", describeErr(err))
		}
		r.Quiesce() // the requeue of its unacknowledged deliveries
		st.chans[op.Channel] = nil
		st.open(op.Channel)
	case OpWait:
		r.Wait(step)
		st.receive()
	case OpPurge:
		r.Purge(st.open(1), name)
	case OpPassive:
		r.Passive(st.open(1), name)
	case OpRedeclare:
		// The same arguments: a redeclare that must succeed and report counts.
		r.Declare(st.open(1), name, true, false, false, s.Queues[op.Queue].args(st.dead))
	}
}

// receive records what the consumer has been handed, and tracks the tags.
func (st *seqState) receive() {
	if st.consumer == nil {
		return
	}
	for _, d := range st.r.ReceiveAll(st.consumer) {
		st.unacked[0] = append(st.unacked[0], d.DeliveryTag)
	}
}
