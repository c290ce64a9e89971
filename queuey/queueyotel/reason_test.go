package queueyotel

import (
	"testing"

	"github.com/queuey/queuey/queuey"
)

// Every reason the worker dead-letters with is its own metric attribute;
// a fatal error's text and anything else are bounded classes.
func TestReasonClass(t *testing.T) {
	for _, r := range []string{queuey.ReasonAttemptsExhausted, queuey.ReasonUnknownKind, queuey.ReasonMalformed,
		queuey.ReasonDelayTooLong, queuey.ReasonJobTooLarge} {
		if got := reasonClass(r); got != r {
			t.Errorf("reasonClass(%q) = %q, want it unchanged", r, got)
		}
	}
	for r, want := range map[string]string{"fatal: card declined": "fatal", "fatal": "fatal", "operator moved it": "other", "": "other"} {
		if got := reasonClass(r); got != want {
			t.Errorf("reasonClass(%q) = %q, want %q", r, got, want)
		}
	}
}
