package contract

import (
	"fmt"
	"time"
)

// Jitter says how RetryPolicy.Delay randomises a backoff, so that jobs that
// failed together do not all come back at the same moment. The names follow
// Marc Brooker's "Exponential Backoff And Jitter" (AWS Architecture Blog,
// 2015), where d is the backoff before jitter and u the caller's uniform
// random number in [0, 1).
type Jitter int

const (
	// FullJitter waits u × d: uniform in [0, d]. It spreads retries the most
	// and, in Brooker's measurements, does the least total work. It is the
	// zero value of Jitter and so the default.
	FullJitter Jitter = iota

	// EqualJitter waits d/2 + u × d/2: uniform in [d/2, d]. A job never comes
	// back sooner than half its backoff.
	EqualJitter

	// NoJitter waits exactly d. Jobs that failed together retry together.
	NoJitter
)

// String returns "full", "equal" or "none", or "Jitter(n)" for a value that
// is none of the constants.
func (j Jitter) String() string {
	switch j {
	case FullJitter:
		return "full"
	case EqualJitter:
		return "equal"
	case NoJitter:
		return "none"
	}
	return fmt.Sprintf("Jitter(%d)", int(j))
}

// Defaults of RetryPolicy's fields.
const (
	retryDefaultBase        = time.Second
	retryDefaultCap         = 5 * time.Minute
	retryDefaultMaxAttempts = 10
)

// RetryPolicy says how long a failed job waits before its next attempt and
// when it gives up.
//
// The wait before attempt n (n >= 2) is the backoff min(Cap, Base × 2^(n-2))
// with Jitter applied. With the defaults the backoffs before attempts 2
// through 10 are 1s, 2s, 4s, … 256s, each fully jittered, and the tenth
// failure dead-letters the job.
//
// A RetryPolicy is a plain value: its methods are pure functions of their
// arguments, safe for concurrent use, and read a zero field as its default,
// so the zero RetryPolicy is the default policy. Call Validate once where a
// policy is configured; the other methods never fail.
type RetryPolicy struct {
	// Base is the backoff before the second attempt, before jitter. Each
	// further attempt doubles it, up to Cap. Must not be negative.
	//
	// Defaults to 1 second.
	Base time.Duration

	// Cap is the upper bound of any delay, jitter included. Must not be
	// negative or less than Base (after defaults).
	//
	// Defaults to 5 minutes.
	Cap time.Duration

	// MaxAttempts is the number of attempts in all, the first included: when
	// attempt MaxAttempts fails, the job is dead-lettered. 1 means the job is
	// never retried. The special value -1 means the job is retried forever
	// and never dead-lettered for running out of attempts. Values below -1
	// are refused.
	//
	// Defaults to 10.
	MaxAttempts int

	// Jitter says how each delay is randomised.
	//
	// Defaults to FullJitter (the zero value).
	Jitter Jitter
}

// WithDefaults returns a copy of p with each zero field set to its default.
// It leaves invalid values alone: that is Validate's job.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Base == 0 {
		p.Base = retryDefaultBase
	}
	if p.Cap == 0 {
		p.Cap = retryDefaultCap
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = retryDefaultMaxAttempts
	}
	return p
}

// Validate returns an error naming the field at fault if p, with defaults
// applied, is not a usable policy: a negative Base or Cap, a Cap less than
// Base, a MaxAttempts below -1, or an unknown Jitter. It returns nil for the
// zero RetryPolicy.
func (p RetryPolicy) Validate() error {
	if p.Base < 0 {
		return fmt.Errorf("queuey: invalid RetryPolicy: Base must not be negative, got %v", p.Base)
	}
	if p.Cap < 0 {
		return fmt.Errorf("queuey: invalid RetryPolicy: Cap must not be negative, got %v", p.Cap)
	}
	if p.MaxAttempts < -1 {
		return fmt.Errorf("queuey: invalid RetryPolicy: MaxAttempts must be at least 1, or -1 to retry forever, got %d", p.MaxAttempts)
	}
	switch p.Jitter {
	case FullJitter, EqualJitter, NoJitter:
	default:
		return fmt.Errorf("queuey: invalid RetryPolicy: Jitter has unknown value %d", int(p.Jitter))
	}
	d := p.WithDefaults()
	if d.Cap < d.Base {
		return fmt.Errorf("queuey: invalid RetryPolicy: Cap (%v%s) must not be less than Base (%v%s)",
			d.Cap, retryDefaultNote(p.Cap), d.Base, retryDefaultNote(p.Base))
	}
	return nil
}

// retryDefaultNote marks a value in a message as a default if it was unset.
func retryDefaultNote(set time.Duration) string {
	if set == 0 {
		return ", the default"
	}
	return ""
}

// Delay returns how long a job waits before attempt next, given u, a uniform
// random number in [0, 1) that the caller draws, so that Delay is a pure
// function and a simulation can seed it. The result is the backoff
// min(Cap, Base × 2^(next-2)) with Jitter applied to it.
//
// Delay never returns less than zero or more than Cap, and computes the
// backoff without overflow for any next, up to math.MaxInt. A next below 2 is
// read as 2. A u outside [0, 1) is clamped into [0, 1], and NaN is read as 0.
// Delay is non-decreasing in u, and with NoJitter non-decreasing in next. On
// a policy Validate refuses, a negative Base or Cap is read as 0, a Cap below
// Base wins, and an unknown Jitter is read as FullJitter.
func (p RetryPolicy) Delay(next int, u float64) time.Duration {
	p = p.WithDefaults()
	base, ceiling := max(p.Base, 0), max(p.Cap, 0)

	// base <= ceiling>>shift exactly when base<<shift <= ceiling, and then the
	// shift cannot overflow.
	shift := max(next, 2) - 2
	backoff := ceiling
	if shift < 63 && base <= ceiling>>shift {
		backoff = base << shift
	}

	switch p.Jitter {
	case NoJitter:
		return backoff
	case EqualJitter:
		half := backoff / 2
		return backoff - half + scaleRetryDelay(half, u)
	default:
		return scaleRetryDelay(backoff, u)
	}
}

// scaleRetryDelay returns u × d, truncated, in [0, d] for any u and d >= 0.
func scaleRetryDelay(d time.Duration, u float64) time.Duration {
	if !(u > 0) || d <= 0 { // also NaN
		return 0
	}
	if u >= 1 {
		return d
	}
	// float64(d) may round above d (d near math.MaxInt64); the comparison
	// keeps the conversion back in range.
	f := u * float64(d)
	if f >= float64(d) {
		return d
	}
	return min(time.Duration(f), d)
}

// Exhausted reports whether a job whose attempt attempt (1-based) just failed
// has no attempts left and is to be dead-lettered: attempt >= MaxAttempts,
// and never when MaxAttempts is -1.
func (p RetryPolicy) Exhausted(attempt int) bool {
	p = p.WithDefaults()
	if p.MaxAttempts == -1 {
		return false
	}
	return attempt >= p.MaxAttempts
}
