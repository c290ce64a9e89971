package contract

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestQueueConfig(t *testing.T) {
	def := QueueConfig{Name: "jobs"}.WithDefaults()
	if def.Prefetch != 10 || *def.MaxPriority != DefaultMaxPriority || def.Type != Classic {
		t.Fatalf("defaults: %+v", def)
	}
	if got := (QueueConfig{Name: "jobs", MaxPriority: new(uint8(0))}).TopPriority(); got != 0 {
		t.Fatalf("plain queue top priority %d", got)
	}
	tests := []struct {
		name string
		q    QueueConfig
		want string
	}{
		{"ok", QueueConfig{Name: "jobs"}, ""},
		{"no name", QueueConfig{}, "Name is empty"},
		{"bad type", QueueConfig{Name: "jobs", Type: 7}, `queue "jobs": Type 7`},
		{"negative prefetch", QueueConfig{Name: "jobs", Prefetch: -1}, `queue "jobs": Prefetch -1 is outside 1..65535`},
		{"prefetch past the wire's 16 bits", QueueConfig{Name: "jobs", Prefetch: 70000}, "Prefetch 70000"},
		{"bad retry", QueueConfig{Name: "jobs", Retry: RetryPolicy{Base: -time.Second}}, `queue "jobs": Retry:`},
		{"negative timeout", QueueConfig{Name: "jobs", Timeout: -time.Second}, `queue "jobs": Timeout -1s is negative`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.q.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// A deferral always waits in a hold queue; a retry's hold is its delay.

func TestTimeoutDefaultsAndTimeoutError(t *testing.T) {
	if got := (QueueConfig{Name: "jobs"}).WithDefaults().Timeout; got != DefaultTimeout {
		t.Fatalf("default timeout %s", got)
	}
	abandoned := &TimeoutError{Timeout: time.Minute}
	late := &TimeoutError{Timeout: time.Minute, Err: errors.New("gave up")}
	for _, err := range []error{abandoned, late} {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v is not DeadlineExceeded", err)
		}
	}
	if !strings.Contains(abandoned.Error(), "abandoned") || !strings.Contains(late.Error(), "gave up") {
		t.Fatalf("texts: %q, %q", abandoned, late)
	}
}
