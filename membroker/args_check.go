package membroker

// The checks of single queue arguments' values, each with the reason
// RabbitMQ gives for refusing one (semantics §E1.3).

import (
	"fmt"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
)

func invalidArg(key, queue, reason string) *amqp.Error {
	return preconditionFailed("invalid arg '%s' for queue '%s' in vhost '%s': %s", key, queue, vhost, reason)
}

// integerOrReason returns the integer value, or the "expected integer" reason.
func integerOrReason(v any) (int64, string) {
	n, ok := asInteger(v)
	if !ok {
		return 0, fmt.Sprintf(`"expected integer, got %s"`, amqpTypeName(v))
	}
	return n, ""
}

func checkExpiry(n int64) string {
	switch {
	case n < 0:
		return fmt.Sprintf("{value_negative,%d}", n)
	case n > maxExpiry:
		return fmt.Sprintf("{value_too_large,%d}", n)
	}
	return ""
}

func checkExpires(v any, _ amqp.Table) string {
	n, r := integerOrReason(v)
	if r != "" {
		return r
	}
	if n == 0 {
		return "{value_zero,0}"
	}
	return checkExpiry(n)
}

func checkMessageTTL(v any, _ amqp.Table) string {
	n, r := integerOrReason(v)
	if r != "" {
		return r
	}
	return checkExpiry(n)
}

func checkNonNegInt(v any, _ amqp.Table) string {
	n, r := integerOrReason(v)
	if r != "" {
		return r
	}
	if n < 0 {
		return fmt.Sprintf("{value_negative,%d}", n)
	}
	return ""
}

func checkGroupSize(v any, _ amqp.Table) string {
	n, r := integerOrReason(v)
	if r != "" {
		return r
	}
	switch {
	case n == 0:
		return "{value_zero,0}"
	case n < 0:
		return fmt.Sprintf("{value_negative,%d}", n)
	}
	return ""
}

func checkMaxPriority(v any, _ amqp.Table) string {
	n, r := integerOrReason(v)
	if r != "" {
		return r
	}
	switch {
	case n < 0:
		return fmt.Sprintf("{value_negative,%d}", n)
	case n > maxClassicPriority:
		return fmt.Sprintf("{max_value_exceeded,%d}", n)
	}
	return ""
}

func checkString(v any, _ amqp.Table) string {
	if _, ok := v.(string); !ok {
		return fmt.Sprintf("{unacceptable_type,%s}", amqpTypeName(v))
	}
	return ""
}

func checkDLRK(v any, args amqp.Table) string {
	if r := checkString(v, args); r != "" {
		return r
	}
	if _, ok := args["x-dead-letter-exchange"]; !ok {
		return "routing_key_but_no_dlx_defined"
	}
	return ""
}

func checkBool(v any, _ amqp.Table) string {
	if _, ok := v.(bool); !ok {
		return fmt.Sprintf("{unacceptable_type,%s}", amqpTypeName(v))
	}
	return ""
}

// checkQueueVersion40 accepts x-queue-version 1 and 2, as RabbitMQ 4.0 does.
func checkQueueVersion40(v any, _ amqp.Table) string { return checkQueueVersion(v, 1) }

// checkQueueVersion43 accepts only x-queue-version 2: RabbitMQ 4.3 refuses 1
// (semantics §E13).
func checkQueueVersion43(v any, _ amqp.Table) string { return checkQueueVersion(v, 2) }

// checkQueueVersion accepts the versions from lowest to 2.
func checkQueueVersion(v any, lowest int64) string {
	n, r := integerOrReason(v)
	if r != "" {
		return r
	}
	switch {
	case n < 0:
		return fmt.Sprintf("{value_negative,%d}", n)
	case n < lowest || n > 2:
		return fmt.Sprintf(`"unsupported queue version '%d'"`, n)
	}
	return ""
}

func checkQueueMode(v any, _ amqp.Table) string {
	s, ok := v.(string)
	switch {
	case !ok:
		return fmt.Sprintf("{unacceptable_type,%s}", amqpTypeName(v))
	case s != "default" && s != "lazy":
		return fmt.Sprintf(`"unsupported queue mode '%s'"`, s)
	}
	return ""
}

func checkQueueType(v any, _ amqp.Table) string {
	s, ok := v.(string)
	switch {
	case !ok:
		return fmt.Sprintf("{unacceptable_type,%s}", amqpTypeName(v))
	case s != "classic" && s != "quorum" && s != "stream":
		return fmt.Sprintf(`"unsupported queue type '%s'"`, s)
	}
	return ""
}

// checkOneOf accepts one of the allowed strings; any other string gets the
// bare reason atom.
func checkOneOf(reason string, allowed ...string) argCheck {
	return func(v any, _ amqp.Table) string {
		s, ok := v.(string)
		switch {
		case !ok:
			return fmt.Sprintf("{unacceptable_type,%s}", amqpTypeName(v))
		case !slices.Contains(allowed, s):
			return reason
		}
		return ""
	}
}
