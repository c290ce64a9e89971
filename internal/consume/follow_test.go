package consume

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func showFollow(acts []FollowAction) string {
	var parts []string
	for _, a := range acts {
		s := a.Kind.String()
		switch a.Kind {
		case Lost, Live:
			s += fmt.Sprintf("(%d)", a.Gen)
		case End:
			s += fmt.Sprintf("(%v)", a.Err)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// TestFollowDecisions is the table of what a subscription does when its
// channel ends, and while it resumes: the decisions rabbitmq's consumer
// and the simulator's workers both carry out.
func TestFollowDecisions(t *testing.T) {
	lost := errors.New("channel closed by the broker")
	gone := errors.New("404 NOT_FOUND")
	supervised, alone := Follow{Supervised: true}, Follow{}
	for _, c := range []struct {
		name string
		acts []FollowAction
		want string
	}{
		{"supervised, channel closed: tell the worker, then resume",
			supervised.Stopped(nil, lost, false, true, 3), "lost(3) reopen"},
		{"unsupervised, channel closed: over, with why",
			alone.Stopped(nil, lost, false, true, 3), "end(channel closed by the broker)"},
		{"the broker cancelled the consumer, channel open: over, with why",
			supervised.Stopped(nil, lost, false, false, 3), "end(channel closed by the broker)"},
		{"our own Cancel or Close raced the broker's end: over, cleanly",
			supervised.Stopped(nil, lost, true, true, 3), "end(<nil>)"},
		{"our own end, nothing from the broker",
			supervised.Stopped(nil, nil, false, true, 3), "end(<nil>)"},
		{"no channel would open: over, with why",
			supervised.OpenFailed(nil, gone, false), "end(404 NOT_FOUND)"},
		{"no channel would open, after our Close: over, cleanly",
			supervised.OpenFailed(nil, gone, true), "end(<nil>)"},
		{"resumed", supervised.Resumed(nil, 4, nil, false, false), "live(4)"},
		{"resumed after our Cancel: stop the broker delivering, and end",
			supervised.Resumed(nil, 4, nil, true, false), "cancel-tag end(<nil>)"},
		{"the queue is gone: over, with why",
			supervised.Resumed(nil, 0, gone, false, true), "end(404 NOT_FOUND)"},
		{"the connection went again: try once more",
			supervised.Resumed(nil, 0, lost, false, false), "reopen"},
		{"the connection went again after our Close: over, cleanly",
			supervised.Resumed(nil, 0, lost, true, false), "end(<nil>)"},
	} {
		if got := showFollow(c.acts); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// TestFollowAppends: every step appends to the actions it is given.
func TestFollowAppends(t *testing.T) {
	acts := []FollowAction{{Kind: Live, Gen: 1}}
	acts = Follow{Supervised: true}.Stopped(acts, errors.New("x"), false, true, 1)
	if got, want := showFollow(acts), "live(1) lost(1) reopen"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
