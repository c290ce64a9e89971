package envelope

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestCivilArithmeticAgreesWithTime holds the calendar arithmetic to the
// time package over the whole envelope range and a little beyond.
func TestCivilArithmeticAgreesWithTime(t *testing.T) {
	lo := time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(10001, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	rapid.Check(t, func(t *rapid.T) {
		sec := rapid.Int64Range(lo, hi).Draw(t, "unix")
		ns := rapid.IntRange(0, 999999999).Draw(t, "ns")
		tm := time.Unix(sec, int64(ns)).UTC()
		days := floorDiv(sec, 86400)
		y, m, d := civilFromDays(days)
		if y != tm.Year() || m != int(tm.Month()) || d != tm.Day() {
			t.Fatalf("civilFromDays(%d) = %d-%d-%d, time says %s", days, y, m, d, tm)
		}
		if got := daysFromCivil(y, m, d); got != days {
			t.Fatalf("daysFromCivil(%d, %d, %d) = %d, want %d", y, m, d, got, days)
		}
		if got, want := inEnvelopeYears(tm), tm.Year() >= 0 && tm.Year() <= 9999; got != want {
			t.Fatalf("inEnvelopeYears(%s) = %v", tm, got)
		}
		if tm.Year() < 0 || tm.Year() > 9999 {
			return
		}
		text := appendEnvelopeTime(nil, tm)
		if want := tm.Format(envelopeTimeLayout); string(text) != want {
			t.Fatalf("appendEnvelopeTime = %s, want %s", text, want)
		}
		back, ok := parseEnvelopeTime(text)
		if !ok || back != tm {
			t.Fatalf("parseEnvelopeTime(%s) = %v, %v; want %v", text, back, ok, tm)
		}
	})
	for _, day := range []string{"2023-02-29", "2024-02-30", "1900-02-29", "2000-02-30", "2024-04-31"} {
		if _, ok := parseEnvelopeTime(day + "T00:00:00.000000000Z"); ok {
			t.Errorf("parseEnvelopeTime accepts %s", day)
		}
	}
	for _, day := range []string{"2024-02-29", "2000-02-29", "0000-02-29", "9999-12-31"} {
		if _, ok := parseEnvelopeTime(day + "T23:59:59.999999999Z"); !ok {
			t.Errorf("parseEnvelopeTime refuses %s", day)
		}
	}
}
