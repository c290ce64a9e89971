package properties

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// recorder is a rapid.TB that records failures instead of failing the
// test, so that a test can require a property or a check to fail. FailNow
// (and so Fatal and Fatalf) panics with errStop, which expectFailure and
// expectRapidFailure recover.
type recorder struct {
	name   string
	failed bool
	out    strings.Builder
}

type stop struct{}

var errStop = stop{}

func (r *recorder) Helper()                         {}
func (r *recorder) Name() string                    { return r.name }
func (r *recorder) Logf(format string, args ...any) { fmt.Fprintf(&r.out, format+"\n", args...) }
func (r *recorder) Log(args ...any)                 { fmt.Fprintln(&r.out, args...) }
func (r *recorder) Skipf(format string, args ...any) {
	panic("recorder: skipped: " + fmt.Sprintf(format, args...))
}
func (r *recorder) Skip(args ...any)                  { panic("recorder: skipped: " + fmt.Sprint(args...)) }
func (r *recorder) SkipNow()                          { panic("recorder: skipped") }
func (r *recorder) Errorf(format string, args ...any) { r.failed = true; r.Logf(format, args...) }
func (r *recorder) Error(args ...any)                 { r.failed = true; r.Log(args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }
func (r *recorder) FailNow()                          { r.failed = true; panic(errStop) }
func (r *recorder) Fail()                             { r.failed = true }
func (r *recorder) Failed() bool                      { return r.failed }

// run calls f with r, stopping where r.FailNow was called.
func (r *recorder) run(f func(rapid.TB)) {
	defer func() {
		if v := recover(); v != nil && v != errStop {
			panic(v)
		}
	}()
	f(r)
}

// expectFailure runs f, a sequence of checked steps, and requires it to
// fail; it returns what f reported.
func expectFailure(t *testing.T, f func(rapid.TB)) string {
	t.Helper()
	r := &recorder{name: t.Name()}
	r.run(f)
	if !r.failed {
		t.Fatalf("the checks did not fail; they reported:\n%s", r.out.String())
	}
	return r.out.String()
}

// expectRapidFailure runs rapid on prop and requires it to find a
// failing case; it returns rapid's report (the failure and the shrunk
// case's draws). It writes no fail file, and gives shrinking at most a few
// seconds.
func expectRapidFailure(t *testing.T, prop func(*rapid.T)) string {
	t.Helper()
	setFlag(t, "rapid.nofailfile", "true")
	setFlag(t, "rapid.shrinktime", time.Second.String())
	// Enough runs that a sabotage is found every time: at the default
	// 100, one in the 50 runs of a soak found none, since rapid draws a
	// new seed each run and a run can draw no sequence that reaches the
	// sabotage. rapid stops at the first failure, so this costs nothing
	// when it is found early, as it nearly always is.
	if f := flag.Lookup("rapid.checks"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < 2000 {
			setFlag(t, "rapid.checks", "2000")
		}
	}
	r := &recorder{name: t.Name()}
	r.run(func(tb rapid.TB) { rapid.Check(tb, prop) })
	if !r.failed {
		t.Fatalf("rapid found no failing case; it reported:\n%s", r.out.String())
	}
	t.Logf("rapid's report, as expected:\n%s", r.out.String())
	return r.out.String()
}

// setFlag sets a command-line flag for the rest of the test.
func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag -%s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set(name, old) })
}
