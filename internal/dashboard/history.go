package dashboard

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/queuey/queuey/rabbitmq"
)

// sample is one queue's figures at one reading.
type sample struct {
	at                  time.Time
	backlog, held, dead int   // ready+unacked, in hold queues, dead letters
	enqueued, acked     int64 // cumulative, from the management API
}

// history keeps the overview's readings of the last keep, at most one
// per every, for its charts and rates. It has no clock and no goroutine:
// readings come from page loads.
type history struct {
	every, keep time.Duration
	queues      map[string][]sample
	last        time.Time
}

// add records a reading at now, unless the last was less than every
// ago, and forgets readings older than keep and queues that are gone.
func (h *history) add(now time.Time, stats []rabbitmq.QueueStats) {
	if !h.last.IsZero() && now.Sub(h.last) < h.every && !now.Before(h.last) {
		return
	}
	h.last = now
	seen := make(map[string]bool, len(stats))
	for _, st := range stats {
		seen[st.Queue] = true
		s := sample{at: now, backlog: st.Ready + st.Unacked, held: held(st), dead: st.Dead, enqueued: st.Enqueued, acked: st.Acked}
		old := h.queues[st.Queue]
		i := 0
		for i < len(old) && now.Sub(old[i].at) > h.keep {
			i++
		}
		h.queues[st.Queue] = append(old[i:], s)
	}
	for q := range h.queues {
		if !seen[q] {
			delete(h.queues, q)
		}
	}
}

func held(st rabbitmq.QueueStats) int {
	n := 0
	for _, h := range st.Holds {
		n += h.Messages
	}
	return n
}

// rateWindow is how far back a rate looks.
const rateWindow = time.Minute

// rates are a queue's rates per second over the last rateWindow of
// readings: jobs enqueued and acknowledged (from the management API's
// counters) and dead-lettered (the rises of the dead-letter count, so a
// redrive or purge in the window hides what it removed). ok is false
// until two readings a second apart exist.
type rates struct {
	ok                    bool
	enqueued, acked, dead float64
}

func (h *history) rates(queue string) rates {
	ss := h.queues[queue]
	if len(ss) < 2 {
		return rates{}
	}
	last := ss[len(ss)-1]
	i := 0
	for i < len(ss)-2 && last.at.Sub(ss[i].at) > rateWindow {
		i++
	}
	secs := last.at.Sub(ss[i].at).Seconds()
	if secs < 1 {
		return rates{}
	}
	// Rises only, step by step: a counter starts again from 0 when its
	// queue is declared again or a broker node restarts, and a count
	// falls with a redrive or purge.
	var enq, acked int64
	var dead int
	for j := i + 1; j < len(ss); j++ {
		enq += max(ss[j].enqueued-ss[j-1].enqueued, 0)
		acked += max(ss[j].acked-ss[j-1].acked, 0)
		dead += max(ss[j].dead-ss[j-1].dead, 0)
	}
	return rates{ok: true, enqueued: float64(enq) / secs, acked: float64(acked) / secs, dead: float64(dead) / secs}
}

// perSecond formats a rate for the overview: "–" before the dashboard has
// two readings to tell it from, "0" for none, "<0.1" for less than one
// every ten seconds, never "0.0".
func (r rates) perSecond(v float64) string {
	switch {
	case !r.ok:
		return "–"
	case v == 0:
		return "0"
	case v < 0.05:
		return "<0.1"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// chart is a queue's sparkline: an SVG viewBox and one polyline's points
// per series, backlog, held and dead, over Span.
type chart struct {
	Width, Height       int
	Backlog, Held, Dead string
	Max                 int
	Span                string
}

const chartW, chartH = 160, 32

func (h *history) chart(queue string, now time.Time) chart {
	ss := h.queues[queue]
	span := h.spanOf(ss, now)
	c := chart{Width: chartW, Height: chartH, Span: Duration(span)}
	for _, s := range ss {
		c.Max = max(c.Max, s.backlog, s.held, s.dead)
	}
	scale := max(c.Max, 1)
	line := func(v func(sample) int) string {
		var b strings.Builder
		for _, s := range ss {
			x := float64(chartW) * (1 - now.Sub(s.at).Seconds()/span.Seconds())
			y := float64(chartH-2) * (1 - float64(v(s))/float64(scale))
			fmt.Fprintf(&b, "%.1f,%.1f ", max(x, 0), y+1)
		}
		return strings.TrimSpace(b.String())
	}
	c.Backlog = line(func(s sample) int { return s.backlog })
	c.Held = line(func(s sample) int { return s.held })
	c.Dead = line(func(s sample) int { return s.dead })
	return c
}

// spanOf is the span of a chart of readings ss: it grows with what the
// dashboard has seen, from a minute to keep, so that a fresh dashboard's
// chart is not a dot at its right edge.
func (h *history) spanOf(ss []sample, now time.Time) time.Duration {
	if len(ss) == 0 {
		return min(h.keep, time.Minute)
	}
	return min(h.keep, max(time.Minute, now.Sub(ss[0].at)))
}

// span is the longest chart's span, for the legend.
func (h *history) span(now time.Time) string {
	var longest []sample
	for _, ss := range h.queues {
		if len(ss) > len(longest) || len(ss) > 0 && len(longest) > 0 && ss[0].at.Before(longest[0].at) {
			longest = ss
		}
	}
	return Duration(h.spanOf(longest, now))
}

// Duration writes d as a person reads it: "250ms", "12s", "3m 20s",
// "5h 20m", "24.3 days". The dashboard and the queuey command show
// durations with it.
func Duration(d time.Duration) string {
	switch d = d.Round(time.Millisecond); {
	case d >= 48*time.Hour:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Hours()/24), ".0") + " days"
	case d >= time.Hour:
		return joinUnits(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "m")
	case d >= time.Minute:
		return joinUnits(int64(d/time.Minute), "m", int64(d%time.Minute/time.Second), "s")
	case d >= time.Second:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", d.Seconds()), ".0") + "s"
	}
	return d.String()
}

// joinUnits writes "5h 20m", or "5h" when the smaller unit is 0.
func joinUnits(big int64, bigUnit string, small int64, smallUnit string) string {
	if small == 0 {
		return fmt.Sprintf("%d%s", big, bigUnit)
	}
	return fmt.Sprintf("%d%s %d%s", big, bigUnit, small, smallUnit)
}
