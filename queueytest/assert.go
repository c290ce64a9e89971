package queueytest

import (
	"errors"
	"fmt"

	"github.com/queuey/queuey/queuey"
)

// Outcome is a handler run as a test states what it expects of it: the
// job's attempt, deferral count and delivery priority when it ran, and what
// the handler's result asked for. Outcomes compare with ==, so a test can
// write the runs it expects of a job as a []Outcome and compare them with
// slices.Equal; String prints one for a failure.
type Outcome struct {
	Attempt   int
	Deferrals int
	Priority  uint8
	// Result is what the handler's result asks of the worker, matched as the
	// worker matches it (errors.As, so a wrapped Defer or Fatal counts):
	//
	//   - "ok": nil; the job is acknowledged.
	//   - "defer 30s": queuey.Defer(30*time.Second, ...), the delay asked
	//     for as time.Duration prints it; the job is held, no attempt spent.
	//   - "fatal": queuey.Fatal, or a *queuey.UnknownKindError; the job is
	//     dead-lettered.
	//   - "panic": the handler panicked; retried like "error".
	//   - "error": any other error; the job is retried, or dead-lettered if
	//     that was its queue's last attempt (Harness.Dead counts those).
	Result string
}

// String is the outcome as test failures print it:
// "attempt=1 deferrals=0 priority=0 defer 30s".
func (o Outcome) String() string {
	return fmt.Sprintf("attempt=%d deferrals=%d priority=%d %s", o.Attempt, o.Deferrals, o.Priority, o.Result)
}

// Outcome is r as a test states it.
func (r Run) Outcome() Outcome {
	return Outcome{Attempt: r.Attempt, Deferrals: r.Deferrals, Priority: r.Priority, Result: result(r.Err)}
}

// result names what err asks of the worker: see Outcome.Result.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	if d, ok := errors.AsType[*queuey.DeferError](err); ok {
		return "defer " + d.Delay.String()
	}
	if _, ok := errors.AsType[*queuey.FatalError](err); ok {
		return "fatal"
	}
	if _, ok := errors.AsType[*queuey.UnknownKindError](err); ok {
		return "fatal"
	}
	if _, ok := errors.AsType[*queuey.PanicError](err); ok {
		return "panic"
	}
	return "error"
}

// OutcomesOf returns the outcomes of one job's runs, in the order they
// ended: RunsOf, each as Run.Outcome states it.
func (l *RunLog) OutcomesOf(id string) []Outcome {
	runs := l.RunsOf(id)
	out := make([]Outcome, len(runs))
	for i, r := range runs {
		out[i] = r.Outcome()
	}
	return out
}
