// The workers' subscriptions: a process subscribes when it starts, and
// when its connection goes, each subscription follows its channel's end
// as the product's core decides (consume.Follow) and resumes as the
// process reconnects.

package sim

import (
	"errors"
	"fmt"

	"github.com/queuey/queuey/internal/acktimeout"
	"github.com/queuey/queuey/internal/consume"
	"github.com/queuey/queuey/internal/relay"
	"github.com/queuey/queuey/internal/workercore"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// subscribe subscribes a process that has just started to its queue, and
// to the ladder's relay queue with a hold ladder, as rabbitmq's
// Backend.Consume does: each on a channel of its own, through the
// consumer's core (consume.Open: Qos(prefetch), manual acknowledgements),
// with the consumer timeout queuey asks for (acktimeout.ConsumeArgs), the
// relay at relay.Prefetch. They are stepped here without the backend's
// forwarding goroutine: membroker hands deliveries over before its calls
// return, so the simulation takes them straight off the channel, on its
// one goroutine, without a thread handoff per message.
func (r *runner) subscribe(w *worker, open func() (rabbitmq.Channel, error)) error {
	w.tags++
	tag := fmt.Sprintf("%s-w%d-%d", w.q.spec.Name, w.idx, w.tags)
	sub := &subscription{w: w, tag: tag, back: w.back}
	r.subs[tag] = sub // before subscribing, which may deliver at once
	work, err := subscribeOn(open, w.q.spec.Name, tag, w.q.cfg.Prefetch, acktimeout.ConsumeArgs(w.q.cfg.WithDefaults()))
	if err != nil {
		return fmt.Errorf("sim: worker consume: %w", err)
	}
	w.work = work
	sub.attach(work)
	w.core.ConnectionUp(sub.gen)
	w.sub = sub
	if r.top.ClassicHolds {
		return nil
	}
	rsub := &subscription{w: w, tag: tag + "-relay", back: w.back, relay: true}
	r.subs[rsub.tag] = rsub
	if w.relayWork, err = subscribeOn(open, r.relayName, rsub.tag, relay.Prefetch, nil); err != nil {
		return fmt.Errorf("sim: worker consume: the ladder's relay queue: %w", err)
	}
	rsub.attach(w.relayWork)
	w.relaySub = rsub
	return nil
}

// subscribeOn subscribes to queue on a fresh channel.
func subscribeOn(open func() (rabbitmq.Channel, error), queue, tag string, prefetch int, args amqp.Table) (*consume.Sub, error) {
	ch, err := open()
	if err != nil {
		return nil, err
	}
	sub, err := consume.Open(ch, queue, tag, prefetch, args)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("consume queue %q: %w", queue, err)
	}
	return sub, nil
}

// resume carries out, for a process that reconnected, the Reopen its
// subscriptions' core asked for when the connection went (followLoss):
// each resumes on a fresh channel of the new connection under its
// consumer tag, as rabbitmq's supervised consumer does, and its core says
// what follows. A subscription whose core asked for no Reopen stays
// without a channel; invariant 13 is there to notice.
func (r *runner) resume(w *worker, open func() (rabbitmq.Channel, error)) error {
	for _, relayed := range []bool{false, true} {
		kept, want := w.work, w.reopenWork
		if relayed {
			kept, want = w.relayWork, w.reopenRelay
		}
		if kept == nil || !want {
			continue
		}
		ch, err := open()
		if err != nil {
			return fmt.Errorf("sim: worker resume: %w", err)
		}
		sub := &subscription{w: w, tag: kept.Tag(), back: w.back, relay: relayed}
		r.subs[sub.tag] = sub // before resuming, which may deliver at once
		gen, err := kept.Resume(ch)
		var buf [2]consume.FollowAction
		for _, a := range r.follow.Resumed(buf[:0], gen, err, false, err != nil) {
			switch a.Kind {
			case consume.Live:
				sub.attach(kept)
				if relayed {
					w.reopenRelay, w.relaySub = false, sub
				} else {
					w.reopenWork, w.sub = false, sub
					w.core.ConnectionUp(sub.gen)
				}
			case consume.End:
				return fmt.Errorf("sim: worker resume on %s: %w", kept.Tag(), a.Err)
			case consume.CancelTag, consume.Reopen:
				return fmt.Errorf("sim: worker resume on %s: its core asked for %s", kept.Tag(), a.Kind)
			}
		}
	}
	return nil
}

// followLoss carries out, for a worker's subscription whose connection
// the broker closed, what the subscription's core decides, as rabbitmq's
// supervised consumer does: the process's core hears of the lost channel
// as the process reconnects, as Worker.Run's hears late from its
// consumers (a handler that returns meanwhile finds its delivery stale,
// internal/execute), and the subscription resumes then (resume).
func (r *runner) followLoss(w *worker, sub *subscription) {
	if sub == nil {
		return // it never resumed after an earlier loss
	}
	sub.dead = true
	var buf [3]consume.FollowAction
	for _, a := range r.follow.Stopped(buf[:0], errConnectionClosed, false, true, uint64(sub.gen)) {
		switch a.Kind {
		case consume.Lost:
			if !sub.relay {
				w.lost = append(w.lost, workercore.Gen(a.Gen))
			}
		case consume.Reopen:
			if sub.relay {
				w.reopenRelay = true
			} else {
				w.reopenWork = true
			}
		}
	}
}

// errConnectionClosed is what a worker's subscription reads when the
// broker closes its connection.
var errConnectionClosed = errors.New("sim: the broker closed the connection")
