package membroker

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// queueKind is a queue's type, as x-queue-type names it.
type queueKind int

const (
	classicKind queueKind = iota
	quorumKind
)

func (k queueKind) String() string {
	if k == quorumKind {
		return "quorum"
	}
	return "classic"
}

func (k queueKind) module() string {
	if k == quorumKind {
		return "rabbit_quorum_queue"
	}
	return "rabbit_classic_queue"
}

// Limits from rabbit_misc:check_expiry and rabbit_amqqueue.
const (
	maxExpiry            = 315_360_000_000 // ms, ten years
	maxClassicPriority   = 255
	defaultDeliveryLimit = 20 // quorum queues, RabbitMQ 4.0 and later
	maxMessageSize       = 16 << 20
)

// queueConfig is what a queue's arguments mean, derived once at declaration.
type queueConfig struct {
	kind           queueKind
	messageTTL     int64 // ms; valid when hasMessageTTL
	hasMessageTTL  bool
	expires        int64 // ms; valid when hasExpires
	hasExpires     bool
	dlx            string
	hasDLX         bool
	dlrk           string
	hasDLRK        bool
	maxPriority    int // classic: levels are 0..maxPriority; valid when hasMaxPriority
	hasMaxPriority bool
	deliveryLimit  int64 // quorum; negative means no limit
	atLeastOnce    bool  // quorum: dead-letters at least once (x-dead-letter-strategy, x-overflow)
	singleActive   bool  // x-single-active-consumer (sac.go)
}

// argCheck validates one argument's value when a queue is created; it returns
// the reason term RabbitMQ prints after "invalid arg '<key>' ...: ".
type argCheck func(v any, args amqp.Table) string

// declareArg is one argument RabbitMQ validates on creation.
type declareArg struct {
	key   string
	check argCheck
}

// declareArgs lists the arguments RabbitMQ 4.0 validates on creation, in the
// order rabbit_amqqueue:declare_args/0 checks them. Only the keys the queue's
// type understands are checked; the others fail the type check after.
var declareArgs = []declareArg{
	{"x-expires", checkExpires},
	{"x-message-ttl", checkMessageTTL},
	{"x-dead-letter-exchange", checkString},
	{"x-dead-letter-routing-key", checkDLRK},
	{"x-dead-letter-strategy", checkOneOf("invalid_dlx_strategy", "at-most-once", "at-least-once")},
	{"x-max-length", checkNonNegInt},
	{"x-max-length-bytes", checkNonNegInt},
	{"x-max-in-memory-length", checkNonNegInt},
	{"x-max-in-memory-bytes", checkNonNegInt},
	{"x-max-priority", checkMaxPriority},
	{"x-overflow", checkOneOf("invalid_overflow", "drop-head", "reject-publish", "reject-publish-dlx")},
	{"x-queue-mode", checkQueueMode},
	{"x-queue-version", checkQueueVersion40},
	{"x-single-active-consumer", checkBool},
	{"x-queue-type", checkQueueType},
	{"x-quorum-initial-group-size", checkGroupSize},
	{"x-queue-leader-locator", checkOneOf("invalid_queue_locator_arg",
		"client-local", "balanced", "random", "least-leaders", "min-masters")},
}

// declareArgs43 is declareArgs as RabbitMQ 4.3 has it (semantics §E13):
// x-queue-mode has no validator any more, and x-queue-version accepts only 2.
var declareArgs43 = func() []declareArg {
	out := slices.DeleteFunc(slices.Clone(declareArgs), func(a declareArg) bool {
		return a.key == "x-queue-mode"
	})
	for i := range out {
		if out[i].key == "x-queue-version" {
			out[i].check = checkQueueVersion43
		}
	}
	return out
}()

// Arguments each queue type understands, in the order its equivalence check
// compares them (rabbit_classic_queue:queue_arguments/0,
// rabbit_quorum_queue:queue_arguments/0).
var (
	classicArgs = []string{
		"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
		"x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
		"x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
		"x-queue-leader-locator",
	}
	quorumArgs = []string{
		"x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
		"x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
		"x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
		"x-quorum-initial-group-size", "x-delivery-limit", "x-message-ttl",
		"x-queue-leader-locator",
	}
	// rabbit_stream_queue:capabilities; x-stream-filter-size-bytes is in
	// no type's list on 4.0, so classic and quorum queues ignore it
	// (observed on 4.0.5: a classic queue declared with it is created).
	streamArgs = []string{
		"x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
		"x-initial-cluster-size", "x-queue-leader-locator",
	}
	// RabbitMQ 4.3 lists x-stream-filter-size-bytes among the stream's own
	// arguments, so classic and quorum queues refuse it as another type's
	// key (semantics §E13).
	streamArgs43 = append(slices.Clip(streamArgs), "x-stream-filter-size-bytes")
)

// quorumArgs43 are the quorum queue's arguments on RabbitMQ 4.3, which
// adds x-consumer-timeout: a quorum queue checks it on redeclaration, and a
// classic queue, which has no consumer timeout on 4.3, refuses it as
// another type's key when it is created (observed on 4.3.6; semantics
// §14). RabbitMQ 4.0 lists it for no type, so both accept it unchecked.
var quorumArgs43 = append(slices.Clip(quorumArgs), "x-consumer-timeout")

// quorumArgsOf returns the quorum queue's own arguments in release v.
func quorumArgsOf(v Version) []string {
	if v == RabbitMQ43 {
		return quorumArgs43
	}
	return quorumArgs
}

// streamArgsOf returns the stream queue's own arguments in release v.
func streamArgsOf(v Version) []string {
	if v == RabbitMQ43 {
		return streamArgs43
	}
	return streamArgs
}

// unmodelled are arguments RabbitMQ accepts whose effect membroker does not
// model. Accepting them silently would let a test pass that means nothing, so
// a declaration carrying one is refused with NOT_IMPLEMENTED.
//
// x-overflow is not among them: without a length limit, which membroker
// refuses, it changes nothing. Nor is x-dead-letter-strategy: at-least-once
// dead-lettering (quorum, with x-overflow reject-publish) differs from
// at-most-once only when a dead letter's target is unavailable, which on one
// node whose queues exist it never is (semantics §3.6).
var unmodelled = []string{
	"x-max-length", "x-max-length-bytes", "x-max-in-memory-length", "x-max-in-memory-bytes",
}

// Consumer arguments the queue types know (rabbit_*_queue:capabilities
// consumer_arguments): x-priority for classic and quorum queues, the rest
// for streams.
var streamConsumeArgs = []string{"x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered"}

// checkConsumeArgs validates basic.consume's arguments as
// rabbit_amqqueue:check_consume_arguments does, after the queue's 404 and
// 405 checks: x-priority must be an integer, and a stream's consumer
// argument on another queue type is refused; unknown keys are ignored. On
// RabbitMQ 4.3 x-consumer-timeout is a quorum queue's consumer argument,
// which a classic queue refuses (observed on 4.3.6; 4.0.5 ignores it on
// both). A valid x-priority is then refused with NOT_IMPLEMENTED: membroker
// does not model consumer priorities (observed on 4.0.5: the texts below).
func checkConsumeArgs(q *queue, args amqp.Table, ver Version) *amqp.Error {
	if v, ok := args["x-priority"]; ok {
		if _, reason := integerOrReason(v); reason != "" {
			return invalidArg("x-priority", q.name, reason)
		}
	}
	for _, key := range sortedKeys(args) {
		if slices.Contains(streamConsumeArgs, key) || (key == "x-consumer-timeout" && ver == RabbitMQ43 && !q.isQuorum()) {
			return preconditionFailed("invalid arg '%s' for queue '%s' in vhost '%s' of queue type %s",
				key, q.name, vhost, q.cfg.kind.module())
		}
	}
	if _, ok := args["x-priority"]; ok {
		return notImplemented("membroker does not model 'x-priority'")
	}
	return nil
}

// kindOf returns the queue type the (wire-form) arguments ask for.
func kindOf(args amqp.Table) queueKind {
	if s, _ := args["x-queue-type"].(string); s == "quorum" {
		return quorumKind
	}
	return classicKind
}

// validateNew checks the declaration of a queue that does not exist yet, in
// the order RabbitMQ 4.0.5 does (4.3 where v says so, semantics §E13), and
// derives its configuration. It does not change args: the queue keeps the
// table as declared.
func validateNew(name string, durable, autoDelete, exclusive bool, args amqp.Table, v Version) (queueConfig, *amqp.Error) {
	// rabbit_channel reads the DLX name before anything else.
	if x, ok := args["x-dead-letter-exchange"]; ok {
		if _, isString := x.(string); !isString {
			return queueConfig{}, preconditionFailed("invalid type '%s' for arg 'x-dead-letter-exchange' in queue '%s' in vhost '%s'",
				amqpTypeName(x), name, vhost)
		}
	}
	if v == RabbitMQ43 && args["x-queue-type"] == "" {
		// 4.3 validates an empty x-queue-type as the default type; the
		// queue keeps the empty string (semantics §E13).
		args = maps.Clone(args)
		args["x-queue-type"] = "classic"
	}
	if x, ok := args["x-queue-type"]; ok {
		if reason := checkQueueType(x, args); reason != "" {
			return queueConfig{}, invalidArg("x-queue-type", name, reason)
		}
	}
	kind := kindOf(args)
	if s, _ := args["x-queue-type"].(string); s == "stream" {
		return queueConfig{}, notImplemented("membroker does not model stream queues")
	}
	own := classicArgs
	if kind == quorumKind {
		own = quorumArgsOf(v)
	}
	checks, streamOwn := declareArgs, streamArgsOf(v)
	if v == RabbitMQ43 {
		checks = declareArgs43
	}
	for _, a := range checks {
		val, ok := args[a.key]
		if !ok || !slices.Contains(own, a.key) {
			continue
		}
		if reason := a.check(val, args); reason != "" {
			return queueConfig{}, invalidArg(a.key, name, reason)
		}
	}
	// The broker walks the client's table in order; membroker walks it
	// sorted, which is the order RabbitMQ uses whenever it injected
	// x-queue-type itself.
	foreign := func(key string) bool {
		known := slices.Contains(classicArgs, key) || slices.Contains(quorumArgsOf(v), key) || slices.Contains(streamOwn, key)
		return known && !slices.Contains(own, key)
	}
	for key := range args {
		if !foreign(key) {
			continue
		}
		// Which one is reported depends on the order: find it sorted.
		for _, key := range sortedKeys(args) {
			if foreign(key) {
				return queueConfig{}, preconditionFailed("invalid arg '%s' for queue '%s' in vhost '%s' of queue type %s",
					key, name, vhost, kind.module())
			}
		}
	}
	if kind == quorumKind {
		switch {
		case autoDelete:
			return queueConfig{}, preconditionFailed("invalid property 'auto-delete' for queue '%s' in vhost '%s'", name, vhost)
		case exclusive:
			return queueConfig{}, preconditionFailed("invalid property 'exclusive-owner' for queue '%s' in vhost '%s'", name, vhost)
		case !durable:
			return queueConfig{}, preconditionFailed("invalid property 'non-durable' for queue '%s' in vhost '%s'", name, vhost)
		}
	}
	if _, ok := args["x-queue-master-locator"]; ok && v == RabbitMQ43 && kind == classicKind {
		// 4.3 denies the deprecated queue_master_locator feature when the
		// classic queue is created: 541, a connection error, after every
		// argument check and before anything membroker refuses as
		// unmodelled (semantics §E13).
		return queueConfig{}, deprecatedDenied("queue_master_locator")
	}
	for _, key := range unmodelled {
		if _, ok := args[key]; ok {
			return queueConfig{}, notImplemented(fmt.Sprintf("membroker does not model '%s'", key))
		}
	}
	cfg := queueConfig{kind: kind, deliveryLimit: defaultDeliveryLimit}
	cfg.singleActive, _ = args["x-single-active-consumer"].(bool)
	if n, ok := asInteger(args["x-message-ttl"]); ok {
		cfg.messageTTL, cfg.hasMessageTTL = n, true
	}
	if n, ok := asInteger(args["x-expires"]); ok {
		cfg.expires, cfg.hasExpires = n, true
	}
	if s, ok := args["x-dead-letter-exchange"].(string); ok {
		cfg.dlx, cfg.hasDLX = s, true
	}
	if s, ok := args["x-dead-letter-routing-key"].(string); ok {
		cfg.dlrk, cfg.hasDLRK = s, true
	}
	if n, ok := asInteger(args["x-max-priority"]); ok && kind == classicKind {
		// rabbit_priority_queue treats 0 as 1: two levels.
		cfg.maxPriority, cfg.hasMaxPriority = max(int(n), 1), true
	}
	if kind == quorumKind {
		// x-delivery-limit has no declare-time validator: a value that is not
		// an integer never compares greater, so it acts as no limit.
		if val, ok := args["x-delivery-limit"]; ok {
			if n, ok := asInteger(val); ok {
				cfg.deliveryLimit = n
			} else {
				cfg.deliveryLimit = -1
			}
		}
		// rabbit_quorum_queue:dlh/5: at-least-once only with reject-publish,
		// else at-most-once.
		cfg.atLeastOnce = args["x-dead-letter-strategy"] == "at-least-once" && args["x-overflow"] == "reject-publish"
	}
	return cfg, nil
}

// checkEquivalent compares a redeclaration with the existing queue, in the
// order rabbit_amqqueue:assert_equivalence does after the exclusivity check.
func checkEquivalent(q *queue, durable, autoDelete bool, args amqp.Table, v Version) *amqp.Error {
	if durable != q.durable {
		return inequivalent("durable", q.name, fmt.Sprintf("'%t'", durable), fmt.Sprintf("'%t'", q.durable))
	}
	if autoDelete != q.autoDelete {
		return inequivalent("auto_delete", q.name, fmt.Sprintf("'%t'", autoDelete), fmt.Sprintf("'%t'", q.autoDelete))
	}
	keys := classicArgs
	if q.cfg.kind == quorumKind {
		keys = quorumArgsOf(v)
	}
	for _, key := range keys {
		nv, nok := args[key]
		ov, ook := q.args[key]
		if nok == ook && (!nok || sameArg(nv, ov)) {
			continue
		}
		if nok && ook {
			// Both present: rabbit_misc:val/1 prints the bare values.
			return inequivalent(key, q.name, "'"+renderValue(nv)+"'", "'"+renderValue(ov)+"'")
		}
		return inequivalent(key, q.name, renderArg(nv, nok), renderArg(ov, ook))
	}
	return nil
}

func inequivalent(key, name, received, current string) *amqp.Error {
	return preconditionFailed("inequivalent arg '%s' for queue '%s' in vhost '%s': received %s but current is %s",
		key, name, vhost, received, current)
}

// renderArg renders one side of a comparison where the other side is
// absent: "none", or "the value '10' of type 'signedint'".
func renderArg(v any, present bool) string {
	if !present {
		return "none"
	}
	return fmt.Sprintf("the value '%s' of type '%s'", renderValue(v), amqpTypeName(v))
}

func renderValue(v any) string {
	if n, ok := asInteger(v); ok {
		return strconv.FormatInt(n, 10)
	}
	// rabbit_misc:val prints a non-binary value with ~tp.
	switch x := v.(type) {
	case float32:
		return erlangFloat(float64(x)) // the broker widens a float to a double
	case float64:
		return erlangFloat(x)
	case time.Time:
		return strconv.FormatInt(x.Unix(), 10) // a timestamp is its seconds
	case amqp.Decimal:
		return fmt.Sprintf("{%d,%d}", x.Scale, uint32(x.Value)) // rabbit_binary_parser reads it unsigned
	case nil:
		return "undefined" // void
	case []byte:
		return string(x)
	}
	return fmt.Sprint(v)
}

// erlangFloat prints a float as Erlang's ~p does (float_to_list short): the
// shortest digits that read back to it, in decimal or scientific notation,
// whichever is shorter, decimal on a tie: 10.0, 100.0, 1.0e3, 0.0001, 1.0e-5
// (observed on 4.0.5: a double 10 re-declared over an integer 10 is
// "received '10.0' but current is '10'").
func erlangFloat(f float64) string {
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	mant, e, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
	exp, _ := strconv.Atoi(e)
	digits := strings.Replace(mant, ".", "", 1)
	rest := digits[1:]
	if rest == "" {
		rest = "0"
	}
	sci := digits[:1] + "." + rest + "e" + strconv.Itoa(exp)
	var dec string
	switch {
	case exp < 0:
		dec = "0." + strings.Repeat("0", -exp-1) + digits
	case len(digits) <= exp+1:
		dec = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	default:
		dec = digits[:exp+1] + "." + digits[exp+1:]
	}
	if len(sci) < len(dec) {
		return sign + sci
	}
	return sign + dec
}

// sameArg compares two argument values as rabbit_misc does: integers of any
// width are one class.
func sameArg(a, b any) bool {
	switch x := a.(type) { // the common cases, without reflection
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	}
	if x, ok := asInteger(a); ok {
		y, ok := asInteger(b)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

func sortedKeys(t amqp.Table) []string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// parseExpiration parses a per-message expiration property as
// rabbit_basic:parse_expiration does; reason is RabbitMQ's error term.
func parseExpiration(s string) (ms int64, reason string) {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i {
		return 0, "no_integer"
	}
	if j < len(s) {
		return 0, "{leftover_string," + erlangByteString(s[j:]) + "}"
	}
	n, err := strconv.ParseInt(s[:j], 10, 64)
	if err != nil {
		// Erlang integers are unbounded: print the value, without a plus
		// sign or leading zeros.
		v, _ := new(big.Int).SetString(strings.TrimPrefix(s[:j], "+"), 10)
		if v.Sign() < 0 {
			return 0, fmt.Sprintf("{value_negative,%s}", v)
		}
		return 0, fmt.Sprintf("{value_too_large,%s}", v)
	}
	if r := checkExpiry(n); r != "" {
		return 0, r
	}
	return n, ""
}

// erlangByteString prints a byte list as ~tp does with the default latin1
// printable range: a quoted string with Erlang's escapes when every byte is
// printable (Latin-1 graphic characters, each sent as its code point, and
// \b \t \n \v \f \r \e), a list of integers otherwise.
func erlangByteString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 32 && c <= 126:
			b.WriteByte(c)
		case c >= 160:
			b.WriteRune(rune(c))
		case c >= 8 && c <= 13:
			b.WriteByte('\\')
			b.WriteByte("btnvfr"[c-8])
		case c == 27:
			b.WriteString(`\e`)
		default:
			parts := make([]string, len(s))
			for k := 0; k < len(s); k++ {
				parts[k] = strconv.Itoa(int(s[k]))
			}
			return "[" + strings.Join(parts, ",") + "]"
		}
	}
	b.WriteByte('"')
	return b.String()
}

// invalidExpiration is the 406 for an expiration property that does not
// parse. rabbit_channel prints the reason with ~tp, which lays a term out
// for 80 columns: a reason that does not fit after the text before it
// breaks after the tag, its value indented to the column of the brace
// (observed on 4.0.5 for expiration '99999999999999999999'). A list of
// integers (non-printable bytes) that does not fit would be filled over
// several lines; membroker prints it on one.
func invalidExpiration(raw, reason string) *amqp.Error {
	prefix := fmt.Sprintf("invalid expiration '%s': ", raw)
	col := utf8.RuneCountInString(prefix) + 1 // 1-based column of the term
	if strings.HasPrefix(reason, "{") && utf8.RuneCountInString(reason) >= 80-col {
		tag, value, _ := strings.Cut(reason[1:len(reason)-1], ",")
		reason = "{" + tag + ",\n" + strings.Repeat(" ", col) + value + "}"
	}
	return preconditionFailed("%s%s", prefix, reason)
}
