package conformance_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/membroker/conformance"
	"pgregory.net/rapid"
)

// minGenerated is how many generated sequences a run checks against each
// live broker unless -rapid.checks says otherwise.
const minGenerated = 200

// generatedShards is how many rapid checks share a release's sequences,
// each drawing from a seed of its own, all at once: a sequence spends most
// of its time waiting for TTLs and for the live broker to settle, so the
// shards' waits overlap. Their live runs queue for liveSlots behind the
// hand-written scenarios; two releases' shards are enough to fill every
// slot once those have started. With -rapid.seed, one shard replays that
// seed.
const generatedShards = liveParallel / 2

// generatedChecks sets -rapid.checks to each shard's share of the
// sequences, minGenerated in all unless -rapid.checks was given, and
// returns the number of shards.
func generatedChecks() int {
	total, shards := minGenerated, generatedShards
	if flagSet("rapid.checks") {
		total, _ = strconv.Atoi(flag.Lookup("rapid.checks").Value.String())
	}
	if flagSet("rapid.seed") {
		shards = 1
	}
	_ = flag.Set("rapid.checks", strconv.Itoa(max(1, (total+shards-1)/shards)))
	return shards
}

// fataler is what playBoth needs of *testing.T and *rapid.T.
type fataler interface {
	Fatalf(format string, args ...any)
}

// playBoth runs a sequence on the model, then on the live broker waiting
// for what the model saw (conformance.Expectations), and returns both traces; onTime
// is false when the live side could not keep the schedule (see runLive),
// raced is true when the order of the model's trace is one of several a
// live broker may show (see conformance.Model.Raced).
func playBoth(t fataler, rel release, url string, s conformance.Sequence) (live, model []string, onTime, raced bool) {
	m := conformance.NewModel(rel.version)
	mrun := conformance.NewRun(m, "cf-model-")
	model, err := mrun.Execute(s.Play)
	if err != nil {
		t.Fatalf("model: %v", err)
	}
	live, _, onTime, err = runLive(url, laterRank, s.Play, mrun.Expectations())
	if err != nil {
		t.Fatalf("live: %v", err)
	}
	return live, model, onTime, m.Raced()
}

// TestGenerated runs rapid-generated operation sequences (declare with a
// random valid argument set, publish with random properties, get, consume
// with prefetch, ack, nack, reject, cancel, close, wait, purge), for each
// release whose live broker is set, on that broker and on the release's
// model, and requires equal traces. Both releases, and generatedShards
// shards of each, run at once. A failing sequence is shrunk by rapid and
// saved with its live trace under the release's regressions.
func TestGenerated(t *testing.T) {
	t.Parallel()
	shards := generatedChecks()
	for _, rel := range releases {
		t.Run(rel.name, func(t *testing.T) {
			t.Parallel()
			url := rel.url()
			if url == "" {
				t.Skipf("%s not set: generated sequences need a live %s broker (the saved regressions still run in TestRegressions)", rel.urlVar, rel.name)
			}
			for i := range shards {
				t.Run(fmt.Sprintf("shard=%d", i+1), func(t *testing.T) {
					t.Parallel()
					generated(t, rel, url)
				})
			}
		})
	}
}

// generated is one shard of TestGenerated: a rapid check of as many
// sequences as -rapid.checks says.
func generated(t *testing.T, rel release, url string) {
	c := rel.tally
	// rapid runs the property again and again while it shrinks a failure;
	// the last failing call is the smallest sequence, and that one is kept.
	var last *conformance.Sequence
	var lastLive []string
	t.Cleanup(func() {
		if last != nil {
			saveRegression(t, rel, *last, lastLive)
		}
	})
	shrinking := false
	rapid.Check(t, func(rt *rapid.T) {
		s := conformance.Generator().Draw(rt, "sequence")
		live, model, onTime, raced := playBoth(rt, rel, url, s)
		if !onTime {
			c.genLate.Add(1)
			return // inconclusive, counted in the report
		}
		diff := gocmp.Diff(live, model)
		if diff != "" && raced {
			if shrinking {
				return
			}
			c.genRaced.Add(1)
			// Logged on t, not rt: rapid shows rt's log only for a failure,
			// and what was set aside should be there to read.
			t.Logf("inconclusive: dead letters raced (the live order is not fixed; Model.Raced):\n%s", diff)
			return
		}
		if diff != "" {
			if !shrinking {
				c.genDiverged.Add(1)
				shrinking = true
			}
			last, lastLive = &s, live
			rt.Fatalf("the %s model differs from live %s (-live +model):\n%s", rel.version, rel.name, diff)
		}
		if !shrinking {
			c.genAgreed.Add(1)
		}
	})
}

// saveRegression keeps a failing sequence and its live trace under
// testdata/regressions, named by its content.
func saveRegression(t *testing.T, rel release, s conformance.Sequence, live []string) {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	base := filepath.Join(rel.regress, hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(base+".json", append(data, '\n'), 0o644)
	writeTrace(t, base+".trace", live)
}

// TestRegressions replays every saved sequence of each release on its
// model and compares it with its recorded live trace, and with the live
// broker when the release's URL is set.
func TestRegressions(t *testing.T) {
	t.Parallel()
	for _, rel := range releases {
		t.Run(rel.name, func(t *testing.T) {
			t.Parallel()
			regressions(t, rel)
		})
	}
}

func regressions(t *testing.T, rel release) {
	files, _ := filepath.Glob(filepath.Join(rel.regress, "*.json"))
	sort.Strings(files)
	url := rel.url()
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var s conformance.Sequence
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatal(err)
			}
			want := readTrace(t, strings.TrimSuffix(f, ".json")+".trace")
			var model []string
			var raced bool
			if url != "" {
				var onTime bool
				want, model, onTime, raced = playBoth(t, rel, url, s)
				if !onTime {
					t.Skipf("inconclusive: the live broker could not keep the schedule")
				}
				if *update {
					writeTrace(t, strings.TrimSuffix(f, ".json")+".trace", want)
				}
			} else {
				m := conformance.NewModel(rel.version)
				model, err = conformance.NewRun(m, "cf-model-").Execute(s.Play)
				if err != nil {
					t.Fatal(err)
				}
				raced = m.Raced()
			}
			diff := gocmp.Diff(want, model)
			if diff != "" && raced {
				t.Skipf("inconclusive: dead letters raced (the live order is not fixed; Model.Raced):\n%s", diff)
			}
			if diff != "" {
				t.Errorf("regression %s: the %s model differs from live %s (-live +model):\n%s", name, rel.version, rel.name, diff)
			}
		})
	}
}
