package contract_test

import (
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/queuey/queuey/queuey/contract"
)

// justBelowOne is the largest float64 less than 1, the largest u a caller
// drawing from [0, 1) can pass.
var justBelowOne = math.Nextafter(1, 0)

func TestRetryPolicyWithDefaults(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		policy contract.RetryPolicy
		want   contract.RetryPolicy
	}{
		{
			name:   "Zero",
			policy: contract.RetryPolicy{},
			want:   contract.RetryPolicy{Base: time.Second, Cap: 5 * time.Minute, MaxAttempts: 10, Jitter: contract.FullJitter},
		},
		{
			name:   "AllSet",
			policy: contract.RetryPolicy{Base: 2 * time.Second, Cap: time.Hour, MaxAttempts: 3, Jitter: contract.NoJitter},
			want:   contract.RetryPolicy{Base: 2 * time.Second, Cap: time.Hour, MaxAttempts: 3, Jitter: contract.NoJitter},
		},
		{
			name:   "SomeSet",
			policy: contract.RetryPolicy{Cap: time.Minute, Jitter: contract.EqualJitter},
			want:   contract.RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 10, Jitter: contract.EqualJitter},
		},
		{
			name:   "RetryForeverKept",
			policy: contract.RetryPolicy{MaxAttempts: -1},
			want:   contract.RetryPolicy{Base: time.Second, Cap: 5 * time.Minute, MaxAttempts: -1},
		},
		{
			name:   "InvalidValuesLeftAlone",
			policy: contract.RetryPolicy{Base: -time.Second, Cap: -time.Minute, MaxAttempts: -7, Jitter: contract.Jitter(9)},
			want:   contract.RetryPolicy{Base: -time.Second, Cap: -time.Minute, MaxAttempts: -7, Jitter: contract.Jitter(9)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if diff := cmp.Diff(tt.want, tt.policy.WithDefaults()); diff != "" {
				t.Errorf("WithDefaults mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		policy  contract.RetryPolicy
		wantErr string // "" for valid
	}{
		{name: "Zero", policy: contract.RetryPolicy{}},
		{name: "Defaults", policy: contract.RetryPolicy{}.WithDefaults()},
		{name: "CapEqualsBase", policy: contract.RetryPolicy{Base: time.Minute, Cap: time.Minute}},
		{name: "OneAttempt", policy: contract.RetryPolicy{MaxAttempts: 1}},
		{name: "RetryForever", policy: contract.RetryPolicy{MaxAttempts: -1}},
		{name: "EveryJitter", policy: contract.RetryPolicy{Jitter: contract.EqualJitter}},
		{name: "NoJitter", policy: contract.RetryPolicy{Jitter: contract.NoJitter}},
		{name: "Huge", policy: contract.RetryPolicy{Base: math.MaxInt64, Cap: math.MaxInt64, MaxAttempts: math.MaxInt}},
		{
			name:    "BaseNegative",
			policy:  contract.RetryPolicy{Base: -time.Second},
			wantErr: "queuey: invalid RetryPolicy: Base must not be negative, got -1s",
		},
		{
			name:    "CapNegative",
			policy:  contract.RetryPolicy{Cap: -time.Nanosecond},
			wantErr: "queuey: invalid RetryPolicy: Cap must not be negative, got -1ns",
		},
		{
			name:    "CapBelowBase",
			policy:  contract.RetryPolicy{Base: 10 * time.Second, Cap: 5 * time.Second},
			wantErr: "queuey: invalid RetryPolicy: Cap (5s) must not be less than Base (10s)",
		},
		{
			name:    "BaseAboveDefaultCap",
			policy:  contract.RetryPolicy{Base: 10 * time.Minute},
			wantErr: "queuey: invalid RetryPolicy: Cap (5m0s, the default) must not be less than Base (10m0s)",
		},
		{
			name:    "CapBelowDefaultBase",
			policy:  contract.RetryPolicy{Cap: 500 * time.Millisecond},
			wantErr: "queuey: invalid RetryPolicy: Cap (500ms) must not be less than Base (1s, the default)",
		},
		{
			name:    "MaxAttemptsBelowMinusOne",
			policy:  contract.RetryPolicy{MaxAttempts: -2},
			wantErr: "queuey: invalid RetryPolicy: MaxAttempts must be at least 1, or -1 to retry forever, got -2",
		},
		{
			name:    "JitterUnknown",
			policy:  contract.RetryPolicy{Jitter: contract.Jitter(3)},
			wantErr: "queuey: invalid RetryPolicy: Jitter has unknown value 3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := tt.policy.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("Validate() = nil, want %q", tt.wantErr)
			case tt.wantErr != "" && err.Error() != tt.wantErr:
				t.Errorf("Validate() = %q, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()

	var (
		full   = contract.RetryPolicy{}
		equal  = contract.RetryPolicy{Jitter: contract.EqualJitter}
		none   = contract.RetryPolicy{Jitter: contract.NoJitter}
		maxDur = time.Duration(math.MaxInt64)
	)

	tests := []struct {
		name   string
		policy contract.RetryPolicy
		next   int
		u      float64
		want   time.Duration
	}{
		// Each jitter at the second attempt, whose backoff is Base.
		{"FullJitterUZero", full, 2, 0, 0},
		{"FullJitterUHalf", full, 2, 0.5, 500 * time.Millisecond},
		{"FullJitterUJustBelowOne", full, 2, justBelowOne, time.Second - 1},
		{"EqualJitterUZero", equal, 2, 0, 500 * time.Millisecond},
		{"EqualJitterUHalf", equal, 2, 0.5, 750 * time.Millisecond},
		{"EqualJitterUJustBelowOne", equal, 2, justBelowOne, time.Second - 1},
		{"NoJitterUZero", none, 2, 0, time.Second},
		{"NoJitterUHalf", none, 2, 0.5, time.Second},
		{"NoJitterUJustBelowOne", none, 2, justBelowOne, time.Second},

		// Exponential growth up to the cap, with the default policy.
		{"Attempt3", none, 3, 0, 2 * time.Second},
		{"Attempt4", none, 4, 0, 4 * time.Second},
		{"Attempt10", none, 10, 0, 256 * time.Second},
		{"Attempt11CapReached", none, 11, 0, 5 * time.Minute},
		{"Attempt64", none, 64, 0, 5 * time.Minute},
		{"Attempt65", none, 65, 0, 5 * time.Minute},
		{"Attempt1Shl30", none, 1 << 30, 0, 5 * time.Minute},
		{"AttemptMaxInt", none, math.MaxInt, 0, 5 * time.Minute},
		{"Attempt10FullJitterUHalf", full, 10, 0.5, 128 * time.Second},
		{"Attempt1Shl30FullJitterUHalf", full, 1 << 30, 0.5, 150 * time.Second},
		{"Attempt1Shl30EqualJitterUZero", equal, 1 << 30, 0, 150 * time.Second},
		{"Attempt10EqualJitterUHalf", equal, 10, 0.5, 192 * time.Second},

		// Attempts before the second read as the second.
		{"Attempt1", none, 1, 0, time.Second},
		{"Attempt0", none, 0, 0, time.Second},
		{"AttemptNegative", none, math.MinInt, 0, time.Second},

		// The cap.
		{"CapExactPowerOfTwo", contract.RetryPolicy{Base: time.Second, Cap: 4 * time.Second, Jitter: contract.NoJitter}, 4, 0, 4 * time.Second},
		{"CapJustPassed", contract.RetryPolicy{Base: time.Second, Cap: 4 * time.Second, Jitter: contract.NoJitter}, 5, 0, 4 * time.Second},
		{"CapBetweenPowers", contract.RetryPolicy{Base: 3 * time.Second, Cap: 10 * time.Second, Jitter: contract.NoJitter}, 4, 0, 10 * time.Second},
		{"CapEqualsBase", contract.RetryPolicy{Base: time.Minute, Cap: time.Minute, Jitter: contract.NoJitter}, 2, 0, time.Minute},
		{"CapFullJitterUJustBelowOne", contract.RetryPolicy{Cap: 4 * time.Second}, 100, justBelowOne, 4*time.Second - 1},

		// No overflow at the extremes of time.Duration.
		{"OneNanosecondShift62", contract.RetryPolicy{Base: 1, Cap: maxDur, Jitter: contract.NoJitter}, 64, 0, 1 << 62},
		{"OneNanosecondShift63", contract.RetryPolicy{Base: 1, Cap: maxDur, Jitter: contract.NoJitter}, 65, 0, maxDur},
		{"OneNanosecondShift1Shl30", contract.RetryPolicy{Base: 1, Cap: maxDur, Jitter: contract.NoJitter}, 1 << 30, 0, maxDur},
		{"MaxBase", contract.RetryPolicy{Base: maxDur, Cap: maxDur, Jitter: contract.NoJitter}, 2, 0, maxDur},
		{"MaxBaseAttempt3", contract.RetryPolicy{Base: maxDur, Cap: maxDur, Jitter: contract.NoJitter}, 3, 0, maxDur},
		{"MaxCapFullJitterUHalf", contract.RetryPolicy{Base: maxDur, Cap: maxDur}, 2, 0.5, 1 << 62},
		{"MaxCapFullJitterUJustBelowOne", contract.RetryPolicy{Base: maxDur, Cap: maxDur}, 2, justBelowOne, maxDur - 1023},
		{"MaxCapEqualJitterUJustBelowOne", contract.RetryPolicy{Base: maxDur, Cap: maxDur, Jitter: contract.EqualJitter}, 2, justBelowOne, maxDur - 511},
		{"MaxCapEqualJitterUZero", contract.RetryPolicy{Base: maxDur, Cap: maxDur, Jitter: contract.EqualJitter}, 2, 0, 1 << 62},

		// u outside [0, 1).
		{"UOne", full, 2, 1, time.Second},
		{"UAboveOne", full, 2, 7.5, time.Second},
		{"UInfinity", full, 2, math.Inf(1), time.Second},
		{"UNegative", full, 2, -0.5, 0},
		{"UNaN", full, 2, math.NaN(), 0},
		{"UNaNEqualJitter", equal, 2, math.NaN(), 500 * time.Millisecond},

		// Policies Validate refuses still give a delay in [0, Cap].
		{"InvalidNegativeBase", contract.RetryPolicy{Base: -time.Second, Jitter: contract.NoJitter}, 5, 0, 0},
		{"InvalidNegativeCap", contract.RetryPolicy{Cap: -time.Second, Jitter: contract.NoJitter}, 5, 0, 0},
		{"InvalidCapBelowBase", contract.RetryPolicy{Base: 10 * time.Second, Cap: 2 * time.Second, Jitter: contract.NoJitter}, 2, 0, 2 * time.Second},
		{"InvalidJitterReadAsFull", contract.RetryPolicy{Jitter: contract.Jitter(9)}, 2, 0.25, 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if got := tt.policy.Delay(tt.next, tt.u); got != tt.want {
				t.Errorf("%+v.Delay(%d, %v) = %v (%d), want %v (%d)",
					tt.policy, tt.next, tt.u, got, int64(got), tt.want, int64(tt.want))
			}
		})
	}
}

func TestRetryPolicyExhausted(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		policy  contract.RetryPolicy
		attempt int
		want    bool
	}{
		{"DefaultFirstAttempt", contract.RetryPolicy{}, 1, false},
		{"DefaultNinthAttempt", contract.RetryPolicy{}, 9, false},
		{"DefaultTenthAttempt", contract.RetryPolicy{}, 10, true},
		{"DefaultPastLast", contract.RetryPolicy{}, 11, true},
		{"OneAttempt", contract.RetryPolicy{MaxAttempts: 1}, 1, true},
		{"ThreeAttemptsSecond", contract.RetryPolicy{MaxAttempts: 3}, 2, false},
		{"ThreeAttemptsThird", contract.RetryPolicy{MaxAttempts: 3}, 3, true},
		{"RetryForeverFirst", contract.RetryPolicy{MaxAttempts: -1}, 1, false},
		{"RetryForeverMaxInt", contract.RetryPolicy{MaxAttempts: -1}, math.MaxInt, false},
		{"MaxIntAttempts", contract.RetryPolicy{MaxAttempts: math.MaxInt}, 1 << 40, false},
		{"MaxIntAttemptsLast", contract.RetryPolicy{MaxAttempts: math.MaxInt}, math.MaxInt, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if got := tt.policy.Exhausted(tt.attempt); got != tt.want {
				t.Errorf("%+v.Exhausted(%d) = %v, want %v", tt.policy, tt.attempt, got, tt.want)
			}
		})
	}
}

func TestJitterString(t *testing.T) {
	t.Parallel()

	tests := []struct {
		jitter contract.Jitter
		want   string
	}{
		{contract.FullJitter, "full"},
		{contract.EqualJitter, "equal"},
		{contract.NoJitter, "none"},
		{contract.Jitter(-1), "Jitter(-1)"},
		{contract.Jitter(3), "Jitter(3)"},
	}
	for _, tt := range tests {
		if got := tt.jitter.String(); got != tt.want {
			t.Errorf("Jitter(%d).String() = %q, want %q", int(tt.jitter), got, tt.want)
		}
	}
	if got := (contract.RetryPolicy{}).Jitter; got != contract.FullJitter {
		t.Errorf("zero RetryPolicy's Jitter = %v, want FullJitter", got)
	}
}

// retryPolicyGen draws a policy that Validate accepts, zero fields (defaults)
// and the extremes of time.Duration included.
func retryPolicyGen() *rapid.Generator[contract.RetryPolicy] {
	duration := rapid.OneOf(
		rapid.Just(time.Duration(0)),
		rapid.Map(rapid.Int64Range(1, int64(time.Hour)), func(n int64) time.Duration { return time.Duration(n) }),
		rapid.Map(rapid.Int64Range(0, math.MaxInt64), func(n int64) time.Duration { return time.Duration(n) }),
		rapid.Just(time.Duration(math.MaxInt64)),
	)
	return rapid.Custom(func(t *rapid.T) contract.RetryPolicy {
		p := contract.RetryPolicy{
			Base:        duration.Draw(t, "base"),
			Cap:         duration.Draw(t, "cap"),
			MaxAttempts: rapid.IntRange(-1, 100).Draw(t, "max_attempts"),
			Jitter:      rapid.SampledFrom([]contract.Jitter{contract.FullJitter, contract.EqualJitter, contract.NoJitter}).Draw(t, "jitter"),
		}
		if d := p.WithDefaults(); d.Cap < d.Base {
			p.Cap = d.Base
		}
		return p
	})
}

// retryAttemptGen draws attempt numbers, small ones and the whole int range.
var retryAttemptGen = rapid.OneOf(rapid.IntRange(-2, 80), rapid.Int(), rapid.Just(math.MaxInt))

// retryUGen draws u in [0, 1), its ends included.
var retryUGen = rapid.OneOf(
	rapid.Float64Range(0, justBelowOne),
	rapid.SampledFrom([]float64{0, 0.5, justBelowOne}),
)

// noJitterBackoff is min(cap, base × 2^(next-2)) in arbitrary precision: the
// oracle for Delay with NoJitter.
func noJitterBackoff(p contract.RetryPolicy, next int) time.Duration {
	p = p.WithDefaults()
	shift := max(next, 2) - 2
	if shift > 64 { // base >= 1ns, so the product exceeds any cap
		return p.Cap
	}
	d := new(big.Int).Lsh(big.NewInt(int64(p.Base)), uint(shift))
	if d.Cmp(big.NewInt(int64(p.Cap))) > 0 {
		return p.Cap
	}
	return time.Duration(d.Int64())
}

func TestRetryPolicyDelayProperties(t *testing.T) {
	t.Parallel()

	rapid.Check(t, func(t *rapid.T) {
		p := retryPolicyGen().Draw(t, "policy")
		if err := p.Validate(); err != nil {
			t.Fatalf("generator drew an invalid policy: %v", err)
		}
		capDelay := p.WithDefaults().Cap
		a, b := retryAttemptGen.Draw(t, "attempt_a"), retryAttemptGen.Draw(t, "attempt_b")
		lo, hi := min(a, b), max(a, b)
		u1, u2 := retryUGen.Draw(t, "u1"), retryUGen.Draw(t, "u2")
		uLo, uHi := min(u1, u2), max(u1, u2)

		got := p.Delay(lo, uLo)
		if got < 0 || got > capDelay {
			t.Fatalf("Delay(%d, %v) = %v, want within [0, %v]", lo, uLo, got, capDelay)
		}

		// Jitter only ever shortens the backoff, EqualJitter by at most half.
		none := p
		none.Jitter = contract.NoJitter
		backoff := none.Delay(lo, uLo)
		if want := noJitterBackoff(p, lo); backoff != want {
			t.Fatalf("NoJitter Delay(%d) = %v, want min(Cap, Base×2^(next-2)) = %v", lo, backoff, want)
		}
		if got > backoff {
			t.Fatalf("Delay(%d, %v) = %v, more than the backoff %v", lo, uLo, got, backoff)
		}
		if p.Jitter == contract.EqualJitter && got < backoff-backoff/2 {
			t.Fatalf("EqualJitter Delay(%d, %v) = %v, less than half the backoff %v", lo, uLo, got, backoff)
		}

		// NoJitter delays never shrink as attempts go up.
		if later := none.Delay(hi, uLo); later < backoff {
			t.Fatalf("NoJitter Delay(%d) = %v < Delay(%d) = %v", hi, later, lo, backoff)
		}

		// A larger u never gives a shorter delay.
		if more := p.Delay(lo, uHi); more < got {
			t.Fatalf("Delay(%d, %v) = %v < Delay(%d, %v) = %v", lo, uHi, more, lo, uLo, got)
		}

		// Exhausted is monotone in the attempt and never true for -1.
		if p.Exhausted(lo) && !p.Exhausted(hi) {
			t.Fatalf("Exhausted(%d) but not Exhausted(%d)", lo, hi)
		}
		if p.MaxAttempts == -1 && p.Exhausted(hi) {
			t.Fatalf("MaxAttempts -1 but Exhausted(%d)", hi)
		}
	})
}

// TestRetryPolicyDelayPropertiesAnyPolicy checks that Delay stays in
// [0, max(Cap, 0)] even for policies Validate refuses.
func TestRetryPolicyDelayPropertiesAnyPolicy(t *testing.T) {
	t.Parallel()

	rapid.Check(t, func(t *rapid.T) {
		p := contract.RetryPolicy{
			Base:        time.Duration(rapid.Int64().Draw(t, "base")),
			Cap:         time.Duration(rapid.Int64().Draw(t, "cap")),
			MaxAttempts: rapid.Int().Draw(t, "max_attempts"),
			Jitter:      contract.Jitter(rapid.IntRange(-1, 4).Draw(t, "jitter")),
		}
		next := retryAttemptGen.Draw(t, "next")
		u := rapid.Float64().Draw(t, "u") // any float64, NaN and infinities included
		got := p.Delay(next, u)
		if limit := max(p.WithDefaults().Cap, 0); got < 0 || got > limit {
			t.Fatalf("%+v.Delay(%d, %v) = %v, want within [0, %v]", p, next, u, got, limit)
		}
		if err := p.Validate(); err != nil && !strings.HasPrefix(err.Error(), "queuey: invalid RetryPolicy: ") {
			t.Fatalf("Validate() = %q, want the queuey: invalid RetryPolicy: prefix", err)
		}
	})
}
