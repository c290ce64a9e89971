package membroker

import (
	"reflect"
	"testing"
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

	first := qqMustGet(e, "q")
	table := reflect.ValueOf(first.Headers).Pointer()
	body := unsafe.SliceData(first.Body)
	e.b.Reuse(&first)
	if first.Headers != nil || first.Body != nil {
		t.Fatalf("Reuse left the delivery holding %v and %q", first.Headers, first.Body)
	}

	second := qqMustGet(e, "q")
	if diff := cmp.Diff(amqp.Table{"c": "3"}, second.Headers); diff != "" || string(second.Body) != "second" {
		t.Fatalf("second delivery: body %q, headers (-want +got):\n%s", second.Body, diff)
	}
	if reflect.ValueOf(second.Headers).Pointer() != table || unsafe.SliceData(second.Body) != body {
		t.Fatal("the second delivery did not reuse the first one's table and body")
	}
	e.b.Reuse(&second)
	third := qqMustGet(e, "q")
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
