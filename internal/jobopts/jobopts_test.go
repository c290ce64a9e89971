package jobopts

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey/envelope"
	"pgregory.net/rapid"
)

// What Write puts in an envelope, Read gives back, through the wire
// format; Write leaves the caller's Ext alone and adds nothing for the
// zero Options.
func TestWriteThenReadThroughTheWire(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := Options{Priority: rapid.Uint8().Draw(t, "priority")}
		if rapid.Bool().Draw(t, "attempts") {
			o.MaxAttempts = rapid.OneOf(rapid.Just(-1), rapid.IntRange(1, 1<<40)).Draw(t, "max")
		}
		theirs := map[string]json.RawMessage{"trace": json.RawMessage(`"abc"`)}
		env := envelope.Envelope{ID: "j", Kind: "k", Queue: "q", Payload: json.RawMessage(`{}`), Attempt: 1,
			EnqueuedAt: time.Unix(1, 0), Ext: theirs}
		body, err := Write(env, o).Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := envelope.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Read(back)
		if err != nil || got != o {
			t.Fatalf("Read = %+v, %v; want %+v", got, err, o)
		}
		if len(theirs) != 1 || string(back.Ext["trace"]) != `"abc"` {
			t.Fatalf("the caller's Ext %v, the sent one %v", theirs, back.Ext)
		}
		if o == (Options{}) && len(back.Ext) != 1 {
			t.Fatalf("zero options wrote %v", back.Ext)
		}
	})
	if _, err := Read(envelope.Envelope{Ext: map[string]json.RawMessage{"queuey_priority": json.RawMessage(`"1"`)}}); !errors.Is(err, envelope.ErrMalformed) {
		t.Fatalf("a priority as a string: %v", err)
	}
}
