package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
	"time"
)

// EventKind names what a trace event records.
type EventKind uint8

// Trace event kinds.
const (
	EvArrive       EventKind = iota + 1 // a job arrives and is enqueued on Queue
	EvMalformed                         // a malformed body is published to Queue
	EvDeliver                           // Worker receives the job (Attempt, Deferrals, Priority)
	EvOutcome                           // the handler returns Detail
	EvHold                              // the successor enters hold queue Queue for TTL (Delay asked)
	EvRelease                           // the job leaves hold queue Detail into Queue
	EvAck                               // the delivery is acknowledged
	EvRequeue                           // the delivery goes back to its queue (settling failed)
	EvDeadLetter                        // the job reaches Queue's dead-letter queue, Detail the reason
	EvHoldCreated                       // hold queue Queue is created
	EvHoldExpired                       // hold queue Queue expires (x-expires)
	EvCrash                             // Worker dies; Detail says why
	EvDrop                              // the broker closes Worker's connection
	EvRestart                           // Worker is back
	EvRefuse                            // hold queue Queue is squatted with other arguments (Detail: on/off)
	EvSettleFailed                      // publishing the successor failed: Detail
	EvViolation                         // an invariant is broken: Detail
	EvLost                              // the job was dropped with hold queue Queue (x-expires)
	EvBrokerDown                        // the broker restarts, or is unreachable (Detail), until it is back
	EvBrokerUp                          // the broker is reachable again
	EvDialFailed                        // Worker (-1: the producer) could not connect: attempt Attempt
	EvRelay                             // a worker moves the job from the hold ladder's relay queue to rung Queue
	EvLead                              // scheduler process Worker leads, or no longer does (Detail)
	EvTick                              // scheduler process Worker enqueues tick Detail's job on Queue
)

var eventNames = [...]string{
	EvArrive: "arrive", EvMalformed: "malformed", EvDeliver: "deliver", EvOutcome: "outcome",
	EvHold: "hold", EvRelease: "release", EvAck: "ack", EvRequeue: "requeue",
	EvDeadLetter: "dead-letter", EvHoldCreated: "hold-created", EvHoldExpired: "hold-expired",
	EvCrash: "crash", EvDrop: "drop", EvRestart: "restart", EvRefuse: "refuse-hold",
	EvSettleFailed: "settle-failed", EvViolation: "VIOLATION", EvLost: "lost",
	EvBrokerDown: "broker-down", EvBrokerUp: "broker-up", EvDialFailed: "dial-failed", EvRelay: "relay",
	EvLead: "lead", EvTick: "tick",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one line of a trace. Fields a kind does not use are zero.
type Event struct {
	At        time.Duration // virtual time since the start of the run
	Kind      EventKind
	Job       uint64 // job number; 0 for none
	Queue     string
	Worker    int // index within its queue's workers; -1 for none
	Attempt   int
	Deferrals int
	Priority  uint8
	Delay     time.Duration // asked-for delay (hold)
	TTL       time.Duration // the hold's rounded TTL
	Late      time.Duration // release: how long after its TTL it came
	Detail    string
}

// AppendText appends the event's one-line text form, without a newline.
func (e *Event) AppendText(b []byte) []byte {
	b = appendVirtual(b, e.At)
	b = append(b, ' ')
	b = append(b, e.Kind.String()...)
	if e.Job != 0 {
		b = append(b, " job="...)
		b = strconv.AppendUint(b, e.Job, 10)
	}
	if e.Queue != "" {
		b = append(b, " queue="...)
		b = append(b, e.Queue...)
	}
	if e.Worker >= 0 {
		b = append(b, " worker="...)
		b = strconv.AppendInt(b, int64(e.Worker), 10)
	}
	if e.Attempt != 0 {
		b = append(b, " attempt="...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	if e.Deferrals != 0 {
		b = append(b, " deferrals="...)
		b = strconv.AppendInt(b, int64(e.Deferrals), 10)
	}
	if e.Priority != 0 {
		b = append(b, " priority="...)
		b = strconv.AppendUint(b, uint64(e.Priority), 10)
	}
	if e.Delay != 0 {
		b = append(b, " delay="...)
		b = append(b, e.Delay.String()...)
	}
	if e.TTL != 0 {
		b = append(b, " ttl="...)
		b = append(b, e.TTL.String()...)
	}
	if e.Kind == EvRelease {
		b = append(b, " late="...)
		b = append(b, e.Late.String()...)
		b = append(b, " from="...)
	} else if e.Detail != "" {
		b = append(b, ' ')
	}
	b = append(b, e.Detail...)
	return b
}

// String is the event's text form.
func (e Event) String() string { return string(e.AppendText(nil)) }

// appendVirtual writes a virtual time as seconds with microseconds,
// zero-padded so that traces line up: "0000012.345678s".
func appendVirtual(b []byte, d time.Duration) []byte {
	us := int64(d / time.Microsecond)
	s := strconv.FormatInt(us/1e6, 10)
	for i := len(s); i < 7; i++ {
		b = append(b, '0')
	}
	b = append(b, s...)
	b = append(b, '.')
	f := strconv.FormatInt(us%1e6, 10)
	for i := len(f); i < 6; i++ {
		b = append(b, '0')
	}
	b = append(b, f...)
	return append(b, 's')
}

// recorder hashes every event's binary form and, when asked, writes its
// text form. Full buffers of records are hashed on a goroutine of their
// own, in order, so the hashing runs on the other core; the hash is the
// same as hashing everything inline.
type recorder struct {
	h      hash.Hash
	buf    []byte // binary records waiting to be hashed
	w      io.Writer
	line   []byte
	events uint64
	werr   error

	full   chan []byte   // to the hasher; nil until the first buffer fills
	free   chan []byte   // hashed buffers, back for reuse
	hashed chan struct{} // closed when the hasher has hashed all it was given
}

const (
	// Bytes of records per handoff. Each handoff wakes the hasher, which
	// costs tens of microseconds on a virtual machine: 64 KiB buffers lost
	// as much as the hashing they moved.
	recordBuffer = 1 << 20
	recordSpare  = 2 // buffers besides the one being filled
)

func newRecorder(w io.Writer) *recorder {
	// A short run never fills a buffer: it starts small and grows.
	return &recorder{h: sha256.New(), buf: make([]byte, 0, 64<<10), w: w}
}

// handOff gives b, full, to the hasher and returns an empty buffer.
func (r *recorder) handOff(b []byte) []byte {
	if r.full == nil {
		r.full = make(chan []byte, recordSpare)
		r.free = make(chan []byte, recordSpare+1)
		r.hashed = make(chan struct{})
		for range recordSpare {
			r.free <- make([]byte, 0, recordBuffer)
		}
		go func(h hash.Hash, full <-chan []byte, free chan<- []byte, hashed chan<- struct{}) {
			defer close(hashed)
			for b := range full {
				h.Write(b)
				free <- b[:0]
			}
		}(r.h, r.full, r.free, r.hashed)
	}
	r.full <- b
	return <-r.free
}

// stop waits for the hasher to hash what it was given and lets it end.
func (r *recorder) stop() {
	if r.full != nil {
		close(r.full)
		<-r.hashed
		r.full = nil
	}
}

func (r *recorder) record(e *Event) {
	r.events++
	b := appendRecord(r.buf, e)
	if len(b) > recordBuffer-1<<10 {
		b = r.handOff(b)
	}
	r.buf = b
	if r.w != nil && r.werr == nil {
		r.line = append(e.AppendText(r.line[:0]), '\n')
		_, r.werr = r.w.Write(r.line)
	}
}

// appendRecord appends e's binary form, the bytes the trace hash covers.
func appendRecord(b []byte, e *Event) []byte {
	b = binary.AppendVarint(b, int64(e.At))
	b = append(b, byte(e.Kind), e.Priority)
	b = binary.AppendUvarint(b, e.Job)
	b = binary.AppendUvarint(b, uint64(len(e.Queue)))
	b = append(b, e.Queue...)
	b = binary.AppendVarint(b, int64(e.Worker))
	b = binary.AppendVarint(b, int64(e.Attempt))
	b = binary.AppendVarint(b, int64(e.Deferrals))
	b = binary.AppendVarint(b, int64(e.Delay))
	b = binary.AppendVarint(b, int64(e.TTL))
	b = binary.AppendVarint(b, int64(e.Late))
	b = binary.AppendUvarint(b, uint64(len(e.Detail)))
	return append(b, e.Detail...)
}

// sum returns the trace hash in hex.
func (r *recorder) sum() string {
	r.stop()
	r.h.Write(r.buf)
	r.buf = r.buf[:0]
	return hex.EncodeToString(r.h.Sum(nil))
}
