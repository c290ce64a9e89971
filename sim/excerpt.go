package sim

// Excerpts: the last events of each job, kept during a deterministic
// replay, that a violation is reported with.

// excerptLen is how many trace events an excerpt shows.
const excerptLen = 24

// excerpter collects, in a replay, the events of the jobs some violations
// concern, and the latest events overall.
type excerpter struct {
	jobs   map[uint64][]seqEvent
	recent []seqEvent // ring of the latest excerptLen events
	next   int
	until  uint64                // the last violation's event number: nothing later is needed
	at     map[uint64][]seqEvent // by violation event number, for violations without a job
}

type seqEvent struct {
	seq uint64
	e   Event
}

func (x *excerpter) add(seq uint64, e Event) {
	if seq > x.until {
		return
	}
	if evs, ok := x.jobs[e.Job]; ok && e.Job != 0 {
		x.jobs[e.Job] = append(evs, seqEvent{seq, e})
	}
	if len(x.recent) < excerptLen {
		x.recent = append(x.recent, seqEvent{seq, e})
	} else {
		x.recent[x.next] = seqEvent{seq, e}
		x.next = (x.next + 1) % excerptLen
	}
	if e.Kind == EvViolation && e.Job == 0 {
		if x.at == nil {
			x.at = map[uint64][]seqEvent{}
		}
		snap := append(append([]seqEvent(nil), x.recent[x.next:]...), x.recent[:x.next]...)
		x.at[seq] = snap
	}
}

// excerpt is the trace that shows v: the job's events up to and including
// the violation, or for a violation that concerns no job, the events just
// before it.
func (x *excerpter) excerpt(v Violation) []string {
	evs := x.at[v.seq]
	if v.Job != 0 {
		evs = nil
		for _, se := range x.jobs[v.Job] {
			if se.seq <= v.seq {
				evs = append(evs, se)
			}
		}
	}
	if len(evs) > excerptLen {
		evs = evs[len(evs)-excerptLen:]
	}
	out := make([]string, len(evs))
	for i, se := range evs {
		out[i] = se.e.String()
	}
	return out
}
