package consume

// Following a subscription through the end of its channel, as a core with
// no goroutines and no clock: what ended the channel in, what to do out
// (docs/worker-core.md, "Resubscription"). Package rabbitmq's consumer
// carries out the actions on its goroutine, waiting for the supervisor's
// next connection; package sim carries out the same actions on its one
// goroutine when a worker's connection drops and comes back.

// FollowKind is what a FollowAction asks the shell to do.
type FollowKind int

const (
	// End: the subscription is over. Err says why; nil when the end was
	// the consumer's own Cancel or Close.
	End FollowKind = iota + 1
	// Lost: tell the worker that the channel of generation Gen is lost:
	// the broker has requeued every delivery made on it, and none of
	// them can be settled any more.
	Lost
	// Reopen: open a fresh channel, once a connection is up, and Resume
	// the subscription on it; report with OpenFailed or Resumed.
	Reopen
	// CancelTag: the consumer was cancelled while it resumed: cancel its
	// tag on the fresh channel (basic.cancel), so that the broker stops
	// delivering.
	CancelTag
	// Live: the subscription delivers on the channel of generation Gen.
	Live
)

func (k FollowKind) String() string {
	switch k {
	case End:
		return "end"
	case Lost:
		return "lost"
	case Reopen:
		return "reopen"
	case CancelTag:
		return "cancel-tag"
	case Live:
		return "live"
	}
	return "unknown"
}

// FollowAction is one thing for the shell to do.
type FollowAction struct {
	Kind FollowKind
	Gen  uint64 // Lost and Live
	Err  error  // End
}

// Follower is what a shell drives. Follow is the product's; a test may
// wrap one to break it on purpose (internal/sabotage).
type Follower interface {
	// Stopped: the channel of generation gen stopped delivering. why is
	// the shell's reading of the end (nil for its own Cancel or Close),
	// ours says Cancel or Close has been called, and closed says the
	// channel itself is closed (not only the consumer cancelled by the
	// broker, which leaves the channel open).
	Stopped(acts []FollowAction, why error, ours, closed bool, gen uint64) []FollowAction
	// OpenFailed: a Reopen could not open a channel (err), or the shell
	// found the consumer cancelled (ours) before it tried.
	OpenFailed(acts []FollowAction, err error, ours bool) []FollowAction
	// Resumed: Resume on the fresh channel returned gen and err; refused
	// says err is the broker refusing the subscription itself (a channel
	// exception such as 404 NOT_FOUND: the queue is gone), which the next
	// connection would repeat, rather than the connection going again.
	Resumed(acts []FollowAction, gen uint64, err error, ours, refused bool) []FollowAction
}

// Follow decides how a subscription follows its channel's end. A
// supervised subscription (one whose connection a supervisor reconnects)
// resumes on a fresh channel when its channel closes; one that is not,
// or whose consumer the broker cancelled (the queue was deleted), or that
// the consumer's own Cancel or Close ended, is over. It holds no state: a
// shell keeps one for the subscription's life.
type Follow struct {
	Supervised bool
}

var _ Follower = Follow{}

// Stopped implements Follower.
func (f Follow) Stopped(acts []FollowAction, why error, ours, closed bool, gen uint64) []FollowAction {
	if ours {
		why = nil // our own Cancel or Close raced the broker's end
	}
	if why == nil || !f.Supervised || !closed {
		return append(acts, FollowAction{Kind: End, Err: why})
	}
	return append(acts, FollowAction{Kind: Lost, Gen: gen}, FollowAction{Kind: Reopen})
}

// OpenFailed implements Follower.
func (f Follow) OpenFailed(acts []FollowAction, err error, ours bool) []FollowAction {
	if ours {
		err = nil
	}
	return append(acts, FollowAction{Kind: End, Err: err})
}

// Resumed implements Follower.
func (f Follow) Resumed(acts []FollowAction, gen uint64, err error, ours, refused bool) []FollowAction {
	switch {
	case err != nil && refused:
		return append(acts, FollowAction{Kind: End, Err: err})
	case err != nil && ours:
		return append(acts, FollowAction{Kind: End})
	case err != nil:
		return append(acts, FollowAction{Kind: Reopen}) // the connection went again
	case ours:
		return append(acts, FollowAction{Kind: CancelTag}, FollowAction{Kind: End})
	}
	return append(acts, FollowAction{Kind: Live, Gen: gen})
}
