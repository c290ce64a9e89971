package schedcore

import (
	"errors"
	"fmt"
	"slices"
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
	if got := TickID("report", t0.In(time.FixedZone("CET", 3600))); got != "report@2026-12-04T09:00:00Z" {
		t.Errorf("TickID = %q", got)
	}
}

// step carries out actions the way a shell whose every action succeeds
// would, for one process, and returns what it enqueued and published.
type script struct {
	t        *testing.T
	c        *Core
	now      time.Time
	enqueued []string
	tokens   [][]byte
	acked    []TokenRef
	wake     time.Time
}

func (s *script) run(acts []Action) {
	s.t.Helper()
	for len(acts) > 0 {
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
			acts = append(acts, s.c.Done(nil, s.now)...)
		case Ack:
			s.acked = append(s.acked, a.Token)
			acts = append(acts, s.c.Done(nil, s.now)...)
		}
	}
}

func newScript(t *testing.T, schedules ...Schedule) *script {
	return &script{t: t, c: New(schedules, Config{Refresh: time.Minute, RetryDelay: time.Second}), now: t0.Add(30 * time.Second)}
}

// A process alone: it publishes an empty token, leads once the broker
// hands it back, enqueues the latest tick at once (the group knew none),
// records it in a new token, and acknowledges the old one only once the
// new one is back; then each tick on time.
func TestLoneProcessLeadsAndEnqueuesEachTick(t *testing.T) {
	s := newScript(t, Schedule{Name: "r", Every: 10 * time.Minute})
	s.run(s.c.Start(s.now))
	if len(s.tokens) != 1 || string(s.tokens[0]) != `{"v":1,"last":null}` || s.c.Leading() {
		t.Fatalf("start: tokens %q, leading %v", s.tokens, s.c.Leading())
	}
	if want := s.now.Add(time.Minute); !s.wake.Equal(want) {
		t.Fatalf("wake at %s, want %s", s.wake, want)
	}
	s.run(s.c.Token(TokenRef{1, 1}, s.tokens[0], s.now))
	if !slices.Equal(s.enqueued, []string{"r@2026-12-04T09:00:00Z"}) {
		t.Fatalf("enqueued %v", s.enqueued)
	}
	if len(s.tokens) != 2 || string(s.tokens[1]) != fmt.Sprintf(`{"v":1,"last":{"r":%d}}`, t0.Unix()) || len(s.acked) != 0 {
		t.Fatalf("tokens %q, acked %v", s.tokens, s.acked)
	}
	s.run(s.c.Token(TokenRef{1, 2}, s.tokens[1], s.now))
	if !slices.Equal(s.acked, []TokenRef{{1, 1}}) || !s.c.Leading() {
		t.Fatalf("acked %v once its state came back", s.acked)
	}
	for s.now.Before(t0.Add(10*time.Minute + time.Second)) {
		s.now = s.wake
		s.run(s.c.Time(s.now))
		if s.c.busy != nil {
			t.Fatal("an action left in flight")
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
	s.now = t0.Add(5*time.Minute + 10*time.Second)
	s.run(s.c.Start(s.now))
	old := fmt.Appendf(nil, `{"v":1,"last":{"r":%d,"daily":%d}}`, t0.Unix(), t0.Add(-9*time.Hour).Unix())
	s.run(s.c.Token(TokenRef{1, 7}, old, s.now))
	if !slices.Equal(s.enqueued, []string{"r@2026-12-04T09:05:00Z"}) {
		t.Fatalf("enqueued %v, want the latest tick of r only", s.enqueued)
	}
}

// A failed enqueue advances nothing and is tried again after RetryDelay.
func TestFailedEnqueueIsRetried(t *testing.T) {
	c := New([]Schedule{{Name: "r", Every: time.Minute}}, Config{Refresh: time.Minute, RetryDelay: 5 * time.Second})
	now := t0
	c.Start(now)
	c.Done(nil, now) // the empty token
	acts := c.Token(TokenRef{1, 1}, []byte(`{"v":1,"last":null}`), now)
	if len(acts) != 1 || acts[0].Kind != Enqueue {
		t.Fatalf("%+v", acts)
	}
	acts = c.Done(errors.New("nacked"), now)
	if len(acts) != 1 || acts[0].Kind != Wake || !acts[0].At.Equal(now.Add(5*time.Second)) {
		t.Fatalf("after a failure: %+v", acts)
	}
	if acts = c.Time(now.Add(5 * time.Second)); len(acts) != 1 || acts[0].Kind != Enqueue || !acts[0].Tick.Equal(t0) {
		t.Fatalf("the retry: %+v", acts)
	}
}

// Losing the channel ends the lead; a follower publishes an empty token
// every Refresh.
func TestLostChannelEndsTheLead(t *testing.T) {
	s := newScript(t, Schedule{Name: "r", Every: time.Hour})
	s.run(s.c.Start(s.now))
	s.run(s.c.Token(TokenRef{1, 1}, s.tokens[0], s.now))
	s.run(s.c.Token(TokenRef{2, 1}, s.tokens[1], s.now)) // on a later channel
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
	if len(s.tokens) != n+1 || string(s.tokens[n]) != `{"v":1,"last":null}` {
		t.Fatalf("a follower's token: %q", s.tokens[n:])
	}
}

// group is processes that share an election queue, as RabbitMQ's single
// active consumer runs it (docs/rabbitmq-semantics.md §15): every token
// goes to the active process, which holds it until it acknowledges it; a
// process killed returns what it held to the front of the queue, and the
// next process becomes active. Every action succeeds at once.
type group struct {
	t      *testing.T
	procs  []*Core
	alive  []bool
	gens   []uint64
	wakes  []time.Time
	queue  []tokenMsg
	held   map[int][]tokenMsg // by process
	nextID uint64
	now    time.Time
	ticks  map[string]int // enqueues by tick ID
}

type tokenMsg struct {
	ref  TokenRef
	body []byte
}

func (g *group) active() int {
	for i, ok := range g.alive {
		if ok {
			return i
		}
	}
	return -1
}

func (g *group) do(p int, acts []Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		c := g.procs[p]
		switch a.Kind {
		case Wake:
			g.wakes[p] = a.At
		case Enqueue:
			g.ticks[TickID(c.schedules[a.Schedule].Name, a.Tick)]++
			acts = append(acts, c.Done(nil, g.now)...)
		case PublishToken:
			g.nextID++
			g.queue = append(g.queue, tokenMsg{body: a.Body, ref: TokenRef{ID: g.nextID}})
			acts = append(acts, c.Done(nil, g.now)...)
		case Ack:
			g.held[p] = slices.DeleteFunc(g.held[p], func(m tokenMsg) bool { return m.ref.ID == a.Token.ID })
			acts = append(acts, c.Done(nil, g.now)...)
		}
	}
}

// deliver hands the queue's tokens to the active process, one at a time.
func (g *group) deliver() {
	for len(g.queue) > 0 {
		p := g.active()
		if p < 0 {
			return
		}
		m := g.queue[0]
		g.queue = g.queue[1:]
		m.ref.Gen = g.gens[p]
		g.held[p] = append(g.held[p], m)
		g.do(p, g.procs[p].Token(m.ref, m.body, g.now))
	}
}

func (g *group) kill(p int) {
	g.alive[p] = false
	g.queue = append(slices.Clone(g.held[p]), g.queue...)
	g.held[p] = nil
}

func (g *group) start(p int) {
	g.procs[p] = New([]Schedule{{Name: "r", Every: time.Minute}}, Config{Refresh: 45 * time.Second, RetryDelay: time.Second})
	g.alive[p] = true
	g.gens[p]++
	// Restarted, it consumes again after the others: last in line.
	core, gen := g.procs[p], g.gens[p]
	g.procs = append(slices.Delete(g.procs, p, p+1), core)
	g.alive = append(slices.Delete(g.alive, p, p+1), true)
	g.gens = append(slices.Delete(g.gens, p, p+1), gen)
	g.wakes = append(slices.Delete(g.wakes, p, p+1), time.Time{})
	held := g.held[p]
	for i := p; i < len(g.procs)-1; i++ {
		g.held[i] = g.held[i+1]
	}
	g.held[len(g.procs)-1] = held
	g.do(len(g.procs)-1, core.Start(g.now))
}

// Three processes, the active one killed now and then and restarted at the
// back of the line: every minute's tick is enqueued exactly once. Here
// every action takes effect at once, so no kill falls between a tick's
// enqueue and the token that records it, the one window where a tick may
// be enqueued twice: a second enqueue would mean that the state was lost,
// a token acknowledged while it alone carried it.
func TestGroupEnqueuesEveryTickThroughKills(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		g := &group{t: t, procs: make([]*Core, 3), alive: make([]bool, 3), gens: make([]uint64, 3),
			wakes: make([]time.Time, 3), held: map[int][]tokenMsg{}, now: t0.Add(-30 * time.Second), ticks: map[string]int{}}
		for range 3 {
			g.start(0) // each new one at the back of the line
		}
		g.deliver()
		end := t0.Add(time.Hour)
		for g.now.Before(end) {
			if rapid.IntRange(0, 30).Draw(rt, "kill") == 0 {
				p := g.active()
				g.kill(p)
				g.deliver()
				g.start(p)
				g.deliver()
			}
			next := end
			for p, w := range g.wakes {
				if g.alive[p] && w.Before(next) {
					next = w
				}
			}
			g.now = laterOf(g.now, next)
			for p := range g.procs {
				if g.alive[p] && !g.wakes[p].After(g.now) {
					g.do(p, g.procs[p].Time(g.now))
				}
			}
			g.deliver()
		}
		for m := t0; m.Before(end); m = m.Add(time.Minute) {
			id := TickID("r", m)
			switch n := g.ticks[id]; {
			case n == 0:
				rt.Fatalf("tick %s never enqueued", id)
			case n > 1:
				rt.Fatalf("tick %s enqueued %d times", id, n)
			}
		}
		for p, h := range g.held {
			if len(h) > 2 {
				rt.Fatalf("process %d holds %d tokens", p, len(h))
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
