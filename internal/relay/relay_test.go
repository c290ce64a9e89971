package relay

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestCore: a fresh delivery is relayed, and acknowledged only once the
// relay's publish is confirmed; a failed relay returns it after the pause;
// a stale one is left alone.
func TestCore(t *testing.T) {
	var c Core
	if got := c.Delivered(nil, false); !slices.Equal(got, []Action{{Kind: Relay}}) {
		t.Errorf("fresh delivery: %v", got)
	}
	if got := c.Delivered(nil, true); len(got) != 0 {
		t.Errorf("stale delivery: %v", got)
	}
	if got := c.Relayed(nil, nil); !slices.Equal(got, []Action{{Kind: Ack}}) {
		t.Errorf("confirmed: %v", got)
	}
	boom := errors.New("312 NO_ROUTE")
	got := c.Relayed(nil, boom)
	if len(got) != 1 || got[0].Kind != Requeue || got[0].Delay != DefaultPause || got[0].Err != boom {
		t.Errorf("failed: %v", got)
	}
	if got := (Core{Pause: 5 * time.Millisecond}).Relayed(nil, boom); got[0].Delay != 5*time.Millisecond {
		t.Errorf("failed, pause 5ms: %v", got)
	}
	if got := c.Relayed([]Action{{Kind: Ack}}, nil); len(got) != 2 {
		t.Errorf("appends: %v", got)
	}
}
