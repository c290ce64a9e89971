package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/queuey/queuey/sim"
)

// replayLine is one line of a replay file. A replay file is JSON Lines:
// one job arrival per line, with what each run of its handler did, as
// exported from production logs:
//
//	{"at": "1.5s", "outcomes": ["retry", "defer", "ok"], "retry_after": "30s", "handler": "40ms"}
//
// The fields:
//
//   - at (required): when the job arrived, either as an offset from the
//     start of the run (a Go duration: "1.5s", "2m3.25s") or as an RFC 3339
//     timestamp ("2026-03-01T12:00:01.5Z"), taken relative to the earliest
//     line; one form throughout the file;
//   - outcomes: the results of successive runs, each "ok", "retry" (an
//     ordinary error: retried with backoff), "fatal" (dead-lettered),
//     "defer" (a Retry-After: deferred without spending an attempt) or
//     "crash" (the worker process dies); the last repeats for any further
//     run; none means "ok";
//   - retry_after: each "defer"'s delay (default: the scenario's
//     outcome.retry_after draw);
//   - handler: how long each run takes (default: the scenario's
//     outcome.handler draw).
//
// Blank lines and lines starting with # are skipped. Unknown fields are
// refused, with the line number.
type replayLine struct {
	At         string   `json:"at"`
	Outcomes   []string `json:"outcomes"`
	RetryAfter string   `json:"retry_after"`
	Handler    string   `json:"handler"`
}

var replayOutcomes = map[string]bool{"ok": true, "retry": true, "fatal": true, "defer": true, "crash": true}

// loadReplay reads a replay file into the jobs of a replay arrival.
func loadReplay(path string) ([]sim.ReplayJob, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay file: %w", err)
	}
	defer f.Close()
	return readReplay(f, path)
}

// readReplay reads JSON Lines of arrivals from r; name labels errors as
// "name:LINE: ...".
func readReplay(r io.Reader, name string) ([]sim.ReplayJob, error) {
	br := bufio.NewReader(r)
	var (
		jobs  []sim.ReplayJob
		times []time.Time // when lines give timestamps, one per job
		form  string      // "an offset" or "a timestamp", from the first line
		first int         // the first line's number
	)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		text := strings.TrimSpace(line)
		if text != "" && !strings.HasPrefix(text, "#") {
			rj, at, f, perr := parseReplayLine(text)
			if perr == nil && form != "" && f != form {
				perr = fmt.Errorf("at: %s, but line %d gave %s: use one form throughout the file", f, first, form)
			}
			if perr != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, n, perr)
			}
			if form == "" {
				form, first = f, n
			}
			jobs = append(jobs, rj)
			times = append(times, at)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no arrivals: want one JSON object per line, such as %s", name, `{"at":"1.5s","outcomes":["retry","ok"]}`)
	}
	if form == "a timestamp" {
		start := times[0]
		for _, t := range times {
			if t.Before(start) {
				start = t
			}
		}
		for i, t := range times {
			jobs[i].At = sim.Duration(t.Sub(start))
		}
	}
	return jobs, nil
}

// parseReplayLine decodes one line. It returns the job, the line's
// timestamp (zero for an offset), and which form "at" took.
func parseReplayLine(text string) (sim.ReplayJob, time.Time, string, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	var l replayLine
	if err := dec.Decode(&l); err != nil {
		return sim.ReplayJob{}, time.Time{}, "", jsonLineError(err)
	}
	if dec.More() {
		return sim.ReplayJob{}, time.Time{}, "", errors.New("trailing data after the object: want one object per line")
	}
	var rj sim.ReplayJob
	var at time.Time
	form := "an offset"
	switch {
	case l.At == "":
		return rj, at, "", errors.New(`at: is required: an offset such as "1.5s" or an RFC 3339 timestamp`)
	default:
		if d, err := time.ParseDuration(l.At); err == nil {
			if d < 0 {
				return rj, at, "", fmt.Errorf("at: must not be negative, got %s", l.At)
			}
			rj.At = sim.Duration(d)
			break
		}
		t, err := time.Parse(time.RFC3339Nano, l.At)
		if err != nil {
			return rj, at, "", fmt.Errorf(`at: %q is neither an offset such as "1.5s" nor an RFC 3339 timestamp`, l.At)
		}
		at, form = t, "a timestamp"
	}
	for i, o := range l.Outcomes {
		if !replayOutcomes[o] {
			return rj, at, "", fmt.Errorf("outcomes[%d]: unknown outcome %q: want ok, retry, fatal, defer or crash", i, o)
		}
	}
	rj.Outcomes = l.Outcomes
	var err error
	if rj.RetryAfter, err = lineDuration("retry_after", l.RetryAfter); err != nil {
		return rj, at, "", err
	}
	if rj.Handler, err = lineDuration("handler", l.Handler); err != nil {
		return rj, at, "", err
	}
	return rj, at, form, nil
}

// lineDuration parses an optional non-negative duration field.
func lineDuration(field, s string) (sim.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf(`%s: bad duration %q: want one such as "30s"`, field, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: must not be negative, got %s", field, s)
	}
	return sim.Duration(d), nil
}

// jsonLineError rewords a decoding error of one line.
func jsonLineError(err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		return &reworded{msg: fmt.Sprintf("%s: want %s, got %s", te.Field, kindName(te.Type), te.Value), err: err}
	}
	return &reworded{msg: strings.TrimPrefix(err.Error(), "json: "), err: err}
}
