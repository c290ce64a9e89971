// Package jobopts reads and writes the options a producer gives one job
// (contract.ExtMaxAttempts and contract.ExtPriority) in its envelope's
// extension fields. The producer writes them; the worker's decoder checks
// them, settle.Decide obeys them, and a redrive restores the priority.
// Each reads them here, so they mean one thing everywhere.
package jobopts

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"

	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

// Options are a job's own options, as its envelope carries them. The zero
// value is a job without any: the queue's policy and priority 0.
type Options struct {
	// MaxAttempts overrides the queue's RetryPolicy.MaxAttempts when not
	// 0: at least 1, or -1 for ever.
	MaxAttempts int
	// Priority is what the job is published at but for a deferral's round.
	Priority uint8
}

// Read returns env's options. An option of the wrong shape is an
// *envelope.Error on the field "ext": the envelope is malformed.
func Read(env envelope.Envelope) (Options, error) {
	var o Options
	if len(env.Ext) == 0 {
		return o, nil // the usual job: no map lookups
	}
	if raw, ok := env.Ext[contract.ExtMaxAttempts]; ok {
		n, err := strconv.Atoi(string(raw))
		if err != nil || (n < 1 && n != -1) {
			return Options{}, &envelope.Error{Field: "ext", Reason: fmt.Sprintf(
				"key %q: must be an integer, at least 1 or -1, got %s", contract.ExtMaxAttempts, raw)}
		}
		o.MaxAttempts = n
	}
	if raw, ok := env.Ext[contract.ExtPriority]; ok {
		n, err := strconv.Atoi(string(raw))
		if err != nil || n < 0 || n > 255 {
			return Options{}, &envelope.Error{Field: "ext", Reason: fmt.Sprintf(
				"key %q: must be an integer in 0..255, got %s", contract.ExtPriority, raw)}
		}
		o.Priority = uint8(n)
	}
	return o, nil
}

// Write returns env with o in its Ext, its map copied (a caller's map is
// never written to). Options at their zero value are left out.
func Write(env envelope.Envelope, o Options) envelope.Envelope {
	if o == (Options{}) {
		return env
	}
	ext := make(map[string]json.RawMessage, len(env.Ext)+2)
	maps.Copy(ext, env.Ext)
	if o.MaxAttempts != 0 {
		ext[contract.ExtMaxAttempts] = strconv.AppendInt(nil, int64(o.MaxAttempts), 10)
	}
	if o.Priority != 0 {
		ext[contract.ExtPriority] = strconv.AppendUint(nil, uint64(o.Priority), 10)
	}
	env.Ext = ext
	return env
}

// Policy is q's retry policy for this job: MaxAttempts overridden when o
// sets it.
func (o Options) Policy(q contract.QueueConfig) contract.RetryPolicy {
	p := q.Retry.WithDefaults()
	if o.MaxAttempts != 0 {
		p.MaxAttempts = o.MaxAttempts
	}
	return p
}

// QueuePriority is the priority the job goes back at on queue q, but for a
// deferral's round: its own where q takes it, else 0. A producer refuses
// a priority q cannot take, but a job written by another producer, or
// enqueued before its queue changed, may carry one: on a quorum queue, or
// at or above a classic queue's top priority, which deferrals keep.
func (o Options) QueuePriority(q contract.QueueConfig) uint8 {
	q = q.WithDefaults()
	if q.Type != contract.Classic || o.Priority >= q.TopPriority() {
		return 0
	}
	return o.Priority
}
