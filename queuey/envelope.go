package queuey

import "github.com/queuey/queuey/queuey/envelope"

// Envelope is a job as it travels on a queue: the job's arguments plus what
// a worker needs to run it, settle it and log it. Its wire format, and how
// strictly it is read, is package envelope's documentation.
type Envelope = envelope.Envelope

// EnvelopeError is what an invalid envelope gets from Encode or
// DecodeEnvelope: the field at fault and why. It matches
// ErrMalformedEnvelope.
type EnvelopeError = envelope.Error

// EnvelopeVersion is the wire format version this package writes and
// reads.
const EnvelopeVersion = envelope.Version

// ErrMalformedEnvelope matches every error DecodeEnvelope returns.
var ErrMalformedEnvelope = envelope.ErrMalformed

// DecodeEnvelope parses body strictly, by the rules of package envelope.
// Every error is an *EnvelopeError and matches ErrMalformedEnvelope.
func DecodeEnvelope(body []byte) (Envelope, error) { return envelope.Decode(body) }
