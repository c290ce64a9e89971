package properties

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/sim"
)

// TestBackendStateMachine drives rabbitmq.Backend on membroker directly,
// one call at a time under sim's virtual clock (not through sim.Run), with
// random sequences of actions: enqueue (Publish without a hold), enqueue
// after a delay (Publish with a hold, HoldDeferred), deliver (read a
// worker's raw consumer channel, set up with Qos and manual
// acknowledgements, without blocking), a handler's outcome for a job in
// hand (success and ack; retry, deferral or fatal failure through
// settle.Decide and settle.PublishSuccessor, then ack; requeue with
// basic.reject), advancing virtual time (by a step, or to a held job's due
// time give or take a millisecond), crashing a worker (the broker closes
// its connection) and restarting it, dropping a worker's connection while
// its handlers run on (their late settlements must fail), restarting the
// broker, squatting a hold queue's name (holds into it must be refused
// and leave the job where it was) and auditing the dead-letter queue. It
// runs classic holds (rabbitmq.Topology.ClassicHolds), one hold queue per
// TTL; the default ladder is checked through sim.Run by
// TestScenarioProperties. The queue is classic or quorum, on either broker profile, with any
// granularities and retry policy, 1–3 workers at prefetch 1–5.
//
// After every action, and at every report the broker makes, it checks
// against a model of where each job must be:
//
//   - nothing is lost or duplicated: the work queue's ready and
//     unacknowledged counts, each hold queue's and the dead-letter queue's
//     are the model's, each worker holds what the broker says it handed
//     it, and a publish that returned nil reached the queue it must;
//   - nothing held is delivered before its due time, and a held job is
//     back on the work queue within a millisecond of its publish time
//     plus its rounded TTL (and is never still held later than that);
//   - Decide and the envelopes delivered agree with the model: a deferral
//     keeps the attempt number and counts a deferral, a retry spends one
//     attempt, priorities are 0 for retries and the queue's top for
//     deferrals, and the enqueue time never changes;
//   - dead letters land in the dead-letter queue, in order, with the
//     reason, original queue and attempts; past a quorum queue's delivery
//     limit the broker dead-letters the job itself;
//   - deliveries respect prefetch and, on a classic queue, come by
//     priority, then by position (a returned job keeping its place); no
//     worker with room idles while jobs wait.
func TestBackendStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newMachine(t, machineConfigGen().Draw(t, "config"))
		t.Cleanup(m.close)
		// Four rounds of rapid's default 30 steps on average: enough for
		// jobs to go round holds, crashes and redeliveries several times.
		for range 4 {
			t.Repeat(m.actions())
		}
	})
}

var (
	granularityGen = rapid.SampledFrom([]time.Duration{time.Second, time.Millisecond, 7 * time.Millisecond,
		100 * time.Millisecond, 250 * time.Millisecond, 3 * time.Second})
	// delayGen draws Retry-Afters and EnqueueAfter delays: values at the
	// edges of the granularities, or any whole millisecond up to 20 s.
	delayGen = rapid.OneOf(
		rapid.SampledFrom([]time.Duration{0, time.Nanosecond, time.Millisecond, 999 * time.Millisecond, time.Second,
			time.Second + time.Nanosecond, 1001 * time.Millisecond, 2500 * time.Millisecond}),
		rapid.Map(rapid.IntRange(0, 20_000), func(n int) time.Duration { return time.Duration(n) * time.Millisecond }),
	)
	advanceGen = rapid.OneOf(
		rapid.SampledFrom([]time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 5 * time.Second}),
		rapid.Map(rapid.IntRange(1, 30_000), func(n int) time.Duration { return time.Duration(n) * time.Millisecond }),
	)
	priorityGen = rapid.Map(rapid.IntRange(0, 12), func(n int) uint8 { return uint8(n) })
	jitterGen   = rapid.Map(rapid.IntRange(0, 999), func(n int) float64 { return float64(n) / 1000 })
)

func machineConfigGen() *rapid.Generator[machineConfig] {
	return rapid.Custom(func(t *rapid.T) machineConfig {
		c := machineConfig{
			Quorum:    rapid.Bool().Draw(t, "quorum"),
			Profile:   rapid.SampledFrom([]membroker.Version{membroker.RabbitMQ40, membroker.RabbitMQ43}).Draw(t, "profile"),
			RetryG:    granularityGen.Draw(t, "retry_granularity"),
			DeferredG: granularityGen.Draw(t, "deferred_granularity"),
			Workers:   rapid.IntRange(1, 3).Draw(t, "workers"),
			Prefetch:  rapid.IntRange(1, 5).Draw(t, "prefetch"),
		}
		if !c.Quorum {
			c.MaxPriority = rapid.SampledFrom([]uint8{10, 0, 1, 255}).Draw(t, "max_priority")
		}
		base := rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}).Draw(t, "retry_base")
		c.Retry = queuey.RetryPolicy{
			Base:        base,
			Cap:         base * time.Duration(rapid.SampledFrom([]int{1, 4, 16}).Draw(t, "retry_cap_factor")),
			MaxAttempts: rapid.SampledFrom([]int{3, 1, 2, 10, -1}).Draw(t, "max_attempts"),
			Jitter:      rapid.SampledFrom([]queuey.Jitter{queuey.FullJitter, queuey.EqualJitter, queuey.NoJitter}).Draw(t, "jitter"),
		}
		return c
	})
}

// actions are the machine's actions for rapid's Repeat; "" is the check
// run after each.
func (m *machine) actions() map[string]func(*rapid.T) {
	settle := func(o outcome) func(*rapid.T) {
		return func(t *rapid.T) {
			j := m.pick(t, "job", func(j *job) bool { return j.state == stInHand && !j.ran })
			var delay time.Duration
			if o == deferral {
				delay = delayGen.Draw(t, "retry_after")
			}
			u := jitterGen.Draw(t, "jitter_draw")
			t.Logf("at %s: %s job %s (attempt %d, %d deferrals) at worker %d", m.now(), o, j.id, j.attempt, j.deferrals, j.worker.idx)
			m.settle(t, j, o, delay, u)
		}
	}
	return map[string]func(*rapid.T){
		"enqueue": func(t *rapid.T) {
			m.enqueue(t, priorityGen.Draw(t, "priority"))
		},
		"enqueueAfter": func(t *rapid.T) {
			m.enqueueAfter(t, delayGen.Draw(t, "hold"), priorityGen.Draw(t, "priority"))
		},
		"deliver": func(t *rapid.T) {
			w := m.pickWorker(t, func(w *worker) bool { return w.up && len(w.unread) > 0 })
			n := rapid.IntRange(1, len(w.unread)+1).Draw(t, "reads")
			t.Logf("at %s: worker %d reads %d of the %d deliveries handed to it", m.now(), w.idx, n, len(w.unread))
			m.deliver(t, w, n)
		},
		"succeed": settle(succeed),
		"retry":   settle(retry),
		"defer":   settle(deferral),
		"fatal":   settle(fatal),
		"requeue": settle(requeue),
		"advance": func(t *rapid.T) {
			d := advanceGen.Draw(t, "by")
			t.Logf("at %s: advance %s", m.now(), d)
			m.advance(d)
		},
		"advanceToDue": func(t *rapid.T) {
			j := m.pick(t, "held_job", func(j *job) bool { return j.state == stHeld })
			off := rapid.SampledFrom([]time.Duration{0, -time.Millisecond, time.Millisecond}).Draw(t, "offset")
			t.Logf("at %s: advance to %s, job %s's due time %+v", m.now(), j.due.Add(off).Sub(sim.Start), j.id, off)
			m.clk.RunUntil(j.due.Add(off))
		},
		"crash": func(t *rapid.T) {
			w := m.pickWorker(t, func(w *worker) bool { return w.up })
			t.Logf("at %s: worker %d crashes", m.now(), w.idx)
			m.crash(t, w)
		},
		"restart": func(t *rapid.T) {
			w := m.pickWorker(t, func(w *worker) bool { return !w.up })
			t.Logf("at %s: worker %d restarts", m.now(), w.idx)
			m.start(t, w)
		},
		"drop": func(t *rapid.T) {
			w := m.pickWorker(t, func(w *worker) bool { return w.up })
			t.Logf("at %s: the broker drops worker %d's connection", m.now(), w.idx)
			m.drop(t, w)
		},
		"lateSettle": func(t *rapid.T) {
			w := m.pickWorker(t, func(w *worker) bool { return len(w.stale) > 0 })
			s := w.stale[rapid.IntRange(0, len(w.stale)-1).Draw(t, "stale")]
			o := rapid.SampledFrom([]outcome{succeed, retry, deferral, fatal, requeue}).Draw(t, "outcome")
			delay := delayGen.Draw(t, "retry_after")
			t.Logf("at %s: worker %d's handler of job %s finishes (%s) after its connection went", m.now(), w.idx, s.j.id, o)
			m.lateSettle(t, w, s, o, delay, jitterGen.Draw(t, "jitter_draw"))
		},
		"restartBroker": func(t *rapid.T) {
			t.Logf("at %s: the broker restarts", m.now())
			m.restartBroker(t)
		},
		"squat": func(t *rapid.T) {
			ttls := m.likelyTTLs()
			ttl := ttls[rapid.IntRange(0, len(ttls)-1).Draw(t, "ttl")]
			t.Logf("at %s: someone declares %s with other arguments", m.now(), destination(ttl))
			m.squatTTL(t, ttl)
		},
		"unsquat": func(t *rapid.T) {
			names := slices.Sorted(maps.Keys(m.squat))
			if len(names) == 0 {
				t.Skip("no squatter")
			}
			name := names[rapid.IntRange(0, len(names)-1).Draw(t, "squatter")]
			t.Logf("at %s: the squatter %s goes", m.now(), name)
			m.unsquat(t, name)
		},
		"audit": func(t *rapid.T) {
			t.Logf("at %s: audit %s (%d dead letters)", m.now(), deadQueue, len(m.dead))
			m.audit(t)
		},
		"": func(t *rapid.T) { m.check(t) },
	}
}

// likelyTTLs are hold TTLs the machine's holds often use, for squatters.
func (m *machine) likelyTTLs() []time.Duration {
	var out []time.Duration
	for _, d := range []time.Duration{time.Millisecond, 999 * time.Millisecond, time.Second, 2500 * time.Millisecond, m.cfg.Retry.Base, m.cfg.Retry.Cap} {
		for _, g := range []time.Duration{m.cfg.RetryG, m.cfg.DeferredG} {
			if ttl := holdTTL(d, g); !slices.Contains(out, ttl) {
				out = append(out, ttl)
			}
		}
	}
	return out
}

// pick draws one of the jobs that satisfy ok, or skips the action.
func (m *machine) pick(t *rapid.T, label string, ok func(*job) bool) *job {
	return pickOne(t, label, "no such job", m.all, ok)
}

// pickWorker draws one of the workers that satisfy ok, or skips the action.
func (m *machine) pickWorker(t *rapid.T, ok func(*worker) bool) *worker {
	return pickOne(t, "worker", "no such worker", m.workers, ok)
}

// pickOne draws one of the items that satisfy ok, or skips the action with
// none.
func pickOne[T any](t *rapid.T, label, none string, items []T, ok func(T) bool) T {
	var fit []T
	for _, x := range items {
		if ok(x) {
			fit = append(fit, x)
		}
	}
	if len(fit) == 0 {
		t.Skip(none)
	}
	return fit[rapid.IntRange(0, len(fit)-1).Draw(t, label)]
}

// --- the checks bite ---------------------------------------------------------

// classic is a machine config for the scripted tests: one classic worker
// at prefetch 2, 1 s granularities, retries after exactly 1 s.
var classic = machineConfig{
	Profile: membroker.RabbitMQ40, MaxPriority: 10, RetryG: time.Second, DeferredG: time.Second,
	Retry:   queuey.RetryPolicy{Base: time.Second, Cap: time.Second, MaxAttempts: 3, Jitter: queuey.NoJitter},
	Workers: 1, Prefetch: 2,
}

// script runs steps on a fresh machine, checking after each as rapid
// does.
func script(cfg machineConfig, sab sabotage, steps ...func(rapid.TB, *machine)) func(rapid.TB) {
	return func(t rapid.TB) {
		m := newMachine(t, cfg)
		defer m.close()
		m.setSabotage(sab)
		for _, step := range steps {
			step(t, m)
			m.check(t)
		}
	}
}

func enqueue(t rapid.TB, m *machine) { m.enqueue(t, 0) }
func readAll(t rapid.TB, m *machine) { m.deliver(t, m.workers[0], 10) }
func firstInHand(m *machine) *job {
	for _, j := range m.all {
		if j.state == stInHand && !j.ran {
			return j
		}
	}
	panic("no job in hand whose handler runs")
}
func settleWith(o outcome, delay time.Duration) func(rapid.TB, *machine) {
	return func(t rapid.TB, m *machine) { m.settle(t, firstInHand(m), o, delay, 0.5) }
}
func advance(d time.Duration) func(rapid.TB, *machine) {
	return func(_ rapid.TB, m *machine) { m.advance(d) }
}

// TestBackendStateMachineChecksBite runs short scripts of the machine's
// actions against a deliberately broken settlement path (a lost retry, a
// deferral that spends an attempt, a hold shorter than its delay, a dead
// letter with the wrong reason), with the broker's state tampered with
// behind the model's back (a hold queue purged or deleted, a consumer
// cancelled), or feeding the model a report a correct broker never makes
// (a job handed out twice or out of priority order, a hold released early
// or late, or never), and requires the machine's checks to report each
// with the expected message. The scripts with a sabotaged settlement path
// pass without it.
func TestBackendStateMachineChecksBite(t *testing.T) {
	for _, c := range []struct {
		name  string
		sab   sabotage
		steps []func(rapid.TB, *machine)
		want  string
	}{
		{"a lost retry", sabLoseRetry,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(retry, 0)},
			"returned nil, but it never reached jobs.deferred.1000"},
		{"a deferral that spends an attempt", sabDeferSpendsAttempt,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(deferral, 2*time.Second), advance(2 * time.Second), readAll},
			"arrived as attempt 2 with 1 deferrals, want attempt 1 with 1"},
		{"a hold shorter than its delay", sabShortHold,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(deferral, 4*time.Second)},
			"entered jobs.deferred.1000"},
		{"a dead letter with the wrong reason", sabWrongReason,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(fatal, 0), func(t rapid.TB, m *machine) { m.audit(t) }},
			`dead letter says reason "a reason nobody decided"`},
		// The worker core's own settlement, as Worker.Run runs it.
		{"an ack before the successor is confirmed", sabAckFirst,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(retry, 0)},
			"acknowledged job j1 before its retry successor was confirmed"},
		{"a pre-drop delivery settled on the new connection", sabSettleStale,
			[]func(rapid.TB, *machine){enqueue, readAll,
				func(t rapid.TB, m *machine) { m.drop(t, m.workers[0]) },
				func(t rapid.TB, m *machine) { m.start(t, m.workers[0]) },
				func(t rapid.TB, m *machine) {
					w := m.workers[0]
					m.lateSettle(t, w, w.stale[0], retry, 0, 0.5)
				}},
			"worker 0's core settled job j1 (retry) after its connection went: [publish start-timer]"},
		{"a hold purged behind the model's back", sabNone,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(deferral, time.Second), func(t rapid.TB, m *machine) {
				if _, err := m.admin.QueuePurge("jobs.deferred.1000", false); err != nil {
					t.Fatal(err)
				}
			}},
			"jobs.deferred.1000 has 0 ready and 0 unacknowledged; the model holds 1 there"},
		{"a hold queue deleted with its job", sabNone,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(retry, 0), func(t rapid.TB, m *machine) {
				if _, err := m.admin.QueueDelete("jobs.deferred.1000", false, false, false); err != nil {
					t.Fatal(err)
				}
			}},
			"queue jobs.deferred.1000 went (deleted) with 1 messages in it"},
		{"a job the broker hands out twice", sabNone,
			[]func(rapid.TB, *machine){enqueue, func(t rapid.TB, m *machine) {
				j := m.all[0]
				m.observe(membroker.Event{Kind: membroker.EventDelivered, Queue: workQueue, MessageID: j.id, ConsumerTag: m.workers[0].tag})
			}},
			"job j1 was delivered while dispatched"},
		{"a lower priority served first", sabNone,
			[]func(rapid.TB, *machine){enqueue, enqueue, enqueue, func(t rapid.TB, m *machine) { m.enqueue(t, 5) }, func(t rapid.TB, m *machine) {
				// What the broker would report if it served j3 (priority 0)
				// ahead of j4 (priority 5).
				m.observe(membroker.Event{Kind: membroker.EventDelivered, Queue: workQueue, MessageID: "j3", ConsumerTag: m.workers[0].tag})
			}},
			"job j3 (priority 0, position 3) was delivered ahead of job j4 (priority 5, position 4)"},
		{"a worker idle while jobs wait", sabNone,
			[]func(rapid.TB, *machine){func(t rapid.TB, m *machine) {
				if err := m.workers[0].ch.Cancel(m.workers[0].tag, false); err != nil {
					t.Fatal(err)
				}
			}, enqueue},
			"worker 0 has 0 of 2 deliveries while 1 jobs wait on jobs"},
		{"a release before the due time", sabNone,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(deferral, 2*time.Second), advance(1500 * time.Millisecond), func(t rapid.TB, m *machine) {
				// What the broker would report if it expired the hold early.
				m.observe(membroker.Event{Kind: membroker.EventEnqueued, Queue: workQueue, MessageID: "j1", Priority: 10,
					DeadLetteredFrom: "jobs.deferred.2000", Reason: "expired"})
			}},
			"was released -500ms after its due time"},
		{"a release more than a millisecond late", sabNone,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(deferral, 2*time.Second), func(t rapid.TB, m *machine) {
				m.all[0].due = m.clk.Now().Add(-2 * time.Millisecond) // as if the hold had been due 2 ms ago
				m.observe(membroker.Event{Kind: membroker.EventEnqueued, Queue: workQueue, MessageID: "j1", Priority: 10,
					DeadLetteredFrom: "jobs.deferred.2000", Reason: "expired"})
			}},
			"was released 2ms after its due time"},
		{"a hold that is never released", sabNone,
			[]func(rapid.TB, *machine){enqueue, readAll, settleWith(deferral, 2*time.Second), func(t rapid.TB, m *machine) {
				m.all[0].due = m.clk.Now().Add(-2 * time.Millisecond) // as if the hold were 2 ms overdue
			}},
			"is still held in jobs.deferred.2000 2ms after its due time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := expectFailure(t, script(classic, c.sab, c.steps...))
			if !strings.Contains(out, c.want) {
				t.Fatalf("the checks failed, but not with %q:\n%s", c.want, out)
			}
			if c.sab != sabNone {
				// Without the sabotage, the same script passes.
				r := &recorder{name: t.Name()}
				r.run(script(classic, sabNone, c.steps...))
				if r.failed {
					t.Fatalf("the script fails without its sabotage too:\n%s", r.out.String())
				}
			}
		})
	}
}

// TestBackendStateMachineFindsALostRetry shows that the random state
// machine, not only a script, finds a broken settlement path: with
// retries' successors never published, rapid finds a failing sequence and
// shrinks it.
func TestBackendStateMachineFindsALostRetry(t *testing.T) {
	out := expectRapidFailure(t, func(t *rapid.T) {
		m := newMachine(t, machineConfigGen().Draw(t, "config"))
		t.Cleanup(m.close)
		m.setSabotage(sabLoseRetry)
		t.Repeat(m.actions())
	})
	// The lost successor shows as a publish that returned nil and reached
	// nothing, or, into a squatted hold queue, as one that was not refused.
	if !strings.Contains(out, "the retry successor of job") ||
		!(strings.Contains(out, "returned nil, but it never reached") || strings.Contains(out, "got <nil>, want a refused declaration")) {
		t.Fatalf("rapid failed, but not for the lost retry:\n%s", out)
	}
}

// TestBackendStateMachineScripts runs, under the machine's checks, paths
// random sequences rarely take in full: a quorum job returned until the
// broker dead-letters it for delivery_limit (on both profiles), and holds
// refused while someone else's queue has the hold queue's name, then
// working again once it is gone.
func TestBackendStateMachineScripts(t *testing.T) {
	requeueAll := func(t rapid.TB, m *machine) {
		readAll(t, m)
		for _, j := range m.all {
			if j.state == stInHand {
				m.settle(t, j, requeue, 0, 0)
			}
		}
		m.advance(queuey.DefaultRequeueDelay) // the core requeues it
	}
	for _, profile := range []membroker.Version{membroker.RabbitMQ40, membroker.RabbitMQ43} {
		t.Run("delivery limit/"+profile.String(), func(t *testing.T) {
			cfg := classic
			cfg.Quorum, cfg.MaxPriority, cfg.Profile = true, 0, profile
			steps := []func(rapid.TB, *machine){enqueue}
			for range deliveryLimit {
				steps = append(steps, requeueAll)
			}
			steps = append(steps,
				func(t rapid.TB, m *machine) {
					// One more return, through a crash this time: over the limit.
					readAll(t, m)
					m.crash(t, m.workers[0])
				},
				func(t rapid.TB, m *machine) {
					if j := m.all[0]; j.state != stDead || !j.deadByLimit || j.returns != deliveryLimit+1 {
						t.Fatalf("job %s is %s after %d returns", j.id, j.state, j.returns)
					}
					m.audit(t)
				})
			script(cfg, sabNone, steps...)(t)
		})
	}
	t.Run("refused holds", func(t *testing.T) {
		script(classic, sabNone,
			func(t rapid.TB, m *machine) { m.squatTTL(t, 2*time.Second) },
			enqueue, readAll,
			settleWith(deferral, 2*time.Second), // refused: the job stays in hand
			func(t rapid.TB, m *machine) {
				if j := m.all[0]; j.state != stInHand || j.deferrals != 0 {
					t.Fatalf("after a refused deferral job %s is %s with %d deferrals", j.id, j.state, j.deferrals)
				}
				m.enqueueAfter(t, 1500*time.Millisecond, 0) // refused too, through the producer
				if len(m.all) != 1 {
					t.Fatalf("a refused enqueue left a job in the model")
				}
			},
			advance(queuey.DefaultRequeueDelay-time.Millisecond),
			func(t rapid.TB, m *machine) {
				if j := m.all[0]; j.state != stInHand {
					t.Fatalf("job %s is %s before the requeue delay has passed", j.id, j.state)
				}
			},
			advance(time.Millisecond), // the core requeues it, and the broker hands it over again
			readAll,
			settleWith(deferral, time.Second), // another hold queue: accepted on a fresh hold channel
			func(t rapid.TB, m *machine) { m.unsquat(t, "jobs.deferred.2000") },
			advance(time.Second), readAll,
			settleWith(deferral, 2*time.Second), // accepted now
			func(t rapid.TB, m *machine) { m.enqueueAfter(t, 1500*time.Millisecond, 3) },
			advance(2*time.Second), readAll,
			func(t rapid.TB, m *machine) {
				for _, j := range m.all {
					if j.state != stInHand {
						t.Fatalf("job %s is %s, want in hand", j.id, j.state)
					}
				}
			},
		)(t)
	})
}
