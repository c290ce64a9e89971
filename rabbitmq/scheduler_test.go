package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// tickJob is the periodic tests' job.
type tickJob struct {
	At time.Time `json:"at"`
}

func (tickJob) Kind() string  { return "tick" }
func (tickJob) Queue() string { return "queuey-ticks" }

var tickQueues = []queuey.QueueConfig{{Name: "queuey-ticks"}}

// schedProcess is one scheduler process on membroker: its connection,
// backend, producer and scheduler, and Run's result.
type schedProcess struct {
	conn   *membroker.Connection
	sched  *Scheduler
	done   chan error    // Run's result
	exited chan struct{} // closed when Run has returned
	stop   context.CancelFunc
}

// newTickScheduler is a scheduler of jobs on backend, enqueueing through a
// producer that declared tickQueues.
func newTickScheduler(t *testing.T, backend *Backend, jobs []PeriodicJob) *Scheduler {
	t.Helper()
	producer, err := queuey.NewProducer(t.Context(), backend, tickQueues, queuey.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := NewScheduler(backend, producer, jobs, SchedulerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sched
}

func startSchedProcess(t *testing.T, b *membroker.Broker, jobs []PeriodicJob) *schedProcess {
	t.Helper()
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	backend, err := New(Channels(conn.Channel), Options{Topology: Topology{ClassicHolds: true}})
	if err != nil {
		t.Fatal(err)
	}
	sched := newTickScheduler(t, backend, jobs)
	ctx, stop := context.WithCancel(t.Context())
	p := &schedProcess{conn: conn, sched: sched, done: make(chan error, 1), exited: make(chan struct{}), stop: stop}
	go func() { p.done <- sched.Run(ctx); close(p.exited) }()
	t.Cleanup(func() { stop(); <-p.exited; _ = backend.Close(); _ = conn.Close() })
	return p
}

// onAdmin runs f on a channel of a connection of its own to b, as an
// operator's tool would, and fails the test if f does.
func onAdmin(t *testing.T, b *membroker.Broker, f func(ch *membroker.Channel) error) {
	t.Helper()
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := f(ch); err != nil {
		t.Fatal(err)
	}
}

// ticksOn reads the tick jobs' IDs off the queue, in order.
func ticksOn(t *testing.T, b *membroker.Broker) []string {
	t.Helper()
	var ids []string
	onAdmin(t, b, func(ch *membroker.Channel) error {
		for {
			d, ok, err := ch.Get("queuey-ticks", true)
			if err != nil || !ok {
				return err
			}
			ids = append(ids, d.MessageId)
		}
	})
	return ids
}

var everyMinute = []PeriodicJob{{Name: "minutely", Every: time.Minute,
	Args: func(tick time.Time) queuey.JobArgs { return tickJob{At: tick} }}}

// Three processes of a group on membroker: one leads, and each minute's
// tick is enqueued once, with the tick's ID. When the leader's connection
// dies, another leads from the state its tokens carried: no tick is missed
// and none is repeated, as no enqueue was in flight at the kill.
func TestSchedulerFailsOverOnMembroker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})
		start := time.Now()
		var procs []*schedProcess
		for range 3 {
			procs = append(procs, startSchedProcess(t, b, everyMinute))
		}
		time.Sleep(10*time.Minute + 30*time.Second)
		synctest.Wait()
		var leaders []int
		for i, p := range procs {
			if p.sched.Leading() {
				leaders = append(leaders, i)
			}
		}
		if len(leaders) != 1 {
			t.Fatalf("leaders %v, want one", leaders)
		}
		_ = procs[leaders[0]].conn.Close() // the leader dies
		if err := <-procs[leaders[0]].done; err == nil {
			t.Fatal("Run returned nil with its connection gone")
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		n := 0
		for _, p := range procs {
			if p.sched.Leading() {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d leaders after the failover, want one", n)
		}
		var want []string
		for tick := start.Truncate(time.Minute); !tick.After(time.Now()); tick = tick.Add(time.Minute) {
			want = append(want, "minutely@"+tick.UTC().Format(time.RFC3339))
		}
		got := ticksOn(t, b)
		t.Logf("%d ticks: %s .. %s", len(got), got[0], got[len(got)-1])
		if !slices.Equal(got, want) {
			t.Fatalf("ticks enqueued\n%v\nwant\n%v", got, want)
		}
	})
}

// A job with an Offset ticks that far past each multiple of its
// interval: a minutely job with an offset of 30 s, at half past each
// minute, and an hourly one at 45 minutes past.
func TestSchedulerTicksAtItsOffset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ43})
		args := func(tick time.Time) queuey.JobArgs { return tickJob{At: tick} }
		startSchedProcess(t, b, []PeriodicJob{
			{Name: "half-past", Every: time.Minute, Offset: 30 * time.Second, Args: args},
			{Name: "quarter-to", Every: time.Hour, Offset: 45 * time.Minute, Args: args},
		})
		start := time.Now()
		time.Sleep(3 * time.Hour)
		synctest.Wait()
		var want []string
		for tick := start.Add(-30 * time.Second).Truncate(time.Minute).Add(30 * time.Second); !tick.After(time.Now()); tick = tick.Add(time.Minute) {
			want = append(want, "half-past@"+tick.UTC().Format(time.RFC3339))
		}
		for tick := start.Add(-45 * time.Minute).Truncate(time.Hour).Add(45 * time.Minute); !tick.After(time.Now()); tick = tick.Add(time.Hour) {
			want = append(want, "quarter-to@"+tick.UTC().Format(time.RFC3339))
		}
		got := ticksOn(t, b)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("ticks enqueued\n%v\nwant\n%v", got, want)
		}
	})
}

// NewScheduler refuses jobs it cannot schedule, naming the job and why.
func TestNewSchedulerRefusesBadJobs(t *testing.T) {
	b := membroker.New(membroker.Config{Clock: clock.New()})
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	backend, err := New(Channels(conn.Channel), Options{})
	if err != nil {
		t.Fatal(err)
	}
	producer := queuey.NewUndeclaredProducer(backend, queuey.ProducerConfig{})
	args := func(time.Time) queuey.JobArgs { return tickJob{} }
	for _, tc := range []struct {
		jobs []PeriodicJob
		opts SchedulerOptions
		says string
	}{
		{nil, SchedulerOptions{}, "no jobs"},
		{[]PeriodicJob{{Name: "", Every: time.Second, Args: args}}, SchedulerOptions{}, "Name must be 1 to 200 bytes"},
		{[]PeriodicJob{{Name: strings.Repeat("n", 201), Every: time.Second, Args: args}}, SchedulerOptions{}, "is 201"},
		{[]PeriodicJob{{Name: "a", Every: time.Second, Args: args}, {Name: "a", Every: time.Second, Args: args}}, SchedulerOptions{}, "used twice"},
		{[]PeriodicJob{{Name: "a", Every: 1500 * time.Millisecond, Args: args}}, SchedulerOptions{}, "whole number of seconds"},
		{[]PeriodicJob{{Name: "a", Every: 0, Args: args}}, SchedulerOptions{}, "whole number of seconds"},
		{[]PeriodicJob{{Name: "a", Every: time.Second}}, SchedulerOptions{}, "Args is nil"},
		{[]PeriodicJob{{Name: "a", Every: time.Hour, Offset: -time.Second, Args: args}}, SchedulerOptions{}, "Offset -1s"},
		{[]PeriodicJob{{Name: "a", Every: time.Hour, Offset: time.Hour, Args: args}}, SchedulerOptions{}, "less than Every"},
		{[]PeriodicJob{{Name: "a", Every: time.Hour, Offset: 1500 * time.Millisecond, Args: args}}, SchedulerOptions{}, "Offset 1.5s"},
		{[]PeriodicJob{{Name: "a", Every: time.Second, Args: args}}, SchedulerOptions{Refresh: time.Millisecond}, "outside 1s..10m0s"},
		{[]PeriodicJob{{Name: "a", Every: time.Second, Args: args}}, SchedulerOptions{Refresh: 11 * time.Minute}, "consumer timeout"},
		{[]PeriodicJob{{Name: "a", Every: time.Second, Args: args}}, SchedulerOptions{Group: strings.Repeat("g", 250)}, "Group"},
	} {
		if _, err := NewScheduler(backend, producer, tc.jobs, tc.opts); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want an error saying %q", tc.jobs, err, tc.says)
		}
	}
	if _, err := NewScheduler(nil, producer, everyMinute, SchedulerOptions{}); err == nil {
		t.Error("no backend: accepted")
	}
}

// Run refuses to run twice at once, and runs again once it has returned.
func TestSchedulerRunOnceAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := membroker.New(membroker.Config{Clock: clock.New()})
		conn, err := b.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		backend, err := New(Channels(conn.Channel), Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := newTickScheduler(t, backend, everyMinute)
		for range 2 {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			synctest.Wait()
			if !s.Leading() {
				t.Fatal("a lone process does not lead")
			}
			if err := s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "running already") {
				t.Fatalf("a second Run: %v", err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			if s.Leading() {
				t.Fatal("leading after Run returned")
			}
		}
	})
}

// A schedule whose job cannot be enqueued (its options refused, its Args
// panicking) is tried again every second and stops no other schedule.
func TestSchedulerABrokenScheduleStopsNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})
		jobs := []PeriodicJob{
			{Name: "refused", Every: time.Minute, Args: func(time.Time) queuey.JobArgs { return tickJob{} },
				Options: []queuey.EnqueueOption{queuey.WithMaxAttempts(0)}},
			{Name: "panics", Every: time.Minute, Args: func(time.Time) queuey.JobArgs { panic("boom") }},
			everyMinute[0],
		}
		startSchedProcess(t, b, jobs)
		time.Sleep(5*time.Minute + 30*time.Second)
		synctest.Wait()
		got := ticksOn(t, b)
		if len(got) != 6 || !strings.HasPrefix(got[0], "minutely@") {
			t.Fatalf("ticks %v, want minutely's six", got)
		}
	})
}

// Two scheduler processes on the live broker at AMQP_URL, a tick every
// second: when the leader's connection is closed, the next tick is
// enqueued by the other process, and the ticks on the queue run on
// without a gap.
func TestLiveSchedulerFailsOver(t *testing.T) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	group := "test-" + hex.EncodeToString(rnd[:])
	work := "queuey-ticks-" + hex.EncodeToString(rnd[:])
	type enqueue struct {
		proc int
		tick time.Time
	}
	var mu sync.Mutex
	var made []enqueue
	type proc struct {
		conn  *amqp.Connection
		sched *Scheduler
		done  chan error
	}
	var procs []*proc
	for i := range 2 {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		backend, err := New(Channels(conn.Channel), Options{})
		if err != nil {
			t.Fatal(err)
		}
		producer, err := queuey.NewProducer(t.Context(), backend, []queuey.QueueConfig{{Name: work}}, queuey.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		jobs := []PeriodicJob{{Name: "each-second", Every: time.Second, Options: []queuey.EnqueueOption{queuey.WithQueue(work)},
			Args: func(tick time.Time) queuey.JobArgs {
				mu.Lock()
				defer mu.Unlock()
				made = append(made, enqueue{i, tick})
				return tickJob{At: tick}
			}}}
		sched, err := NewScheduler(backend, producer, jobs, SchedulerOptions{Group: group, Refresh: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		p := &proc{conn: conn, sched: sched, done: make(chan error, 1)}
		ctx, stop := context.WithCancel(t.Context())
		exited := make(chan struct{})
		go func() { p.done <- sched.Run(ctx); close(exited) }()
		t.Cleanup(func() { stop(); <-exited })
		procs = append(procs, p)
	}
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		if err != nil {
			t.Error(err)
			return
		}
		for _, q := range []string{"queuey.scheduler." + group, work, work + ".dead"} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("cleanup: delete %s: %v", q, err)
			}
		}
	})
	leader := func() int {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for i, p := range procs {
				if p.sched.Leading() {
					return i
				}
			}
		}
		t.Fatal("no process leads after 20 s")
		return -1
	}
	first := leader()
	time.Sleep(3 * time.Second)
	killed := time.Now()
	_ = procs[first].conn.Close()
	if err := <-procs[first].done; err == nil {
		t.Fatal("the killed process's Run returned nil")
	}
	other := 1 - first
	var takeover time.Time // the first tick the other process enqueued
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		var after []time.Time
		for _, e := range made {
			if e.proc == other {
				after = append(after, e.tick)
			}
		}
		mu.Unlock()
		if len(after) >= 3 {
			takeover = after[0]
			t.Logf("process %d led first; killed at %s; process %d then enqueued ticks %s, %s, %s",
				first, killed.Format(time.StampMilli), other, after[0].Format(time.TimeOnly), after[1].Format(time.TimeOnly), after[2].Format(time.TimeOnly))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the kill, process %d enqueued %d ticks", other, len(after))
		}
	}
	if !procs[other].sched.Leading() {
		t.Fatal("the other process does not lead")
	}
	// The ticks on the queue: consecutive seconds, each at least once.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var firstTick, lastTick time.Time
	for {
		d, ok, err := ch.Get(work, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		seen[d.MessageId]++
		tick, err := time.Parse(time.RFC3339, strings.TrimPrefix(d.MessageId, "each-second@"))
		if err != nil {
			t.Fatalf("job ID %q: %v", d.MessageId, err)
		}
		if firstTick.IsZero() || tick.Before(firstTick) {
			firstTick = tick
		}
		if tick.After(lastTick) {
			lastTick = tick
		}
	}
	// A tick between the kill and the takeover is missed only if the
	// takeover took longer than a tick: it is coalesced into the takeover's
	// tick, by design (docs/periodic.md). Every other tick is there.
	var dups, coalesced []string
	for tick := firstTick; !tick.After(lastTick); tick = tick.Add(time.Second) {
		id := "each-second@" + tick.UTC().Format(time.RFC3339)
		switch n := seen[id]; {
		case n == 0 && tick.After(killed.Add(-time.Second)) && tick.Before(takeover):
			coalesced = append(coalesced, id)
		case n == 0:
			t.Errorf("tick %s missing", id)
		case n > 1:
			dups = append(dups, id)
		}
	}
	t.Logf("%d ticks from %s to %s; enqueued twice (across the failover): %v; coalesced into the takeover's: %v",
		len(seen), firstTick.Format(time.TimeOnly), lastTick.Format(time.TimeOnly), dups, coalesced)
}

// Two scheduler processes on supervised backends (Connect) over membroker:
// the leader's connection dropped, then the broker restarted, then killed.
// Each process reconnects; one leads at a time, and at the end one leads;
// every minute's tick is on the queue, and one is there twice only in a
// minute a fault struck.
func TestSchedulerSurvivesDropsRestartsAndKillsOnMembroker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ40})
		start := time.Now()
		scheds, nets := startSupervisedSchedulers(t, broker, 2)
		leaders := func() (ids []int) {
			for i, s := range scheds {
				if s.Leading() {
					ids = append(ids, i)
				}
			}
			return ids
		}
		faults := map[string]bool{} // tick IDs of the minutes a fault struck in
		strike := func(what string, f func()) {
			time.Sleep(5*time.Minute + 17*time.Second)
			synctest.Wait()
			l := leaders()
			if len(l) != 1 {
				t.Fatalf("before the %s: leaders %v", what, l)
			}
			t.Logf("%s at %s; process %d leads", what, time.Now().UTC().Format(time.TimeOnly), l[0])
			faults["minutely@"+time.Now().UTC().Truncate(time.Minute).Format(time.RFC3339)] = true
			f()
		}
		strike("drop", func() { nets[leaders()[0]].drop() })
		strike("restart", broker.Restart)
		strike("kill", broker.Crash)
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if l := leaders(); len(l) != 1 {
			t.Fatalf("at the end: leaders %v", l)
		}
		seen := map[string]int{}
		ids := ticksOn(t, broker)
		for _, id := range ids {
			seen[id]++
		}
		t.Logf("%d jobs for %d ticks; process %d leads at the end", len(ids), len(seen), leaders()[0])
		for tick := start.Truncate(time.Minute); !tick.After(time.Now()); tick = tick.Add(time.Minute) {
			id := "minutely@" + tick.UTC().Format(time.RFC3339)
			if n := seen[id]; n == 0 || (n > 1 && !faults[id]) {
				t.Errorf("tick %s enqueued %d times", id, n)
			}
		}
	})
}

// startSupervisedSchedulers starts n scheduler processes of everyMinute on
// broker, each on a backend from Connect with a network of its own.
func startSupervisedSchedulers(t *testing.T, broker *membroker.Broker, n int) ([]*Scheduler, []*memNet) {
	t.Helper()
	var scheds []*Scheduler
	var nets []*memNet
	for range n {
		net := &memNet{broker: broker}
		b, err := Connect(t.Context(), ConnectOptions{URLs: []string{secretURL}, Dial: net.dial, Rand: func() float64 { return 0.5 }},
			Options{Topology: Topology{ClassicHolds: true}})
		if err != nil {
			t.Fatal(err)
		}
		sched := newTickScheduler(t, b, everyMinute)
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- sched.Run(ctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			_ = b.Close()
		})
		scheds, nets = append(scheds, sched), append(nets, net)
	}
	return scheds, nets
}

// leadsAgain checks, five minutes on, that one of scheds leads and the
// latest tick is enqueued.
func leadsAgain(t *testing.T, broker *membroker.Broker, scheds []*Scheduler) {
	t.Helper()
	time.Sleep(5 * time.Minute)
	synctest.Wait()
	leading := 0
	for _, s := range scheds {
		if s.Leading() {
			leading++
		}
	}
	if leading != 1 {
		t.Fatalf("%d processes lead, want 1", leading)
	}
	ids := ticksOn(t, broker)
	last := "minutely@" + time.Now().UTC().Truncate(time.Minute).Format(time.RFC3339)
	if !slices.Contains(ids, last) {
		t.Fatalf("the latest tick %s is not enqueued; the queue holds %v", last, ids)
	}
}

// A kill moments after the group's first process created its election
// queue loses the tokens in it (a quorum queue's name reaches disk about
// a second after its creation: docs/rabbitmq-semantics.md §13). The
// processes that do not lead offer a token every Refresh, so the group
// elects a leader again and its ticks go on.
func TestSchedulerSurvivesAKillThatLosesItsTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ43, Timing: membroker.Timing{QuorumRegister: 3 * time.Second}})
		scheds, _ := startSupervisedSchedulers(t, broker, 2)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		broker.Crash()
		if q, ok := broker.Queue("queuey.scheduler.default"); !ok || q.Ready+q.Unacked != 0 {
			t.Fatalf("after the kill the election queue exists: %v, with %d tokens; want it empty", ok, q.Ready+q.Unacked)
		}
		leadsAgain(t, broker, scheds)
	})
}

// An election queue deleted while the processes were cut off is declared
// again as they reconnect, as their work queues are, so that their
// consumers can resume.
func TestSchedulerDeclaresItsElectionQueueAgainOnReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ43})
		scheds, nets := startSupervisedSchedulers(t, broker, 2)
		time.Sleep(90 * time.Second)
		synctest.Wait()
		for _, n := range nets {
			n.setDown(true)
			n.drop()
		}
		synctest.Wait()
		onAdmin(t, broker, func(ch *membroker.Channel) error {
			_, err := ch.QueueDelete("queuey.scheduler.default", false, false, false)
			return err
		})
		for _, n := range nets {
			n.setDown(false)
		}
		leadsAgain(t, broker, scheds)
	})
}

// The election queue is declared again on reconnection while some Run of
// its group runs on the backend, and no longer once every one has
// returned. A refusal to declare it again (it was re-created with other
// arguments, perhaps without single active consumer, which would let
// every process lead) ends the backend's supervision, as a refused work
// queue does: loudly, rather than with two leaders.
func TestSchedulerElectionQueueRedeclaredWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{Version: membroker.RabbitMQ43})
		net := &memNet{broker: broker}
		b, err := Connect(t.Context(), ConnectOptions{URLs: []string{secretURL}, Dial: net.dial, Rand: func() float64 { return 0.5 }},
			Options{Topology: Topology{ClassicHolds: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Close() }()
		admin := func(f func(ch *membroker.Channel) error) { t.Helper(); onAdmin(t, broker, f) }
		deleteIt := func(ch *membroker.Channel) error {
			_, err := ch.QueueDelete("queuey.scheduler.default", false, false, false)
			return err
		}
		cutAndRestore := func(meanwhile func()) {
			t.Helper()
			net.setDown(true)
			net.drop()
			synctest.Wait()
			meanwhile()
			net.setDown(false)
			time.Sleep(time.Minute)
			synctest.Wait()
		}
		exists := func() bool { _, ok := broker.Queue("queuey.scheduler.default"); return ok }
		run := func(s *Scheduler) (stop func() error) {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			return func() error { cancel(); return <-done }
		}
		// Two schedulers of the group on the one backend: the queue is
		// kept while either runs.
		stopA := run(newTickScheduler(t, b, everyMinute))
		stopB := run(newTickScheduler(t, b, everyMinute))
		time.Sleep(90 * time.Second)
		synctest.Wait()
		if err := stopA(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		cutAndRestore(func() { admin(deleteIt) })
		if !exists() {
			t.Fatal("the election queue was not declared again while a Run ran")
		}
		if err := stopB(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		cutAndRestore(func() { admin(deleteIt) })
		if exists() {
			t.Fatal("the election queue was declared again after every Run returned")
		}
		if err := b.Ready(); err != nil {
			t.Fatalf("the backend is not ready: %v", err)
		}

		// Re-created without single active consumer while a Run runs.
		stopC := run(newTickScheduler(t, b, everyMinute))
		time.Sleep(90 * time.Second)
		synctest.Wait()
		cutAndRestore(func() {
			admin(func(ch *membroker.Channel) error {
				if err := deleteIt(ch); err != nil {
					return err
				}
				_, err := ch.QueueDeclare("queuey.scheduler.default", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
				return err
			})
		})
		if err := b.Ready(); err == nil || !strings.Contains(err.Error(), "queuey.scheduler.default") {
			t.Fatalf("the backend carried on past a refused election queue: Ready() = %v", err)
		}
		if err := stopC(); err == nil {
			t.Fatal("Run returned nil when its backend's supervision ended")
		}
	})
}
