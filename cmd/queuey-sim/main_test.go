package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")

// runCLI runs the command and returns its exit status, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// small is the golden scenario's command line: three granularities and
// the legacy row of two virtual minutes, well under a second in all.
var small = []string{"run", "testdata/small.yaml", "--granularity", "100ms,1s,10s", "--compare-legacy"}

// TestGolden: the table, JSON and CSV reports of a small scenario are
// exactly the golden files (go test -update rewrites them), nothing goes
// to stderr, and the reports hold no wall-clock time: the same run gives
// the same bytes whatever the parallelism.
func TestGolden(t *testing.T) {
	for _, tc := range []struct{ name, flag string }{
		{"small.table.golden", ""},
		{"small.json.golden", "--json"},
		{"small.csv.golden", "--csv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string(nil), small...)
			if tc.flag != "" {
				args = append(args, tc.flag)
			}
			code, out, errOut := runCLI(t, args...)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			golden := filepath.Join("testdata", tc.name)
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), out); diff != "" {
				t.Errorf("output differs from %s (-want +got):\n%s", golden, diff)
			}
			_, serial, _ := runCLI(t, append(args, "--parallel", "1")...)
			if serial != out {
				t.Error("--parallel 1 gave another report")
			}
		})
	}
}

// TestGoldenJSONParses: the JSON report decodes, with the rows in
// granularity order and the legacy row's violations all expected.
func TestGoldenJSONParses(t *testing.T) {
	code, out, _ := runCLI(t, append(small, "--json")...)
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var grans []time.Duration
	for _, r := range rep.Rows {
		grans = append(grans, r.Granularity.D())
	}
	if diff := cmp.Diff([]time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second, time.Second}, grans); diff != "" {
		t.Errorf("rows' granularities (-want +got):\n%s", diff)
	}
	leg := rep.Rows[3]
	if !leg.Legacy || leg.Violations == 0 || leg.ExpectedViolations != leg.Violations {
		t.Errorf("legacy row: legacy %v, %d violations, %d expected", leg.Legacy, leg.Violations, leg.ExpectedViolations)
	}
	for _, r := range rep.Rows[:3] {
		if r.Violations != 0 {
			t.Errorf("%s: %d violations", r.Label, r.Violations)
		}
	}
	if rep.Seed != 7 || !rep.Recommendation.Found {
		t.Errorf("seed %d, recommendation %+v", rep.Seed, rep.Recommendation)
	}
}

// TestSeedAndOverrides: --seed changes the run (and is printed), and the
// other overrides reach the scenario.
func TestSeedAndOverrides(t *testing.T) {
	args := []string{"run", "testdata/small.yaml", "--granularity", "1s", "--duration", "30s", "--drain", "10s",
		"--profile", "RabbitMQ43", "--queue-type", "quorum", "--hold-type", "quorum", "--json"}
	code, out, errOut := runCLI(t, append(args, "--seed", "99")...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Seed != 99 || rep.Duration.D() != 30*time.Second || rep.Drain.D() != 10*time.Second ||
		rep.Profile != "RabbitMQ43" || rep.Queues[0].Type != "quorum" || rep.HoldType != "quorum" {
		t.Errorf("overrides not applied: %+v", rep)
	}
	_, out2, _ := runCLI(t, append(args, "--seed", "100")...)
	var rep2 report
	if err := json.Unmarshal([]byte(out2), &rep2); err != nil {
		t.Fatal(err)
	}
	if rep.Rows[0].TraceHash == rep2.Rows[0].TraceHash {
		t.Error("another seed gave the same trace")
	}
	_, table, _ := runCLI(t, "run", "testdata/small.yaml", "--granularity", "1s", "--seed", "99")
	if !strings.Contains(table, "seed 99;") {
		t.Errorf("the table does not print the seed:\n%s", table)
	}
}

// TestPlot: --plot writes an SVG that parses as XML from start to end, and
// a PNG that decodes.
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "sweep.svg")
	pngFile := filepath.Join(dir, "sweep.png")
	for _, f := range []string{svg, pngFile} {
		code, _, errOut := runCLI(t, "run", "testdata/small.yaml", "--granularity", "100ms,1s,10s", "--plot", f, "--csv")
		if code != exitOK || errOut != "" {
			t.Fatalf("%s: exit %d, stderr:\n%s", f, code, errOut)
		}
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var root string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	for _, want := range []string{"peak hold queues", "p99 added wait (s)", "retry granularity", "budget (50)"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the SVG has no %q", want)
		}
	}
	f, err := os.Open(pngFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("the PNG does not decode: %v", err)
	}
}

// TestBadInput: every kind of bad input exits 2 with a message naming the
// field or flag and the problem, writes nothing to stdout, and never
// panics.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unknown := write("unknown.yaml", "duration: 1m\nqueues:\n  - arrivals: [{process: poisson, rat: 5}]\n")
	negative := write("negative.yaml", "duration: 1m\nqueues:\n  - arrivals: [{process: poisson, rate: -5}]\n")
	negJSON := write("negative.json", `{"duration": "1m", "queues": [{"arrivals": [{"process": "poisson", "rate": -5}]}]}`)
	badProfile := write("profile.yaml", "duration: 1m\nprofile: RabbitMQ39\nqueues:\n  - arrivals: [{process: poisson, rate: 5}]\n")
	badReplay := write("bad.jsonl", "{\"at\": \"1s\"}\n# a comment\n{\"at\": \"2s\", \"outcome\": \"ok\"}\n")
	badOutcome := write("outcome.jsonl", "{\"at\": \"1s\", \"outcomes\": [\"ok\", \"maybe\"]}\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown field", []string{"run", unknown}, "unknown.yaml: queues[0].arrivals[0].rat: unknown field"},
		{"negative rate", []string{"run", negative}, "queues[0].arrivals[0].rate: must be a positive number of jobs per second, got -5"},
		{"negative rate in JSON", []string{"run", negJSON}, "negative.json: queues[0].arrivals[0].rate: must be a positive number"},
		{"zero granularity", []string{"--granularity", "1s,0s"}, `--granularity: granularity of zero ("0s")`},
		{"negative granularity", []string{"--granularity", "-1s"}, `--granularity: negative granularity "-1s"`},
		{"missing file", []string{"run", filepath.Join(dir, "nope.yaml")}, "scenario file: open " + filepath.Join(dir, "nope.yaml") + ": no such file or directory"},
		{"missing replay file", []string{"replay", filepath.Join(dir, "nope.jsonl")}, "replay file: open "},
		{"bad profile flag", []string{"--profile", "RabbitMQ39"}, `--profile: unknown profile "RabbitMQ39": want RabbitMQ40 or RabbitMQ43`},
		{"bad profile in file", []string{"run", badProfile}, `profile.yaml: profile: unknown profile "RabbitMQ39"`},
		{"bad queue type", []string{"--queue-type", "stream"}, `--queue-type: unknown queue type "stream"`},
		{"bad hold type", []string{"--hold-type", "stream"}, `--hold-type: unknown hold queue type "stream"`},
		{"bad replay line", []string{"replay", badReplay}, `bad.jsonl:3: unknown field "outcome"`},
		{"bad replay outcome", []string{"replay", badOutcome}, `outcome.jsonl:1: outcomes[1]: unknown outcome "maybe"`},
		{"unknown flag", []string{"--nope"}, "unknown flag --nope"},
		{"unknown command", []string{"walk"}, `unknown command "walk"`},
		{"missing FILE", []string{"run"}, "run: missing FILE argument"},
		{"bad plot format", []string{"--plot", "x.pdf"}, "--plot: x.pdf: want a file ending in .svg or .png"},
		{"zero duration", []string{"--duration", "0s"}, "flag --duration: must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q does not contain %q", errOut, tc.want)
			}
			if out != "" {
				t.Errorf("stdout not empty: %q", out)
			}
		})
	}
}

// TestHelp documents every flag with its default, on stdout, exit 0.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		code, out, errOut := runCLI(t, arg)
		if code != exitOK || errOut != "" {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errOut)
		}
		newConfig().flagSet().VisitAll(func(f *flag.Flag) {
			i := strings.Index(out, "  --"+f.Name)
			if i < 0 {
				t.Errorf("%s: --%s is not documented", arg, f.Name)
				return
			}
			entry, _, _ := strings.Cut(out[i+3:], "\n  --")
			if !strings.Contains(entry, "(default") {
				t.Errorf("%s: --%s's entry gives no default:\n%s", arg, f.Name, entry)
			}
		})
	}
}

// TestExamples: the shipped example scenario and replay file load and run.
func TestExamples(t *testing.T) {
	for _, args := range [][]string{
		{"run", "examples/scenario.yaml", "--duration", "1m", "--drain", "30s", "--granularity", "10s"},
		{"replay", "examples/replay.jsonl", "--granularity", "1s,10s", "--compare-legacy"},
		{"replay", "examples/replay.jsonl", "--scenario", "testdata/small.yaml", "--granularity", "1s"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != exitOK || errOut != "" {
			t.Fatalf("%v: exit %d, stderr:\n%s", args, code, errOut)
		}
		if !strings.Contains(out, "recommendation: ") {
			t.Errorf("%v: no recommendation:\n%s", args, out)
		}
	}
}

// TestDefaultScenario: the embedded default scenario is the sizing
// workload (sim's sizing(), BenchmarkSizingHour).
func TestDefaultScenario(t *testing.T) {
	got, err := defaultScenario()
	if err != nil {
		t.Fatal(err)
	}
	d := func(v time.Duration) sim.Duration { return sim.Duration(v) }
	// sizing() leaves MaxAttempts 0, queuey's default of 10, which
	// default.yaml spells out.
	want := sim.Scenario{
		Name: "rate-limited external API", Duration: d(time.Hour),
		Queues: []sim.Queue{{
			Workers: 4, Prefetch: 10,
			Retry:    sim.Retry{Base: d(time.Second), Cap: d(5 * time.Minute), MaxAttempts: 10},
			Arrivals: []sim.Arrival{{Process: sim.ArrivalPoisson, Rate: 100}},
			Outcome: sim.Outcome{
				Retryable: 0.30, RateLimited: 0.05,
				RetryAfter: sim.Dist{Dist: sim.DistConstant, Value: d(30 * time.Second)},
				Handler:    sim.Dist{Dist: sim.DistExponential, Mean: d(250 * time.Millisecond)},
			},
		}},
	}
	if diff := cmp.Diff(want.WithDefaults(), got.WithDefaults()); diff != "" {
		t.Errorf("default scenario differs from the sizing workload (-want +got):\n%s", diff)
	}
}

// TestParseArgs: flags before and after the command, defaults, and
// refusals.
func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(*config) bool
		wantErr string
	}{
		{"defaults", nil, func(c *config) bool {
			return c.command == "" && cmp.Equal(c.grans, defaultGranularities) && c.budget == 50 && c.format == formatTable && !c.seedSet
		}, ""},
		{"flags after the file", []string{"run", "s.yaml", "--json", "--budget", "10"}, func(c *config) bool {
			return c.command == "run" && c.file == "s.yaml" && c.format == formatJSON && c.budget == 10
		}, ""},
		{"granularities sorted, deduplicated", []string{"--granularity", "10s, 1s,1s,500ms"}, func(c *config) bool {
			return cmp.Equal(c.grans, []time.Duration{500 * time.Millisecond, time.Second, 10 * time.Second})
		}, ""},
		{"replay with a base scenario", []string{"--seed", "0", "replay", "w.jsonl", "--scenario", "s.yaml", "--drain", "0s"}, func(c *config) bool {
			return c.command == "replay" && c.file == "w.jsonl" && c.scenario == "s.yaml" && c.seedSet && c.drainSet
		}, ""},
		{"csv", []string{"--csv"}, func(c *config) bool { return c.format == formatCSV }, ""},
		{"json and csv", []string{"--json", "--csv"}, nil, "--json and --csv: choose one"},
		{"zero budget", []string{"--budget", "0"}, nil, "--budget: must be at least 1"},
		{"zero parallel", []string{"--parallel", "0"}, nil, "--parallel: must be at least 1"},
		{"empty granularity", []string{"--granularity", "1s,"}, nil, "an empty entry"},
		{"bad granularity", []string{"--granularity", "fast"}, nil, `"fast" is not a duration`},
		{"sub-millisecond granularity", []string{"--granularity", "500us"}, nil, `granularity "500us" is under 1ms`},
		{"huge granularity", []string{"--granularity", "1000h"}, nil, `granularity "1000h" is over 596h31m23.647s`},
		{"negative drain", []string{"--drain", "-1s"}, nil, "must not be negative"},
		{"two files", []string{"run", "a", "b"}, nil, `run takes one FILE, got also "b"`},
		{"scenario without replay", []string{"--scenario", "s.yaml", "run", "x"}, nil, "--scenario: only replay"},
		{"help", []string{"run", "x", "--help"}, nil, flag.ErrHelp.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Errorf("unexpected config: %+v", cfg)
			}
		})
	}
}

// TestDecodeScenario: YAML and JSON files decode to the same scenario, and
// bad files are refused with the field's path and the problem.
func TestDecodeScenario(t *testing.T) {
	yamlSrc := "name: t\nduration: 90s\nqueues:\n  - name: q\n    max_priority: 0\n    arrivals:\n      - {process: burst, every: 10s, size: 3}\n"
	jsonSrc := `{"name": "t", "duration": "90s", "queues": [{"name": "q", "max_priority": 0, "arrivals": [{"process": "burst", "every": "10s", "size": 3}]}]}`
	y, err := decodeScenario([]byte(yamlSrc), false)
	if err != nil {
		t.Fatal(err)
	}
	j, err := decodeScenario([]byte(jsonSrc), true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(j, y); diff != "" {
		t.Errorf("YAML and JSON differ (-json +yaml):\n%s", diff)
	}
	if *y.Queues[0].MaxPriority != 0 {
		t.Error("max_priority: 0 was lost")
	}

	const q = "duration: 1m\nqueues:\n  - arrivals: [{process: poisson, rate: 5}]\n"
	for _, tc := range []struct {
		name, src string
		json      bool
		want      string
	}{
		{"unknown top-level field", "nmae: x\n" + q, false, "nmae: unknown field (the top level takes"},
		{"unknown nested field", strings.Replace(q, "rate", "rat", 1), false, "queues[0].arrivals[0].rat: unknown field"},
		{"negative rate", strings.Replace(q, "rate: 5", "rate: -5", 1), false, "queues[0].arrivals[0].rate: must be a positive number of jobs per second, got -5"},
		{"infinite rate", strings.Replace(q, "rate: 5", "rate: .inf", 1), false, "queues[0].arrivals[0].rate: +Inf is not a finite number"},
		{"bare number duration", strings.Replace(q, "1m", "60", 1), false, `duration: want a duration string such as "30s", got 60`},
		{"bad duration", strings.Replace(q, "1m", "1 minute", 1), false, `duration: bad duration "1 minute"`},
		{"wrong kind", strings.Replace(q, "  - arrivals", "  - workers: four\n    arrivals", 1), false, `queues[0].workers: want an integer, got "four"`},
		{"fractional integer", strings.Replace(q, "  - arrivals", "  - workers: 2.5\n    arrivals", 1), false, "queues[0].workers: want an integer, got 2.5"},
		{"not a list", "duration: 1m\nqueues: {}\n", false, "queues: want a list, got an object"},
		{"no queues", "duration: 1m\n", false, "queues: at least one queue is needed"},
		{"two documents", q + "---\n" + q, false, "more than one YAML document"},
		{"empty", "", false, "the file is empty"},
		{"YAML syntax", "duration: [1m\n", false, "YAML line 1: did not find expected ',' or ']'"},
		{"JSON syntax", "{\"duration\": \"1m\",\n \"queues\": [}", true, "line 2, column 13: invalid character '}'"},
		{"JSON trailing data", `{"duration": "1m"} {}`, true, "invalid character '{' after top-level value"},
		{"JSON unknown field", `{"duration": "1m", "queues": [{"arrivals": [{"process": "poisson", "rate": 1}], "wokers": 2}]}`, true, "queues[0].wokers: unknown field"},
		{"bad process", strings.Replace(q, "poisson", "steady", 1), false, `queues[0].arrivals[0].process: unknown process "steady"`},
		{"rates over 1", strings.Replace(q, "]\n", "]\n    outcome: {retryable: 0.8, fatal: 0.5}\n", 1), false, "queues[0].outcome: retryable + fatal + rate_limited is 1.3, over 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeScenario([]byte(tc.src), tc.json)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestReadReplay: lines map onto sim.ReplayJob; comments and blank lines
// are skipped; timestamps become offsets from the earliest; bad lines are
// refused with their line number.
func TestReadReplay(t *testing.T) {
	src := "# recorded\n\n{\"at\": \"1.5s\", \"outcomes\": [\"retry\", \"defer\", \"ok\"], \"retry_after\": \"30s\"}\n{\"at\": \"0s\", \"handler\": \"40ms\"}\n"
	got, err := readReplay(strings.NewReader(src), "w")
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.ReplayJob{
		{At: sim.Duration(1500 * time.Millisecond), Outcomes: []string{"retry", "defer", "ok"}, RetryAfter: sim.Duration(30 * time.Second)},
		{Handler: sim.Duration(40 * time.Millisecond)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	ts := `{"at": "2026-03-01T12:00:05Z"}` + "\n" + `{"at": "2026-03-01T12:00:01.5Z", "outcomes": ["crash", "ok"]}`
	got, err = readReplay(strings.NewReader(ts), "w")
	if err != nil {
		t.Fatal(err)
	}
	if got[0].At.D() != 3500*time.Millisecond || got[1].At != 0 {
		t.Errorf("timestamps gave offsets %s and %s, want 3.5s and 0s", got[0].At.D(), got[1].At.D())
	}

	for _, tc := range []struct{ name, src, want string }{
		{"unknown field", "{\"at\": \"1s\"}\n{\"at\": \"1s\", \"outcome\": \"ok\"}", `w:2: unknown field "outcome"`},
		{"missing at", `{"outcomes": ["ok"]}`, "w:1: at: is required"},
		{"negative at", `{"at": "-1s"}`, "w:1: at: must not be negative"},
		{"bad at", `{"at": "soon"}`, `w:1: at: "soon" is neither an offset`},
		{"bad outcome", `{"at": "1s", "outcomes": ["ok", "maybe"]}`, `w:1: outcomes[1]: unknown outcome "maybe"`},
		{"bad retry_after", `{"at": "1s", "retry_after": "30"}`, `w:1: retry_after: bad duration "30"`},
		{"negative handler", `{"at": "1s", "handler": "-1ms"}`, "w:1: handler: must not be negative"},
		{"wrong kind", `{"at": 1.5}`, "w:1: at: want a string, got number"},
		{"not JSON", "# ok\nat=1s", "w:2: invalid character 'a'"},
		{"two objects", `{"at": "1s"} {"at": "2s"}`, "w:1: trailing data"},
		{"mixed forms", "{\"at\": \"1s\"}\n{\"at\": \"2026-03-01T12:00:05Z\"}", "w:2: at: a timestamp, but line 1 gave an offset"},
		{"empty", "# nothing\n\n", "w: no arrivals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readReplay(strings.NewReader(tc.src), "w")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestUnexpectedViolations: a row's violations fail the run (exit status
// path: reportViolations counts them) unless they are the legacy row's
// invariant-2 ones.
func TestUnexpectedViolations(t *testing.T) {
	v := func(inv int) sim.Violation {
		return sim.Violation{Invariant: inv, Name: sim.InvariantName(inv), Detail: "d"}
	}
	rows := []row{
		{runSpec: runSpec{granularity: time.Second}, res: &sim.Result{}},
		{runSpec: runSpec{granularity: time.Second, legacy: true},
			res: &sim.Result{ViolationCount: 5, Violations: []sim.Violation{v(2), v(2), v(2), v(2), v(6)}}, byInvariant: map[int]int{2: 4, 6: 1}},
		{runSpec: runSpec{granularity: time.Minute}, res: &sim.Result{ViolationCount: 1, Violations: []sim.Violation{v(1)}},
			byInvariant: map[int]int{1: 1}},
	}
	var b bytes.Buffer
	if n := reportViolations(&b, rows); n != 2 {
		t.Errorf("%d unexpected violations, want 2:\n%s", n, b.String())
	}
	for _, want := range []string{"legacy (1s): 1 invariant violations", "invariant 6 (no hold queue expires with messages)", "1m: 1 invariant violations"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
	if got := tableRow(newRowReport(rows[1]))[16]; got != "4 expected (inv. 2) + 1 other" {
		t.Errorf("legacy violations cell %q", got)
	}
}

// TestRecommend picks the smallest granularity within the budget, or says
// that none is.
func TestRecommend(t *testing.T) {
	rows := []rowReport{
		{Label: "1ms", Granularity: sim.Duration(time.Millisecond), HoldQueuesPeak: 120},
		{Label: "1s", Granularity: sim.Duration(time.Second), HoldQueuesPeak: 30, AddedWait: sim.Summary{P50: 400 * time.Millisecond, P99: 990 * time.Millisecond, Max: time.Second}},
		{Label: "10s", Granularity: sim.Duration(10 * time.Second), HoldQueuesPeak: 8},
		{Label: "legacy (1s)", Legacy: true},
	}
	r := recommend(rows, 50)
	if !r.Found || r.Granularity.D() != time.Second || !r.IsDefault || !strings.Contains(r.Text, "p50 400ms, p99 990ms, max 1.00s") ||
		!strings.Contains(r.Text, "1s is the default of rabbitmq.Topology.RetryGranularity (with ClassicHolds): nothing to set") {
		t.Errorf("budget 50: %+v", r)
	}
	r = recommend(rows, 200)
	if !r.Found || r.IsDefault || !strings.Contains(r.Text, "set rabbitmq.Topology.RetryGranularity (with ClassicHolds) to 1ms") {
		t.Errorf("budget 200: %+v", r)
	}
	r = recommend(rows, 5)
	if r.Found || !strings.Contains(r.Text, "the fewest, 8, at 10s") {
		t.Errorf("budget 5: %+v", r)
	}
}

// TestRecommendLadder picks, for the ladder, the finest granularity whose
// relays stay within twice the fewest.
func TestRecommendLadder(t *testing.T) {
	rows := []rowReport{
		{Label: "1ms", Granularity: sim.Duration(time.Millisecond), RelaysPerSecond: 238},
		{Label: "100ms", Granularity: sim.Duration(100 * time.Millisecond), RelaysPerSecond: 64},
		{Label: "1s", Granularity: sim.Duration(time.Second), RelaysPerSecond: 40},
		{Label: "10s", Granularity: sim.Duration(10 * time.Second), RelaysPerSecond: 35},
		{Label: "legacy (1s)", Legacy: true},
	}
	if r := recommendLadder(rows); !r.Found || r.Granularity.D() != 100*time.Millisecond || !strings.Contains(r.Text, "fewest (35.0, at 10s)") ||
		!strings.Contains(r.Text, "set rabbitmq.Topology.RetryGranularity to 100ms") || r.Rule != recommendationRule {
		t.Errorf("%+v", r)
	}
	// The fewest relays at the finest row: said so, not as "within twice
	// itself".
	rows[3].RelaysPerSecond = 100
	rows[2].RelaysPerSecond = 30
	if r := recommendLadder(rows[2:]); !r.Found || !r.IsDefault || !strings.Contains(r.Text, "the fewest relays of any row (30.0 a second)") {
		t.Errorf("fewest at the finest: %+v", r)
	}
}

// TestFmtDur writes durations with three significant figures and a unit.
func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", 850: "850ns", 999_999: "1.00ms", 418_000: "418µs", 41_900_000: "41.9ms",
		990 * time.Millisecond: "990ms", 5 * time.Second: "5.00s", 59_600 * time.Millisecond: "59.6s",
		time.Minute: "1m00s", 228 * time.Second: "3m48s", 62 * time.Minute: "1h02m",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%d) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{time.Millisecond: "1ms", time.Minute: "1m", 90 * time.Minute: "1h30m", time.Hour: "1h"} {
		if got := fmtGranularity(d); got != want {
			t.Errorf("fmtGranularity(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestProgress: the progress line gives the share of all runs' virtual
// time and an ETA, and is cleared at the end; a writer that is not a
// terminal gets nothing unless asked.
func TestProgress(t *testing.T) {
	s := sim.Scenario{Duration: sim.Duration(time.Minute), Drain: sim.Duration(time.Minute)}
	var b bytes.Buffer
	p := newProgress(&b, []runSpec{{scenario: s}, {scenario: s}})
	p.set(0, 2*time.Minute)
	p.set(1, 0)
	p.show(p.start.Add(3 * time.Second))
	p.finish()
	want := "\r\x1b[Kqueuey-sim:  50% of 4m virtual time simulated, ETA 3s\r\x1b[K"
	if b.String() != want {
		t.Errorf("progress wrote %q, want %q", b.String(), want)
	}
	b.Reset()
	p = newProgress(&b, []runSpec{{scenario: s}})
	p.set(0, time.Minute)
	p.finished(row{runSpec: runSpec{scenario: s, granularity: time.Second}, res: &sim.Result{}})
	p.finish()
	if b.Len() != 0 {
		t.Errorf("progress on a non-terminal wrote %q", b.String())
	}
	// On a terminal, a finished run's line goes above the progress line,
	// which the next tick writes again.
	b.Reset()
	p = newProgress(&b, []runSpec{{scenario: s}, {scenario: s}})
	p.live = true
	p.show(p.start.Add(3 * time.Second))
	res := &sim.Result{HoldQueuesPeak: 22, RelaysPerSecond: 24.9}
	p.finished(row{runSpec: runSpec{scenario: s, granularity: time.Second}, res: res})
	p.finish()
	want = "\r\x1b[Kqueuey-sim:   0% of 4m virtual time simulated, ETA --" +
		"\r\x1b[Kqueuey-sim: 1s done: 22 hold queues at the peak, 24.9 relays a second, added wait p50 0 p99 0, 0 lost, 0 violations\n"
	if b.String() != want {
		t.Errorf("progress on a terminal wrote %q, want %q", b.String(), want)
	}
}

// TestRecommendationRuleStatedOnce: --help, the README and
// docs/queuey-sim.md state the rule the recommendation follows in the
// words the output uses.
func TestRecommendationRuleStatedOnce(t *testing.T) {
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	var help strings.Builder
	writeHelp(&help)
	texts := map[string]string{"--help": help.String()}
	for _, path := range []string{"../../README.md", "../../docs/queuey-sim.md"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts[path] = string(data)
	}
	for where, text := range texts {
		if !strings.Contains(flat(text), recommendationRule) {
			t.Errorf("%s does not state the recommendation's rule %q", where, recommendationRule)
		}
	}
}
