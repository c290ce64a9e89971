package relay

import (
	"errors"
	"fmt"
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

// recording is a Shell that records what Run asks of it.
type recording struct {
	publishErr error
	did        []string
}

func (r *recording) Publish() error { r.did = append(r.did, "publish"); return r.publishErr }
func (r *recording) Ack()           { r.did = append(r.did, "ack") }
func (r *recording) Requeue(d time.Duration, err error) {
	r.did = append(r.did, "requeue after "+d.String()+": "+err.Error())
}
func (r *recording) Drop(err error) { r.did = append(r.did, "drop: "+err.Error()) }

// TestRun: the shell publishes, then acknowledges once confirmed; a
// failed publish is followed by the requeue after the pause, never an
// acknowledgement, unless the job's work queue is gone, when it is
// dropped; a stale delivery is left alone.
func TestRun(t *testing.T) {
	for _, c := range []struct {
		name  string
		stale bool
		err   error
		want  []string
	}{
		{"confirmed", false, nil, []string{"publish", "ack"}},
		{"refused", false, errors.New("312 NO_ROUTE"), []string{"publish", "requeue after 1s: 312 NO_ROUTE"}},
		{"stale", true, nil, nil},
		{"work queue gone", false, fmt.Errorf("relay job %q: %w", "j1", ErrGone), []string{"publish", `drop: relay job "j1": ` + ErrGone.Error()}},
	} {
		sh := &recording{publishErr: c.err}
		Run(Core{}, c.stale, sh)
		if !slices.Equal(sh.did, c.want) {
			t.Errorf("%s: %q, want %q", c.name, sh.did, c.want)
		}
	}
}
