package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuey/queuey/sim"
	"golang.org/x/term"
)

// maxViolations is how many violations each run keeps in full, with their
// trace excerpts.
const maxViolations = 20

// row is one run's result.
type row struct {
	runSpec
	res *sim.Result
	// byInvariant counts the violations by invariant (Result.ViolationsByInvariant).
	byInvariant map[int]int
}

// sweep runs every spec, up to parallel at once (each sim.Run is one
// goroutine), and returns the results in the specs' order. The first
// error to happen cancels the runs still going and is returned.
func sweep(ctx context.Context, specs []runSpec, parallel int, prog *progress) ([]row, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows := make([]row, len(specs))
	var (
		mu       sync.Mutex
		firstErr error
	)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, len(specs)) {
		wg.Go(func() {
			for i := range next {
				r, err := runOne(ctx, specs[i], func(done, _ time.Duration) { prog.set(i, done) })
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("simulating %s: %w", specs[i].label(), err)
					}
					mu.Unlock()
					cancel()
					continue
				}
				rows[i] = r
				prog.finished(r)
			}
		})
	}
	for _, i := range scheduleOrder(specs) {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return rows, nil
}

// runOne runs one spec's simulation. The legacy run breaks invariant 2 on
// nearly every hold, so it runs without excerpts, which sim would build by
// replaying the whole run.
func runOne(ctx context.Context, spec runSpec, progress func(done, total time.Duration)) (row, error) {
	opts := sim.Options{Progress: progress, MaxViolations: maxViolations, NoExcerpts: spec.legacy}
	res, err := sim.Run(ctx, spec.scenario, opts)
	if err != nil {
		return row{}, err
	}
	return row{runSpec: spec, res: res, byInvariant: res.ViolationsByInvariant}, nil
}

// scheduleOrder starts the runs likely to take longest first, so that the
// last one to finish is a short one: the legacy run, then the
// granularities from the finest, which have the most hold queues.
func scheduleOrder(specs []runSpec) []int {
	var order []int
	for i, s := range specs {
		if s.legacy {
			order = append(order, i)
		}
	}
	for i, s := range specs {
		if !s.legacy {
			order = append(order, i)
		}
	}
	return order
}

// label names a row in messages and tables.
func (s runSpec) label() string {
	if s.legacy {
		return "legacy (" + fmtGranularity(s.granularity) + ")"
	}
	return fmtGranularity(s.granularity)
}

// progress reports the share of virtual time simulated, over all runs,
// with an estimate of the time left, on a terminal's line, and above it a
// line for each run as it finishes, so that the first rows can be read
// while the slowest run goes on; the report on stdout follows at the end.
// It shows nothing when stderr is not a terminal, and no progress line for
// the first second.
type progress struct {
	w     io.Writer
	live  bool           // w is a terminal
	done  []atomic.Int64 // virtual time simulated, per run
	total time.Duration  // virtual time of all runs
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex // serialises writes to w
	shown bool       // a progress line is on the screen
}

// progressDelay is how long a sweep runs before progress shows.
const progressDelay = time.Second

// newProgress starts reporting the runs' progress on w if w is a terminal;
// otherwise it returns a progress that only counts.
func newProgress(w io.Writer, runs []runSpec) *progress {
	p := &progress{w: w, done: make([]atomic.Int64, len(runs)), start: time.Now(), stop: make(chan struct{})}
	for _, r := range runs {
		s := r.scenario.WithDefaults()
		p.total += s.Duration.D() + s.Drain.D()
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.live = true
		p.wg.Go(p.loop)
	}
	return p
}

// finished writes a line for the run that just finished, on a terminal,
// above the progress line. Safe from any goroutine.
func (p *progress) finished(r row) {
	if !p.live {
		return
	}
	rr := newRowReport(r)
	rate := fmt.Sprintf("%s relays a second", fmtRate(rr.RelaysPerSecond))
	if r.scenario.Topology.HoldType == "classic" {
		rate = fmt.Sprintf("%s declarations a second", fmtRate(rr.DeclarationsPerSecond))
	}
	line := fmt.Sprintf("queuey-sim: %s done: %d hold queues at the peak, %s, added wait p50 %s p99 %s, %d lost, %d violations",
		rr.Label, rr.HoldQueuesPeak, rate, fmtDur(rr.AddedWait.P50), fmtDur(rr.AddedWait.P99), rr.Jobs.Lost, rr.Violations)
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
	p.shown = false
}

// set records run i's virtual time done. Safe from any goroutine.
func (p *progress) set(i int, done time.Duration) { p.done[i].Store(int64(done)) }

func (p *progress) loop() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			if now.Sub(p.start) >= progressDelay {
				p.show(now)
			}
		}
	}
}

// show writes one progress line over the last.
func (p *progress) show(now time.Time) {
	var done time.Duration
	for i := range p.done {
		done += time.Duration(p.done[i].Load())
	}
	f := 0.0
	if p.total > 0 {
		f = min(float64(done)/float64(p.total), 1)
	}
	eta := "ETA --"
	if f > 0.01 {
		left := time.Duration(float64(now.Sub(p.start)) * (1 - f) / f)
		eta = "ETA " + left.Round(time.Second).String()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r\x1b[Kqueuey-sim: %3.0f%% of %s virtual time simulated, %s", 100*f, fmtGranularity(p.total), eta)
	p.shown = true
}

// finish stops reporting and clears the progress line.
func (p *progress) finish() {
	close(p.stop)
	p.wg.Wait()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
