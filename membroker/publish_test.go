package membroker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	amqp "github.com/rabbitmq/amqp091-go"
)

// qqConfirms takes every confirmation already waiting on c.
func qqConfirms(c <-chan amqp.Confirmation) []amqp.Confirmation {
	var out []amqp.Confirmation
	for {
		select {
		case x, ok := <-c:
			if !ok {
				return out
			}
			out = append(out, x)
		default:
			return out
		}
	}
}

// In confirm mode every publish is acknowledged on NotifyPublish with
// delivery tags 1, 2, 3...; GetNextPublishSeqNo reports the next one.
// Publishes before Confirm are not numbered.
// Ref §8 (confirms; unroutable messages are acked) and amqp091
// GetNextPublishSeqNo (confirms.published + 1, counted only in confirm mode).
func TestPublishConfirmsNumberedFromOne(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	e.publish("q", "before", amqp.Publishing{})
	if got := e.ch.GetNextPublishSeqNo(); got != 1 {
		t.Fatalf("GetNextPublishSeqNo before Confirm = %d, want 1", got)
	}
	confirms := e.ch.NotifyPublish(make(chan amqp.Confirmation, 10))
	if err := e.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if got := e.ch.GetNextPublishSeqNo(); got != 1 {
		t.Fatalf("GetNextPublishSeqNo after Confirm = %d, want 1", got)
	}
	e.publish("q", "a", amqp.Publishing{})
	e.publish("nowhere", "b", amqp.Publishing{})
	e.publish("q", "c", amqp.Publishing{DeliveryMode: amqp.Persistent})
	want := []amqp.Confirmation{{DeliveryTag: 1, Ack: true}, {DeliveryTag: 2, Ack: true}, {DeliveryTag: 3, Ack: true}}
	if diff := cmp.Diff(want, qqConfirms(confirms)); diff != "" {
		t.Fatalf("confirms (-want +got):\n%s", diff)
	}
	if got := e.ch.GetNextPublishSeqNo(); got != 4 {
		t.Fatalf("GetNextPublishSeqNo = %d, want 4", got)
	}
}

// A mandatory publish that reaches no queue is returned with 312 NO_ROUTE,
// and the basic.return comes before the confirm's ack: when the ack is
// available the return already is, and a return that cannot be handed over
// holds back the ack behind it.
// Ref §8 (confirms.md: "If the message is also published as mandatory, the
// basic.return is sent to the client before basic.ack"; reply 312
// NO_ROUTE) and §11 (observed on 4.0.5: return 312 NO_ROUTE and an ack).
func TestPublishMandatoryUnroutableReturnedBeforeAck(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	returns := e.ch.NotifyReturn(make(chan amqp.Return, 1))
	confirms := e.ch.NotifyPublish(make(chan amqp.Confirmation, 10))
	if err := e.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	pub := amqp.Publishing{ContentType: "text/plain", MessageId: "id1", Priority: 2,
		Headers: amqp.Table{"h": 1}, Body: []byte("lost")}
	if err := e.ch.Publish("", "missing", true, false, pub); err != nil {
		t.Fatal(err)
	}
	var conf amqp.Confirmation
	select {
	case conf = <-confirms:
	default:
		t.Fatal("no confirm")
	}
	var ret amqp.Return
	select {
	case ret = <-returns:
	default:
		t.Fatal("the confirm was available before the return")
	}
	if conf != (amqp.Confirmation{DeliveryTag: 1, Ack: true}) {
		t.Fatalf("confirm = %+v, want tag 1 ack", conf)
	}
	want := amqp.Return{ReplyCode: 312, ReplyText: "NO_ROUTE", Exchange: "", RoutingKey: "missing",
		ContentType: "text/plain", MessageId: "id1", Priority: 2, Headers: amqp.Table{"h": int32(1)}, Body: []byte("lost")}
	if diff := cmp.Diff(want, ret); diff != "" {
		t.Fatalf("return (-want +got):\n%s", diff)
	}

	// With the return listener full, the next return waits, and so does the
	// ack behind it.
	e.ch.Publish("", "missing", true, false, amqp.Publishing{Body: []byte("r2")})
	e.ch.Publish("", "missing", true, false, amqp.Publishing{Body: []byte("r3")})
	if got := qqConfirms(confirms); len(got) != 1 || got[0].DeliveryTag != 2 {
		t.Fatalf("confirms with the second return unread: %+v, want only tag 2", got)
	}
	if r := <-returns; string(r.Body) != "r2" {
		t.Fatalf("return %q, want r2", r.Body)
	}
	e.ch.GetNextPublishSeqNo() // any call hands over what waits
	if r := <-returns; string(r.Body) != "r3" {
		t.Fatalf("return %q, want r3", r.Body)
	}
	if got := qqConfirms(confirms); len(got) != 1 || got[0].DeliveryTag != 3 {
		t.Fatalf("confirms after reading the returns: %+v, want tag 3", got)
	}
}

// A publish that is not mandatory and reaches no queue is dropped silently
// and still acked.
// Ref §8 ("Unroutable with mandatory=false: the message is silently
// dropped"; process_routing_confirm(SeqNo, [], ...) acks at once).
func TestPublishUnroutableDroppedAndAcked(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	returns := e.ch.NotifyReturn(make(chan amqp.Return, 1))
	confirms := e.ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	e.ch.Confirm(false)
	e.publish("missing", "x", amqp.Publishing{})
	if diff := cmp.Diff([]amqp.Confirmation{{DeliveryTag: 1, Ack: true}}, qqConfirms(confirms)); diff != "" {
		t.Fatalf("confirms (-want +got):\n%s", diff)
	}
	select {
	case r := <-returns:
		t.Fatalf("unexpected return %+v", r)
	default:
	}
	if len(e.b.Queues()) != 0 || e.ch.IsClosed() {
		t.Fatal("an unroutable publish created a queue or closed the channel")
	}
}

// Publishing to an exchange other than "" is a 404 that closes the channel;
// "amq.default" is not an exchange over AMQP 0-9-1. Publish itself returns
// nil, later calls amqp.ErrClosed; the connection stays open.
// Ref semantics §E7 step 4 ("amq.default" not an exchange record in 0-9-1);
// text checked live on 4.0.5.
func TestPublishToMissingExchangeClosesChannel(t *testing.T) {
	for _, x := range []string{"nope", "amq.default"} {
		t.Run(x, func(t *testing.T) {
			e := newEnv(t, RabbitMQ40)
			e.declare("q", nil)
			errs := closeErr(e.ch)
			if err := e.ch.Publish(x, "q", false, false, amqp.Publishing{Body: []byte("m")}); err != nil {
				t.Fatalf("Publish returned %v, want nil", err)
			}
			qqClosedWith(t, errs, serverErr(amqp.NotFound, "NOT_FOUND - no exchange '"+x+"' in vhost '/'"))
			if err := e.ch.Publish("", "q", false, false, amqp.Publishing{}); !errors.Is(err, amqp.ErrClosed) {
				t.Fatalf("Publish after the close = %v, want amqp.ErrClosed", err)
			}
			if e.conn.IsClosed() {
				t.Fatal("404 is a channel error")
			}
			qqWantReady(e, "q", 0, 0)
		})
	}
}

// An invalid expiration property closes the channel with 406, even when the
// message would route nowhere (the check runs before routing).
// Ref semantics §E7 step 6 (check_expiration_header, rabbit_basic:
// parse_expiration; "Checked before routing"); "10s" checked live on 4.0.5.
func TestPublishInvalidExpirationClosesChannel(t *testing.T) {
	for _, c := range []struct{ exp, reason string }{
		{"abc", "no_integer"},
		{"10s", `{leftover_string,"s"}`},
		{"-1", "{value_negative,-1}"},
		{"1.5", `{leftover_string,".5"}`},
		{"315360000001", "{value_too_large,315360000001}"},
	} {
		for _, key := range []string{"nowhere", "q"} {
			t.Run(c.exp+"/"+key, func(t *testing.T) {
				e := newEnv(t, RabbitMQ40)
				e.declare("q", nil)
				errs := closeErr(e.ch)
				if err := e.ch.Publish("", key, true, false, amqp.Publishing{Expiration: c.exp}); err != nil {
					t.Fatalf("Publish returned %v, want nil", err)
				}
				qqClosedWith(t, errs, serverErr(amqp.PreconditionFailed,
					"PRECONDITION_FAILED - invalid expiration '"+c.exp+"': "+c.reason))
				qqWantReady(e, "q", 0, 0)
			})
		}
	}
}

// The CC and BCC headers add routes; BCC is removed from the message, CC
// kept, and a queue named twice gets one copy. Every copy keeps the publish
// routing key.
// Ref §3.2 (routing keys = publish key plus CC and BCC); checked live on
// 4.0.5: BCC absent from every copy, CC present, CC naming the publish
// queue itself gives one copy.
func TestPublishCCAndBCCRoute(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	for _, q := range []string{"to", "cc", "bcc", "other"} {
		e.declare(q, nil)
	}
	e.publish("to", "m", amqp.Publishing{Headers: amqp.Table{
		"CC": []any{"cc", "to", "missing"}, "BCC": []any{"bcc", "cc"}, "k": "v"}})
	wantHeaders := amqp.Table{"CC": []any{"cc", "to", "missing"}, "k": "v"}
	for _, q := range []string{"to", "cc", "bcc"} {
		d := e.mustGet(q)
		if diff := cmp.Diff(wantHeaders, d.Headers); diff != "" {
			t.Errorf("%s headers (-want +got):\n%s", q, diff)
		}
		if d.RoutingKey != "to" {
			t.Errorf("%s routing key %q, want to", q, d.RoutingKey)
		}
		if _, more := e.get(q); more {
			t.Errorf("%s got two copies", q)
		}
	}
	qqWantReady(e, "other", 0, 0)

	// Through BCC alone, to a queue the routing key does not name. The
	// header table is left empty, not absent (seen live on 4.0.5).
	e.publish("missing", "b", amqp.Publishing{Headers: amqp.Table{"BCC": []any{"other"}}})
	d := e.mustGet("other")
	if diff := cmp.Diff(amqp.Table{}, d.Headers); diff != "" || d.RoutingKey != "missing" {
		t.Fatalf("BCC-only copy: key %q (want missing), headers (-want +got):\n%s", d.RoutingKey, diff)
	}
}

// Properties and headers reach the consumer as amqp091 would decode them
// after a round trip: a Go int header becomes int32 (also nested in tables
// and arrays), timestamps lose their sub-second part, other field types
// keep theirs, and the user id may be the authenticated user "guest".
// Ref §3.3 ("Other properties are preserved"); amqp091 write.go/read.go
// (int is written as 'I' and read as int32; 'T' is whole seconds); checked
// live on 4.0.5 for every header type used here, classic and quorum.
func TestPublishPropertiesRoundTrip(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	e.publish("q", "body", amqp.Publishing{
		Headers: amqp.Table{
			"int": 5, "i64": int64(6), "i16": int16(-3), "i8": int8(-2), "u8": uint8(200), "u32": uint32(7),
			"str": "x", "bool": true, "f64": 1.5, "f32": float32(2.5), "bytes": []byte("raw"), "nil": nil,
			"dec": amqp.Decimal{Scale: 2, Value: 314}, "ts": ts,
			"table": amqp.Table{"n": 1, "arr": []any{1, "a", amqp.Table{"z": true}}},
		},
		ContentType: "text/plain", ContentEncoding: "gzip", DeliveryMode: amqp.Persistent, Priority: 3,
		CorrelationId: "cid", ReplyTo: "rt", Expiration: "60000", MessageId: "mid", Timestamp: ts,
		Type: "ty", UserId: "guest", AppId: "app",
	})
	got := e.mustGet("q")
	sec := time.Unix(ts.Unix(), 0)
	want := amqp.Delivery{
		Headers: amqp.Table{
			"int": int32(5), "i64": int64(6), "i16": int16(-3), "i8": int8(-2), "u8": uint8(200), "u32": uint32(7),
			"str": "x", "bool": true, "f64": 1.5, "f32": float32(2.5), "bytes": []byte("raw"), "nil": nil,
			"dec": amqp.Decimal{Scale: 2, Value: 314}, "ts": sec,
			"table": amqp.Table{"n": int32(1), "arr": []any{int32(1), "a", amqp.Table{"z": true}}},
		},
		ContentType: "text/plain", ContentEncoding: "gzip", DeliveryMode: amqp.Persistent, Priority: 3,
		CorrelationId: "cid", ReplyTo: "rt", Expiration: "60000", MessageId: "mid", Timestamp: sec,
		Type: "ty", UserId: "guest", AppId: "app",
		DeliveryTag: 1, RoutingKey: "q", Body: []byte("body"),
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(amqp.Delivery{}, "Acknowledger")); diff != "" {
		t.Fatalf("delivery (-want +got):\n%s", diff)
	}
	if got.Timestamp.Nanosecond() != 0 || got.Headers["ts"].(time.Time).Nanosecond() != 0 {
		t.Fatal("timestamps keep sub-second parts")
	}

	// amqp091 does not send an empty header table: it arrives absent.
	e.publish("q", "empty", amqp.Publishing{Headers: amqp.Table{}})
	if d := e.mustGet("q"); d.Headers != nil {
		t.Fatalf("empty header table delivered as %#v, want nil", d.Headers)
	}
}

// A user id other than the authenticated user ("guest") is a 406 that
// closes the channel.
// Ref semantics §E7 step 9 (rabbit_access_control:check_user_id); text checked
// live on 4.0.5.
func TestPublishUserIDMustBeGuest(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	errs := closeErr(e.ch)
	if err := e.ch.Publish("", "q", false, false, amqp.Publishing{UserId: "x"}); err != nil {
		t.Fatalf("Publish returned %v, want nil", err)
	}
	qqClosedWith(t, errs, serverErr(amqp.PreconditionFailed,
		"PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'guest'"))
	qqWantReady(e, "q", 0, 0)
}

// The broker keeps its own copy of a body: changing the published slice or a
// delivered body does not change what is delivered next.
// Ref: on the wire the body is copied into frames; amqp091 gives each
// delivery its own slice.
func TestPublishBodiesAreCopied(t *testing.T) {
	for _, typ := range []string{"classic", "quorum"} {
		t.Run(typ, func(t *testing.T) {
			e := newEnv(t, RabbitMQ40)
			e.declare("q", amqp.Table{"x-queue-type": typ})
			body := []byte("hello")
			e.ch.Publish("", "q", false, false, amqp.Publishing{Body: body})
			copy(body, "XXXXX")
			d := e.mustGet("q")
			if string(d.Body) != "hello" {
				t.Fatalf("delivered %q after mutating the published slice", d.Body)
			}
			copy(d.Body, "YYYYY")
			d.Reject(true)
			if d := e.mustGet("q"); string(d.Body) != "hello" {
				t.Fatalf("redelivered %q after mutating a delivered body", d.Body)
			}
		})
	}
}

// PublishWithContext with a cancelled context returns the context's error
// and publishes nothing, not even a confirm sequence number.
// Ref amqp091 PublishWithDeferredConfirmWithContext (select on ctx.Done()
// before publishing).
func TestPublishWithCancelledContext(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	confirms := e.ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	e.ch.Confirm(false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.ch.PublishWithContext(ctx, "", "q", false, false, amqp.Publishing{Body: []byte("m")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("PublishWithContext = %v, want context.Canceled", err)
	}
	qqWantReady(e, "q", 0, 0)
	if got := qqConfirms(confirms); len(got) != 0 {
		t.Fatalf("confirms %+v, want none", got)
	}
	if got := e.ch.GetNextPublishSeqNo(); got != 1 {
		t.Fatalf("GetNextPublishSeqNo = %d, want 1", got)
	}
	if err := e.ch.PublishWithContext(context.Background(), "", "q", false, false, amqp.Publishing{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	qqWantReady(e, "q", 1, 0)
}

// A header the client library cannot encode is refused before anything is
// sent, with amqp091's own error, whether it sits at the top of the table
// or nested; nothing is published and no sequence number is used.
func TestPublishRefusesUnsupportedHeaderValues(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	if err := e.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, h := range []amqp.Table{
		{"ok": "v", "bad": struct{}{}},
		{"ok": uint32(7), "nested": amqp.Table{"bad": []any{uint64(1)}}},
	} {
		err := e.ch.Publish("", "q", false, false, amqp.Publishing{Headers: h, Body: []byte("x")})
		if err == nil || err.Error() != h.Validate().Error() {
			t.Fatalf("publish with %v: error %v, want amqp091's %v", h, err, h.Validate())
		}
	}
	if n := e.ch.GetNextPublishSeqNo(); n != 1 {
		t.Fatalf("next publish sequence number %d after refused publishes, want 1", n)
	}
	qqWantReady(e, "q", 0, 0)
	e.publish("q", "m", amqp.Publishing{Headers: amqp.Table{"u16": uint16(3), "u32": uint32(4)}})
	if d := e.mustGet("q"); !cmp.Equal(d.Headers, amqp.Table{"u16": uint16(3), "u32": uint32(4)}) {
		t.Fatalf("headers %v", d.Headers)
	}
}

// QueueInfo counts what the management API's message_stats call publish
// and ack: a message dead-lettered into a queue (here, expired) is not
// published to it, and only acknowledged deliveries count as acks.
func TestQueueInfoCountsPublishesAndAcks(t *testing.T) {
	e := newEnv(t, RabbitMQ40)
	e.declare("q.dead", nil)
	e.declare("q", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q.dead"})
	for _, body := range []string{"a", "b", "c"} {
		e.publish("q", body, amqp.Publishing{})
	}
	e.publish("q", "gone", amqp.Publishing{Expiration: "0"})
	for i, ack := range []bool{true, false, true} {
		d, ok := e.get("q")
		if !ok {
			t.Fatalf("get %d: empty", i)
		}
		var err error
		if ack {
			err = d.Ack(false)
		} else {
			err = d.Reject(false) // dead-lettered
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string][2]int64{"q": {4, 2}, "q.dead": {0, 0}} {
		q, _ := e.b.Queue(name)
		if q.Published != want[0] || q.Acked != want[1] {
			t.Errorf("%s: published %d, acked %d; want %d, %d", name, q.Published, q.Acked, want[0], want[1])
		}
	}
	if q, _ := e.b.Queue("q.dead"); q.Ready != 2 {
		t.Fatalf("q.dead holds %d, want the expired and the rejected message", q.Ready)
	}
}
