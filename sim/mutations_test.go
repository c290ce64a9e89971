package sim

// Broken worker cores and channels, written here, in test code: each
// wraps the product's core (internal/settle over internal/workercore) and
// rewrites what it answers, or wraps a channel and changes what it
// declares, so that the tests can show an invariant fire. The product has
// no switch for any of them.

import (
	"context"
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/redial"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/internal/execute"
	"github.com/queuey/queuey/internal/schedcore"
	"github.com/queuey/queuey/internal/settle"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queuey/envelope"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

type simCore = execute.Core[*simDelivery]

// rewritten forwards every event to the product's core, then hands the
// actions the core appended (from index from) to rewrite.
type rewritten struct {
	simCore
	rewrite func(acts []simAction, from int) []simAction
}

func (c rewritten) DeliverDecoded(acts []simAction, q int, gen workercore.Gen, m *simDelivery, job envelope.Envelope, err error) []simAction {
	n := len(acts)
	return c.rewrite(c.simCore.DeliverDecoded(acts, q, gen, m, job, err), n)
}

func (c rewritten) HandlerDecided(acts []simAction, id workercore.ID, dec settle.Decision, publish bool) []simAction {
	n := len(acts)
	return c.rewrite(c.simCore.HandlerDecided(acts, id, dec, publish), n)
}

func (c rewritten) HandlerAbandoned(acts []simAction, id workercore.ID, dec settle.Decision, publish bool) []simAction {
	n := len(acts)
	return c.rewrite(c.simCore.HandlerAbandoned(acts, id, dec, publish), n)
}

func (c rewritten) Published(acts []simAction, id workercore.ID, err error) []simAction {
	n := len(acts)
	return c.rewrite(c.simCore.Published(acts, id, err), n)
}

func (c rewritten) TimerFired(acts []simAction, id workercore.ID) []simAction {
	n := len(acts)
	return c.rewrite(c.simCore.TimerFired(acts, id), n)
}

func (c rewritten) ConnectionLost(acts []simAction, gen workercore.Gen) []simAction {
	n := len(acts)
	return c.rewrite(c.simCore.ConnectionLost(acts, gen), n)
}

func (c rewritten) Stop(acts []simAction) []simAction {
	n := len(acts)
	return c.rewrite(c.simCore.Stop(acts), n)
}

// ackFirst acknowledges a delivery as its successor's publish starts, not
// once the broker has confirmed it; the core's own acknowledgement of it
// later is dropped.
func ackFirst(core simCore) simCore {
	early := map[workercore.ID]bool{}
	return rewritten{core, func(acts []simAction, from int) []simAction {
		for i := from; i < len(acts); i++ {
			a := acts[i]
			switch {
			case a.Kind == workercore.Publish && !a.Malformed:
				ack := a
				ack.Kind = workercore.Ack
				early[a.ID] = true
				acts = slices.Insert(acts, i, ack)
				i++
			case a.Kind == workercore.Ack && early[a.ID]:
				delete(early, a.ID)
				acts = slices.Delete(acts, i, i+1)
				i--
			}
		}
		return acts
	}}
}

// ackTwice asks for every acknowledgement twice, which the consumer's
// settle-once guard must refuse.
func ackTwice(core simCore) simCore {
	return rewritten{core, func(acts []simAction, from int) []simAction {
		for i := from; i < len(acts); i++ {
			if acts[i].Kind == workercore.Ack {
				acts = slices.Insert(acts, i+1, acts[i])
				i++
			}
		}
		return acts
	}}
}

// ignoreTimeout runs handlers without their queue's timeout: none is
// timed out or abandoned.
func ignoreTimeout(core simCore) simCore {
	return rewritten{core, func(acts []simAction, from int) []simAction {
		for i := from; i < len(acts); i++ {
			if acts[i].Kind == workercore.RunHandler {
				acts[i].Delay = 0
			}
		}
		return acts
	}}
}

// settleStale never hears that a connection is gone, so it settles a
// delivery of a dropped connection as if it were not: it publishes the
// job's successor beside the copy the broker requeued.
func settleStale(core simCore) simCore { return deaf{core} }

type deaf struct{ simCore }

func (deaf) ConnectionLost(acts []simAction, _ workercore.Gen) []simAction { return acts }

// With a worker core that ignores its handlers' timeout (ignoreTimeout),
// long handlers outlast the broker's consumer timeout, the broker takes
// their jobs back, and invariant 11 (no job runs more than its attempts
// allow) fires. Not only in longJobs: among random scenarios of long
// handlers on both profiles and queue types, drawn from a fixed seed, it
// fires in 5 of 12 (never on 4.3's classic queues, which have no consumer
// timeout at all: docs/consumer-timeout.md), and the product's core
// passes every one of them.
func TestInvariant11CatchesAWorkerIgnoringItsTimeout(t *testing.T) {
	rnd := rand.New(rand.NewPCG(41, 11))
	caught := 0
	const scenarios = 12
	for i := range scenarios {
		s := Scenario{
			Name: "long handlers", Seed: rnd.Uint64(), Duration: dur(time.Duration(30+rnd.IntN(90)) * time.Second), Drain: dur(10 * time.Minute),
			Profile: []string{"RabbitMQ40", "RabbitMQ43"}[rnd.IntN(2)],
			Queues: []Queue{{
				Type: []string{"classic", "quorum"}[rnd.IntN(2)], Workers: 1 + rnd.IntN(3), Prefetch: 1 + rnd.IntN(5),
				Timeout:  dur(time.Duration(1+rnd.IntN(5)) * time.Second),
				Retry:    Retry{Base: dur(time.Second), Cap: dur(10 * time.Second), MaxAttempts: 2 + rnd.IntN(3)},
				Arrivals: []Arrival{{Process: ArrivalPoisson, Rate: 0.5 + 4*rnd.Float64()}},
				Outcome: Outcome{
					Retryable: 0.2 * rnd.Float64(), IgnoreContext: 1,
					Handler: Dist{Dist: DistPareto, Mean: dur(time.Duration(60+rnd.IntN(120)) * time.Second), Alpha: 1.1},
				},
			}},
		}
		res, _ := run(t, s, Options{NoExcerpts: true})
		requireNoViolations(t, res)
		broken, _ := run(t, s, Options{NoExcerpts: true, wrapCore: ignoreTimeout})
		if broken.ViolationsByInvariant[int(invAttemptsBounded)] > 0 {
			caught++
		}
		t.Logf("scenario %d (%s, %s): %d violations of invariant 11 with the timeout ignored", i, s.Profile, s.Queues[0].Type, broken.ViolationsByInvariant[int(invAttemptsBounded)])
	}
	if caught < scenarios/4 {
		t.Fatalf("invariant 11 caught the worker ignoring its timeout in %d of %d scenarios, want at least a quarter", caught, scenarios)
	}
}

// withoutSAC declares a scheduler group's election queue without single
// active consumer: every process then gets tokens, and leads.
func withoutSAC(ch rabbitmq.Channel) rabbitmq.Channel { return noSACChannel{ch} }

type noSACChannel struct{ rabbitmq.Channel }

func (c noSACChannel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	if strings.HasPrefix(name, "queuey.scheduler.") {
		args = maps.Clone(args)
		delete(args, "x-single-active-consumer")
	}
	return c.Channel.QueueDeclare(name, durable, autoDelete, exclusive, noWait, args)
}

// oldExpires declares hold queues with seed 000's x-expires, twice the
// TTL, whatever the backend asks: the rule issue 11 replaced.
func oldExpires(ch rabbitmq.Channel) rabbitmq.Channel { return oldExpiresChannel{ch} }

type oldExpiresChannel struct{ rabbitmq.Channel }

func (c oldExpiresChannel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	if ttl, ok := args["x-message-ttl"].(int64); ok && args["x-expires"] != nil {
		args = maps.Clone(args)
		args["x-expires"] = 2 * ttl
	}
	return c.Channel.QueueDeclare(name, durable, autoDelete, exclusive, noWait, args)
}

// publishing wraps the backend the workers publish successors and dead
// letters through, and changes each publish or dead letter as change
// says; a false keep drops it, unpublished.
type publishing struct {
	queuey.Backend
	change     func(env *queuey.Envelope, hold *time.Duration, kind queuey.HoldKind) (keep bool)
	deadLetter func(reason string) string
}

func (b publishing) Publish(ctx context.Context, env queuey.Envelope, hold time.Duration, kind queuey.HoldKind) error {
	if b.change != nil && !b.change(&env, &hold, kind) {
		return nil
	}
	return b.Backend.Publish(ctx, env, hold, kind)
}

func (b publishing) DeadLetter(ctx context.Context, queue string, body []byte, reason string, attempts int) error {
	if b.deadLetter != nil {
		reason = b.deadLetter(reason)
	}
	return b.Backend.DeadLetter(ctx, queue, body, reason, attempts)
}

// holdsEarly publishes every hold for a quarter of the delay decided.
func holdsEarly(b queuey.Backend) queuey.Backend {
	return publishing{Backend: b, change: func(_ *queuey.Envelope, hold *time.Duration, _ queuey.HoldKind) bool {
		*hold /= 4
		return true
	}}
}

// deferralSpendsAttempt counts an attempt in a deferral's successor.
func deferralSpendsAttempt(b queuey.Backend) queuey.Backend {
	return publishing{Backend: b, change: func(env *queuey.Envelope, _ *time.Duration, kind queuey.HoldKind) bool {
		if kind == queuey.HoldDeferred {
			env.Attempt++
		}
		return true
	}}
}

// deferralAtPriority0 brings a deferral back at priority 0.
func deferralAtPriority0(b queuey.Backend) queuey.Backend {
	return publishing{Backend: b, change: func(env *queuey.Envelope, _ *time.Duration, kind queuey.HoldKind) bool {
		if kind == queuey.HoldDeferred {
			env.Priority = 0
		}
		return true
	}}
}

// retryLost never publishes a retry's successor, and says it did.
func retryLost(b queuey.Backend) queuey.Backend {
	return publishing{Backend: b, change: func(_ *queuey.Envelope, _ *time.Duration, kind queuey.HoldKind) bool {
		return kind != queuey.HoldRetry
	}}
}

// wrongReason dead-letters with a reason nobody decided, but for a
// malformed body.
func wrongReason(b queuey.Backend) queuey.Backend {
	return publishing{Backend: b, deadLetter: func(reason string) string {
		if reason == queuey.ReasonMalformed {
			return reason
		}
		return "a reason nobody decided"
	}}
}

// offerOnce wraps a scheduler process's core so that, while it does not
// lead, it offers a token at its start only: its later offers are taken
// as published, and dropped. A group whose tokens a kill lost then never
// elects again.
func offerOnce(core schedcore.Stepper) schedcore.Stepper { return &oneOffer{Stepper: core} }

type oneOffer struct {
	schedcore.Stepper
	offered bool
}

func (c *oneOffer) filter(acts []schedcore.Action, now time.Time) []schedcore.Action {
	for i := 0; i < len(acts); i++ {
		if acts[i].Kind != schedcore.PublishToken || c.Stepper.Leading() {
			continue
		}
		if !c.offered {
			c.offered = true
			continue
		}
		acts = append(slices.Delete(acts, i, i+1), c.Stepper.Done(nil, now)...)
		i--
	}
	return acts
}

func (c *oneOffer) Start(now time.Time) []schedcore.Action {
	return c.filter(c.Stepper.Start(now), now)
}

func (c *oneOffer) Token(ref schedcore.TokenRef, body []byte, now time.Time) []schedcore.Action {
	return c.filter(c.Stepper.Token(ref, body, now), now)
}

func (c *oneOffer) Lost(gen uint64, now time.Time) []schedcore.Action {
	return c.filter(c.Stepper.Lost(gen, now), now)
}

func (c *oneOffer) Time(now time.Time) []schedcore.Action { return c.filter(c.Stepper.Time(now), now) }

func (c *oneOffer) Done(err error, now time.Time) []schedcore.Action {
	return c.filter(c.Stepper.Done(err, now), now)
}

// neverResume is the subscriptions' core without resubscription: it takes
// every channel that closes for a consumer the broker cancelled, so the
// subscription ends where a supervised one resumes.
func neverResume(f consume.Follower) consume.Follower { return unresumed{f} }

type unresumed struct{ consume.Follower }

func (u unresumed) Stopped(acts []consume.FollowAction, why error, ours, _ bool, gen uint64) []consume.FollowAction {
	return u.Follower.Stopped(acts, why, ours, false, gen)
}

// TestAWorkerResumesItsSubscriptionAfterADrop: a worker whose connection
// drops keeps its subscription and resumes it on the next connection,
// under its consumer tag and on the channel's next generation, as
// rabbitmq's supervised consumer does (consume.Follow); a worker that
// crashes starts afresh. Both keep every invariant.
func TestAWorkerResumesItsSubscriptionAfterADrop(t *testing.T) {
	res, trace := run(t, mixed("classic", "RabbitMQ40"), Options{})
	requireNoViolations(t, res)
	var drop, resumed, crashRestart bool
	for line := range strings.Lines(trace) {
		switch {
		case strings.Contains(line, " drop "):
			drop = true
		case strings.Contains(line, " restart ") && strings.Contains(line, "resumed jobs-w2-1 on channel 2"):
			resumed = true
		case strings.Contains(line, " restart ") && !strings.Contains(line, "resumed"):
			crashRestart = true
		}
	}
	if !drop || !resumed || !crashRestart {
		t.Fatalf("drop %v, resumed after it %v, a fresh start after the crash %v; trace restarts:\n%s",
			drop, resumed, crashRestart, grepLines(trace, " restart ", " drop "))
	}
}

func grepLines(s string, subs ...string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				b.WriteString(line)
				break
			}
		}
	}
	return b.String()
}

// dialStorm is the reconnection loop's core with its waits halved: each
// dial comes half the wait the core drew (and reports) too early.
func dialStorm(core redial.Stepper) redial.Stepper { return hasty{core} }

type hasty struct{ redial.Stepper }

func halve(acts []redial.Action) []redial.Action {
	for i := range acts {
		if acts[i].Kind == redial.Wait {
			acts[i].Delay /= 2
		}
	}
	return acts
}

func (h hasty) Start() []redial.Action { return halve(h.Stepper.Start()) }
func (h hasty) DialDone(err error, fatal bool) []redial.Action {
	return halve(h.Stepper.DialDone(err, fatal))
}
func (h hasty) TimerFired() []redial.Action    { return halve(h.Stepper.TimerFired()) }
func (h hasty) Lost(err error) []redial.Action { return halve(h.Stepper.Lost(err)) }

// strayHolds declares, beside each classic hold queue the backend
// declares, ten more of longer TTLs (the name's TTL with a digit after
// it), as a backend that rounded nothing would: hold queues past the
// bound the granularities allow.
func strayHolds(ch rabbitmq.Channel) rabbitmq.Channel { return strayHoldChannel{ch} }

type strayHoldChannel struct{ rabbitmq.Channel }

func (c strayHoldChannel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args amqp.Table) (amqp.Queue, error) {
	q, err := c.Channel.QueueDeclare(name, durable, autoDelete, exclusive, noWait, args)
	ttl, isHold := args["x-message-ttl"].(int64)
	if err != nil || !isHold || !strings.HasSuffix(name, "."+strconv.FormatInt(ttl, 10)) {
		return q, err
	}
	for d := range int64(10) {
		stray := maps.Clone(args)
		stray["x-message-ttl"] = ttl*10 + d
		if _, err := c.Channel.QueueDeclare(name+strconv.FormatInt(d, 10), durable, autoDelete, exclusive, noWait, stray); err != nil {
			return q, err
		}
	}
	return q, nil
}
