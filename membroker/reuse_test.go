package membroker

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// A delivery given back with Reuse lends its table and body to a later
// delivery, which carries only its own headers and bytes; a big table is
// not kept, and an empty body stays nil.
func TestReuseLendsTableAndBodyToALaterDelivery(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	e.publish("q", "first body, the longer one", amqp.Publishing{Headers: amqp.Table{"a": "1", "b": "2"}})
	e.publish("q", "second", amqp.Publishing{Headers: amqp.Table{"c": "3"}})
	e.publish("q", "", amqp.Publishing{Headers: amqp.Table{"d": "4"}})

	first := e.mustGet("q")
	table := reflect.ValueOf(first.Headers).Pointer()
	body := unsafe.SliceData(first.Body)
	e.b.Reuse(&first)
	if first.Headers != nil || first.Body != nil {
		t.Fatalf("Reuse left the delivery holding %v and %q", first.Headers, first.Body)
	}

	second := e.mustGet("q")
	if diff := cmp.Diff(amqp.Table{"c": "3"}, second.Headers); diff != "" || string(second.Body) != "second" {
		t.Fatalf("second delivery: body %q, headers (-want +got):\n%s", second.Body, diff)
	}
	if reflect.ValueOf(second.Headers).Pointer() != table || unsafe.SliceData(second.Body) != body {
		t.Fatal("the second delivery did not reuse the first one's table and body")
	}
	e.b.Reuse(&second)
	third := e.mustGet("q")
	if third.Body != nil || !cmp.Equal(third.Headers, amqp.Table{"d": "4"}) {
		t.Fatalf("third delivery: body %#v, headers %v", third.Body, third.Headers)
	}

	big := amqp.Table{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		big[k] = k
	}
	e.b.Reuse(&amqp.Delivery{Headers: big})
	e.b.mu.Lock()
	n := len(e.b.reusedTables)
	e.b.mu.Unlock()
	if n != 0 {
		t.Fatalf("a table of %d entries was kept for reuse", len(big))
	}
}

// The x-death records of a dead-lettered delivery come back with Reuse too,
// and the next dead letter's records are its own.
func TestReuseTakesBackDeathRecords(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	e.declare("hold", amqp.Table{"x-message-ttl": int64(1000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q"})
	e.publish("hold", "one", amqp.Publishing{})
	e.advance(1000 * time.Millisecond)
	e.publish("hold", "two", amqp.Publishing{Headers: amqp.Table{"k": "v"}})
	e.advance(1000 * time.Millisecond)

	first := e.mustGet("q")
	record := first.Headers["x-death"].([]any)[0].(amqp.Table)
	recordPtr := reflect.ValueOf(record).Pointer()
	e.b.Reuse(&first)
	second := e.mustGet("q")
	xd := second.Headers["x-death"].([]any)
	got := xd[0].(amqp.Table)
	want := amqp.Table{"count": int64(1), "reason": "expired", "queue": "hold", "exchange": "",
		"routing-keys": []any{"hold"}, "time": got["time"]}
	if diff := cmp.Diff(want, got); diff != "" || second.Headers["k"] != "v" || second.Headers["x-first-death-queue"] != "hold" {
		t.Fatalf("second dead letter: headers %v, x-death (-want +got):\n%s", second.Headers, diff)
	}
	if reflect.ValueOf(got).Pointer() != recordPtr {
		t.Fatal("the second dead letter's x-death record is not the first one's, reused")
	}
}
