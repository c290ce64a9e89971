package schedcore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)

func TestTick(t *testing.T) {
	s := Schedule{Name: "report", Every: time.Hour}
	for _, tc := range []struct{ now, want time.Time }{
		{t0, t0},
		{t0.Add(59*time.Minute + 59*time.Second), t0},
		{t0.Add(time.Hour), t0.Add(time.Hour)},
		{time.Unix(-1, 0), time.Unix(-3600, 0)},
	} {
		if got := s.Tick(tc.now); !got.Equal(tc.want) {
			t.Errorf("Tick(%s) = %s, want %s", tc.now, got, tc.want)
		}
	}
	daily := Schedule{Name: "nightly", Every: 24 * time.Hour, Offset: 2 * time.Hour}
	for _, tc := range []struct{ now, want time.Time }{
		{t0, time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)},
		{time.Date(2026, 12, 4, 1, 59, 59, 0, time.UTC), time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)},
		{time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC), time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)},
		{time.Unix(3600, 0), time.Unix(7200-86400, 0)},
	} {
		if got := daily.Tick(tc.now); !got.Equal(tc.want) {
			t.Errorf("daily at 02:00: Tick(%s) = %s, want %s", tc.now, got, tc.want)
		}
	}
	if got := TickID("report", t0.In(time.FixedZone("CET", 3600))); got != "report@2026-12-04T09:00:00Z" {
		t.Errorf("TickID = %q", got)
	}
}

// script carries out one process's actions the way a shell whose every
// action succeeds would, and hands the process back every token it
// publishes, as the broker does to the active consumer of an otherwise
// empty queue.
type script struct {
	t        *testing.T
	c        *Core
	now      time.Time
	enqueued []string
	tokens   [][]byte
	acked    []TokenRef
	wake     time.Time
	echo     bool // deliver each published token back
	nextID   uint64
}

func (s *script) run(acts []Action) {
	s.t.Helper()
	var echoes [][]byte
	for len(acts) > 0 || len(echoes) > 0 {
		if len(acts) == 0 {
			s.nextID++
			acts = s.c.Token(TokenRef{1, s.nextID}, echoes[0], s.now)
			echoes = echoes[1:]
			continue
		}
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case Wake:
			s.wake = a.At
		case Enqueue:
			s.enqueued = append(s.enqueued, TickID(s.c.schedules[a.Schedule].Name, a.Tick))
			acts = append(acts, s.c.Done(nil, s.now)...)
		case PublishToken:
			s.tokens = append(s.tokens, a.Body)
			if s.echo {
				echoes = append(echoes, a.Body)
			}
			acts = append(acts, s.c.Done(nil, s.now)...)
		case Ack:
			s.acked = append(s.acked, a.Token)
			acts = append(acts, s.c.Done(nil, s.now)...)
		}
	}
}

func newScript(t *testing.T, schedules ...Schedule) *script {
	return &script{t: t, c: New(schedules, Config{ID: "p1", Refresh: time.Minute, RetryDelay: time.Second}),
		now: t0.Add(30 * time.Second), echo: true}
}

// A process alone: it publishes an empty token, leads once the broker
// hands it back, records that it leads in a token of its own, and once
// that is back (it has read every older token) enqueues the latest tick at
// once (the group knew none), records it, and acknowledges older tokens
// only then; then each tick on time, holding one token.
func TestLoneProcessLeadsAndEnqueuesEachTick(t *testing.T) {
	s := newScript(t, Schedule{Name: "r", Every: 10 * time.Minute})
	s.run(s.c.Start(s.now))
	if !slices.Equal(s.enqueued, []string{"r@2026-12-04T09:00:00Z"}) {
		t.Fatalf("enqueued %v", s.enqueued)
	}
	want := []string{`{"v":1,"by":"p1","seq":1,"last":null}`, `{"v":1,"by":"p1","seq":2,"last":{}}`,
		fmt.Sprintf(`{"v":1,"by":"p1","seq":3,"last":{"r":%d}}`, t0.Unix())}
	if got := strings.Split(string(slices.Concat(s.tokens...)), "}{"); len(s.tokens) != 3 || string(slices.Concat(s.tokens...)) != strings.Join(want, "") {
		t.Fatalf("tokens %q, want %q", got, want)
	}
	if !slices.Equal(s.acked, []TokenRef{{1, 1}, {1, 2}}) || len(s.c.held) != 1 {
		t.Fatalf("acked %v, holds %d", s.acked, len(s.c.held))
	}
	for s.now.Before(t0.Add(10*time.Minute + time.Second)) {
		s.now = s.wake
		s.run(s.c.Time(s.now))
		if s.c.busy != nil || len(s.c.held) != 1 {
			t.Fatalf("at %s: in flight %v, holding %d", s.now, s.c.busy, len(s.c.held))
		}
	}
	if len(s.enqueued) != 2 || s.enqueued[1] != "r@2026-12-04T09:10:00Z" {
		t.Fatalf("enqueued %v by %s", s.enqueued, s.now)
	}
}

// A new leader takes the state from the tokens it is handed, coalesces the
// ticks missed meanwhile into the latest, and skips the rest.
func TestNewLeaderCoalescesMissedTicks(t *testing.T) {
	s := newScript(t, Schedule{Name: "r", Every: time.Minute}, Schedule{Name: "daily", Every: 24 * time.Hour})
	s.echo = false
	s.now = t0.Add(5*time.Minute + 10*time.Second)
	s.run(s.c.Start(s.now))
	old := fmt.Appendf(nil, `{"v":1,"by":"p0","seq":9,"last":{"r":%d,"daily":%d}}`, t0.Unix(), t0.Add(-9*time.Hour).Unix())
	s.run(s.c.Token(TokenRef{1, 1}, old, s.now))
	if len(s.enqueued) != 0 {
		t.Fatalf("enqueued %v before its own token came back", s.enqueued)
	}
	s.run(s.c.Token(TokenRef{1, 2}, s.tokens[len(s.tokens)-1], s.now))
	if !slices.Equal(s.enqueued, []string{"r@2026-12-04T09:05:00Z"}) {
		t.Fatalf("enqueued %v, want the latest tick of r only", s.enqueued)
	}
}

// A new leader handed first an old token, then a newer one recorded just
// before the old leader died, learns of the newer one before it enqueues:
// the tick it records is not enqueued again.
func TestNewLeaderReadsEveryOlderTokenFirst(t *testing.T) {
	s := newScript(t, Schedule{Name: "r", Every: time.Minute})
	s.echo = false
	s.now = t0.Add(90 * time.Second)
	s.run(s.c.Start(s.now))
	older := fmt.Appendf(nil, `{"v":1,"by":"p0","seq":4,"last":{"r":%d}}`, t0.Unix())
	newer := fmt.Appendf(nil, `{"v":1,"by":"p0","seq":5,"last":{"r":%d}}`, t0.Add(time.Minute).Unix())
	s.run(s.c.Token(TokenRef{1, 1}, older, s.now))
	s.run(s.c.Token(TokenRef{1, 2}, newer, s.now))
	s.run(s.c.Token(TokenRef{1, 3}, s.tokens[len(s.tokens)-2], s.now)) // its first since it leads
	s.run(s.c.Token(TokenRef{1, 4}, s.tokens[len(s.tokens)-1], s.now))
	if len(s.enqueued) != 0 {
		t.Fatalf("enqueued %v: the newer token recorded 09:01 already", s.enqueued)
	}
}

// A failed enqueue advances nothing and is tried again after RetryDelay;
// the other schedules go on meanwhile.
func TestFailedEnqueueIsRetriedAndStarvesNoOther(t *testing.T) {
	c := New([]Schedule{{Name: "bad", Every: time.Minute}, {Name: "good", Every: time.Minute}},
		Config{ID: "p", Refresh: time.Hour, RetryDelay: 5 * time.Second})
	now := t0
	var enqueued []string
	pending := c.Start(now)
	var echo [][]byte
	for step := 0; step < 100 && now.Before(t0.Add(3*time.Minute)); step++ {
		if len(pending) == 0 {
			if len(echo) > 0 {
				pending = c.Token(TokenRef{1, uint64(step)}, echo[0], now)
				echo = echo[1:]
			}
			continue
		}
		a := pending[0]
		pending = pending[1:]
		switch a.Kind {
		case Wake:
			if len(echo) == 0 {
				now = a.At
				pending = append(pending, c.Time(now)...)
			}
		case PublishToken:
			echo = append(echo, a.Body)
			pending = append(pending, c.Done(nil, now)...)
		case Ack:
			pending = append(pending, c.Done(nil, now)...)
		case Enqueue:
			if a.Schedule == 0 {
				pending = append(pending, c.Done(errors.New("WithPriority on a quorum queue"), now)...)
				continue
			}
			enqueued = append(enqueued, TickID("good", a.Tick))
			pending = append(pending, c.Done(nil, now)...)
		}
	}
	if len(enqueued) < 3 {
		t.Fatalf("the good schedule enqueued %v while the bad one failed", enqueued)
	}
}

// Losing the channel ends the lead; a follower publishes an empty token
// every Refresh.
func TestLostChannelEndsTheLead(t *testing.T) {
	s := newScript(t, Schedule{Name: "r", Every: time.Hour})
	s.echo = false
	s.run(s.c.Start(s.now))
	s.run(s.c.Token(TokenRef{1, 1}, s.tokens[0], s.now))
	s.run(s.c.Token(TokenRef{2, 1}, s.tokens[0], s.now)) // on a later channel
	s.run(s.c.Lost(1, s.now))
	if !s.c.Leading() {
		t.Fatal("a token of a later channel was dropped")
	}
	s.run(s.c.Lost(2, s.now))
	if s.c.Leading() {
		t.Fatal("still leading")
	}
	n := len(s.tokens)
	s.now = s.wake
	s.run(s.c.Time(s.now))
	if len(s.tokens) != n+1 || !strings.HasSuffix(string(s.tokens[n]), `"last":null}`) {
		t.Fatalf("a follower's token: %q", s.tokens[n:])
	}
}

// group is processes that share an election queue, as RabbitMQ's single
// active consumer runs it (docs/rabbitmq-semantics.md §15): the active
// process is handed the queue's tokens in order, up to its prefetch, and
// holds each until it acknowledges it; a process killed returns what it
// held to the front of the queue, and the next process becomes active. Each
// process carries out one action per step, so a kill falls between any two.
type group struct {
	procs    []*gproc
	queue    []tokenMsg
	nextID   uint64
	now      time.Time
	prefetch int
	ticks    map[string]int  // enqueues by tick ID
	explain  map[string]bool // ticks a kill may have made enqueued twice
	procSeq  int
}

type gproc struct {
	core    *Core
	alive   bool
	gen     uint64
	wake    time.Time
	pending []Action
	held    []tokenMsg
	// unrecorded are the ticks it enqueued that no token it had
	// confirmed since carries yet.
	unrecorded []string
}

type tokenMsg struct {
	ref  TokenRef
	body []byte
}

func (g *group) active() *gproc {
	for _, p := range g.procs {
		if p.alive {
			return p
		}
	}
	return nil
}

// step carries out p's next action, if it has one.
func (g *group) step(p *gproc) bool {
	if len(p.pending) == 0 {
		return false
	}
	a := p.pending[0]
	p.pending = p.pending[1:]
	c := p.core
	switch a.Kind {
	case Wake:
		p.wake = a.At
	case Enqueue:
		id := TickID(c.schedules[a.Schedule].Name, a.Tick)
		g.ticks[id]++
		p.unrecorded = append(p.unrecorded, id)
		p.pending = append(p.pending, c.Done(nil, g.now)...)
	case PublishToken:
		g.nextID++
		g.queue = append(g.queue, tokenMsg{body: a.Body, ref: TokenRef{ID: g.nextID}})
		p.unrecorded = slices.DeleteFunc(p.unrecorded, func(id string) bool {
			return strings.Contains(string(a.Body), fmt.Sprint(tickOf(id).Unix()))
		})
		p.pending = append(p.pending, c.Done(nil, g.now)...)
	case Ack:
		p.held = slices.DeleteFunc(p.held, func(m tokenMsg) bool { return m.ref.ID == a.Token.ID })
		p.pending = append(p.pending, c.Done(nil, g.now)...)
	}
	return true
}

func tickOf(id string) time.Time {
	t, _ := time.Parse(time.RFC3339, id[strings.IndexByte(id, '@')+1:])
	return t
}

// deliver hands the active process one token, if it has room.
func (g *group) deliver() bool {
	p := g.active()
	if p == nil || len(g.queue) == 0 || len(p.held) >= g.prefetch {
		return false
	}
	m := g.queue[0]
	g.queue = g.queue[1:]
	m.ref.Gen = p.gen
	p.held = append(p.held, m)
	p.pending = append(p.pending, p.core.Token(m.ref, m.body, g.now)...)
	return true
}

func (g *group) kill(p *gproc) {
	p.alive = false
	g.queue = append(slices.Clone(p.held), g.queue...)
	p.held = nil
	for _, id := range p.unrecorded {
		g.explain[id] = true
	}
	// Restarted, it consumes again after the others: last in line.
	g.procs = append(slices.DeleteFunc(g.procs, func(q *gproc) bool { return q == p }), g.start())
}

func (g *group) start() *gproc {
	g.procSeq++
	p := &gproc{core: New([]Schedule{{Name: "r", Every: time.Minute}},
		Config{ID: fmt.Sprint("p", g.procSeq), Refresh: 45 * time.Second, RetryDelay: time.Second}), alive: true, gen: 1}
	p.pending = p.core.Start(g.now)
	return p
}

// Three processes, one killed now and then, between any two of its
// actions, and restarted at the back of the line; the leader's prefetch is
// small, so tokens queue behind it: every minute's tick is enqueued, and
// twice only when its leader was killed after enqueueing it and before a
// token recording it was confirmed. Acknowledging the oldest token rather
// than one the persisted state covers, or enqueueing before the leader's
// own token is back, fails this.
func TestGroupEnqueuesEveryTickThroughKills(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		g := &group{now: t0.Add(-30 * time.Second), ticks: map[string]int{}, explain: map[string]bool{},
			prefetch: rapid.IntRange(1, 4).Draw(rt, "prefetch")}
		for range 3 {
			g.procs = append(g.procs, g.start())
		}
		end := t0.Add(time.Hour)
		kills := 0
		for g.now.Before(end) {
			// Time stands still while anything can progress, so a takeover
			// completes in the instant of its kill; the kills are bounded
			// (and shrink to none) so that something does progress.
			if kills < 30 && rapid.IntRange(0, 40).Draw(rt, "kill") == 40 {
				kills++
				g.kill(g.procs[rapid.IntRange(0, 2).Draw(rt, "who")])
			}
			// Everything due now, in an order drawn.
			progressed := false
			for _, i := range rapid.Permutation([]int{0, 1, 2, 3}).Draw(rt, "order") {
				if i == 3 {
					progressed = g.deliver() || progressed
				} else {
					progressed = g.step(g.procs[i]) || progressed
				}
			}
			if progressed {
				continue
			}
			next := end
			for _, p := range g.procs {
				if p.wake.Before(next) {
					next = p.wake
				}
			}
			g.now = laterOf(g.now, next)
			for _, p := range g.procs {
				if !p.wake.After(g.now) {
					p.wake = end.Add(time.Hour)
					p.pending = append(p.pending, p.core.Time(g.now)...)
				}
			}
		}
		for m := t0; m.Before(end.Add(-time.Minute)); m = m.Add(time.Minute) {
			id := TickID("r", m)
			switch n := g.ticks[id]; {
			case n == 0:
				rt.Fatalf("tick %s never enqueued", id)
			case n > 1 && !g.explain[id]:
				rt.Fatalf("tick %s enqueued %d times, and no kill explains it", id, n)
			}
		}
	})
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
