package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/queuey/queuey/queuey/envelope"
)

// ExtErrors is the extension field in which a job carries its latest
// failed attempts, oldest first: a JSON array of objects
//
//	{"attempt": 2, "at": "2026-12-06T09:00:01.5Z", "error": "upstream 503"}
//
// one for each attempt whose handler failed (an error, a panic, a timeout,
// a Fatal, an unknown kind), written by the worker as it settles the job:
// the attempt that ran, when its handler ended, and the error's text. A
// deferral is no failure and adds none. At most MaxAttemptErrors entries
// are kept, each text at most MaxErrorText bytes. The array travels with
// the job through holds, retries and dead letters, so a dead letter says
// why each of its last attempts failed (AttemptErrors reads it), and a
// redrive keeps it.
const ExtErrors = "queuey_errors"

// MaxAttemptErrors is how many of its latest failed attempts a job
// carries in ExtErrors.
const MaxAttemptErrors = 5

// MaxErrorText is the longest error text ExtErrors keeps, in bytes: a
// longer one is cut at a character boundary and ends with "…". With
// MaxAttemptErrors, a job's error history stays under 6 KiB.
const MaxErrorText = 1024

// AttemptError is one failed attempt of a job, as ExtErrors carries it.
type AttemptError struct {
	Attempt int       `json:"attempt"` // the attempt that failed, from 1
	At      time.Time `json:"at"`      // when its handler ended (UTC)
	Error   string    `json:"error"`   // what it returned, cut to MaxErrorText
}

// AttemptErrors returns the failed attempts env carries in ExtErrors,
// oldest first, or nil when it carries none. An ExtErrors that is not an
// array of such objects is an error (wrapping ErrMalformedErrors); the
// worker ignores it, and writes a fresh array at the next failure.
func AttemptErrors(env envelope.Envelope) ([]AttemptError, error) {
	raw, ok := env.Ext[ExtErrors]
	if !ok {
		return nil, nil
	}
	var errs []AttemptError
	if err := json.Unmarshal(raw, &errs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedErrors, err)
	}
	return errs, nil
}

// ErrMalformedErrors is wrapped by the error of AttemptErrors for an
// ExtErrors field that is not as described there.
var ErrMalformedErrors = errors.New("queuey: malformed " + ExtErrors)
