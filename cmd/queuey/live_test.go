package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The command against the live broker at AMQP_URL (and its management API
// at RABBITMQ_MANAGEMENT_URL, when set), through its real dialer: a
// dead-letter session from stats to purge, then, with the management API,
// the listing of work queues and the deletion of this one.
func TestLiveSession(t *testing.T) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL not set: skipping a test that needs a live RabbitMQ (scripts/rabbitmq start)")
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	b, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	q := "queuey-cli-" + hex.EncodeToString(rnd[:])
	ctx := t.Context()
	if err := b.Declare(ctx, queuey.QueueConfig{Name: q}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, name := range []string{q, q + ".dead", rabbitmq.Topology{}.WarmQueue(q)} {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	}()
	for i := range 20 {
		reason := queuey.ReasonAttemptsExhausted
		if i%2 == 1 {
			reason = "fatal: card declined"
		}
		e := queuey.Envelope{ID: fmt.Sprintf("j-%d", i), Kind: "email", Queue: q, Payload: json.RawMessage(`{}`), Attempt: 3, EnqueuedAt: time.Now()}
		body, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.DeadLetter(ctx, q, body, reason, 3); err != nil {
			t.Fatal(err)
		}
	}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: os.Getenv, dial: dialAMQP}
		if code := a.run(ctx, args); code != wantCode {
			t.Fatalf("queuey %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, out.String(), errOut.String())
		}
		t.Logf("$ queuey %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
		return out.String()
	}
	if out := run(0, "stats", q); !strings.Contains(out, " 20 ") {
		t.Fatalf("stats does not show 20 dead letters:\n%s", out)
	}
	if out := run(0, "dead", "ls", q, "--reason", "fatal", "--json"); strings.Count(out, `"reason"`) != 10 {
		t.Fatalf("ls --reason fatal listed %d, want 10", strings.Count(out, `"reason"`))
	}
	if out := run(0, "dead", "redrive", q, "--reason", "exhausted", "--reset-attempts", "--yes"); !strings.Contains(out, "redrove 10 of the 20 dead letters read") {
		t.Fatalf("redrive: %s", out)
	}
	if out := run(0, "dead", "purge", q, "--yes"); !strings.Contains(out, "purged 10 dead letters") {
		t.Fatalf("purge: %s", out)
	}
	if out := run(0, "dead", "purge", q, "--yes"); !strings.Contains(out, "nothing to purge") { // nothing left: a success
		t.Fatalf("purge of an empty dead-letter queue: %s", out)
	}
	run(1, "stats", q+"-missing")
	if os.Getenv("RABBITMQ_MANAGEMENT_URL") == "" {
		t.Skip("RABBITMQ_MANAGEMENT_URL not set: skipping the half of the session that needs the management API (queues, delete); export RABBITMQ_MANAGEMENT_URL=$(scripts/rabbitmq management-url)")
	}
	if out := run(0, "queues"); !strings.Contains(out, q+" ") {
		t.Fatalf("queues does not list %s:\n%s", q, out)
	}
	// q, its dead-letter queue and, once the warm-up is over, its warm
	// marker; never the shared ladder.
	if out := run(0, "delete", q, "--yes"); !(strings.HasPrefix(out, "deleted 2 queues") || strings.HasPrefix(out, "deleted 3 queues")) ||
		!strings.Contains(out, " queues of "+q+" and the ") {
		t.Fatalf("delete: %s", out)
	}
	run(1, "stats", q)
}
