package conformance

// Error and declaration scenarios: argument validation, re-declaration
// equivalence, quorum refusals, reserved names, exclusive queues, unknown
// delivery tags, publish refusals, consumer-tag reuse, missing queues,
// conditional deletes and basic.qos. "§EN" cites the error texts of
// docs/rabbitmq-semantics.md (read from the v4.0.5 source); "§N" its other
// sections.

import (
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func init() { errorScenarios = errorScenarioList }

// errDecl is one declaration in a table of cases.
type errDecl struct {
	label                          string
	durable, autoDelete, exclusive bool
	args                           tbl
}

// errClosedIf records ch's close when ok is false (the operation failed).
func errClosedIf(r *Run, ch Channel, ok bool) {
	if !ok {
		r.Closed(ch)
	}
}

// errDeclareEach declares each case as a new queue base-<i> on a fresh
// channel of c and records the reply, and the channel's close after an error.
func errDeclareEach(r *Run, c Conn, base string, cases []errDecl) {
	for i, d := range cases {
		r.Logf("case %s", d.label)
		ch := r.Channel(c)
		if ch == nil {
			continue // the connection is gone: recorded in the trace
		}
		q := r.Q(fmt.Sprintf("%s-%d", base, i))
		errClosedIf(r, ch, r.Declare(ch, q, d.durable, d.autoDelete, d.exclusive, d.args))
	}
}

// errRedecl is a queue declared as orig and then re-declared as again.
type errRedecl struct {
	label string
	orig  errDecl
	again errDecl
}

// errRedeclareEach creates each case's queue and re-declares it on the same
// fresh channel, recording both replies and the close after an error.
func errRedeclareEach(r *Run, c Conn, base string, cases []errRedecl) {
	for i, d := range cases {
		r.Logf("case %s", d.label)
		ch := r.Channel(c)
		if ch == nil {
			continue // the connection is gone: recorded in the trace
		}
		q := r.Q(fmt.Sprintf("%s-%d", base, i))
		if !r.Declare(ch, q, d.orig.durable, d.orig.autoDelete, d.orig.exclusive, d.orig.args) {
			r.Closed(ch)
			continue
		}
		errClosedIf(r, ch, r.Declare(ch, q, d.again.durable, d.again.autoDelete, d.again.exclusive, d.again.args))
	}
}

// errDurable returns a durable, non-exclusive declaration with args.
func errDurable(args tbl) errDecl { return errDecl{durable: true, args: args} }

// errCase labels a durable declaration.
func errCase(label string, args tbl) errDecl { return errDecl{label: label, durable: true, args: args} }

// errQuorum adds x-queue-type quorum to args.
func errQuorum(args tbl) tbl {
	out := tbl{"x-queue-type": "quorum"}
	for k, v := range args {
		out[k] = v
	}
	return out
}

var errorScenarioList = []Scenario{
	// --- Successful re-declaration -------------------------------------
	{
		Name: "declare-redeclare-same",
		Cite: "§6.1 step 3, §E2.2: an equivalent re-declare is declare_ok with the ready and consumer counts; unknown keys are not compared, absent x-queue-type equals classic",
		Run: func(r *Run) {
			_, ch := setup(r)
			q := r.Q("same")
			args := tbl{"x-message-ttl": int32(60000), "x-max-priority": int32(5),
				"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl"}
			r.Declare(ch, q, true, false, false, args)
			r.Publish(ch, q, "m0", pub{})
			r.Publish(ch, q, "m1", pub{})
			r.Publish(ch, q, "m2", pub{})
			r.Qos(ch, 1)
			r.Receive(r.Consume(ch, q, "c1", false, false), 1)
			r.Declare(ch, q, true, false, false, args)
			r.Declare(ch, q, true, false, false, tbl{"x-message-ttl": int32(60000), "x-max-priority": int32(5),
				"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl", "x-queue-type": "classic", "x-foo": "bar"})
			r.Passive(ch, q)
			if d, ok := r.Get(ch, q, false); ok {
				r.Ack(ch, d.DeliveryTag, false)
			}
			r.Declare(ch, q, true, false, false, args)
			p := r.Q("plain")
			r.Declare(ch, p, false, false, false, nil)
			r.Declare(ch, p, false, false, false, tbl{"x-queue-type": "classic"})
			r.Declare(ch, p, false, false, false, nil)
			qq := r.Q("qq")
			r.Declare(ch, qq, true, false, false, tbl{"x-queue-type": "quorum", "x-delivery-limit": int32(3)})
			r.Publish(ch, qq, "q0", pub{})
			r.Declare(ch, qq, true, false, false, tbl{"x-queue-type": "quorum", "x-delivery-limit": int64(3)})
		},
	},
	{
		Name: "declare-int-widths-equal",
		Cite: "§6.2: integer types compare as one class (rabbit_misc:type_class), so signedint 1000 equals long, short, unsignedshort and unsignedint 1000",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("widths")
			r.Declare(ch, q, true, false, false, tbl{"x-message-ttl": int32(1000), "x-max-priority": int32(10)})
			for _, a := range []tbl{
				{"x-message-ttl": int64(1000), "x-max-priority": int64(10)},
				{"x-message-ttl": int16(1000), "x-max-priority": int8(10)},
				{"x-message-ttl": uint16(1000), "x-max-priority": uint8(10)},
				{"x-message-ttl": uint32(1000), "x-max-priority": uint32(10)},
				{"x-message-ttl": 1000, "x-max-priority": 10},
			} {
				r.Declare(ch, q, true, false, false, a)
			}
		},
	},

	// --- Inequivalent re-declaration -----------------------------------
	{
		Name: "error-inequivalent-arg-missing",
		Cite: "§6.2, §E2.2d: an argument present on one side only: 'received none but current is the value ...' or the reverse; keys compared in the classic type's order",
		Run: func(r *Run) {
			c := r.Dial()
			errRedeclareEach(r, c, "miss", []errRedecl{
				{"max-priority dropped", errDurable(tbl{"x-max-priority": int32(10)}), errDurable(nil)},
				{"message-ttl added", errDurable(nil), errDurable(tbl{"x-message-ttl": int64(5000)})},
				{"dlx dropped", errDurable(tbl{"x-dead-letter-exchange": "dlx"}), errDurable(nil)},
				{"expires before message-ttl", errDurable(tbl{"x-message-ttl": int32(5000), "x-expires": int32(60000)}),
					errDurable(tbl{"x-message-ttl": int32(6000)})},
				{"message-ttl before max-priority", errDurable(tbl{"x-max-priority": int32(3)}),
					errDurable(tbl{"x-message-ttl": int32(100)})},
				{"queue-mode added", errDurable(nil), errDurable(tbl{"x-queue-mode": "lazy"})},
			})
		},
	},
	{
		Name: "error-inequivalent-arg-value",
		Cite: "§6.2, §E2.2d: both sides present and different: the bare values ('received '2000' but current is '1000''), whatever the types",
		Run: func(r *Run) {
			c := r.Dial()
			errRedeclareEach(r, c, "val", []errRedecl{
				{"message-ttl 1000 vs 2000", errDurable(tbl{"x-message-ttl": int32(1000)}), errDurable(tbl{"x-message-ttl": int32(2000)})},
				{"signedint vs long, different", errDurable(tbl{"x-message-ttl": int32(1000)}), errDurable(tbl{"x-message-ttl": int64(2000)})},
				{"signedint vs longstr", errDurable(tbl{"x-message-ttl": int32(1000)}), errDurable(tbl{"x-message-ttl": "1000"})},
				{"signedint vs double", errDurable(tbl{"x-max-priority": int32(10)}), errDurable(tbl{"x-max-priority": 10.0})},
				{"dlx a vs b", errDurable(tbl{"x-dead-letter-exchange": "a"}), errDurable(tbl{"x-dead-letter-exchange": "b"})},
				{"queue-mode lazy vs default", errDurable(tbl{"x-queue-mode": "lazy"}), errDurable(tbl{"x-queue-mode": "default"})},
			})
		},
	},
	{
		Name: "error-inequivalent-arg-rendering",
		Cite: "§6.2, rabbit_misc:val: values that are not binaries print with ~tp: doubles in Erlang's shortest form (10.0, 1.0e3), a float widened to a double, timestamps as seconds, decimals as {Scale,Value}",
		Run: func(r *Run) {
			c := r.Dial()
			errRedeclareEach(r, c, "rend", []errRedecl{
				{"double 1000.0 vs int", errDurable(tbl{"x-message-ttl": int32(1000)}), errDurable(tbl{"x-message-ttl": 1000.0})},
				{"double 0.0001 vs int", errDurable(tbl{"x-message-ttl": int32(1)}), errDurable(tbl{"x-message-ttl": 0.0001})},
				{"double 1.0e-5 vs int", errDurable(tbl{"x-message-ttl": int32(1)}), errDurable(tbl{"x-message-ttl": 1e-5})},
				{"float 0.1 vs int", errDurable(tbl{"x-max-priority": int32(1)}), errDurable(tbl{"x-max-priority": float32(0.1)})},
				{"double one side", errDurable(nil), errDurable(tbl{"x-expires": 123456.0})},
				{"big double one side", errDurable(nil), errDurable(tbl{"x-expires": 12345678901234567890.0})},
				{"bool one side", errDurable(nil), errDurable(tbl{"x-message-ttl": true})},
				{"timestamp one side", errDurable(nil), errDurable(tbl{"x-message-ttl": time.Unix(1000, 0)})},
				{"decimal one side", errDurable(nil), errDurable(tbl{"x-expires": amqp.Decimal{Scale: 2, Value: 150}})},
			})
		},
	},
	{
		Name: "error-inequivalent-durable",
		Cite: "§6.1 step 3b, §E2.2b: 'inequivalent arg 'durable' ... received 'false' but current is 'true'', checked before auto_delete and arguments; exclusive forces durable false",
		Run: func(r *Run) {
			c := r.Dial()
			errRedeclareEach(r, c, "dur", []errRedecl{
				{"durable to transient", errDecl{durable: true}, errDecl{}},
				{"transient to durable", errDecl{}, errDecl{durable: true}},
				{"durable before auto_delete and args", errDecl{durable: true, args: tbl{"x-max-priority": int32(1)}},
					errDecl{autoDelete: true}},
				{"exclusive durable is transient", errDecl{exclusive: true}, errDecl{durable: true, exclusive: true}},
			})
		},
	},
	{
		Name: "error-inequivalent-auto-delete",
		Cite: "§6.1 step 3c, §E2.2c: 'inequivalent arg 'auto_delete' ...', checked after durable and before the arguments",
		Run: func(r *Run) {
			c := r.Dial()
			errRedeclareEach(r, c, "ad", []errRedecl{
				{"auto-delete added", errDecl{durable: true}, errDecl{durable: true, autoDelete: true}},
				{"auto-delete dropped", errDecl{autoDelete: true}, errDecl{}},
				{"auto_delete before args", errDecl{durable: true, args: tbl{"x-message-ttl": int32(1)}},
					errDecl{durable: true, autoDelete: true}},
			})
		},
	},
	{
		Name: "error-inequivalent-queue-type",
		Cite: "§6.2, §E12: a quorum queue re-declared without x-queue-type meets the injected 'classic'; other types fall out of the argument comparison; a quorum queue compares only its own argument list",
		Run: func(r *Run) {
			c := r.Dial()
			q := tbl{"x-queue-type": "quorum"}
			errRedeclareEach(r, c, "type", []errRedecl{
				{"quorum redeclared without type", errDurable(q), errDurable(nil)},
				{"quorum redeclared as classic", errDurable(q), errDurable(tbl{"x-queue-type": "classic"})},
				{"classic redeclared as quorum", errDurable(nil), errDurable(q)},
				{"quorum redeclared auto-delete", errDurable(q), errDecl{durable: true, autoDelete: true, args: q}},
				{"quorum redeclared transient", errDurable(q), errDecl{args: q}},
				{"quorum dlx before type", errDurable(errQuorum(tbl{"x-dead-letter-exchange": "x"})), errDurable(nil)},
				{"quorum ignores classic-only arg", errDurable(q), errDurable(errQuorum(tbl{"x-max-priority": int32(5)}))},
				{"quorum delivery-limit", errDurable(errQuorum(tbl{"x-delivery-limit": int32(3)})),
					errDurable(errQuorum(tbl{"x-delivery-limit": int32(4)}))},
			})
		},
	},
	{
		Name: "declare-existing-not-validated",
		Cite: "§6.1 step 3, §E2.2: re-declaring an existing queue runs no argument validation, so an invalid value reads as 'inequivalent arg', an unknown type as an x-queue-type mismatch",
		Run: func(r *Run) {
			c := r.Dial()
			errRedeclareEach(r, c, "exist", []errRedecl{
				{"x-expires 0 on existing", errDurable(nil), errDurable(tbl{"x-expires": int32(0)})},
				{"x-queue-type foo on existing", errDurable(nil), errDurable(tbl{"x-queue-type": "foo"})},
				{"x-max-priority 256 on existing", errDurable(tbl{"x-max-priority": int32(10)}), errDurable(tbl{"x-max-priority": int32(256)})},
				{"dlx int on existing", errDurable(nil), errDurable(tbl{"x-dead-letter-exchange": int32(1)})},
				{"unknown key on existing", errDurable(nil), errDurable(tbl{"x-foo": int32(1)})},
			})
		},
	},

	// --- Invalid arguments on creation ----------------------------------
	{
		Name: "error-invalid-x-expires",
		Cite: "§E1.3, §2 (x-expires): 0 {value_zero,0}, negative {value_negative,N}, above ten years {value_too_large,N}, non-integer \"expected integer, got T\"; 1 and 315360000000 accepted",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "exp", []errDecl{
				errCase("zero", tbl{"x-expires": int32(0)}),
				errCase("negative", tbl{"x-expires": int32(-1)}),
				errCase("too large", tbl{"x-expires": int64(315360000001)}),
				errCase("string", tbl{"x-expires": "abc"}),
				errCase("bool", tbl{"x-expires": true}),
				errCase("double", tbl{"x-expires": 1.5}),
				errCase("one", tbl{"x-expires": int32(1)}),
				errCase("max", tbl{"x-expires": int64(315360000000)}),
			})
		},
	},
	{
		Name: "error-invalid-x-message-ttl",
		Cite: "§E1.3, §1.1 (x-message-ttl): negative {value_negative,N}, above ten years {value_too_large,N}, non-integer \"expected integer, got T\"; 0 and 315360000000 accepted",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "ttl", []errDecl{
				errCase("negative", tbl{"x-message-ttl": int32(-1)}),
				errCase("too large", tbl{"x-message-ttl": int64(315360000001)}),
				errCase("string", tbl{"x-message-ttl": "abc"}),
				errCase("double", tbl{"x-message-ttl": 1.5}),
				errCase("float", tbl{"x-message-ttl": float32(2)}),
				errCase("zero", tbl{"x-message-ttl": int32(0)}),
				errCase("max", tbl{"x-message-ttl": int64(315360000000)}),
				errCase("expires checked first", tbl{"x-message-ttl": int32(-1), "x-expires": int32(0)}),
			})
		},
	},
	{
		Name: "error-invalid-x-max-priority",
		Cite: "§E1.3 (x-max-priority): negative {value_negative,N}, above 255 {max_value_exceeded,N}, non-integer \"expected integer, got T\"; 0 and 255 accepted",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "prio", []errDecl{
				errCase("negative", tbl{"x-max-priority": int32(-1)}),
				errCase("256", tbl{"x-max-priority": int32(256)}),
				errCase("long 300", tbl{"x-max-priority": int64(300)}),
				errCase("string", tbl{"x-max-priority": "10"}),
				errCase("zero", tbl{"x-max-priority": int32(0)}),
				errCase("255", tbl{"x-max-priority": int32(255)}),
				errCase("ttl checked first", tbl{"x-max-priority": int32(-1), "x-message-ttl": int32(-1)}),
			})
		},
	},
	{
		Name: "error-invalid-x-queue-type",
		Cite: "§E1.3 (x-queue-type): unknown \"unsupported queue type 'foo'\", non-string {unacceptable_type,T}; checked before every other argument",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "qtype", []errDecl{
				errCase("foo", tbl{"x-queue-type": "foo"}),
				errCase("capitalised", tbl{"x-queue-type": "Quorum"}),
				errCase("empty", tbl{"x-queue-type": ""}),
				errCase("int", tbl{"x-queue-type": int32(1)}),
				errCase("before x-expires", tbl{"x-queue-type": "foo", "x-expires": int32(0)}),
			})
		},
	},
	{
		Name: "error-server-named-unknown-type",
		Cite: "§E1.3: a server-named declare with an unknown x-queue-type crashes rabbit_queue_type:discover in the channel: 541 INTERNAL_ERROR, a connection error [UNCERTAIN in the source]",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			other := r.Channel(c)
			errClosedIf(r, ch, r.Declare(ch, "", false, false, true, tbl{"x-queue-type": "foo"}))
			r.Closed(other)
			ch = r.Channel(r.Dial())
			errClosedIf(r, ch, r.Declare(ch, "", false, false, true, tbl{"x-queue-type": int32(1)}))
			ch = r.Channel(r.Dial())
			errClosedIf(r, ch, r.Declare(ch, "", false, false, true, tbl{"x-queue-type": "classic", "x-expires": int32(0)}))
		},
	},
	{
		Name: "error-invalid-dead-letter",
		Cite: "§E1.3, §E2.3: a non-string DLX is 'invalid type 'T' for arg 'x-dead-letter-exchange'' before anything else; DLRK without DLX routing_key_but_no_dlx_defined; non-string DLRK {unacceptable_type,T}",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "dl", []errDecl{
				errCase("dlrk without dlx", tbl{"x-dead-letter-routing-key": "rk"}),
				errCase("dlrk int with dlx", tbl{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": int32(5)}),
				errCase("dlrk int without dlx", tbl{"x-dead-letter-routing-key": int32(5)}),
				errCase("dlx int", tbl{"x-dead-letter-exchange": int32(5)}),
				errCase("dlx bool", tbl{"x-dead-letter-exchange": true}),
				errCase("dlx int before queue type", tbl{"x-dead-letter-exchange": int32(5), "x-queue-type": "foo"}),
				errCase("dlx int on quorum", errQuorum(tbl{"x-dead-letter-exchange": int64(5)})),
				errCase("dlrk without dlx on quorum", errQuorum(tbl{"x-dead-letter-routing-key": "rk"})),
			})
		},
	},
	{
		Name: "error-invalid-x-queue-mode",
		Cite: "§E1.3 (x-queue-mode, classic): other strings \"unsupported queue mode 'foo'\", non-string {unacceptable_type,T}; default and lazy accepted",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "mode", []errDecl{
				errCase("foo", tbl{"x-queue-mode": "foo"}),
				errCase("int", tbl{"x-queue-mode": int32(1)}),
				errCase("lazy", tbl{"x-queue-mode": "lazy"}),
				errCase("default", tbl{"x-queue-mode": "default"}),
			})
		},
	},
	{
		Name: "error-invalid-x-queue-version",
		Cite: "§E1.3 (x-queue-version, classic): 0 and 3 \"unsupported queue version 'N'\", negative {value_negative,N}, non-integer \"expected integer, got T\"; 1 and 2 accepted",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "ver", []errDecl{
				errCase("zero", tbl{"x-queue-version": int32(0)}),
				errCase("three", tbl{"x-queue-version": int32(3)}),
				errCase("negative", tbl{"x-queue-version": int32(-1)}),
				errCase("string", tbl{"x-queue-version": "2"}),
				errCase("one", tbl{"x-queue-version": int32(1)}),
				errCase("two", tbl{"x-queue-version": int64(2)}),
			})
		},
	},
	{
		Name: "error-invalid-x-single-active-consumer",
		Cite: "§E1.3: x-single-active-consumer accepts only a bool; anything else {unacceptable_type,T} (valid values are not modelled and not tested)",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "sac", []errDecl{
				errCase("string", tbl{"x-single-active-consumer": "true"}),
				errCase("int", tbl{"x-single-active-consumer": int32(1)}),
				errCase("on quorum", errQuorum(tbl{"x-single-active-consumer": "yes"})),
			})
		},
	},
	{
		Name: "error-invalid-unmodelled-args",
		Cite: "§E1.3: invalid values of arguments membroker does not model are still RabbitMQ's 406 (x-max-length*, x-overflow, x-dead-letter-strategy, x-max-in-memory-*, x-quorum-initial-group-size, x-queue-leader-locator)",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "unm", []errDecl{
				errCase("max-length negative", tbl{"x-max-length": int32(-1)}),
				errCase("max-length string", tbl{"x-max-length": "10"}),
				errCase("max-length-bytes negative", tbl{"x-max-length-bytes": int64(-5)}),
				errCase("overflow foo", tbl{"x-overflow": "foo"}),
				errCase("overflow int", tbl{"x-overflow": int32(1)}),
				errCase("leader-locator foo", tbl{"x-queue-leader-locator": "foo"}),
				errCase("quorum dead-letter-strategy foo", errQuorum(tbl{"x-dead-letter-strategy": "foo"})),
				errCase("quorum in-memory-length negative", errQuorum(tbl{"x-max-in-memory-length": int32(-1)})),
				errCase("quorum initial-group-size zero", errQuorum(tbl{"x-quorum-initial-group-size": int32(0)})),
				errCase("quorum initial-group-size negative", errQuorum(tbl{"x-quorum-initial-group-size": int32(-2)})),
				errCase("quorum overflow foo", errQuorum(tbl{"x-overflow": "foo"})),
			})
		},
	},
	{
		Name: "error-classic-foreign-args",
		Cite: "§5.5, §E1.2 step 4: a key another queue type owns is 'invalid arg 'K' for queue 'q' in vhost '/' of queue type rabbit_classic_queue' (x-delivery-limit included); unknown keys are ignored",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "cfor", []errDecl{
				errCase("x-delivery-limit", tbl{"x-delivery-limit": int32(5)}),
				errCase("x-dead-letter-strategy", tbl{"x-dead-letter-strategy": "at-least-once"}),
				errCase("x-quorum-initial-group-size", tbl{"x-quorum-initial-group-size": int32(1)}),
				errCase("x-max-in-memory-length", tbl{"x-max-in-memory-length": int32(1)}),
				errCase("x-max-age", tbl{"x-max-age": "1D"}),
				errCase("x-initial-cluster-size", tbl{"x-initial-cluster-size": int32(1)}),
				errCase("x-stream-max-segment-size-bytes", tbl{"x-stream-max-segment-size-bytes": int32(1)}),
				errCase("x-stream-filter-size-bytes", tbl{"x-stream-filter-size-bytes": int32(16)}),
				errCase("explicit classic x-delivery-limit", tbl{"x-queue-type": "classic", "x-delivery-limit": int32(5)}),
				errCase("invalid value wins over foreign key", tbl{"x-delivery-limit": int32(5), "x-expires": int32(0)}),
				errCase("unknown x-foo", tbl{"x-foo": "bar"}),
				errCase("x-queue-master-locator, no validator", tbl{"x-queue-master-locator": int32(7)}),
			})
		},
	},

	// --- Quorum refusals -------------------------------------------------
	{
		Name: "error-quorum-foreign-args",
		Cite: "§5.5, §10 item 1, §E1.2: classic- and stream-only keys on a quorum queue are 'invalid arg 'K' ... of queue type rabbit_quorum_queue', after the quorum type's own validators",
		Run: func(r *Run) {
			errDeclareEach(r, r.Dial(), "qfor", []errDecl{
				errCase("x-max-priority", errQuorum(tbl{"x-max-priority": int32(10)})),
				errCase("x-max-priority invalid", errQuorum(tbl{"x-max-priority": int32(-1)})),
				errCase("x-queue-mode", errQuorum(tbl{"x-queue-mode": "lazy"})),
				errCase("x-queue-version", errQuorum(tbl{"x-queue-version": int32(2)})),
				errCase("x-queue-master-locator", errQuorum(tbl{"x-queue-master-locator": "min-masters"})),
				errCase("x-max-age", errQuorum(tbl{"x-max-age": "1D"})),
				errCase("own validator first", errQuorum(tbl{"x-max-priority": int32(10), "x-expires": int32(0)})),
				errCase("x-stream-filter-size-bytes ignored", errQuorum(tbl{"x-stream-filter-size-bytes": int32(16)})),
				errCase("x-delivery-limit, no validator", errQuorum(tbl{"x-delivery-limit": "abc"})),
			})
		},
	},
	{
		Name: "error-quorum-properties",
		Cite: "§5.5, §E2.3 step 10: quorum queues refuse auto-delete, exclusive and non-durable, checked in that order after the arguments; exclusive forces non-durable",
		Run: func(r *Run) {
			q := tbl{"x-queue-type": "quorum"}
			errDeclareEach(r, r.Dial(), "qprop", []errDecl{
				{label: "non-durable", args: q},
				{label: "auto-delete", durable: true, autoDelete: true, args: q},
				{label: "exclusive", durable: true, exclusive: true, args: q},
				{label: "auto-delete and exclusive", durable: true, autoDelete: true, exclusive: true, args: q},
				{label: "non-durable and exclusive", exclusive: true, args: q},
				{label: "non-durable and auto-delete", autoDelete: true, args: q},
				{label: "argument first", autoDelete: true, args: errQuorum(tbl{"x-expires": int32(0)})},
			})
		},
	},
	{
		Name: "error-quorum-server-named",
		Cite: "§E9, §5.5: a server-named quorum queue is 406 'Cannot declare a server-named queue for type rabbit_quorum_queue', before argument validation",
		Run: func(r *Run) {
			c := r.Dial()
			for _, args := range []tbl{
				{"x-queue-type": "quorum"},
				{"x-queue-type": "quorum", "x-expires": int32(0)},
			} {
				ch := r.Channel(c)
				errClosedIf(r, ch, r.Declare(ch, "", true, false, false, args))
			}
		},
	},

	// --- Names -----------------------------------------------------------
	{
		Name: "error-passive-missing",
		Cite: "§6.2, §E2.4: a passive declare of a missing queue is 404 'no queue 'q' in vhost '/''; a passive declare ignores flags and arguments",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			r.Passive(ch, r.Q("nope"))
			r.Closed(ch)
			ch = r.Channel(c)
			r.Passive(ch, "")
			r.Closed(ch)
			ch = r.Channel(c)
			q := r.Q("there")
			r.Declare(ch, q, true, false, false, tbl{"x-max-priority": int32(2)})
			r.Publish(ch, q, "m", pub{})
			if got, err := ch.QueueDeclarePassive(q, false, true, true, false, tbl{"x-expires": int32(0), "x-queue-type": "quorum"}); err != nil {
				r.Logf("passive %s with other flags and args: %s", q, describeErr(err))
			} else {
				r.Logf("passive %s with other flags and args: messages=%d consumers=%d", q, got.Messages, got.Consumers)
			}
		},
	},
	{
		Name: "error-amq-prefix",
		Cite: "§6.1 step 2, §E2.1 step 3: a non-passive declare of an 'amq.' name is 403 'queue name 'amq.x' contains reserved prefix 'amq.*'', even for an existing server-named queue; passive declares are not checked",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			errClosedIf(r, ch, r.Declare(ch, "amq.cf-reserved", true, false, false, nil))
			ch = r.Channel(c)
			errClosedIf(r, ch, r.Declare(ch, "amq.", false, false, true, nil))
			ch = r.Channel(c)
			r.Passive(ch, "amq.cf-reserved")
			r.Closed(ch)
			ch = r.Channel(c)
			q, err := ch.QueueDeclare("", false, false, true, false, nil)
			if err != nil {
				r.Logf("declare server-named: %s", describeErr(err))
				return
			}
			r.Logf("declare server-named: ok name=%s", q.Name)
			r.Passive(ch, q.Name)
			errClosedIf(r, ch, r.Declare(ch, q.Name, false, false, true, nil))
		},
	},

	{
		Name: "error-reply-text-limits",
		Cite: "§E0, rabbit_binary_generator:amqp_exception_explanation (chars_limit 255): a reply text over 255 characters becomes its first 252 and '...'; one still over 255 bytes (multi-byte characters) cannot be sent and the connection closes with 541 INTERNAL_ERROR (observed on 4.0.5)",
		Run: func(r *Run) {
			// Names are not run-prefixed: the prefix's length differs
			// between runs and would move the cut. The queues never exist.
			for _, name := range []string{
				"cf-long-" + strings.Repeat("x", 210),          // 254 characters in all
				"cf-long-" + strings.Repeat("x", 212),          // 256: cut
				"cf-long-" + strings.Repeat("x", 240),          // cut
				"cf-long-" + strings.Repeat("é", 100),          // 244 bytes
				"cf-long-" + strings.Repeat("é", 105),          // 254 bytes
				"cf-long-" + strings.Repeat("é", 106),          // 256 bytes: 541
				"cf-long-" + strings.Repeat("é", 120),          // 541
				"cf-long-" + strings.Repeat("x", 215) + "éééé", // cut, still over 255 bytes
				"cf-long-" + strings.Repeat("x", 220) + "é",    // cut before the é
			} {
				c := r.Dial()
				ch := r.Channel(c)
				other := r.Channel(c)
				r.Passive(ch, name)
				r.Closed(ch)
				if _, err := other.QueueDeclarePassive("cf-long-probe", false, false, false, false, nil); err != nil {
					r.Logf("other channel: %s", describeErr(err))
				}
			}
		},
	},

	// --- Exclusive queues --------------------------------------------------
	{
		Name: "error-exclusive-other-connection",
		Cite: "§E10, §E2.2 (a): another connection's exclusive queue is 405 RESOURCE_LOCKED on declare, passive declare, consume, get, purge and delete; publishing to it is allowed; a re-declare whose exclusive flag differs is 405 too",
		Run: func(r *Run) {
			a := r.Dial()
			cha := r.Channel(a)
			q := r.Q("ex")
			r.Declare(cha, q, false, false, true, nil)
			r.Publish(cha, q, "m0", pub{})
			b := r.Dial()
			for _, op := range []string{"declare exclusive", "declare shared", "declare durable", "passive", "consume", "get", "purge", "delete"} {
				r.Logf("case %s from another connection", op)
				ch := r.Channel(b)
				var ok bool
				switch op {
				case "declare exclusive":
					ok = r.Declare(ch, q, false, false, true, nil)
				case "declare shared":
					ok = r.Declare(ch, q, false, false, false, nil)
				case "declare durable":
					ok = r.Declare(ch, q, true, false, false, nil)
				case "passive":
					_, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
					ok = err == nil
					if err != nil {
						r.Logf("passive %s: %s", q, describeErr(err))
					}
				case "consume":
					ok = r.Consume(ch, q, "c1", false, false) != nil
				case "get":
					_, got := r.Get(ch, q, false)
					ok = got
				case "purge":
					_, err := ch.QueuePurge(q, false)
					ok = err == nil
					if err != nil {
						r.Logf("purge %s: %s", q, describeErr(err))
					}
				case "delete":
					_, err := ch.QueueDelete(q, false, false, false)
					ok = err == nil
					if err != nil {
						r.Logf("delete %s: %s", q, describeErr(err))
					}
				}
				errClosedIf(r, ch, ok)
			}
			r.Logf("case publish from another connection")
			chb := r.Channel(b)
			r.Publish(chb, q, "m1", pub{})
			r.Passive(cha, q)
			r.Logf("case same connection, exclusive flag dropped")
			errClosedIf(r, cha, r.Declare(cha, q, false, false, false, nil))
			cha = r.Channel(a)
			r.Declare(cha, q, false, false, true, nil)
			r.Logf("case shared queue re-declared exclusive")
			s := r.Q("shared")
			r.Declare(cha, s, false, false, false, nil)
			errClosedIf(r, cha, r.Declare(cha, s, false, false, true, nil))
			r.Logf("case owner closes")
			_ = a.Close()
			r.Passive(chb, q)
		},
	},

	// --- Unknown delivery tags ---------------------------------------------
	{
		Name: "error-ack-unknown-tag",
		Cite: "§E6: a tag never delivered is 406 'PRECONDITION_FAILED - unknown delivery tag N', a channel error; tag 0 without multiple too; multiple with tag 0 and nothing outstanding is a no-op",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("tags")
			r.Declare(ch, q, true, false, false, nil)
			r.Logf("case ack 0 multiple, nothing outstanding")
			r.Ack(ch, 0, true)
			r.Passive(ch, q)
			r.Logf("case ack 5, never delivered")
			r.Ack(ch, 5, false)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Logf("case ack 0 without multiple")
			r.Ack(ch, 0, false)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Publish(ch, q, "m0", pub{})
			r.Get(ch, q, false)
			r.Logf("case ack 2, above the outstanding tag 1")
			r.Ack(ch, 2, false)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Passive(ch, q)
			r.Get(ch, q, false)
			r.Logf("case reject 7 with requeue")
			r.Reject(ch, 7, true)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Get(ch, q, true)
		},
	},
	{
		Name: "error-ack-twice",
		Cite: "§E6: acknowledging a tag a second time (or after a nack or reject) is 406 'unknown delivery tag N'",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("twice")
			r.Declare(ch, q, true, false, false, nil)
			r.Publish(ch, q, "m0", pub{})
			r.Publish(ch, q, "m1", pub{})
			if d, ok := r.Get(ch, q, false); ok {
				r.Ack(ch, d.DeliveryTag, false)
				r.Ack(ch, d.DeliveryTag, false)
				r.Closed(ch)
			}
			ch = r.Channel(c)
			if d, ok := r.Get(ch, q, false); ok {
				r.Nack(ch, d.DeliveryTag, false, true)
				r.Ack(ch, d.DeliveryTag, false)
				r.Closed(ch)
			}
			ch = r.Channel(c)
			r.Passive(ch, q)
		},
	},
	{
		Name: "error-nack-multiple-unknown-tag",
		Cite: "§E6: nack multiple with a tag that is not outstanding raises 'unknown delivery tag N' before settling anything; the closing channel requeues all its deliveries",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("nackm")
			r.Declare(ch, q, true, false, false, nil)
			for _, b := range []string{"m0", "m1", "m2", "m3"} {
				r.Publish(ch, q, b, pub{})
			}
			for range 3 {
				r.Get(ch, q, false)
			}
			r.Ack(ch, 2, false)
			r.Logf("case nack 2 multiple after acking 2")
			r.Nack(ch, 2, true, false)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Passive(ch, q)
			for range 5 {
				r.Get(ch, q, false)
			}
			r.Logf("case nack 9 multiple, never delivered")
			r.Nack(ch, 9, true, false)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Passive(ch, q)
		},
	},
	{
		Name: "error-reject-auto-acked",
		Cite: "§E6: a delivery made with no_ack has no tag to settle: reject, nack or ack of it is 406 'unknown delivery tag N'",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("autoack")
			r.Declare(ch, q, true, false, false, nil)
			r.Publish(ch, q, "m0", pub{})
			r.Publish(ch, q, "m1", pub{})
			if d, ok := r.Get(ch, q, true); ok {
				r.Reject(ch, d.DeliveryTag, true)
				r.Closed(ch)
			}
			ch = r.Channel(c)
			r.Passive(ch, q)
			deliveries := r.Consume(ch, q, "c1", true, false)
			if ds := r.Receive(deliveries, 1); len(ds) == 1 {
				r.Nack(ch, ds[0].DeliveryTag, false, true)
				r.Closed(ch)
			}
			ch = r.Channel(c)
			r.Passive(ch, q)
		},
	},

	// --- Publish refusals ----------------------------------------------------
	{
		Name: "error-publish-missing-exchange",
		Cite: "§8, §E7 step 4: publishing to a missing exchange is 404 'no exchange 'x' in vhost '/''; 'amq.default' is not an exchange over AMQP 0-9-1; the exchange is checked before the expiration",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			r.PublishTo(ch, "cf-missing-exchange", "k", "m0", pub{})
			ch = r.Channel(c)
			r.PublishTo(ch, "amq.default", "k", "m1", pub{})
			ch = r.Channel(c)
			r.PublishTo(ch, "cf-missing-exchange", "k", "m2", pub{Expiration: "abc"})
		},
	},
	{
		Name: "error-publish-invalid-expiration",
		Cite: "§E7 step 6: 'invalid expiration 'raw': reason' (406) from rabbit_basic:parse_expiration, checked before routing so an unroutable publish is refused too; 0, +5 and 315360000000 accepted",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("exp")
			r.Declare(ch, q, true, false, false, nil)
			miss := r.Q("nowhere")
			for _, e := range []struct{ to, exp string }{
				{q, "abc"}, {q, "10s"}, {q, "-1"}, {q, "315360000001"}, {q, "1.5"}, {q, " 5"},
				{q, "99999999999999999999"},
				{miss, "abc"}, {miss, "-1"}, {"", "10s"},
				{miss, "+00099999999999999999999"}, {miss, "-99999999999999999999"}, {miss, "-1" + strings.Repeat("0", 60)},
				{miss, "1" + strings.Repeat("x", 40)}, {miss, "1" + strings.Repeat("y", 70)}, {miss, "1 abc"},
				{miss, "1\té\"\\"}, {miss, "1\x01ab"}, {miss, "0x10"}, {miss, "--5"}, {miss, "+"},
				{miss, "0"}, {miss, "+5"}, {miss, "315360000000"}, {miss, "-0"}, {miss, "0000000000000000000000000000007"},
			} {
				r.Logf("case expiration %q to %s", e.exp, e.to)
				r.Publish(ch, e.to, "m", pub{Expiration: e.exp})
				if ch.IsClosed() {
					ch = r.Channel(c)
				}
			}
			r.Logf("case mandatory unroutable")
			r.PublishMandatory(ch, miss, "m", pub{Expiration: "x"})
			ch = r.Channel(c)
			r.Passive(ch, q)
		},
	},
	{
		Name: "error-publish-user-id",
		Cite: "§E7 step 9: a user-id other than the authenticated user is 406 'user_id property set to 'bob' but authenticated user was 'guest''; 'guest' passes and is delivered",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("uid")
			r.Declare(ch, q, true, false, false, nil)
			r.Publish(ch, q, "m0", pub{UserId: "bob"})
			ch = r.Channel(c)
			r.Publish(ch, r.Q("nowhere"), "m1", pub{UserId: "Guest"})
			ch = r.Channel(c)
			r.Publish(ch, q, "m2", pub{UserId: "guest"})
			r.Get(ch, q, true)
			r.Get(ch, q, true)
		},
	},
	{
		Name: "error-publish-too-large",
		Cite: "§8, §E7 step 2: a body above 16 MiB is 406 'message size N is larger than configured max size 16777216'; 16 MiB exactly is accepted",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			miss := r.Q("nowhere")
			for _, n := range []int{16 << 20, 16<<20 + 1} {
				r.Logf("case body of %d bytes", n)
				body := strings.Repeat("x", n)
				if err := ch.Publish("", miss, false, false, pub{Body: []byte(body)}); err != nil {
					r.Logf("publish: %s", describeErr(err))
					continue
				}
				r.awaitConfirm(ch, r.state(ch), fmt.Sprintf("%d bytes", n))
			}
		},
	},
	{
		Name: "error-publish-immediate",
		Cite: "§8, §E7 step 1: immediate=true is 540 'NOT_IMPLEMENTED - immediate=true', a connection error",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			other := r.Channel(c)
			q := r.Q("imm")
			r.Declare(ch, q, true, false, false, nil)
			if err := ch.Publish("", q, false, true, pub{Body: []byte("m0")}); err != nil {
				r.Logf("publish immediate: %s", describeErr(err))
			} else {
				r.awaitConfirm(ch, r.state(ch), "m0")
			}
			r.Closed(other)
			ch = r.Channel(r.Dial())
			r.Passive(ch, q)
		},
	},

	// --- Consumers -------------------------------------------------------------
	{
		Name: "error-consumer-tag-reuse",
		Cite: "§E4 step 1: reusing a consumer tag on one channel is 530 'NOT_ALLOWED - attempt to reuse consumer tag 't'', a connection error, checked before the queue is looked up; another channel may use the tag; cancelling an unknown tag is no error",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			other := r.Channel(c)
			q := r.Q("ctag")
			r.Declare(ch, q, true, false, false, nil)
			r.Cancel(ch, "never")
			r.Consume(ch, q, "c1", false, false)
			r.Consume(other, q, "c1", false, false)
			r.Consume(ch, q, "c1", false, false)
			r.Closed(ch)
			r.Closed(other)
			c = r.Dial()
			ch = r.Channel(c)
			r.Passive(ch, q)
			r.Consume(ch, q, "c2", false, false)
			r.Consume(ch, r.Q("missing"), "c2", false, false)
			r.Closed(ch)
			ch = r.Channel(r.Dial())
			r.Passive(ch, q)
		},
	},
	{
		Name: "error-consume-exclusive-in-use",
		Cite: "§E4 step 6: on a classic queue an exclusive consume next to any consumer, or any consume next to an exclusive one, is 403 'queue 'q' in vhost '/' in exclusive use'; quorum queues ignore the exclusive flag [UNCERTAIN]",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("excl")
			r.Declare(ch, q, true, false, false, nil)
			r.Consume(ch, q, "c1", false, false)
			errClosedIf(r, ch, r.Consume(ch, q, "c2", false, true) != nil)
			ch = r.Channel(c)
			q2 := r.Q("excl2")
			r.Declare(ch, q2, true, false, false, nil)
			r.Consume(ch, q2, "c3", false, true)
			errClosedIf(r, ch, r.Consume(ch, q2, "c4", false, false) != nil)
			ch = r.Channel(c)
			errClosedIf(r, ch, r.Consume(ch, q2, "c5", false, true) != nil)
			ch = r.Channel(c)
			qq := r.Q("exclq")
			r.Declare(ch, qq, true, false, false, tbl{"x-queue-type": "quorum"})
			r.Consume(ch, qq, "c6", false, false)
			r.Consume(ch, qq, "c7", false, true)
			r.Consume(ch, qq, "c8", false, false)
			r.Passive(ch, qq)
		},
	},
	{
		Name: "error-consume-invalid-args",
		Cite: "§E1.4: consumer arguments are validated after the 404/405 checks: x-priority must be an integer ('\"expected integer, got T\"'), stream-only consumer arguments are 'invalid arg ... of queue type ...'; unknown keys are ignored (valid x-priority is not modelled and not tested)",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("cargs")
			qq := r.Q("cargsq")
			r.Declare(ch, q, true, false, false, nil)
			r.Declare(ch, qq, true, false, false, tbl{"x-queue-type": "quorum"})
			for i, tc := range []struct {
				label, queue string
				args         tbl
			}{
				{"x-priority string", q, tbl{"x-priority": "high"}},
				{"x-priority bool", q, tbl{"x-priority": true}},
				{"x-priority double", qq, tbl{"x-priority": 1.5}},
				{"x-stream-offset on classic", q, tbl{"x-stream-offset": "first"}},
				{"x-stream-filter on quorum", qq, tbl{"x-stream-filter": "f"}},
				{"x-stream-match-unfiltered on classic", q, tbl{"x-stream-match-unfiltered": true}},
				{"missing queue first", r.Q("nope"), tbl{"x-priority": "high"}},
				{"unknown key", q, tbl{"x-foo": "bar"}},
				{"unknown key on quorum", qq, tbl{"x-foo": int32(1)}},
			} {
				r.Logf("case %s", tc.label)
				ch := r.Channel(c)
				tag := fmt.Sprintf("c%d", i)
				if _, err := ch.Consume(tc.queue, tag, false, false, false, false, tc.args); err != nil {
					r.Logf("consume %s %s: %s", tc.queue, tag, describeErr(err))
					r.Closed(ch)
					continue
				}
				r.Logf("consume %s %s: ok", tc.queue, tag)
			}
			r.Passive(ch, q)
			r.Passive(ch, qq)
		},
	},
	{
		Name: "error-missing-queue",
		Cite: "§E3, §E4: consume, get and purge on a missing queue are 404 'no queue 'q' in vhost '/''; deleting a missing queue is delete_ok 0; an empty name with no previously declared queue is 404 'no previously declared queue'",
		Run: func(r *Run) {
			c := r.Dial()
			q := r.Q("missing")
			ch := r.Channel(c)
			errClosedIf(r, ch, r.Consume(ch, q, "c1", false, false) != nil)
			ch = r.Channel(c)
			r.Get(ch, q, false)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Purge(ch, q)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Delete(ch, q, false, false)
			r.Delete(ch, q, true, true)
			r.Logf("case empty names")
			ch = r.Channel(c)
			r.Get(ch, "", false)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Purge(ch, "")
			r.Closed(ch)
			ch = r.Channel(c)
			errClosedIf(r, ch, r.Consume(ch, "", "c2", false, false) != nil)
			ch = r.Channel(c)
			r.Delete(ch, "", false, false)
			r.Closed(ch)
			ch = r.Channel(c)
			e := r.Q("last")
			r.Declare(ch, e, true, false, false, nil)
			r.Publish(ch, e, "m0", pub{})
			r.Get(ch, "", true)
			r.Purge(ch, "")
			r.Delete(ch, "", false, false)
			r.Passive(ch, e)
			r.Closed(ch)
		},
	},

	// --- Deletes and QoS ---------------------------------------------------------
	{
		Name: "error-delete-conditions-classic",
		Cite: "§E3: classic queue.delete if-empty 406 'queue 'q' in vhost '/' not empty' (ready messages only, checked first), if-unused 406 'queue 'q' in vhost '/' in use'",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			q := r.Q("del")
			r.Declare(ch, q, true, false, false, nil)
			r.Publish(ch, q, "m0", pub{})
			r.Delete(ch, q, false, true)
			r.Closed(ch)
			ch = r.Channel(c)
			r.Consume(ch, q, "c1", false, false)
			ch2 := r.Channel(c)
			r.Delete(ch2, q, true, false)
			r.Closed(ch2)
			ch2 = r.Channel(c)
			r.Delete(ch2, q, true, true)
			r.Closed(ch2)
			ch2 = r.Channel(c)
			r.Passive(ch2, q)
			r.Cancel(ch, "c1")
			u := r.Q("unacked")
			r.Declare(ch2, u, true, false, false, nil)
			r.Publish(ch2, u, "u0", pub{})
			r.Get(ch2, u, false)
			r.Delete(ch2, u, true, true)
			p := r.Q("plain")
			r.Declare(ch2, p, true, false, false, nil)
			r.Publish(ch2, p, "p0", pub{})
			r.Publish(ch2, p, "p1", pub{})
			r.Delete(ch2, p, true, false)
		},
	},
	{
		Name: "error-delete-conditions-quorum",
		Cite: "§E3: on a quorum queue queue.delete with if-unused or if-empty is 540 'NOT_IMPLEMENTED - cannot delete queue ... with if-unused flag set are not supported by quorum queues', a connection error, if-unused named first",
		Run: func(r *Run) {
			q := r.Q("qdel")
			ch := r.Channel(r.Dial())
			r.Declare(ch, q, true, false, false, tbl{"x-queue-type": "quorum"})
			r.Publish(ch, q, "m0", pub{})
			for _, f := range []struct{ unused, empty bool }{{true, false}, {false, true}, {true, true}} {
				r.Logf("case if-unused=%t if-empty=%t", f.unused, f.empty)
				r.Delete(ch, q, f.unused, f.empty)
				r.Closed(ch)
				ch = r.Channel(r.Dial())
			}
			r.Passive(ch, q)
			r.Delete(ch, q, false, false)
		},
	},
	{
		Name: "error-qos-prefetch-size",
		Cite: "§E8: basic.qos with prefetch_size != 0 is 540 'NOT_IMPLEMENTED - prefetch_size!=0 (N)', a connection error",
		Run: func(r *Run) {
			c := r.Dial()
			ch := r.Channel(c)
			other := r.Channel(c)
			if err := ch.Qos(1, 4096, false); err != nil {
				r.Logf("qos prefetch_size 4096: %s", describeErr(err))
			} else {
				r.Logf("qos prefetch_size 4096: ok")
			}
			r.Closed(ch)
			r.Closed(other)
			if _, err := c.Channel(); err != nil {
				r.Logf("new channel on the closed connection: %s", describeErr(err))
			}
			ch = r.Channel(r.Dial())
			if err := ch.Qos(1, 0, false); err != nil {
				r.Logf("qos 1: %s", describeErr(err))
			} else {
				r.Logf("qos 1: ok")
			}
		},
	},
}
