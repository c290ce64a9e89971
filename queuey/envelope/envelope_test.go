package envelope_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/queuey/queuey/queuey/envelope"
)

// testEnvelope returns a valid envelope that cases modify.
func testEnvelope() envelope.Envelope {
	return envelope.Envelope{
		Version:    envelope.Version,
		ID:         "job-1",
		Kind:       "send_email",
		Queue:      "emails",
		Payload:    json.RawMessage(`{"to":"a@example.com"}`),
		Attempt:    1,
		EnqueuedAt: time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC),
	}
}

// envelopeMember is one key and raw JSON value of an envelope body.
type envelopeMember struct{ key, value string }

// testEnvelopeMembers are the members of a valid body, in wire order.
var testEnvelopeMembers = []envelopeMember{
	{"v", `1`},
	{"id", `"job-1"`},
	{"kind", `"send_email"`},
	{"queue", `"emails"`},
	{"payload", `{"to":"a@example.com"}`},
	{"attempt", `1`},
	{"deferrals", `0`},
	{"priority", `0`},
	{"enqueued_at", `"2025-01-02T03:04:05.123456789Z"`},
}

// envelopeBody returns the valid body of testEnvelopeMembers with each member
// of set replacing the member with its key, or appended if there is none, and
// without the keys in del.
func envelopeBody(set []envelopeMember, del ...string) string {
	members := append([]envelopeMember(nil), testEnvelopeMembers...)
	for _, s := range set {
		replaced := false
		for i := range members {
			if members[i].key == s.key {
				members[i].value, replaced = s.value, true
			}
		}
		if !replaced {
			members = append(members, s)
		}
	}
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for _, m := range members {
		if containsString(del, m.key) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "%q:%s", m.key, m.value)
	}
	b.WriteByte('}')
	return b.String()
}

func containsString(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// requireEnvelopeError fails t unless err is an *Error for field
// whose reason contains reason, and matches ErrMalformed.
func requireEnvelopeError(t *testing.T, err error, field, reason string) {
	t.Helper()
	var envErr *envelope.Error
	if !errors.As(err, &envErr) {
		t.Fatalf("error = %v (%T), want an *Error", err, err)
	}
	if !errors.Is(err, envelope.ErrMalformed) {
		t.Errorf("errors.Is(%v, ErrMalformed) = false, want true", err)
	}
	if envErr.Field != field {
		t.Errorf("Field = %q, want %q (error: %v)", envErr.Field, field, err)
	}
	if !strings.Contains(envErr.Reason, reason) {
		t.Errorf("Reason = %q, want it to contain %q", envErr.Reason, reason)
	}
}

func TestEnvelopeEncodeGolden(t *testing.T) {
	t.Parallel()

	env := envelope.Envelope{
		Version:    envelope.Version,
		ID:         "01JGX3M4N5P6Q7R8S9T0",
		Kind:       "call_api",
		Queue:      "myapp.emails",
		Payload:    json.RawMessage(`{ "url": "https://example.com/?a=1&b=<2>",  "n": [1, 2.5, null] }`),
		Attempt:    3,
		Deferrals:  2,
		Priority:   10,
		EnqueuedAt: time.Date(2025, 1, 2, 4, 4, 5, 120000000, time.FixedZone("CET", 3600)),
		Ext: map[string]json.RawMessage{
			"trace_id": json.RawMessage(`"abc"`),
			"b":        json.RawMessage(`{"z": true, "a": false}`),
			"a":        json.RawMessage(`[]`),
		},
	}
	const want = `{"v":1,"id":"01JGX3M4N5P6Q7R8S9T0","kind":"call_api","queue":"myapp.emails",` +
		`"payload":{"url":"https://example.com/?a=1&b=<2>","n":[1,2.5,null]},` +
		`"attempt":3,"deferrals":2,"priority":10,"enqueued_at":"2025-01-02T03:04:05.120000000Z",` +
		`"ext":{"a":[],"b":{"z":true,"a":false},"trace_id":"abc"}}`

	got, err := env.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("Encode bytes mismatch (-want +got):\n%s", diff)
	}

	// Canonical: decoding and encoding again gives the same bytes.
	decoded, err := envelope.Decode(got)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	again, err := decoded.Encode()
	if err != nil {
		t.Fatalf("Encode after decode: %v", err)
	}
	if diff := cmp.Diff(want, string(again)); diff != "" {
		t.Errorf("re-encoded bytes mismatch (-want +got):\n%s", diff)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()

	now := time.Now() // local, with a monotonic clock reading

	with := func(f func(e *envelope.Envelope)) envelope.Envelope {
		e := testEnvelope()
		f(&e)
		return e
	}

	tests := []struct {
		name string
		env  envelope.Envelope
		want envelope.Envelope // zero: the same as env
	}{
		{name: "PayloadObject", env: testEnvelope()},
		{name: "PayloadArray", env: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`[1,"two",{"three":3}]`) })},
		{name: "PayloadString", env: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`"hello"`) })},
		{name: "PayloadNull", env: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`null`) })},
		{name: "PayloadNumber", env: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`-12.5e3`) })},
		{name: "PayloadBoolean", env: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`false`) })},
		{name: "PayloadHTMLCharactersKept", env: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{"q":"<a href=\"x\">&amp;</a>"}`) })},
		{name: "PayloadEscapesKept", env: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`"\u00e9\n\ud83d\ude00"`) })},
		{
			name: "PayloadWhitespaceCompacted",
			env: with(func(e *envelope.Envelope) {
				e.Payload = json.RawMessage(" {\n  \"to\" : \"a b\" ,\t\"n\": [ 1 , 2 ]\n} ")
			}),
			want: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{"to":"a b","n":[1,2]}`) }),
		},
		{
			name: "ExtWithKeys",
			env: with(func(e *envelope.Envelope) {
				e.Ext = map[string]json.RawMessage{
					"trace_id": json.RawMessage(`"4bf92f3577b34da6"`),
					"tenant":   json.RawMessage(`{"id":42}`),
					"flags":    json.RawMessage(`[true,null]`),
					"":         json.RawMessage(`0`),
				}
			}),
		},
		{
			name: "ExtEmptyMapDecodesNil",
			env:  with(func(e *envelope.Envelope) { e.Ext = map[string]json.RawMessage{} }),
			want: testEnvelope(),
		},
		{
			name: "TimeNormalisedToUTC",
			env: with(func(e *envelope.Envelope) {
				e.EnqueuedAt = time.Date(2025, 1, 2, 12, 34, 5, 0, time.FixedZone("JST", 9*3600))
			}),
			want: with(func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(2025, 1, 2, 3, 34, 5, 0, time.UTC) }),
		},
		{
			name: "TimeNanosecondsKept",
			env:  with(func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(2025, 6, 30, 23, 59, 59, 1, time.UTC) }),
		},
		{
			name: "TimeMonotonicReadingDropped",
			env:  with(func(e *envelope.Envelope) { e.EnqueuedAt = now }),
			want: with(func(e *envelope.Envelope) { e.EnqueuedAt = now.Round(0).UTC() }),
		},
		{
			name: "TimeExtremes",
			env:  with(func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC) }),
		},
		{
			name: "VersionZeroWritesCurrent",
			env:  with(func(e *envelope.Envelope) { e.Version = 0 }),
			want: testEnvelope(),
		},
		{
			name: "CountersAndPriority",
			env: with(func(e *envelope.Envelope) {
				e.Attempt, e.Deferrals, e.Priority = 1<<40, 1<<31, 255
			}),
		},
		{
			name: "UnicodeStrings",
			env: with(func(e *envelope.Envelope) {
				e.ID, e.Kind, e.Queue = "jöb-\u2028-😀", "kind \"quoted\" \\ <&>", "q\x00\t"
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			want := tt.want
			if want.ID == "" {
				want = tt.env
			}

			body, err := tt.env.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := envelope.Decode(body)
			if err != nil {
				t.Fatalf("Decode(%s): %v", body, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s\nbody: %s", diff, body)
			}
			// cmp compares times with Equal; the location must be UTC too.
			if loc := got.EnqueuedAt.Location(); loc != time.UTC {
				t.Errorf("EnqueuedAt location = %v, want UTC", loc)
			}
		})
	}
}

func TestDecodeEnvelope(t *testing.T) {
	t.Parallel()

	want := testEnvelope()
	with := func(f func(e *envelope.Envelope)) envelope.Envelope {
		e := testEnvelope()
		f(&e)
		return e
	}

	tests := []struct {
		name string
		body string
		want envelope.Envelope
	}{
		{name: "Full", body: envelopeBody(nil), want: want},
		{name: "OptionalKeysAbsent", body: envelopeBody(nil, "deferrals", "priority"), want: want},
		{
			name: "KeysInAnyOrder",
			body: `{"enqueued_at":"2025-01-02T03:04:05.123456789Z","attempt":1,"payload":{"to":"a@example.com"},` +
				`"queue":"emails","kind":"send_email","id":"job-1","v":1}`,
			want: want,
		},
		{
			name: "WhitespaceAroundAndInside",
			body: " \r\n\t{ \"v\" : 1 , \"id\":\"job-1\",\"kind\":\"send_email\",\"queue\":\"emails\"," +
				"\"payload\": { \"to\" :\n\"a@example.com\" },\"attempt\":1," +
				"\"enqueued_at\":\"2025-01-02T03:04:05.123456789Z\" } \n",
			want: want,
		},
		{
			name: "CountersAndPriority",
			body: envelopeBody([]envelopeMember{{"attempt", `7`}, {"deferrals", `3`}, {"priority", `255`}}),
			want: with(func(e *envelope.Envelope) { e.Attempt, e.Deferrals, e.Priority = 7, 3, 255 }),
		},
		{
			name: "NegativeZeroIsZero",
			body: envelopeBody([]envelopeMember{{"deferrals", `-0`}}),
			want: want,
		},
		{
			name: "TimeWithOffset",
			body: envelopeBody([]envelopeMember{{"enqueued_at", `"2025-01-02T05:04:05.5+02:00"`}}),
			want: with(func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(2025, 1, 2, 3, 4, 5, 500000000, time.UTC) }),
		},
		{
			name: "TimeWithoutFraction",
			body: envelopeBody([]envelopeMember{{"enqueued_at", `"2025-01-02T03:04:05Z"`}}),
			want: with(func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }),
		},
		{
			name: "TimeYearZero",
			body: envelopeBody([]envelopeMember{{"enqueued_at", `"0000-01-01T00:00:00Z"`}}),
			want: with(func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC) }),
		},
		{
			name: "StringEscapes",
			body: envelopeBody([]envelopeMember{{"id", `"job-\u00e9\/\ud83d\ude00"`}}),
			want: with(func(e *envelope.Envelope) { e.ID = "job-é/😀" }),
		},
		{
			name: "PayloadNull",
			body: envelopeBody([]envelopeMember{{"payload", `null`}}),
			want: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`null`) }),
		},
		{
			name: "PayloadNumberKeptVerbatim",
			body: envelopeBody([]envelopeMember{{"payload", `1.50E+300`}}),
			want: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`1.50E+300`) }),
		},
		{
			name: "PayloadDuplicateKeysNotInspected",
			body: envelopeBody([]envelopeMember{{"payload", `{"a":1,"a":2}`}}),
			want: with(func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{"a":1,"a":2}`) }),
		},
		{
			name: "ExtEmptyObject",
			body: envelopeBody([]envelopeMember{{"ext", `{}`}}),
			want: want,
		},
		{
			name: "ExtValuesCompacted",
			body: envelopeBody([]envelopeMember{{"ext", `{"b": [ 1, 2 ], "a" : { "x" : null } }`}}),
			want: with(func(e *envelope.Envelope) {
				e.Ext = map[string]json.RawMessage{"a": json.RawMessage(`{"x":null}`), "b": json.RawMessage(`[1,2]`)}
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := envelope.Decode([]byte(tt.body))
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.body, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode mismatch (-want +got):\n%s", diff)
			}
			if loc := got.EnqueuedAt.Location(); loc != time.UTC {
				t.Errorf("EnqueuedAt location = %v, want UTC", loc)
			}
		})
	}
}

// envelopeRejections are bodies Decode refuses, with the field and a
// part of the reason it gives. The fuzz test seeds its corpus with them.
var envelopeRejections = []struct {
	name   string
	body   string
	field  string
	reason string
}{
	// The body as a whole.
	{"Empty", ``, "", "not valid JSON"},
	{"Whitespace", " \n", "", "not valid JSON"},
	{"NotJSON", `v=1&id=job-1`, "", "not valid JSON"},
	{"Truncated", envelopeBody(nil)[:40], "", "not valid JSON"},
	{"TrailingObject", envelopeBody(nil) + ` {}`, "", "not valid JSON"},
	{"TrailingGarbage", envelopeBody(nil) + `x`, "", "not valid JSON"},
	{"TwoEnvelopes", envelopeBody(nil) + "\n" + envelopeBody(nil), "", "not valid JSON"},
	{"InvalidUTF8", envelopeBody([]envelopeMember{{"id", "\"job-\xff\""}}), "", "not valid UTF-8"},
	{"Array", `[` + envelopeBody(nil) + `]`, "", "must be a JSON object, got array"},
	{"String", `"{}"`, "", "must be a JSON object, got string"},
	{"Number", `1`, "", "must be a JSON object, got number"},
	{"Null", `null`, "", "must be a JSON object, got null"},
	{"EmptyObject", `{}`, "v", "missing"},

	// The version, checked first.
	{"VersionMissing", envelopeBody(nil, "v"), "v", "missing"},
	{"VersionZero", envelopeBody([]envelopeMember{{"v", `0`}}), "v", "unsupported version 0"},
	{"VersionTwo", envelopeBody([]envelopeMember{{"v", `2`}}), "v", "unsupported version 2 (this package reads version 1)"},
	{"VersionTwoBeforeOtherRules", `{"v":2,"job_id":"x","attempt":"first"}`, "v", "unsupported version 2"},
	{"VersionNegative", envelopeBody([]envelopeMember{{"v", `-1`}}), "v", "unsupported version -1"},
	{"VersionString", envelopeBody([]envelopeMember{{"v", `"1"`}}), "v", "must be an integer, got string"},
	{"VersionFloat", envelopeBody([]envelopeMember{{"v", `1.0`}}), "v", "without fraction or exponent, got 1.0"},
	{"VersionExponent", envelopeBody([]envelopeMember{{"v", `1e0`}}), "v", "without fraction or exponent"},
	{"VersionNull", envelopeBody([]envelopeMember{{"v", `null`}}), "v", "must be an integer, got null"},
	{"VersionOverflow", envelopeBody([]envelopeMember{{"v", `99999999999999999999`}}), "v", "out of range"},

	// Keys.
	{"UnknownKey", envelopeBody([]envelopeMember{{"attempts", `1`}}), "attempts", `unknown key (extension fields go in "ext")`},
	{"UnknownKeyWrongCase", envelopeBody([]envelopeMember{{"ID", `"job-1"`}}), "ID", "unknown key"},
	{"UnknownKeyBeforeMissing", envelopeBody([]envelopeMember{{"trace", `"x"`}}, "id"), "trace", "unknown key"},
	{"DuplicateVersion", `{"v":1,` + envelopeBody(nil)[1:], "v", "duplicate key"},
	{"DuplicateID", strings.Replace(envelopeBody(nil), `"kind"`, `"id":"job-2","kind"`, 1), "id", "duplicate key"},
	{"DuplicateUnknownKey", strings.TrimSuffix(envelopeBody(nil), "}") + `,"x":1,"x":2}`, "x", "duplicate key"},
	{"IDMissing", envelopeBody(nil, "id"), "id", "missing"},
	{"KindMissing", envelopeBody(nil, "kind"), "kind", "missing"},
	{"QueueMissing", envelopeBody(nil, "queue"), "queue", "missing"},
	{"PayloadMissing", envelopeBody(nil, "payload"), "payload", "missing"},
	{"AttemptMissing", envelopeBody(nil, "attempt"), "attempt", "missing"},
	{"EnqueuedAtMissing", envelopeBody(nil, "enqueued_at"), "enqueued_at", "missing"},

	// Strings.
	{"IDEmpty", envelopeBody([]envelopeMember{{"id", `""`}}), "id", "must not be empty"},
	{"IDNumber", envelopeBody([]envelopeMember{{"id", `1`}}), "id", "must be a string, got number"},
	{"IDNull", envelopeBody([]envelopeMember{{"id", `null`}}), "id", "must be a string, got null"},
	{"KindEmpty", envelopeBody([]envelopeMember{{"kind", `""`}}), "kind", "must not be empty"},
	{"KindArray", envelopeBody([]envelopeMember{{"kind", `["send_email"]`}}), "kind", "must be a string, got array"},
	{"QueueEmpty", envelopeBody([]envelopeMember{{"queue", `""`}}), "queue", "must not be empty"},
	{"QueueBoolean", envelopeBody([]envelopeMember{{"queue", `true`}}), "queue", "must be a string, got boolean"},
	{"IDTooLong", envelopeBody([]envelopeMember{{"id", `"` + strings.Repeat("i", 256) + `"`}}), "id", "is 256 bytes, over the 255"},
	{"KindTooLong", envelopeBody([]envelopeMember{{"kind", `"` + strings.Repeat("\u00e9", 128) + `"`}}), "kind", "is 256 bytes, over the 255"},
	{"QueueTooLong", envelopeBody([]envelopeMember{{"queue", `"` + strings.Repeat("q", 300) + `"`}}), "queue", "is 300 bytes, over the 255"},

	// Integers.
	{"AttemptZero", envelopeBody([]envelopeMember{{"attempt", `0`}}), "attempt", "must be at least 1, got 0"},
	{"AttemptNegative", envelopeBody([]envelopeMember{{"attempt", `-3`}}), "attempt", "must be at least 1, got -3"},
	{"AttemptString", envelopeBody([]envelopeMember{{"attempt", `"1"`}}), "attempt", "must be an integer, got string"},
	{"AttemptFraction", envelopeBody([]envelopeMember{{"attempt", `1.5`}}), "attempt", "without fraction or exponent, got 1.5"},
	{"AttemptWholeFloat", envelopeBody([]envelopeMember{{"attempt", `2.0`}}), "attempt", "without fraction or exponent"},
	{"AttemptExponent", envelopeBody([]envelopeMember{{"attempt", `1E2`}}), "attempt", "without fraction or exponent"},
	{"AttemptOverflow", envelopeBody([]envelopeMember{{"attempt", `9223372036854775808`}}), "attempt", "out of range"},
	{"AttemptNull", envelopeBody([]envelopeMember{{"attempt", `null`}}), "attempt", "must be an integer, got null"},
	{"AttemptObject", envelopeBody([]envelopeMember{{"attempt", `{"n":1}`}}), "attempt", "must be an integer, got object"},
	{"DeferralsNegative", envelopeBody([]envelopeMember{{"deferrals", `-1`}}), "deferrals", "must not be negative, got -1"},
	{"DeferralsString", envelopeBody([]envelopeMember{{"deferrals", `"0"`}}), "deferrals", "must be an integer, got string"},
	{"DeferralsNull", envelopeBody([]envelopeMember{{"deferrals", `null`}}), "deferrals", "must be an integer, got null"},
	{"DeferralsFraction", envelopeBody([]envelopeMember{{"deferrals", `0.5`}}), "deferrals", "without fraction or exponent"},
	{"PriorityTooHigh", envelopeBody([]envelopeMember{{"priority", `256`}}), "priority", "must be between 0 and 255, got 256"},
	{"PriorityNegative", envelopeBody([]envelopeMember{{"priority", `-1`}}), "priority", "must be between 0 and 255, got -1"},
	{"PriorityHuge", envelopeBody([]envelopeMember{{"priority", `18446744073709551616`}}), "priority", "out of range"},
	{"PriorityFraction", envelopeBody([]envelopeMember{{"priority", `9.5`}}), "priority", "without fraction or exponent"},
	{"PriorityString", envelopeBody([]envelopeMember{{"priority", `"10"`}}), "priority", "must be an integer, got string"},
	{"PriorityNull", envelopeBody([]envelopeMember{{"priority", `null`}}), "priority", "must be an integer, got null"},

	// Times.
	{"EnqueuedAtNumber", envelopeBody([]envelopeMember{{"enqueued_at", `1735787045`}}), "enqueued_at", "must be a string, got number"},
	{"EnqueuedAtSpaceSeparator", envelopeBody([]envelopeMember{{"enqueued_at", `"2025-01-02 03:04:05Z"`}}), "enqueued_at", "must be an RFC 3339 time"},
	{"EnqueuedAtNoZone", envelopeBody([]envelopeMember{{"enqueued_at", `"2025-01-02T03:04:05"`}}), "enqueued_at", "must be an RFC 3339 time"},
	{"EnqueuedAtDateOnly", envelopeBody([]envelopeMember{{"enqueued_at", `"2025-01-02"`}}), "enqueued_at", "must be an RFC 3339 time"},
	{"EnqueuedAtMonth13", envelopeBody([]envelopeMember{{"enqueued_at", `"2025-13-02T03:04:05Z"`}}), "enqueued_at", "must be an RFC 3339 time"},
	{"EnqueuedAtEmpty", envelopeBody([]envelopeMember{{"enqueued_at", `""`}}), "enqueued_at", "must be an RFC 3339 time"},
	{"EnqueuedAtZeroTime", envelopeBody([]envelopeMember{{"enqueued_at", `"0001-01-01T00:00:00Z"`}}), "enqueued_at", "must be set, got the zero time"},
	{"EnqueuedAtZeroTimeWithOffset", envelopeBody([]envelopeMember{{"enqueued_at", `"0001-01-01T01:00:00+01:00"`}}), "enqueued_at", "zero time"},
	{"EnqueuedAtBeforeYearZeroInUTC", envelopeBody([]envelopeMember{{"enqueued_at", `"0000-01-01T00:30:00+01:00"`}}), "enqueued_at", "year -1 in UTC is outside 0000 to 9999"},
	{"EnqueuedAtAfterYear9999InUTC", envelopeBody([]envelopeMember{{"enqueued_at", `"9999-12-31T23:59:59-01:00"`}}), "enqueued_at", "year 10000 in UTC is outside 0000 to 9999"},

	// Extensions.
	{"ExtArray", envelopeBody([]envelopeMember{{"ext", `[]`}}), "ext", "must be an object, got array"},
	{"ExtNull", envelopeBody([]envelopeMember{{"ext", `null`}}), "ext", "must be an object, got null"},
	{"ExtString", envelopeBody([]envelopeMember{{"ext", `"trace=1"`}}), "ext", "must be an object, got string"},
	{"ExtDuplicateKey", envelopeBody([]envelopeMember{{"ext", `{"a":1,"b":2,"a":3}`}}), "ext", `duplicate key "a"`},
}

func TestDecodeEnvelopeRejects(t *testing.T) {
	t.Parallel()

	for _, tt := range envelopeRejections {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := envelope.Decode([]byte(tt.body))
			if err == nil {
				t.Fatalf("Decode(%s) = %+v, want an error", tt.body, got)
			}
			requireEnvelopeError(t, err, tt.field, tt.reason)
			if diff := cmp.Diff(envelope.Envelope{}, got); diff != "" {
				t.Errorf("Decode returned a partial envelope with its error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnvelopeEncodeRejects(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		modify func(e *envelope.Envelope)
		field  string
		reason string
	}{
		{"VersionTwo", func(e *envelope.Envelope) { e.Version = 2 }, "v", "unsupported version 2 (this package writes version 1)"},
		{"VersionNegative", func(e *envelope.Envelope) { e.Version = -1 }, "v", "unsupported version -1"},
		{"IDEmpty", func(e *envelope.Envelope) { e.ID = "" }, "id", "must not be empty"},
		{"IDInvalidUTF8", func(e *envelope.Envelope) { e.ID = "job-\xff" }, "id", "must be valid UTF-8"},
		{"KindEmpty", func(e *envelope.Envelope) { e.Kind = "" }, "kind", "must not be empty"},
		{"KindInvalidUTF8", func(e *envelope.Envelope) { e.Kind = "\xc3" }, "kind", "must be valid UTF-8"},
		{"QueueEmpty", func(e *envelope.Envelope) { e.Queue = "" }, "queue", "must not be empty"},
		{"QueueInvalidUTF8", func(e *envelope.Envelope) { e.Queue = "\xed\xa0\x80" }, "queue", "must be valid UTF-8"},
		{"IDTooLong", func(e *envelope.Envelope) { e.ID = strings.Repeat("i", 256) }, "id", "is 256 bytes, over the 255"},
		{"KindTooLong", func(e *envelope.Envelope) { e.Kind = strings.Repeat("k", 256) }, "kind", "is 256 bytes, over the 255"},
		{"PayloadNil", func(e *envelope.Envelope) { e.Payload = nil }, "payload", "must be valid JSON, got nothing (use null for a job without arguments)"},
		{"PayloadEmpty", func(e *envelope.Envelope) { e.Payload = json.RawMessage{} }, "payload", "got nothing"},
		{"PayloadInvalidJSON", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{"to":`) }, "payload", "must be valid JSON"},
		{"PayloadTwoValues", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`1 2`) }, "payload", "must be valid JSON"},
		{"PayloadInvalidUTF8", func(e *envelope.Envelope) { e.Payload = json.RawMessage("\"\xff\"") }, "payload", "must be valid UTF-8"},
		{"AttemptZero", func(e *envelope.Envelope) { e.Attempt = 0 }, "attempt", "must be at least 1, got 0"},
		{"AttemptNegative", func(e *envelope.Envelope) { e.Attempt = -1 }, "attempt", "must be at least 1, got -1"},
		{"DeferralsNegative", func(e *envelope.Envelope) { e.Deferrals = -1 }, "deferrals", "must not be negative, got -1"},
		{"EnqueuedAtZero", func(e *envelope.Envelope) { e.EnqueuedAt = time.Time{} }, "enqueued_at", "must be set, got the zero time"},
		{"EnqueuedAtYear10000", func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "enqueued_at", "year 10000"},
		{"EnqueuedAtYearMinus1", func(e *envelope.Envelope) { e.EnqueuedAt = time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC) }, "enqueued_at", "year -1"},
		{
			"EnqueuedAtYear9999OnlyLocally",
			func(e *envelope.Envelope) {
				e.EnqueuedAt = time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("", -2*3600))
			},
			"enqueued_at", "year 10000 in UTC",
		},
		{"ExtValueNil", func(e *envelope.Envelope) { e.Ext = map[string]json.RawMessage{"a": nil} }, "ext", `key "a": value must be valid JSON, got nothing`},
		{"ExtValueInvalidJSON", func(e *envelope.Envelope) { e.Ext = map[string]json.RawMessage{"a": json.RawMessage(`[`)} }, "ext", `key "a": value must be valid JSON`},
		{"ExtValueInvalidUTF8", func(e *envelope.Envelope) { e.Ext = map[string]json.RawMessage{"a": json.RawMessage("\"\xff\"")} }, "ext", `key "a": value must be valid UTF-8`},
		{"ExtKeyInvalidUTF8", func(e *envelope.Envelope) { e.Ext = map[string]json.RawMessage{"\xff": json.RawMessage(`1`)} }, "ext", "is not valid UTF-8"},
		{
			"ExtFirstBadKeyInOrder",
			func(e *envelope.Envelope) {
				e.Ext = map[string]json.RawMessage{"c": nil, "a": json.RawMessage(`1`), "b": json.RawMessage(`}`)}
			},
			"ext", `key "b"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			env := testEnvelope()
			tt.modify(&env)
			body, err := env.Encode()
			if err == nil {
				t.Fatalf("Encode() = %s, want an error", body)
			}
			if body != nil {
				t.Errorf("Encode returned bytes %q with its error, want nil", body)
			}
			requireEnvelopeError(t, err, tt.field, tt.reason)
		})
	}
}

func TestEnvelopeError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		err  *envelope.Error
		want string
	}{
		{
			name: "Field",
			err:  &envelope.Error{Field: "attempt", Reason: "must be at least 1, got 0"},
			want: `queuey: invalid envelope: field "attempt": must be at least 1, got 0`,
		},
		{
			name: "WholeBody",
			err:  &envelope.Error{Reason: "body is not valid JSON"},
			want: `queuey: invalid envelope: body is not valid JSON`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			wrapped := fmt.Errorf("settling delivery 7: %w", tt.err)
			if !errors.Is(wrapped, envelope.ErrMalformed) {
				t.Error("errors.Is(wrapped, ErrMalformed) = false, want true")
			}
			if errors.Is(wrapped, io.EOF) {
				t.Error("errors.Is(wrapped, io.EOF) = true, want false")
			}
			var envErr *envelope.Error
			if !errors.As(wrapped, &envErr) || envErr != tt.err {
				t.Errorf("errors.As(wrapped) = %v, want the original error", envErr)
			}
		})
	}
}

func TestDecodeEnvelopeUnsupportedVersionMessage(t *testing.T) {
	t.Parallel()

	_, err := envelope.Decode([]byte(envelopeBody([]envelopeMember{{"v", `2`}, {"payload_v2", `{}`}})))
	const want = `queuey: invalid envelope: field "v": unsupported version 2 (this package reads version 1)`
	if err == nil || err.Error() != want {
		t.Errorf("Decode error = %v, want %q", err, want)
	}
}
