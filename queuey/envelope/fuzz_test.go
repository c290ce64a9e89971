package envelope_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey/queuey/queuey/envelope"
)

// FuzzDecodeEnvelope checks that Decode never panics, that every
// error it returns is an *Error matching ErrMalformed, and
// that any body it accepts encodes, decodes again to an equal Envelope, and
// encodes again to the same bytes.
//
// Run it with:
//
//	go test -run '^$' -fuzz FuzzDecodeEnvelope -fuzztime 60s ./queuey/
//
// Inputs it finds failing belong in testdata/fuzz/FuzzDecodeEnvelope, where
// plain go test replays them.
func FuzzDecodeEnvelope(f *testing.F) {
	valid := []string{
		envelopeBody(nil),
		envelopeBody(nil, "deferrals", "priority"),
		envelopeBody([]envelopeMember{{"payload", `null`}}),
		envelopeBody([]envelopeMember{{"payload", `[1,"two",{"three":[3.0e-1]}]`}}),
		envelopeBody([]envelopeMember{{"payload", `"<&>\u2028\ud800"`}}),
		envelopeBody([]envelopeMember{{"payload", `{"a":{"b":{"c":[[[]]]}}}`}}),
		envelopeBody([]envelopeMember{{"ext", `{"trace_id":"abc","n":{"x":[1, 2]},"":null}`}}),
		envelopeBody([]envelopeMember{{"ext", `{}`}}),
		envelopeBody([]envelopeMember{{"enqueued_at", `"2025-01-02T05:04:05.5+02:00"`}}),
		envelopeBody([]envelopeMember{{"enqueued_at", `"0000-01-01T00:00:00Z"`}}),
		envelopeBody([]envelopeMember{{"enqueued_at", `"9999-12-31T23:59:59.999999999Z"`}}),
		envelopeBody([]envelopeMember{{"attempt", `9223372036854775807`}, {"deferrals", `-0`}, {"priority", `255`}}),
		envelopeBody([]envelopeMember{{"id", `"job-\u00e9\/\ud83d\ude00"`}, {"queue", `"q\u0000"`}}),
		" \t\n" + envelopeBody(nil) + "\r\n",
	}
	for _, body := range valid {
		f.Add([]byte(body))
	}
	env := testEnvelope()
	if golden, err := env.Encode(); err == nil {
		f.Add(golden)
	}
	for _, tt := range envelopeRejections {
		f.Add([]byte(tt.body))
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := envelope.Decode(body)
		if err != nil {
			var envErr *envelope.Error
			if !errors.As(err, &envErr) {
				t.Fatalf("Decode error %v is %T, want *Error", err, err)
			}
			if !errors.Is(err, envelope.ErrMalformed) {
				t.Fatalf("Decode error %v does not match ErrMalformed", err)
			}
			if diff := cmp.Diff(envelope.Envelope{}, env); diff != "" {
				t.Fatalf("Decode returned a partial envelope with its error (-want +got):\n%s", diff)
			}
			return
		}

		if env.Version != envelope.Version || env.ID == "" || env.Kind == "" || env.Queue == "" ||
			env.Attempt < 1 || env.Deferrals < 0 || env.EnqueuedAt.Location() != time.UTC {
			t.Fatalf("Decode(%q) accepted an envelope that breaks the format: %+v", body, env)
		}

		encoded, err := env.Encode()
		if err != nil {
			t.Fatalf("decoded envelope does not encode: %v\nbody: %q\nenvelope: %+v", err, body, env)
		}
		again, err := envelope.Decode(encoded)
		if err != nil {
			t.Fatalf("encoded envelope does not decode: %v\nbody: %q\nencoded: %q", err, body, encoded)
		}
		if diff := cmp.Diff(env, again); diff != "" {
			t.Fatalf("decode, encode, decode mismatch (-first +second):\n%s\nbody: %q\nencoded: %q", diff, body, encoded)
		}
		reencoded, err := again.Encode()
		if err != nil {
			t.Fatalf("second encode: %v", err)
		}
		if !bytes.Equal(encoded, reencoded) {
			t.Fatalf("encoding is not canonical:\nfirst:  %q\nsecond: %q", encoded, reencoded)
		}
	})
}
