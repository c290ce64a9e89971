package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"
)

// TestRecorderHashesEverythingInOrder records far more than one buffer of
// events, so full buffers go to the hasher goroutine, and checks the sum
// against hashing every record inline.
func TestRecorderHashesEverythingInOrder(t *testing.T) {
	rec := newRecorder(nil)
	ref := sha256.New()
	var b []byte
	for i := range 100000 {
		e := Event{At: time.Duration(i) * time.Millisecond, Kind: EventKind(i % 7), Job: uint64(i), Queue: "emails", Worker: i % 4, Detail: "ok"}
		rec.record(&e)
		b = appendRecord(b[:0], &e)
		ref.Write(b)
	}
	if rec.full == nil {
		t.Fatal("no buffer was handed to the hasher: record more")
	}
	if got, want := rec.sum(), hex.EncodeToString(ref.Sum(nil)); got != want {
		t.Fatalf("trace hash %s, want %s", got, want)
	}
	rec.stop() // after sum: does nothing
}
