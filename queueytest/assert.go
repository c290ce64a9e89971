package queueytest

import (
	"fmt"

	"github.com/queuey/queuey/queuey"
)

// Outcome is a handler run as a test states what it expects of it: the
// job's attempt, deferral count and delivery priority when it ran, and
// what the worker does with it next. Outcomes compare with ==, so a test
// can write the runs it expects of a job as a []Outcome and compare them
// with slices.Equal; String prints one for a failure.
type Outcome struct {
	Attempt   int
	Deferrals int
	Priority  uint8
	// Result is what the worker does with the job next (Run.Action, by
	// the worker's own rules):
	//
	//   - "ok": acknowledged;
	//   - "defer 30s": held for the delay the handler asked for, as
	//     time.Duration prints it, no attempt spent;
	//   - "retry": held for the retry policy's backoff, an attempt spent (a
	//     returned error, or a panic, with attempts left);
	//   - "dead-letter: REASON": to the dead-letter queue, REASON as its
	//     x-death-reason header says it ("attempts exhausted", "fatal: …").
	Result string
}

// String is the outcome as test failures print it, in braces so that a
// slice of them reads one outcome at a time:
// "{attempt=1 deferrals=0 priority=0 defer 30s}", and printed with %v a
// []Outcome is "[{attempt=1 … defer 30s} {attempt=1 deferrals=1 … ok}]".
func (o Outcome) String() string {
	return fmt.Sprintf("{attempt=%d deferrals=%d priority=%d %s}", o.Attempt, o.Deferrals, o.Priority, o.Result)
}

// Outcome is r as a test states it.
func (r Run) Outcome() Outcome {
	o := Outcome{Attempt: r.Attempt, Deferrals: r.Deferrals, Priority: r.Priority}
	switch r.Action {
	case queuey.ActionAck:
		o.Result = "ok"
	case queuey.ActionDefer:
		o.Result = "defer " + r.Delay.String()
	case queuey.ActionRetry:
		o.Result = "retry"
	case queuey.ActionDeadLetter:
		o.Result = "dead-letter: " + r.Reason
	default:
		o.Result = r.Action.String()
	}
	return o
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
