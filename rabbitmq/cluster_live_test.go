package rabbitmq

// A Jepsen-style check on a live three-node RabbitMQ cluster
// (scripts/rabbitmq cluster start), in the manner of RabbitMQ's own Jepsen
// suite and its total-queue checker: every confirmed job must be processed
// at least once or dead-lettered with a reason; lost jobs, duplicates and
// the time to recover are counted.
//
// The workload (faultFleet, the fault tests' own): a producer enqueues jobs
// with unique numbers and publisher confirms while two workers process them
// on a quorum work queue, with retries and deferrals, so that holds are in
// flight when the fault comes.
// Every process is supervised (Connect) with the three nodes' URLs, tried
// in turn, so all of them start on node 1: it hosts the classic hold queues
// and the leaders of the quorum queues.
//
// The nemesis: at a point drawn from the seed, it kills node 1 with
// SIGKILL, leaves it down for 75 s, then starts it again. The clients fail
// over to node 2. The span outlasts RabbitMQ 4.3's
// consumer_disconnected_timeout (60 s by default): until it runs out, a
// quorum queue keeps the deliveries in hand of consumers on a lost node
// assigned to them, so jobs a worker held at the kill come back only then.
//
// The same schedule runs twice, once with classic hold queues and once
// with quorum hold queues (Topology.HoldType), and each run prints a
// RESULT line. With quorum holds nothing may be lost, and every job
// confirmed 2 s before node 1 is started again must have ended by then.
// With classic holds the run reports what was stuck while the node was
// down and what was lost for good.
//
// AMQP_CLUSTER_URLS lists the nodes (comma-separated, as `scripts/rabbitmq
// cluster urls` prints them) and QUEUEY_RABBITMQ_SCRIPT is the script;
// without both the test skips. QUEUEY_CLUSTER_JOBS (default 2000),
// QUEUEY_CLUSTER_DOWN (default 75s, at least 65s) and QUEUEY_CLUSTER_SEED
// (default 1) size a longer soak. For the node-loss runs of
// docs/hold-ladder.md: QUEUEY_CLUSTER_RUNS repeats the ladder's run (seeds
// SEED, SEED+1, …) and leaves classic holds out; QUEUEY_CLUSTER_KILL=rungs
// kills the node that leads most of the work queue's rungs instead of
// node 1, the workers' (QUEUEY_CLUSTER_KILL=workers, the default); and
// QUEUEY_CLUSTER_TOPOLOGY=default runs the default topology (1 s
// granularity) instead of 100 ms.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// clusterEnv reads a positive integer or duration setting.
func clusterEnv[T int | time.Duration](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := parse(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a positive value", name, s)
	}
	return v
}

func TestLiveClusterNodeLoss(t *testing.T) {
	urls := strings.Split(os.Getenv("AMQP_CLUSTER_URLS"), ",")
	if urls[0] == "" || os.Getenv("QUEUEY_RABBITMQ_SCRIPT") == "" {
		t.Skip("AMQP_CLUSTER_URLS or QUEUEY_RABBITMQ_SCRIPT not set: skipping the cluster check (scripts/rabbitmq cluster start; see .ci/run)")
	}
	if len(urls) < 3 {
		t.Fatalf("AMQP_CLUSTER_URLS lists %d nodes; the check needs three", len(urls))
	}
	cfg := clusterCheck{
		urls: urls,
		jobs: clusterEnv(t, "QUEUEY_CLUSTER_JOBS", 2000, strconv.Atoi),
		down: clusterEnv(t, "QUEUEY_CLUSTER_DOWN", 75*time.Second, time.ParseDuration),
		seed: uint64(clusterEnv(t, "QUEUEY_CLUSTER_SEED", 1, strconv.Atoi)),
	}
	if cfg.down < 65*time.Second {
		t.Fatalf("QUEUEY_CLUSTER_DOWN=%s: the outage must outlast RabbitMQ 4.3's consumer_disconnected_timeout of 60 s, with margin: at least 65s", cfg.down)
	}
	cfg.victim = os.Getenv("QUEUEY_CLUSTER_KILL")
	switch cfg.victim {
	case "":
		cfg.victim = "workers"
	case "workers", "rungs":
	default:
		t.Fatalf("QUEUEY_CLUSTER_KILL=%q: want workers or rungs", cfg.victim)
	}
	cfg.defaults = os.Getenv("QUEUEY_CLUSTER_TOPOLOGY") == "default"
	runs := 0
	if os.Getenv("QUEUEY_CLUSTER_RUNS") != "" {
		runs = clusterEnv(t, "QUEUEY_CLUSTER_RUNS", 1, strconv.Atoi)
	}
	schedule := func(c clusterCheck, seed uint64) clusterCheck {
		rng := mrand.New(mrand.NewPCG(seed, 0x636c7573746572))
		// The kill comes between a fifth and two fifths of the way in.
		c.seed, c.killAt = seed, max(1, c.jobs/5+rng.IntN(c.jobs/5+1))
		t.Logf("schedule (seed %d): kill the %s' node after job %d of %d, start it again %s later", seed, c.victim, c.killAt, c.jobs, c.down)
		return c
	}
	if runs > 0 {
		for i := range runs {
			t.Run(fmt.Sprintf("holds=ladder/run=%d", i+1), func(t *testing.T) {
				c := schedule(cfg, cfg.seed+uint64(i))
				c.holds = "ladder"
				c.run(t)
			})
		}
		return
	}
	cfg = schedule(cfg, cfg.seed)
	for _, holds := range []string{"classic", "ladder"} {
		t.Run("holds="+holds, func(t *testing.T) {
			c := cfg
			c.holds = holds
			c.run(t)
		})
	}
}

// clusterCheck is one run of the check.
type clusterCheck struct {
	urls   []string
	jobs   int
	killAt int
	down   time.Duration
	seed   uint64
	holds  string // "classic" or "ladder" (the default)
	// victim is whose node is killed: "workers" (node 1, which every
	// process tries first) or "rungs" (the node leading most rungs).
	victim   string
	defaults bool // the default topology, not 100 ms granularity
}

func (c clusterCheck) topology() Topology {
	if c.defaults {
		return Topology{ClassicHolds: c.holds == "classic"}
	}
	return Topology{RetryGranularity: 100 * time.Millisecond, DeferredGranularity: 100 * time.Millisecond, ClassicHolds: c.holds == "classic"}
}

// declareThrough declares queues on a connection to url.
func (c clusterCheck) declareThrough(t *testing.T, url string, opts Options, queues []queuey.QueueConfig) {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := New(Channels(conn.Channel), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Declare(t.Context(), queues...); err != nil {
		t.Fatal(err)
	}
}

// rungLeader is the node (1 to 3) that leads most of the ladder's rungs,
// as each node lists the queues it leads (footprint_live_test.go's
// quorumOnline says why each lists its own).
func (c clusterCheck) rungLeader(t *testing.T) int {
	prefix := c.topology().LadderQueue(1)
	prefix = prefix[:len(prefix)-1] // queuey.ladder.
	best, bestN := 1, -1
	for n := 1; n <= 3; n++ {
		out, err := clusterCtlErr(n, "list_queues", "name", "--local", "--formatter", "json")
		if err != nil {
			t.Fatalf("listing node %d's queues: %v", n, err)
		}
		var qs []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(out, &qs); err != nil {
			t.Fatalf("listing node %d's queues: %v", n, err)
		}
		led := 0
		for _, q := range qs {
			if strings.HasPrefix(q.Name, prefix) {
				led++
			}
		}
		t.Logf("node %d leads %d of the ladder's rungs", n, led)
		if led > bestN {
			best, bestN = n, led
		}
	}
	return best
}

func (c clusterCheck) run(t *testing.T) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	faultQueue = "queuey-cluster-" + hex.EncodeToString(rnd[:])
	opts := Options{Topology: c.topology()}
	queues := []queuey.QueueConfig{{
		Name: faultQueue, Type: queuey.Quorum, Prefetch: 20,
		Retry: queuey.RetryPolicy{Base: 50 * time.Millisecond, Cap: 400 * time.Millisecond, MaxAttempts: 6},
	}}
	t.Cleanup(func() { c.deleteQueues(t) })

	if c.victim == "rungs" {
		// Queues declared through node 3 are led from there (4.3's
		// leaders are local to the declaring client): the rungs' node is
		// then not the workers', which connect to node 1.
		c.declareThrough(t, c.urls[2], opts, queues)
	}
	fleet := startFaultFleet(t, c.urls, opts, queues)
	producer, tally := fleet.producer, fleet.tally
	victim := "1"
	if c.victim == "rungs" {
		victim = strconv.Itoa(c.rungLeader(t))
	}

	// The nemesis runs beside the producer. Just before it starts node 1
	// again, it takes stock: which jobs confirmed 2 s or more before then
	// (time enough to end, holds included) have not ended.
	var confirmedMu sync.Mutex
	confirmedAt := map[int]time.Time{}
	unfinished := func(among []int) []int {
		tally.mu.Lock()
		defer tally.mu.Unlock()
		var out []int
		for _, n := range among {
			if tally.succeeded[n] == 0 {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	var killedAt, startedAt time.Time
	var settled, stuck []int
	var stuckHeld int
	nemesisDone := make(chan error, 1)
	nemesis := func() {
		killedAt = time.Now()
		if err := command("QUEUEY_RABBITMQ_SCRIPT", "cluster", "kill", victim); err != nil {
			nemesisDone <- err
			return
		}
		time.Sleep(time.Until(killedAt.Add(c.down)))
		confirmedMu.Lock()
		for n, at := range confirmedAt {
			if time.Since(at) >= 2*time.Second {
				settled = append(settled, n)
			}
		}
		confirmedMu.Unlock()
		stuck = unfinished(settled)
		stuckHeld = c.countHeld(tally, stuck)
		err := command("QUEUEY_RABBITMQ_SCRIPT", "cluster", "start-node", victim)
		startedAt = time.Now()
		nemesisDone <- err
	}

	confirmed := map[int]bool{}
	var maybe []int
	notSent := 0 // refused for the outage (ErrDisconnected): a caller would try again
	start := time.Now()
	for n := 1; n <= c.jobs; n++ {
		if n == c.killAt {
			go nemesis()
			// Whatever happens to the test, node 1 is up again before the
			// next run.
			t.Cleanup(func() {
				if nemesisDone != nil {
					<-nemesisDone
				}
			})
		}
		ectx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		_, err := producer.Enqueue(ectx, faultJob{N: n})
		cancel()
		switch {
		case err == nil:
			confirmed[n] = true
			confirmedMu.Lock()
			confirmedAt[n] = time.Now()
			confirmedMu.Unlock()
		case errors.Is(err, queuey.ErrMaybeEnqueued):
			maybe = append(maybe, n)
		case errors.Is(err, ErrDisconnected):
			notSent++
		default:
			t.Fatalf("enqueue %d: %v", n, err)
		}
	}
	enqueued := time.Since(start)
	t.Logf("enqueued %d jobs in %s: %d confirmed, %d maybe, %d not sent (no connection within a minute)", c.jobs, enqueued.Round(time.Millisecond), len(confirmed), len(maybe), notSent)
	all := make([]int, 0, len(confirmed))
	for n := range confirmed {
		all = append(all, n)
	}
	err := <-nemesisDone
	nemesisDone = nil
	if err != nil {
		t.Fatalf("the nemesis: %v", err)
	}
	t.Logf("node %s down from %s to %s into the run; of the %d jobs confirmed 2 s or more before it was started again, %d had not ended (%d of them last failed or deferred, so waited in a hold queue)",
		victim, killedAt.Sub(start).Round(time.Millisecond), startedAt.Sub(start).Round(time.Millisecond), len(settled), len(stuck), stuckHeld)

	// After it is back: wait until every confirmed job has ended or
	// nothing has run for 15 s.
	for len(unfinished(all)) > 0 {
		tally.mu.Lock()
		idle := time.Since(tally.lastRun)
		tally.mu.Unlock()
		if idle > 15*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fleet.stop(t)

	dead := c.drainDead(t)
	lost := 0
	var lostJobs []string
	for _, n := range unfinished(all) {
		if _, ok := dead[n]; !ok {
			lost++
			lostJobs = append(lostJobs, fmt.Sprintf("job %d (last run: %s)", n, tally.last[n]))
		}
	}
	reasons := map[string]int{}
	for _, r := range dead {
		reasons[r]++
	}
	tally.mu.Lock()
	duplicates := 0
	for _, k := range tally.succeeded {
		duplicates += max(k-1, 0)
	}
	runs := tally.runs
	tally.mu.Unlock()
	tally.mu.Lock()
	lastRun := tally.lastRun
	late := lateDeferrals(tally.late, tally.lateAt, startedAt)
	tally.mu.Unlock()
	reconnected := fleet.reconnections()
	recovery := "never"
	if len(reconnected) > 0 {
		recovery = slices.MinFunc(reconnected, func(a, b time.Time) int { return a.Compare(b) }).Sub(killedAt).Round(time.Millisecond).String() + " after the kill"
	}
	t.Logf("RESULT %s: %d jobs, %d confirmed, %d maybe-enqueued, %d not sent; node %s down %s: %d of the %d jobs confirmed 2 s before its restart unfinished then, %d lost for good, %d dead-lettered %v, %d duplicates, %d handler runs; the first worker reconnected %s; the last job ran %s after the kill (%s after the restart); enqueueing took %s; %s",
		t.Name(), c.jobs, len(confirmed), len(maybe), notSent, victim, startedAt.Sub(killedAt).Round(time.Millisecond), len(stuck), len(settled), lost, len(dead), reasons, duplicates, runs, recovery, lastRun.Sub(killedAt).Round(time.Millisecond), lastRun.Sub(startedAt).Round(time.Millisecond), enqueued.Round(time.Millisecond), late)
	if lost > 0 {
		t.Logf("lost: %s", strings.Join(lostJobs, "; "))
	}
	if c.holds == "ladder" {
		if lost != 0 || len(dead) != 0 {
			t.Errorf("ladder: %d lost and %d dead-lettered; want none", lost, len(dead))
		}
		if len(stuck) != 0 {
			t.Errorf("ladder: %d jobs confirmed 2 s before node %s was started again had not ended: %v", len(stuck), victim, stuck)
		}
		if notSent != 0 {
			t.Errorf("ladder: %d enqueues found no connection within a minute", notSent)
		}
	}
}

// countHeld counts the jobs among ns whose last run failed or deferred
// them: their successor waited in a hold queue.
func (clusterCheck) countHeld(tally *faultTally, ns []int) int {
	tally.mu.Lock()
	defer tally.mu.Unlock()
	held := 0
	for _, n := range ns {
		if o := tally.outcome[n]; o == "failed" || o == "deferred" {
			held++
		}
	}
	return held
}

// dialAny dials the first node that answers.
func (c clusterCheck) dialAny() (*amqp.Connection, error) {
	var errs []error
	for _, u := range c.urls {
		conn, err := amqp.Dial(u)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// drainDead takes every message off the dead-letter queue and returns the
// job numbers with their reasons: queuey's x-death-reason, or the
// broker's x-first-death-reason.
func (c clusterCheck) drainDead(t *testing.T) map[int]string {
	t.Helper()
	conn, err := c.dialAny()
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for {
		d, ok, err := ch.Get(c.topology().DeadQueue(faultQueue), true)
		if err != nil {
			t.Fatalf("the dead-letter queue: %v", err)
		}
		if !ok {
			return out
		}
		reason, _ := d.Headers["x-death-reason"].(string)
		if reason == "" {
			reason, _ = d.Headers["x-first-death-reason"].(string)
		}
		env, err := queuey.DecodeEnvelope(d.Body)
		if err != nil {
			out[-len(out)-1] = reason
			continue
		}
		var job faultJob
		_ = json.Unmarshal(env.Payload, &job)
		out[job.N] = reason
	}
}

// deleteQueues deletes the work queue, its dead-letter queue and every hold
// queue the run may have used.
func (c clusterCheck) deleteQueues(t *testing.T) {
	conn, err := c.dialAny()
	if err != nil {
		t.Errorf("cleanup: dial: %v", err)
		return
	}
	defer conn.Close()
	top := c.topology()
	names := []string{faultQueue, top.DeadQueue(faultQueue)}
	for ttl := int64(100); ttl <= 400; ttl += 100 {
		names = append(names, top.HoldQueue(faultQueue, ttl))
	}
	names = append(names, top.WarmQueue(faultQueue)) // the shared ladder stays
	for _, name := range names {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.Close()
	}
}
