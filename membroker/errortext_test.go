package membroker

// Tests of error texts and error classes that the conformance scenarios
// error-reply-text-limits, error-inequivalent-arg-rendering,
// error-publish-invalid-expiration, error-server-named-unknown-type and
// error-consume-invalid-args checked against a live RabbitMQ 4.0.5; the
// expected strings below are the live ones (float forms also from
// Erlang/OTP 27's ~p).

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestErlangFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{10, "10.0"}, {100, "100.0"}, {1000, "1.0e3"}, {1e4, "1.0e4"}, {123456, "123456.0"},
		{0.1, "0.1"}, {0.001, "0.001"}, {0.0001, "0.0001"}, {1e-5, "1.0e-5"}, {1.5, "1.5"},
		{-3, "-3.0"}, {1e21, "1.0e21"}, {123456789012, "123456789012.0"}, {1e15, "1.0e15"},
		{0.5e-300, "5.0e-301"}, {12345678901234567890.0, "1.2345678901234567e19"},
		{0.30000000000000004, "0.30000000000000004"}, {float64(float32(0.1)), "0.10000000149011612"},
		{-0.0001, "-0.0001"}, {1.7976931348623157e308, "1.7976931348623157e308"}, {5e-324, "5.0e-324"},
		{0, "0.0"}, {1234567, "1234567.0"}, {0.012345, "0.012345"},
	} {
		if got := erlangFloat(tc.f); got != tc.want {
			t.Errorf("erlangFloat(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

// TestReplyTextLimits: a text over 255 characters is cut to 252 and "...";
// one still over 255 bytes is a 541 INTERNAL_ERROR that closes the
// connection.
func TestReplyTextLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string
	}{
		{strings.Repeat("x", 218), "NOT_FOUND - no queue '" + strings.Repeat("x", 218) + "' in vhost '/'"},
		{strings.Repeat("x", 220), "NOT_FOUND - no queue '" + strings.Repeat("x", 220) + "' in vhost..."},
		{strings.Repeat("é", 109), "NOT_FOUND - no queue '" + strings.Repeat("é", 109) + "' in vhost '/'"},
		{strings.Repeat("é", 110), "INTERNAL_ERROR"},
	} {
		e := newEnv(t, RabbitMQ40)
		other := e.channel()
		_, err := e.ch.QueueDeclarePassive(tc.name, false, false, false, false, nil)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Reason != tc.want {
			t.Fatalf("passive %d bytes: got %v, want %q", len(tc.name), err, tc.want)
		}
		if got := len(ae.Reason); got > 255 {
			t.Fatalf("reason of %d bytes", got)
		}
		if (ae.Code == amqp.InternalError) != e.conn.IsClosed() || (ae.Code == amqp.InternalError) != other.IsClosed() {
			t.Fatalf("%d: connection closed %t, other channel closed %t", ae.Code, e.conn.IsClosed(), other.IsClosed())
		}
	}
}

func TestInvalidExpirationTexts(t *testing.T) {
	const pf = "PRECONDITION_FAILED - invalid expiration "
	for _, tc := range []struct{ exp, want string }{
		{"abc", "'abc': no_integer"},
		{"10s", `'10s': {leftover_string,"s"}`},
		{"-1", "'-1': {value_negative,-1}"},
		{"315360000001", "'315360000001': {value_too_large,315360000001}"},
		{"99999999999999999999", "'99999999999999999999': {value_too_large,\n" + strings.Repeat(" ", 44) + "99999999999999999999}"},
		{"+00099999999999999999999", "'+00099999999999999999999': {value_too_large,\n" + strings.Repeat(" ", 48) + "99999999999999999999}"},
		{"-99999999999999999999", "'-99999999999999999999': {value_negative,\n" + strings.Repeat(" ", 45) + "-99999999999999999999}"},
		{"1 abc", `'1 abc': {leftover_string," abc"}`},
		{"1\té\"\\", "'1\té\"\\': {leftover_string,\"\\tÃ©\\\"\\\\\"}"},
		{"1\x01ab", "'1\x01ab': {leftover_string,[1,97,98]}"},
		{"--5", "'--5': no_integer"},
	} {
		e := newEnv(t, RabbitMQ40)
		errc := closeErr(e.ch)
		if err := e.ch.Publish("", "nowhere", false, false, amqp.Publishing{Expiration: tc.exp}); err != nil {
			t.Fatal(err)
		}
		ae := <-errc
		if ae == nil || ae.Code != amqp.PreconditionFailed || ae.Reason != pf+tc.want {
			t.Errorf("expiration %q: got %v\nwant %q", tc.exp, ae, pf+tc.want)
		}
	}
	e := newEnv(t, RabbitMQ40)
	for _, ok := range []string{"0", "-0", "+5", "315360000000", "0000000000000000000000000000007"} {
		if err := e.ch.Publish("", "nowhere", false, false, amqp.Publishing{Expiration: ok}); err != nil || e.ch.IsClosed() {
			t.Fatalf("expiration %q refused: %v", ok, err)
		}
	}
}

// TestServerNamedUnknownType: a server-named declare with an unknown or
// non-string x-queue-type crashes RabbitMQ's channel: 541, connection error.
func TestServerNamedUnknownType(t *testing.T) {
	for _, typ := range []any{"foo", int32(1)} {
		e := newEnv(t, RabbitMQ40)
		_, err := e.ch.QueueDeclare("", false, false, true, false, amqp.Table{"x-queue-type": typ})
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.InternalError || ae.Reason != "INTERNAL_ERROR" || !e.conn.IsClosed() {
			t.Fatalf("type %v: got %v, connection closed %t", typ, err, e.conn.IsClosed())
		}
	}
}

func TestConsumeArgs(t *testing.T) {
	for _, tc := range []struct {
		args amqp.Table
		code int
		want string
	}{
		{amqp.Table{"x-priority": "high"}, 406, `PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "expected integer, got longstr"`},
		{amqp.Table{"x-priority": 1.5}, 406, `PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "expected integer, got double"`},
		{amqp.Table{"x-stream-offset": "first"}, 406, "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"},
		{amqp.Table{"x-priority": 5}, 540, "NOT_IMPLEMENTED - membroker does not model 'x-priority'"},
	} {
		e := newEnv(t, RabbitMQ40)
		e.declare("q", nil)
		_, err := e.ch.Consume("q", "c", false, false, false, false, tc.args)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != tc.code || ae.Reason != tc.want {
			t.Fatalf("%v: got %v, want %d %q", tc.args, err, tc.code, tc.want)
		}
		if !e.ch.IsClosed() || e.conn.IsClosed() {
			t.Fatalf("%v: want a channel error", tc.args)
		}
	}
	e := newEnv(t, RabbitMQ40)
	e.declare("q", nil)
	if _, err := e.ch.Consume("q", "c", false, false, false, false, amqp.Table{"x-foo": "bar"}); err != nil {
		t.Fatalf("unknown consumer argument: %v", err)
	}
}
