package membroker

// Tests of the declarations where the RabbitMQ43 profile differs from
// RabbitMQ40: each case runs on both profiles. semantics §E13 gives each
// rule's source at v4.3.5 and the conformance scenario that observed it on
// a live 4.3.6.

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// declOutcome is what one declaration gets on one profile: ok, or an error
// code and reply text ("<q>" stands for the queue name), and whether the
// error closed the connection.
type declOutcome struct {
	ok       bool
	code     int
	reason   string
	connDown bool
}

var declOK = declOutcome{ok: true}

func declRefused(code int, reason string) declOutcome {
	return declOutcome{code: code, reason: reason, connDown: code == amqp.InternalError}
}

// TestDeclareRabbitMQ43: transient non-exclusive queues are created on both
// profiles; on RabbitMQ43 x-queue-version 1 is refused, x-queue-mode is no
// longer validated, an empty x-queue-type means the default, a server-named
// declare with an unknown type is a 406 channel error,
// x-stream-filter-size-bytes belongs to streams, and x-queue-master-locator
// on a new classic queue is a 541 connection error.
// semantics §E13, §E1.3, §9.
func TestDeclareRabbitMQ43(t *testing.T) {
	const pf = amqp.PreconditionFailed
	foreign := func(key, module string) string {
		return "PRECONDITION_FAILED - invalid arg '" + key + "' for queue '<q>' in vhost '/' of queue type " + module
	}
	masterLocator := "INTERNAL_ERROR - Feature `queue_master_locator` is deprecated.\n" +
		"By default, this feature is not permitted anymore.\n" +
		"The feature will be removed from a future major RabbitMQ version, regardless of the " +
		"configuration; actual version to be determined.\nTo con..."
	cases := []struct {
		name       string
		queue      string // "" for a server-named queue
		durable    bool
		exclusive  bool
		args       amqp.Table
		on40, on43 declOutcome
	}{
		{"transient non-exclusive", "t-transient", false, false, nil, declOK, declOK},
		{"x-queue-version 1", "t-ver1", true, false, amqp.Table{"x-queue-version": 1},
			declOK, declRefused(pf, cqInvalid("x-queue-version", `"unsupported queue version '1'"`))},
		{"x-queue-version 2", "t-ver2", true, false, amqp.Table{"x-queue-version": 2}, declOK, declOK},
		{"x-queue-version 0", "t-ver0", true, false, amqp.Table{"x-queue-version": 0},
			declRefused(pf, cqInvalid("x-queue-version", `"unsupported queue version '0'"`)),
			declRefused(pf, cqInvalid("x-queue-version", `"unsupported queue version '0'"`))},
		{"x-queue-mode foo", "t-mode", true, false, amqp.Table{"x-queue-mode": "foo"},
			declRefused(pf, cqInvalid("x-queue-mode", `"unsupported queue mode 'foo'"`)), declOK},
		{"x-queue-mode int", "t-mode-int", true, false, amqp.Table{"x-queue-mode": 1},
			declRefused(pf, cqInvalid("x-queue-mode", "{unacceptable_type,signedint}")), declOK},
		{"x-queue-mode on quorum", "t-mode-qq", true, false, amqp.Table{"x-queue-type": "quorum", "x-queue-mode": "lazy"},
			declRefused(pf, foreign("x-queue-mode", "rabbit_quorum_queue")),
			declRefused(pf, foreign("x-queue-mode", "rabbit_quorum_queue"))},
		{"x-queue-type empty", "t-type-empty", true, false, amqp.Table{"x-queue-type": ""},
			declRefused(pf, cqInvalid("x-queue-type", `"unsupported queue type ''"`)), declOK},
		{"x-queue-type empty, server-named", "", true, true, amqp.Table{"x-queue-type": ""},
			declRefused(amqp.InternalError, "INTERNAL_ERROR"), declOK},
		{"x-queue-type foo, server-named", "", true, true, amqp.Table{"x-queue-type": "foo"},
			declRefused(amqp.InternalError, "INTERNAL_ERROR"),
			declRefused(pf, "PRECONDITION_FAILED - unknown queue type 'foo'")},
		{"x-queue-type int, server-named", "", true, true, amqp.Table{"x-queue-type": 1},
			declRefused(amqp.InternalError, "INTERNAL_ERROR"), declRefused(amqp.InternalError, "INTERNAL_ERROR")},
		{"x-stream-filter-size-bytes on classic", "t-sfsb", true, false, amqp.Table{"x-stream-filter-size-bytes": 100},
			declOK, declRefused(pf, foreign("x-stream-filter-size-bytes", "rabbit_classic_queue"))},
		{"x-stream-filter-size-bytes on quorum", "t-sfsb-qq", true, false,
			amqp.Table{"x-queue-type": "quorum", "x-stream-filter-size-bytes": 100},
			declOK, declRefused(pf, foreign("x-stream-filter-size-bytes", "rabbit_quorum_queue"))},
		{"x-queue-master-locator", "t-ml", true, false, amqp.Table{"x-queue-master-locator": "client-local"},
			declOK, declRefused(amqp.InternalError, masterLocator)},
		{"x-queue-master-locator before unmodelled", "t-ml-max", true, false,
			amqp.Table{"x-queue-master-locator": "client-local", "x-max-length": 5},
			declRefused(amqp.NotImplemented, "NOT_IMPLEMENTED - membroker does not model 'x-max-length'"),
			declRefused(amqp.InternalError, masterLocator)},
		{"x-queue-master-locator on quorum", "t-ml-qq", true, false,
			amqp.Table{"x-queue-type": "quorum", "x-queue-master-locator": "client-local"},
			declRefused(pf, foreign("x-queue-master-locator", "rabbit_quorum_queue")),
			declRefused(pf, foreign("x-queue-master-locator", "rabbit_quorum_queue"))},
	}
	for _, tc := range cases {
		for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
			want := tc.on40
			if v == RabbitMQ43 {
				want = tc.on43
			}
			t.Run(tc.name+"/"+v.String(), func(t *testing.T) {
				e := newEnv(t, v)
				other := e.channel()
				q, err := e.ch.QueueDeclare(tc.queue, tc.durable, false, tc.exclusive, false, tc.args)
				if want.ok {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					if _, ok := e.b.Queue(q.Name); !ok {
						t.Fatalf("queue %q not created", q.Name)
					}
					return
				}
				var ae *amqp.Error
				if !errors.As(err, &ae) {
					t.Fatalf("got %v, want %d %q", err, want.code, want.reason)
				}
				if reason := strings.ReplaceAll(want.reason, "<q>", tc.queue); ae.Code != want.code || ae.Reason != reason {
					t.Fatalf("got  %d %q\nwant %d %q", ae.Code, ae.Reason, want.code, reason)
				}
				if !e.ch.IsClosed() || e.conn.IsClosed() != want.connDown || other.IsClosed() != want.connDown {
					t.Fatalf("channel closed %t, connection closed %t, other channel closed %t; want the connection closed: %t",
						e.ch.IsClosed(), e.conn.IsClosed(), other.IsClosed(), want.connDown)
				}
				if n := len(e.b.Queues()); n != 0 {
					t.Fatalf("%d queues exist", n)
				}
			})
		}
	}
}

// TestDeclareEmptyTypeKeptRabbitMQ43: a queue declared with an empty
// x-queue-type keeps it, so re-declaring it without one meets the injected
// classic and is inequivalent. semantics §E13, §6.2.
func TestDeclareEmptyTypeKeptRabbitMQ43(t *testing.T) {
	e := newEnv(t, RabbitMQ43)
	e.declare("empty-type", amqp.Table{"x-queue-type": ""})
	if _, err := e.ch.QueueDeclare("empty-type", true, false, false, false, amqp.Table{"x-queue-type": ""}); err != nil {
		t.Fatalf("same re-declaration: %v", err)
	}
	_, err := e.ch.QueueDeclare("empty-type", true, false, false, false, nil)
	want := "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'empty-type' in vhost '/': received 'classic' but current is ''"
	if ae := cqAmqpErr(t, err); ae.Code != amqp.PreconditionFailed || ae.Reason != want {
		t.Fatalf("got %d %q, want 406 %q", ae.Code, ae.Reason, want)
	}
}
