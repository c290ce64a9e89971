package membroker

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// This file makes values look as they would after a round trip through
// amqp091-go's frame encoder and decoder, so that a test on membroker sees
// the same Go types a test on a live broker would: an int header comes back
// as int32, a time.Time loses its sub-second part, a []byte is copied.

// wireValue returns v as amqp091 would decode it after encoding it.
func wireValue(v any) any {
	switch x := v.(type) {
	case int:
		return int32(x) // amqp091 writes a Go int as a 32-bit 'I'
	case time.Time:
		return time.Unix(x.Unix(), 0)
	case []byte:
		return append([]byte(nil), x...)
	case amqp.Table:
		out := make(amqp.Table, len(x))
		for k, e := range x {
			out[k] = wireValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = wireValue(e)
		}
		return out
	default:
		return v
	}
}

// field is one header of a stored message, in wire form. Messages keep
// their headers as a slice: building a delivery's table from it needs no
// walk over a map.
type field struct {
	key string
	val any
}

// wireFields appends t's entries to dst in wire form, or returns the error
// t.Validate gives (the client library refuses such a table before
// sending anything). Tables of plain values are checked on the way, in one
// walk; Validate runs only for nested or unsupported values, so an error
// reads exactly as amqp091's.
func wireFields(dst []field, t amqp.Table) ([]field, error) {
	nested := false
	for k, v := range t {
		switch v.(type) {
		case nil, bool, byte, int8, int, int16, int32, int64, uint16, uint32, float32, float64, string, []byte, amqp.Decimal, time.Time:
		default:
			nested = true
		}
		dst = append(dst, field{k, wireValue(v)})
	}
	if nested {
		if err := t.Validate(); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// headerTable builds a delivery's header table from m's headers, with room
// for extra more entries: nil if it was published without headers, empty
// if its only header was BCC.
func (m *message) headerTable(b *Broker, extra int) amqp.Table {
	if len(m.headers) == 0 && !m.hadHeaders {
		return nil
	}
	h := b.table(len(m.headers) + extra)
	for _, f := range m.headers {
		h[f.key] = copyValue(f.val)
	}
	return h
}

// copyTable returns a deep copy of a table already in wire form, so that a
// consumer mutating a delivery's headers cannot reach the stored message,
// with room for extra more entries.
func copyTable(t amqp.Table, extra int) amqp.Table {
	if t == nil {
		return nil
	}
	out := make(amqp.Table, len(t)+extra)
	for k, v := range t {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v any) any {
	switch x := v.(type) {
	case []byte:
		return append([]byte(nil), x...)
	case amqp.Table:
		return copyTable(x, 0)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = copyValue(e)
		}
		return out
	default:
		return v
	}
}

// wireTimestamp mirrors the AMQP timestamp property: whole seconds, and the
// zero time stays absent.
func wireTimestamp(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(t.Unix(), 0)
}

// amqpTypeName is the name RabbitMQ prints for the AMQP type a Go value is
// encoded as by amqp091 (rabbit_binary_parser's type atoms).
func amqpTypeName(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32, int:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case amqp.Decimal:
		return "decimal"
	case string:
		return "longstr"
	case time.Time:
		return "timestamp"
	case amqp.Table:
		return "table"
	case []any:
		return "array"
	case []byte:
		return "binary"
	case nil:
		return "void"
	}
	return "unknown"
}

// asInteger reports the value of an AMQP integer of any width.
func asInteger(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case uint8:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int:
		return int64(int32(x)), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}
