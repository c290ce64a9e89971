package sim

// The checks made of what a worker received, ran and decided, and the
// audits of the dead-letter queues.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// checkDelivered compares the envelope a worker received with the
// successor last issued (3).
func (r *runner) checkDelivered(j *job, env queuey.Envelope, d queuey.Delivery) {
	if d.Redelivered() || len(j.delivered) == 0 {
		return
	}
	e := j.delivered[0]
	j.delivered = popFront(j.delivered)
	if env.Attempt != e.attempt || env.Deferrals != e.deferrals {
		r.violate(invDeferralsFree, j, fmt.Sprintf("delivered as attempt %d with %d deferrals, issued as attempt %d with %d",
			env.Attempt, env.Deferrals, e.attempt, e.deferrals))
	}
}

// checkRun checks a handler run of j as env (11): never past the retry
// policy's attempts, and never again at the attempt and deferrals of the
// run before unless the job went back to its queue unsettled (a crash, a
// dropped connection, a requeue the worker asked for) as often. A broker
// that takes back a delivery a handler still runs (its consumer timeout)
// makes such a repeat with nothing to explain it.
func (r *runner) checkRun(j *job, env queuey.Envelope) {
	if max := j.q.cfg.Retry.MaxAttempts; max > 0 && env.Attempt > max {
		r.violate(invAttemptsBounded, j, fmt.Sprintf("ran at attempt %d of %d", env.Attempt, max))
	}
	if j.ran && env.Attempt == j.lastAttempt && env.Deferrals == j.lastDefers {
		j.repeats++
		if j.repeats > j.explain+j.requeues {
			r.violate(invAttemptsBounded, j, fmt.Sprintf("ran at attempt %d with %d deferrals %d times over, with %d requeues to explain it",
				env.Attempt, env.Deferrals, j.repeats, j.explain+j.requeues))
		}
	}
	j.ran, j.lastAttempt, j.lastDefers = true, env.Attempt, env.Deferrals
}

// checkDecision checks a settlement against the handler's result (3): a
// deferral keeps the attempt and ignores the retry policy, a retry spends
// exactly one attempt, and attempts spent count retryable failures only.
func (r *runner) checkDecision(j *job, env queuey.Envelope, out outcome, dec settle.Decision) {
	q := j.q
	policy := q.cfg.Retry
	if j.explain == 0 && env.Attempt != j.failures+1 {
		r.violate(invDeferralsFree, j, fmt.Sprintf("attempt %d after %d retryable failures", env.Attempt, j.failures))
	}
	switch res := out.result; {
	case res == nil:
		if dec.Action != queuey.ActionAck {
			r.violate(invDeferralsFree, j, "a success was settled as "+dec.Action.String())
		}
	case out.label == "retry" || out.label == "timeout":
		exhausted := policy.MaxAttempts > 0 && env.Attempt >= policy.MaxAttempts
		want := queuey.ReasonAttemptsExhausted
		if out.label == "timeout" {
			want = queuey.ReasonTimedOut
		}
		switch {
		case exhausted && (dec.Action != queuey.ActionDeadLetter || dec.Reason != want):
			r.violate(invDeferralsFree, j, fmt.Sprintf("attempt %d of %d failed and was settled as %s", env.Attempt, policy.MaxAttempts, dec.Action))
		case !exhausted && (dec.Action != queuey.ActionRetry || dec.Successor.Attempt != env.Attempt+1 ||
			dec.Successor.Deferrals != env.Deferrals || dec.Successor.Priority != 0 || dec.Delay > policy.Cap):
			r.violate(invDeferralsFree, j, fmt.Sprintf("a retry settled as %s to attempt %d, priority %d, delay %s", dec.Action,
				dec.Successor.Attempt, dec.Successor.Priority, dec.Delay))
		}
	case strings.HasPrefix(out.label, "defer"):
		if dec.Action != queuey.ActionDefer || dec.Successor.Attempt != env.Attempt ||
			dec.Successor.Deferrals != env.Deferrals+1 || dec.Successor.Priority != q.top {
			r.violate(invDeferralsFree, j, fmt.Sprintf("a deferral settled as %s to attempt %d with %d deferrals at priority %d",
				dec.Action, dec.Successor.Attempt, dec.Successor.Deferrals, dec.Successor.Priority))
		}
	case out.label == "fatal":
		if dec.Action != queuey.ActionDeadLetter || !strings.HasPrefix(dec.Reason, "fatal: ") {
			r.violate(invDeferralsFree, j, "a fatal failure settled as "+dec.Action.String())
		}
	}
}

// audit takes what reached q's dead-letter queue off it (basic.get, as an
// operator's tool would; the oracle is no consumer) and checks each dead
// letter's reason and headers (8).
func (r *runner) audit(q *simQueue) {
	for {
		d, ok, err := r.admin.Get(q.dead, true)
		if err != nil || !ok {
			return // empty, or the admin channel went with the broker: audited once it is back
		}
		reason, hasReason := d.Headers[rabbitmq.HeaderDeathReason].(string)
		if !hasReason {
			r.auditBrokerDeadLetter(q, d.MessageId, d.Headers)
			continue
		}
		if orig, _ := d.Headers[rabbitmq.HeaderOriginalQueue].(string); orig != q.spec.Name {
			r.violate(invDeadLetterReason, nil, fmt.Sprintf("dead letter from %s says x-original-queue %q", q.spec.Name, orig))
		}
		attempts, _ := d.Headers[rabbitmq.HeaderAttempts].(int64)
		env, err := queuey.DecodeEnvelope(d.Body)
		if err != nil {
			r.auditMalformed(q, reason, attempts, d.Body)
			continue
		}
		j := r.job(jobNumber(env.ID))
		if j == nil || len(j.deadWant) == 0 {
			r.violate(invDeadLetterReason, j, fmt.Sprintf("unexpected dead letter for %s (%s)", env.ID, reason))
			continue
		}
		want := j.deadWant[0]
		j.deadWant = j.deadWant[1:]
		r.emit(Event{Kind: EvDeadLetter, Job: j.n, Queue: q.spec.Name, Worker: -1, Attempt: int(attempts), Detail: reason})
		if reason != want.reason || int(attempts) != want.attempts {
			r.violate(invDeadLetterReason, j, fmt.Sprintf("dead letter says %q after %d attempts, want %q after %d", reason, attempts, want.reason, want.attempts))
		}
		if len(j.deadWant) == 0 {
			j.deadWant = nil
		}
		r.retire(j)
	}
}

func (r *runner) auditMalformed(q *simQueue, reason string, attempts int64, body []byte) {
	s := string(body)
	i := strings.LastIndexByte(s, '#')
	n, _ := strconv.ParseUint(s[i+1:], 10, 64)
	want, ok := q.malformed[n]
	switch {
	case i < 0 || !ok:
		r.violate(invDeadLetterReason, nil, fmt.Sprintf("a dead letter that is neither a job nor a malformed body we sent: %.60q", s))
	case string(want) != s:
		r.violate(invDeadLetterReason, nil, fmt.Sprintf("malformed body %d changed on its way to the dead-letter queue: %.60q", n, s))
	case reason != queuey.ReasonMalformed || attempts != 0:
		r.violate(invDeadLetterReason, nil, fmt.Sprintf("malformed body %d dead-lettered as %q after %d attempts", n, reason, attempts))
	default:
		delete(q.malformed, n)
		r.res.Jobs.MalformedDeadLettered++
		r.emit(Event{Kind: EvDeadLetter, Queue: q.spec.Name, Worker: -1, Detail: reason + " #" + strconv.FormatUint(n, 10)})
	}
}

func (r *runner) auditBrokerDeadLetter(q *simQueue, id string, h amqp.Table) {
	j := r.job(jobNumber(id))
	deaths, _ := h["x-death"].([]any)
	var first amqp.Table
	if len(deaths) > 0 {
		first, _ = deaths[0].(amqp.Table)
	}
	if first == nil {
		r.violate(invDeadLetterReason, j, fmt.Sprintf("dead letter %q carries neither x-death-reason nor x-death", id))
		return
	}
	reason, _ := first["reason"].(string)
	from, _ := first["queue"].(string)
	if reason != "delivery_limit" || from != q.spec.Name {
		r.violate(invDeadLetterReason, j, fmt.Sprintf("dead letter %q: x-death says %s from %s", id, reason, from))
	}
	if j == nil {
		return
	}
	if len(j.deadWant) > 0 {
		j.deadWant = j.deadWant[1:]
	}
	if len(j.deadWant) == 0 {
		j.deadWant = nil
	}
	r.retire(j)
}

// popFront removes a slice's first element in place, keeping its capacity
// for the appends that follow.
func popFront[T any](s []T) []T {
	copy(s, s[1:])
	var zero T
	s[len(s)-1] = zero
	return s[:len(s)-1]
}
