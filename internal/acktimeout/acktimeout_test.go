package acktimeout

import (
	"testing"
	"time"

	"github.com/queuey/queuey/queuey/contract"
)

func TestTheLimitSitsAboveTheWorkersLast(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs"}.WithDefaults()
	if got, want := Limit(q), 10*time.Minute+4687500*time.Microsecond+contract.AbandonGrace+time.Minute; got != want {
		t.Fatalf("Limit(default) = %s, want %s", got, want)
	}
	if got := Arg(q); got != 669688 {
		t.Fatalf("Arg(default) = %d ms, want 669688 (rounded up)", got)
	}
}

// Only a quorum work queue's consumer carries the argument: RabbitMQ 4.3
// refuses it on a classic queue's.
func TestConsumeArgs(t *testing.T) {
	q := contract.QueueConfig{Name: "jobs", Type: contract.Quorum}.WithDefaults()
	if got := ConsumeArgs(q)["x-consumer-timeout"]; got != Arg(q) {
		t.Fatalf("quorum: x-consumer-timeout = %v, want %d", got, Arg(q))
	}
	q.Type = contract.Classic
	if got := ConsumeArgs(q); got != nil {
		t.Fatalf("classic: %v, want none", got)
	}
}

func TestRelease40(t *testing.T) {
	for v, want := range map[string]bool{"4.0.5": true, "4.0.0": true, "4.3.6": false, "4.1.0": false, "": false, "3.13.7": false} {
		if Release40(v) != want {
			t.Errorf("Release40(%q) = %v", v, !want)
		}
	}
}
