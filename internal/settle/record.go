package settle

import (
	"encoding/json"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/queuey/queuey/queuey/contract"
	"github.com/queuey/queuey/queuey/envelope"
)

// Record returns dec with the failure it settles written into its
// successor's contract.ExtErrors, so that the error travels with the job
// to its next attempt and, in the end, to its dead letter: attempt (the
// attempt that ran), at (when its handler ended, on the shell's clock) and
// dec.Err's text cut to contract.MaxErrorText, the latest
// contract.MaxAttemptErrors kept. An ack and a deferral record nothing: a
// deferral is no failure. A history that does not parse starts afresh.
// The successor's Ext is copied, never written in place: the job that ran
// shares it.
func Record(dec Decision, attempt int, at time.Time) Decision {
	if dec.Err == nil || dec.Action == contract.ActionAck || dec.Action == contract.ActionDefer {
		return dec
	}
	prev, _ := contract.AttemptErrors(dec.Successor)
	if n := len(prev) - (contract.MaxAttemptErrors - 1); n > 0 {
		prev = prev[n:]
	}
	errs := make([]contract.AttemptError, 0, len(prev)+1)
	errs = append(errs, prev...)
	errs = append(errs, contract.AttemptError{Attempt: attempt, At: at.UTC(), Error: cutText(dec.Err.Error(), contract.MaxErrorText)})
	raw, err := json.Marshal(errs)
	if err != nil {
		return dec // a time beyond year 9999: no history rather than no job
	}
	ext := make(map[string]json.RawMessage, len(dec.Successor.Ext)+1)
	maps.Copy(ext, dec.Successor.Ext)
	ext[contract.ExtErrors] = raw
	dec.Successor.Ext = ext
	return dec
}

// cutText returns s if it is at most max bytes, or its longest prefix that
// ends at a character boundary and leaves room for "…", followed by "…".
// Text that is not UTF-8 is made so first: ExtErrors is JSON.
func cutText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // each invalid byte becomes U+FFFD
	}
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// WithoutErrors returns env without its failed attempts (ExtErrors), its
// Ext copied: what a successor that the backend refused as too large is
// published as, rather than being dead-lettered for its history.
func WithoutErrors(env envelope.Envelope) envelope.Envelope {
	if _, ok := env.Ext[contract.ExtErrors]; ok {
		ext := maps.Clone(env.Ext)
		delete(ext, contract.ExtErrors)
		if len(ext) == 0 {
			ext = nil
		}
		env.Ext = ext
	}
	return env
}
