package envelope

import "time"

// Envelope timestamps are converted to and from their text with the civil
// calendar arithmetic below (Howard Hinnant's days_from_civil and
// civil_from_days, proleptic Gregorian, UTC) instead of time.Date and
// time.Time.Date, which are general and several times slower; envelopes
// are encoded and decoded on every delivery and settlement.

// daysFromCivil returns the number of days from 1970-01-01 to y-m-d.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(int64(y), 400)
	yoe := int64(y) - era*400
	mp := int64((m + 9) % 12) // March is 0
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	y = int(yoe + era*400)
	if m <= 2 {
		y++
	}
	return y, m, d
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// daysIn is the length of month m of year y.
func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// The range of envelope timestamps: years 0000 to 9999 in UTC, as Unix
// seconds.
var (
	minEnvelopeUnix = daysFromCivil(0, 1, 1) * 86400
	maxEnvelopeUnix = daysFromCivil(10000, 1, 1)*86400 - 1
)

// inEnvelopeYears reports whether t falls in the years 0000 to 9999 in UTC.
func inEnvelopeYears(t time.Time) bool {
	s := t.Unix()
	return s >= minEnvelopeUnix && s <= maxEnvelopeUnix
}
