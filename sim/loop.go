package sim

// The event loop: virtual time moves from one timer to the next, and the
// deliveries the broker handed over are taken after each step.

import (
	"errors"
	"fmt"
	"time"

	"github.com/queuey/queuey/internal/consume"
)

// ErrLivelock is wrapped by Run's error when virtual time stops moving:
// 131,072 events at one instant. The scenario, not the simulator, is at
// fault: a job deferred for 0 on every run by a handler that takes no time
// has no next instant.
var ErrLivelock = errors.New("sim: livelock")

// maxStepsAtOneInstant is how many events may fire without virtual time
// moving before Run gives up: a job deferred for 0 by a handler that takes
// no time would otherwise spin at one instant for ever.
const maxStepsAtOneInstant = 1 << 17

// loop fires events in virtual-time order until the run's end.
func (r *runner) loop() error {
	total := r.stop.Sub(Start)
	var lastAt time.Duration
	still := 0
	r.pump() // what the processes' start handed over
	for r.fatal == nil {
		at, ok := r.clk.Next()
		if !ok || at.After(r.stop) {
			break
		}
		r.clk.Step()
		r.pump()
		r.steps++
		if now := r.clk.Elapsed(); now != lastAt {
			lastAt, still = now, 0
		} else if still++; still > maxStepsAtOneInstant {
			return fmt.Errorf("%w: %d events fired at virtual time %s without time moving (a handler that takes no time deferring for 0?)",
				ErrLivelock, still, appendVirtual(nil, now))
		}
		if r.steps&0x3ff == 0 {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			if r.opts.Progress != nil && r.steps&0xffff == 0 {
				r.opts.Progress(r.clk.Now().Sub(Start), total)
			}
		}
	}
	if r.fatal != nil {
		return r.fatal
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if r.clk.Now().Before(r.stop) {
		r.clk.RunUntil(r.stop)
	}
	if r.opts.Progress != nil {
		r.opts.Progress(total, total)
	}
	return nil
}

// pump takes every delivery the broker has handed to a worker and drains
// the dead-letter audits. membroker never blocks and hands over what it
// delivers before its call returns, so taking what is on the channels now
// is deterministic.
func (r *runner) pump() {
	for len(r.ready) > 0 || r.auditDue || (r.per != nil && len(r.per.ready)+len(r.per.arrived) > 0) {
		if r.per != nil {
			r.pumpPeriodic()
		}
		// Taking a delivery can make more ready: the loop reads the
		// length afresh, and the slice keeps its storage.
		for i := 0; i < len(r.ready); i++ {
			sub := r.ready[i]
			r.ready[i] = nil
			for sub.pending > 0 {
				sub.pending--
				if sub.relay {
					var d consume.Delivery
					if !receiveNow(&d.D, sub.in) {
						sub.pending = 0 // the broker took them back with the channel
						break
					}
					sub.core.Take(&d, uint64(sub.gen))
					r.relayOne(sub, &d)
					continue
				}
				sd := r.newDelivery()
				if !receiveNow(&sd.cd.D, sub.in) {
					r.recycle(sd)
					if sub.dead || sub.ch.IsClosed() {
						sub.pending = 0 // the broker took them back with the channel
						break
					}
					r.failf("consumer %s: a delivery the broker reported is not on its channel", sub.tag)
					return
				}
				sub.core.Take(&sd.cd, uint64(sub.gen))
				r.begin(sub.w, sub, sd)
			}
		}
		r.ready = r.ready[:0]
		if r.auditDue {
			r.auditDue = false
			for _, q := range r.queues {
				r.audit(q)
			}
		}
	}
}
