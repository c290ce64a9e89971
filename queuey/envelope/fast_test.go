package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// envelopeWire is the wire form of an Envelope as encoding/json writes it:
// the reference the hand-built encoder is held to.
type envelopeWire struct {
	Version    int                        `json:"v"`
	ID         string                     `json:"id"`
	Kind       string                     `json:"kind"`
	Queue      string                     `json:"queue"`
	Payload    json.RawMessage            `json:"payload"`
	Attempt    int                        `json:"attempt"`
	Deferrals  int                        `json:"deferrals"`
	Priority   uint8                      `json:"priority"`
	EnqueuedAt string                     `json:"enqueued_at"`
	Ext        map[string]json.RawMessage `json:"ext,omitempty"`
}

func encodeWithEncodingJSON(t *rapid.T, e Envelope) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(envelopeWire{
		Version: Version, ID: e.ID, Kind: e.Kind, Queue: e.Queue, Payload: e.Payload,
		Attempt: e.Attempt, Deferrals: e.Deferrals, Priority: e.Priority,
		EnqueuedAt: e.EnqueuedAt.UTC().Format(envelopeTimeLayout), Ext: e.Ext,
	})
	if err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// jsonText draws strings that exercise escaping: quotes, backslashes,
// control characters, HTML characters, U+2028/U+2029 and other runes.
func jsonText() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.StringMatching(`[a-z0-9\-]{1,12}`),
		rapid.StringOfN(rapid.SampledFrom([]rune("ab\"\\/\x00\x01\x1f\x7f\b\f\n\r\t<>&\u2028\u2029é😀\ufffd ")), 1, 16, -1),
		rapid.StringN(1, 16, -1),
	)
}

// jsonValue draws a valid JSON value, sometimes with insignificant space.
func jsonValue() *rapid.Generator[json.RawMessage] {
	return rapid.Custom(func(t *rapid.T) json.RawMessage {
		v := rapid.SampledFrom([]string{
			`null`, `true`, `1`, `-0.5e3`, `"x"`, `[]`, `{}`, `{"a":[1,2,{"b":"c d"}]}`,
			` { "a" : [ 1 , 2 ] } `, "[\n\t\"<&>\"\r\n]", `"\u2028"`, `{"k":"\\\" "}`,
		}).Draw(t, "json")
		if rapid.Bool().Draw(t, "string") {
			b, _ := json.Marshal(jsonText().Draw(t, "text"))
			v = string(b)
		}
		return json.RawMessage(v)
	})
}

func envelopeGen() *rapid.Generator[Envelope] {
	return rapid.Custom(func(t *rapid.T) Envelope {
		e := Envelope{
			ID: jsonText().Draw(t, "id"), Kind: jsonText().Draw(t, "kind"), Queue: jsonText().Draw(t, "queue"),
			Payload:   jsonValue().Draw(t, "payload"),
			Attempt:   rapid.IntRange(1, 1<<40).Draw(t, "attempt"),
			Deferrals: rapid.IntRange(0, 1<<40).Draw(t, "deferrals"),
			Priority:  rapid.Uint8().Draw(t, "priority"),
			EnqueuedAt: time.Unix(rapid.Int64Range(-62135596799, 253402300799).Draw(t, "sec"),
				rapid.Int64Range(0, 999999999).Draw(t, "nsec")).In(time.FixedZone("x", rapid.IntRange(-50000, 50000).Draw(t, "zone"))),
		}
		if rapid.Bool().Draw(t, "has ext") {
			e.Ext = rapid.MapOfN(jsonText(), jsonValue(), 1, 3).Draw(t, "ext")
		}
		return e
	})
}

// TestEncodeMatchesEncodingJSON: the hand-built encoder writes exactly what
// encoding/json writes for the wire struct.
func TestEncodeMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := envelopeGen().Draw(t, "envelope")
		got, err := e.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if want := encodeWithEncodingJSON(t, e); !bytes.Equal(got, want) {
			t.Fatalf("Encode differs from encoding/json:\n got %q\nwant %q", got, want)
		}
	})
}

// TestCanonicalDecodeAgreesWithGeneral: whatever the canonical fast path
// accepts, the general decoder accepts with the same envelope, for encoded
// envelopes and for mutations of them; and the fast path does take the
// common case (no extension fields, nothing escaped), every time.
//
// It used to count how many of the drawn bodies the fast path took and
// require at least one: most drawn envelopes have extension fields or
// escaped strings, and about one run in fifty drew none it could take.
// Each draw now also makes its plain counterpart, which the fast path must
// take.
func TestCanonicalDecodeAgreesWithGeneral(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := envelopeGen().Draw(t, "envelope")
		body, err := e.Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if rapid.Bool().Draw(t, "mutate") && len(body) > 0 {
			i := rapid.IntRange(0, len(body)-1).Draw(t, "at")
			switch rapid.IntRange(0, 2).Draw(t, "how") {
			case 0:
				body = append(body[:i:i], body[i+1:]...)
			case 1:
				body = append(body[:i:i], append([]byte{rapid.Byte().Draw(t, "byte")}, body[i:]...)...)
			case 2:
				body[i] = rapid.Byte().Draw(t, "byte")
			}
		}
		checkCanonicalAgrees(t, body)

		body, err = plainCounterpart(e).Encode()
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if _, ok := decodeCanonicalEnvelope(body); !ok {
			t.Fatalf("the fast path refused a plain envelope: %s", body)
		}
		checkCanonicalAgrees(t, body)
	})
	plain := Envelope{ID: "j1", Kind: "email", Queue: "jobs", Payload: json.RawMessage(`{"to":"a@b"}`), Attempt: 3,
		Deferrals: 1, Priority: 10, EnqueuedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	body, _ := plain.Encode()
	got, ok := decodeCanonicalEnvelope(body)
	if !ok {
		t.Fatalf("the fast path refused a plain envelope: %s", body)
	}
	plain.Version = Version
	if diff := cmp.Diff(plain, got); diff != "" {
		t.Fatalf("fast path (-want +got):\n%s", diff)
	}
}

// plainCounterpart is e in the common case the fast path takes: no
// extension fields, no string that needs escaping, counters under a
// billion, a payload without whitespace.
func plainCounterpart(e Envelope) Envelope {
	unescaped := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				b[i] = 'x'
			}
		}
		if len(b) == 0 {
			return "x"
		}
		return string(b)
	}
	e.Ext = nil
	e.ID, e.Kind, e.Queue = unescaped(e.ID), unescaped(e.Kind), unescaped(e.Queue)
	e.Attempt = 1 + e.Attempt%999_999_998
	e.Deferrals %= 1_000_000_000
	if hasJSONSpace(e.Payload) {
		e.Payload = json.RawMessage(`{"plain":true}`)
	}
	return e
}

type fataler interface{ Fatalf(string, ...any) }

func checkCanonicalAgrees(t fataler, body []byte) {
	fast, ok := decodeCanonicalEnvelope(body)
	if !ok {
		return
	}
	general, err := decodeEnvelopeGeneral(body)
	if err != nil {
		t.Fatalf("fast path accepted %q, the general decoder refused it: %v", body, err)
	}
	if diff := cmp.Diff(general, fast); diff != "" {
		t.Fatalf("fast path and general decoder disagree on %q (-general +fast):\n%s", body, diff)
	}
}

// FuzzCanonicalDecode holds the fast path to the general decoder on
// arbitrary bodies:
//
//	go test -run '^$' -fuzz FuzzCanonicalDecode -fuzztime 60s ./queuey/
func FuzzCanonicalDecode(f *testing.F) {
	for _, e := range []Envelope{
		{ID: "j1", Kind: "k", Queue: "q", Payload: json.RawMessage(`null`), Attempt: 1, EnqueuedAt: time.Unix(0, 0)},
		{ID: "j2", Kind: "k", Queue: "q", Payload: json.RawMessage(`{"a":[1,"x,}]"]}`), Attempt: 12, Deferrals: 3, Priority: 255, EnqueuedAt: time.Unix(1e9, 5)},
	} {
		b, err := e.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"id":"a","kind":"b","queue":"c","payload":01,"attempt":1,"deferrals":0,"priority":0,"enqueued_at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"id":"a","kind":"b","queue":"c","payload":1,"attempt":01,"deferrals":0,"priority":256,"enqueued_at":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, body []byte) { checkCanonicalAgrees(t, body) })
}

// TestInternReturnsEqualStrings fills the intern table far past its size,
// so slots collide and are replaced, and checks every answer against the
// bytes asked for, and that a repeat of the last string is not allocated.
func TestInternReturnsEqualStrings(t *testing.T) {
	var tab interned
	for i := range 1000 {
		b := []byte(fmt.Sprintf("queue-%d", i%300))
		if got := tab.intern(b); got != string(b) {
			t.Fatalf("intern(%q) = %q", b, got)
		}
	}
	long := bytes.Repeat([]byte("x"), 200)
	if got := tab.intern(long); got != string(long) {
		t.Fatalf("intern of a long string changed it")
	}
	b := []byte("emails")
	tab.intern(b)
	if n := testing.AllocsPerRun(100, func() { _ = tab.intern(b) }); n != 0 {
		t.Fatalf("interning a string already held allocates %v times", n)
	}
}

// The decoded envelope shares no bytes with the body, on the canonical path
// and the general one: overwriting the body afterwards changes nothing.
func TestDecodedEnvelopeDoesNotReferToTheBody(t *testing.T) {
	canonical := `{"v":1,"id":"j1","kind":"email","queue":"q","payload":{"to":"a@b"},"attempt":1,"deferrals":0,"priority":0,"enqueued_at":"2026-01-02T03:04:05.000000006Z"}`
	general := `{"v":1, "id":"j1","kind":"email","queue":"q","payload":{"to": "a@b"},"attempt":1,"deferrals":0,"priority":0,"enqueued_at":"2026-01-02T03:04:05.000000006Z","ext":{"x":[1]}}`
	for name, text := range map[string]string{"canonical": canonical, "general": general} {
		body := []byte(text)
		e, err := Decode(body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		before := fmt.Sprintf("%+v %s %s", e, e.Payload, e.Ext)
		for i := range body {
			body[i] = 'X'
		}
		if after := fmt.Sprintf("%+v %s %s", e, e.Payload, e.Ext); after != before {
			t.Fatalf("%s: overwriting the body changed the envelope:\nbefore %s\nafter  %s", name, before, after)
		}
	}
}

// An envelope with extension fields as Encode writes them (a worker's
// error history among them, with spaces inside its strings) takes the
// fast path, and agrees with the general decoder; one whose ext keys are
// out of order, or whose values hold space, is left to the general one.
func TestCanonicalDecodeTakesExtFields(t *testing.T) {
	e := Envelope{ID: "j1", Kind: "email", Queue: "jobs", Payload: json.RawMessage(`{"to":"a@b"}`), Attempt: 3,
		EnqueuedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Ext: map[string]json.RawMessage{
			"queuey_errors":       json.RawMessage(`[{"attempt":1,"at":"2026-01-02T03:04:05Z","error":"upstream 503: {\"a\": 1}"}]`),
			"queuey_max_attempts": json.RawMessage(`5`),
		}}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := decodeCanonicalEnvelope(body)
	if !ok {
		t.Fatalf("the fast path refused %s", body)
	}
	if string(got.Ext["queuey_errors"]) != string(e.Ext["queuey_errors"]) || string(got.Ext["queuey_max_attempts"]) != "5" || len(got.Ext) != 2 {
		t.Fatalf("ext %q", got.Ext)
	}
	checkCanonicalAgrees(t, body)
	for _, odd := range []string{
		strings.Replace(string(body), `"queuey_errors"`, `"queuey_zz"`, 1), // keys out of order
		strings.Replace(string(body), `:5}`, `: 5}`, 1),                    // space outside a string
		strings.Replace(string(body), `,"ext":{`, `,"ext":{"":1,`, 1),      // an empty key
	} {
		if _, ok := decodeCanonicalEnvelope([]byte(odd)); ok {
			t.Errorf("the fast path took %s", odd)
		}
		checkCanonicalAgrees(t, []byte(odd))
	}
}
