package queuey

import (
	"context"
	"encoding/json"
	"time"
)

// Observer is told what happens to jobs, for metrics and traces: set it as
// ProducerConfig.Observer and WorkerConfig.Observer. Package
// github.com/queuey/queuey/queuey/queueyotel implements it with
// OpenTelemetry. Its methods are called from many goroutines at once, on
// the path of every job, and must not block.
//
// Without an Observer (the default) the producer and worker call nothing
// and stamp nothing.
type Observer interface {
	// Enqueue is called as a Producer is about to publish env. It may add
	// extension fields to env.Ext, which travel with the job through its
	// retries, deferrals and dead letter (trace context, say); the map is
	// env's own. Keys that start with "queuey_" are queuey's (the job's
	// own options among them, ExtMaxAttempts and ExtPriority): leave them
	// as they are. done is called with the publish's result.
	Enqueue(ctx context.Context, env *Envelope) (done func(err error))
	// Run is called as a Worker is about to run a job's handler (or to
	// find it has none). The context it returns is the handler's. done is
	// called once the handler has returned and its outcome is decided,
	// before the job is settled: a job whose settlement then fails runs
	// again, and is observed again.
	Run(ctx context.Context, run RunInfo) (context.Context, func(RunOutcome))
	// Malformed is called for a delivery of queue whose body is not an
	// envelope, as it is dead-lettered.
	Malformed(ctx context.Context, queue string)
}

// RunInfo is a job about to run, for an Observer.
type RunInfo struct {
	Job JobContext
	// Ext is the envelope's extension fields. Read only.
	Ext map[string]json.RawMessage
	// Redelivered: the broker delivered this job before (its worker was
	// lost before settling it).
	Redelivered bool
	// Started is when the run started, by the worker's clock.
	Started time.Time
	// DueAt is when this run was due, for a job released by a hold queue
	// from a retry or deferral that a worker with an Observer decided: when
	// it was decided, plus the delay asked for. Zero otherwise.
	DueAt time.Time
}

// RunOutcome is what a job's run came to, for an Observer.
type RunOutcome struct {
	// Result is the handler's error (nil for success).
	Result error
	// Action is what happens to the job next.
	Action Action
	// Reason is a deferral's reason, or why the job is dead-lettered.
	Reason string
	// Delay is how long a retry or deferral asked to wait.
	Delay time.Duration
	// Duration is how long the handler ran.
	Duration time.Duration
}

// dueAt reads ExtDueAt from ext; zero when absent or not a timestamp.
func dueAt(ext map[string]json.RawMessage) time.Time {
	raw, ok := ext[ExtDueAt]
	if !ok {
		return time.Time{}
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}
