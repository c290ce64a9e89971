package conformance_test

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/membroker/conformance"
	"github.com/queuey/queuey/sim"
	amqp "github.com/rabbitmq/amqp091-go"
)

var update = flag.Bool("update", false, "rewrite each release's recorded live traces from its live broker")

// release is a RabbitMQ release the suite proves a membroker profile
// against: its live broker is at the URL in urlVar (scripts/rabbitmq starts
// both), and its live traces are recorded under testdata.
type release struct {
	name    string
	version membroker.Version
	urlVar  string
	live    string // recorded traces of the hand-written scenarios
	regress string // generated sequences that once diverged, with their live traces
	tally   *tally
}

var releases = []release{
	{"4.0", membroker.RabbitMQ40, "AMQP_URL", filepath.Join("testdata", "live"), filepath.Join("testdata", "regressions"), &tally{}},
	{"4.3", membroker.RabbitMQ43, "AMQP_URL_43", filepath.Join("testdata", "live-4.3"), filepath.Join("testdata", "regressions-4.3"), &tally{}},
}

func (r release) url() string { return os.Getenv(r.urlVar) }

// tally counts one release's outcomes for the report printed after the run.
type tally struct {
	handAgreed, handDiverged, handAllowed atomic.Int64
	genAgreed, genDiverged                atomic.Int64
	handLate, genLate                     atomic.Int64 // inconclusive: the live side fell behind its schedule
	genRaced                              atomic.Int64 // inconclusive: traces differ after racing dead letters
	broker                                string
}

// liveParallel is how many runs (hand-written scenarios and generated
// sequences, both releases together) are on the live brokers at once
// unless -test.parallel says otherwise. A run spends nearly all its time
// waiting on TTLs (the slowest waits out 4.0's 60 s channel tick), so their
// waits overlap; but each one running adds to the brokers' load, and a
// loaded broker's timers run late, which the suite sees as runs behind
// schedule (inconclusive) or, where only the broker was late, as a
// divergence. docs/membroker.md has the figures that chose this setting.
const liveParallel = 16

// liveSlots hands out the liveParallel slots (see slots). TestMain sizes it.
var liveSlots *slots

// Ranks in liveSlots' queue: a hand-written scenario's is its place in
// longestFirst's order; every generated sequence and regression comes
// after them.
const laterRank = 1 << 20

func TestMain(m *testing.M) {
	flag.Parse()
	// The live runs are bounded by liveSlots, not by -test.parallel:
	// every run waits its turn there, ranked, so that go test's own limit
	// is set above the number of tests, and only a -test.parallel given
	// on the command line sizes the slots.
	n := liveParallel
	if flagSet("test.parallel") {
		n, _ = strconv.Atoi(flag.Lookup("test.parallel").Value.String())
	} else {
		_ = flag.Set("test.parallel", "4096")
	}
	liveSlots = newSlots(max(1, n))
	for _, r := range releases {
		if url := r.url(); url != "" {
			if c, err := amqp.Dial(url); err == nil {
				r.tally.broker = fmt.Sprintf("%v %v", c.Properties["product"], c.Properties["version"])
				_ = c.Close()
			}
		}
	}
	start := time.Now()
	code := m.Run()
	var report strings.Builder
	for _, r := range releases {
		c := r.tally
		against := "the live broker " + c.broker
		if r.url() == "" {
			against = "the live traces recorded in " + r.live + " (" + r.urlVar + " not set)"
		}
		fmt.Fprintf(&report, "conformance: %s profile against %s: %d hand-written scenarios agreed, %d diverged (%d allow-listed), %d inconclusive; "+
			"%d generated sequences agreed, %d diverged, %d inconclusive (%d behind schedule, %d after racing dead letters); %s\n",
			r.version, against, c.handAgreed.Load(), c.handDiverged.Load(), c.handAllowed.Load(), c.handLate.Load(),
			c.genAgreed.Load(), c.genDiverged.Load(), c.genLate.Load()+c.genRaced.Load(), c.genLate.Load(), c.genRaced.Load(),
			time.Since(start).Round(time.Second))
	}
	fmt.Print(report.String())
	// go test ./... shows a passing package's output only with -v: CI names
	// a file to collect the report in.
	if path := os.Getenv("QUEUEY_CONFORMANCE_REPORT"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(report.String())
			_ = f.Close()
		}
	}
	os.Exit(code)
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// uniquePrefix keeps runs on a shared live broker apart.
func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "cf-" + hex.EncodeToString(b[:]) + "-"
}

// allowList reads testdata/allowlist.txt: "name: justification" lines for
// divergences the project accepts. It should be empty.
func allowList(t *testing.T) map[string]string {
	data, err := os.ReadFile(filepath.Join("testdata", "allowlist.txt"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, why, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(why) == "" {
			t.Fatalf("allowlist line without a justification: %q", line)
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(why)
	}
	return out
}

func runOn(target conformance.Target, prefix string, fn func(*conformance.Run)) ([]string, error) {
	return conformance.NewRun(target, prefix).Execute(fn)
}

// runModel runs fn on the model of release v and returns its trace and
// what a live run should wait for (conformance.Expectations).
func runModel(v membroker.Version, fn func(*conformance.Run)) ([]string, conformance.Expectations, error) {
	run := conformance.NewRun(conformance.NewModel(v), "cf-model-")
	trace, err := run.Execute(fn)
	return trace, run.Expectations(), err
}

// liveTries is how often a live run that fell behind its schedule is tried
// again before it is called inconclusive.
const liveTries = 3

// runLive runs fn on the live broker once one of liveSlots is free
// (rank orders the waiting runs), waiting for what the model saw (expect). A run that fell more than conformance.MaxLate
// behind its schedule cannot be compared (its deadlines moved relative to
// its observations) and is tried again; onTime is false if every try was
// late. Lateness does not matter to a run that set no deadline, or that
// was over before its shortest deadline could pass.
func runLive(url string, rank int, fn func(*conformance.Run), expect conformance.Expectations) (trace []string, late time.Duration, onTime bool, err error) {
	defer liveSlots.acquire(rank)()
	for range liveTries {
		target := &conformance.Live{URL: url}
		run := conformance.NewRun(target, uniquePrefix())
		run.Expect(expect)
		trace, err = run.Execute(fn)
		late = target.Late()
		if err != nil || !run.Timed() || late <= conformance.MaxLate || target.Span() < run.Shortest() {
			return trace, late, true, err
		}
	}
	return trace, late, false, nil
}

// TestHandWritten runs every hand-written scenario, for each release, on
// the release's model and, when its URL is set, on its live broker, and
// requires equal traces. Without the live broker the model's trace is
// compared with the live trace recorded for the release, so the comparison
// with real RabbitMQ behaviour holds without a broker too.
//
// Every scenario works on queues of its own (Run.Q) and changes nothing
// broker-wide: the consumer timeouts are queue and consumer arguments, and
// no scenario restarts the broker. So all of them, on both releases, run in
// parallel, liveParallel at a time together with TestGenerated's
// sequences, the longest on the model's clock started first, so that the
// 62 s consumer-timeout scenarios overlap the rest instead of trailing
// them.
func TestHandWritten(t *testing.T) {
	t.Parallel()
	allowed := allowList(t)
	for _, rel := range releases {
		if rel.url() == "" {
			t.Logf("%s not set: skipping the live half for %s; comparing the model with recorded live traces", rel.urlVar, rel.name)
		}
	}
	for i, sc := range longestFirst(conformance.All()) {
		for j, rel := range releases {
			t.Run(rel.name+"/"+sc.Name, func(t *testing.T) {
				t.Parallel()
				handWritten(t, rel, i*len(releases)+j, sc, allowed)
			})
		}
	}
}

// longestFirst orders scenarios by how long they take on the model's
// clock, which is how long they wait on a live broker, longest first (and
// by name among equals).
func longestFirst(all []conformance.Scenario) []conformance.Scenario {
	took := map[string]time.Duration{}
	for _, sc := range all {
		m := conformance.NewModel(membroker.RabbitMQ40)
		start := m.Clk.Now()
		_, _ = conformance.NewRun(m, "cf-model-").Execute(sc.Run)
		took[sc.Name] = m.Clk.Now().Sub(start)
	}
	out := slices.Clone(all)
	slices.SortStableFunc(out, func(a, b conformance.Scenario) int { return cmp.Compare(took[b.Name], took[a.Name]) })
	return out
}

func handWritten(t *testing.T, rel release, rank int, sc conformance.Scenario, allowed map[string]string) {
	c := rel.tally
	model, expect, err := runModel(rel.version, sc.Run)
	if err != nil {
		t.Fatalf("model: %v", err)
	}
	golden := filepath.Join(rel.live, sc.Name+".trace")
	want, reference := readTrace(t, golden), "recorded live trace "+golden
	if url := rel.url(); url != "" {
		// A hand-written scenario says how many deliveries it waits for
		// (Receive), so only the counts after its waits are expected.
		live, late, onTime, err := runLive(url, rank, sc.Run, conformance.Expectations{Counts: expect.Counts})
		if err != nil {
			t.Fatalf("live: %v", err)
		}
		if !onTime {
			c.handLate.Add(1)
			t.Skipf("inconclusive: the live broker fell more than %s behind the scenario's schedule %d times, last by %s (is the machine overloaded?)",
				conformance.MaxLate, liveTries, late.Round(time.Millisecond))
		}
		if *update {
			writeTrace(t, golden, live)
		}
		want, reference = live, "live broker "+rel.name
	}
	if want == nil {
		t.Fatalf("no live trace for %s on %s: run with %s set and -update", sc.Name, rel.name, rel.urlVar)
	}
	if diff := gocmp.Diff(want, model); diff != "" {
		if why, ok := allowed[rel.name+"/"+sc.Name]; ok {
			c.handAllowed.Add(1)
			t.Logf("allow-listed divergence (%s):\n%s", why, diff)
			return
		}
		c.handDiverged.Add(1)
		t.Errorf("scenario %s (%s): the %s model differs from %s (-live +model):\n%s", sc.Name, sc.Cite, rel.version, reference, diff)
		return
	}
	c.handAgreed.Add(1)
}

// TestHandWrittenWithSimulatorTiming runs every hand-written scenario on a
// model with the latency and timer slack the simulator gives it by default,
// under three seeds, and requires the recorded live trace: the looseness
// that lets the simulator see a hold queue expire under its message
// changes nothing the suite observes, whose waits keep margins of tens of
// milliseconds. A quorum queue's x-expires tick is left out: it moves a
// quorum queue's deletion by up to 5 s, which the hand-written scenarios,
// timed to the exact model, do not wait for.
func TestHandWrittenWithSimulatorTiming(t *testing.T) {
	t.Parallel()
	for _, rel := range releases {
		for _, sc := range conformance.All() {
			want := readTrace(t, filepath.Join(rel.live, sc.Name+".trace"))
			if want == nil {
				continue
			}
			t.Run(rel.name+"/"+sc.Name, func(t *testing.T) {
				t.Parallel()
				for seed := range uint64(3) {
					tm := membroker.Timing{Latency: sim.DefaultLatency, TimerSlack: sim.DefaultTimerSlack, Seed: seed}
					model, err := runOn(conformance.NewTimedModel(rel.version, tm), "cf-model-", sc.Run)
					if err != nil {
						t.Fatalf("model: %v", err)
					}
					if diff := gocmp.Diff(want, model); diff != "" {
						t.Fatalf("scenario %s (%s), timing seed %d: the %s model with the simulator's timing differs from the recorded live trace (-live +model):\n%s", sc.Name, sc.Cite, seed, rel.version, diff)
					}
				}
			})
		}
	}
}

func readTrace(t *testing.T, path string) []string {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func writeTrace(t *testing.T, path string, trace []string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(trace, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
