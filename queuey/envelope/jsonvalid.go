package envelope

// validJSON reports whether b is one JSON value with optional surrounding
// whitespace: exactly what encoding/json.Valid reports (FuzzValidJSON holds
// it to that), including its nesting limit and its leniency about UTF-8
// inside strings, without the scanner's per-byte state machine. Envelopes
// check their payload on every encode and decode.
func validJSON(b []byte) bool {
	v := jsonValidator{cursor{b: b}}
	v.space()
	if !v.value(0) {
		return false
	}
	v.space()
	return v.i == len(b)
}

// maxJSONDepth is encoding/json's maxNestingDepth.
const maxJSONDepth = 10000

type jsonValidator struct{ cursor }

func (v *jsonValidator) space() {
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case ' ', '\t', '\n', '\r':
			v.i++
		default:
			return
		}
	}
}

func (v *jsonValidator) value(depth int) bool {
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '{':
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
	case c == '"':
		return v.string()
	case c == '-' || (c >= '0' && c <= '9'):
		return v.number()
	case c == 't':
		return v.lit("true")
	case c == 'f':
		return v.lit("false")
	case c == 'n':
		return v.lit("null")
	}
	return false
}

func (v *jsonValidator) object(depth int) bool {
	if depth > maxJSONDepth {
		return false
	}
	v.i++ // {
	v.space()
	if v.i < len(v.b) && v.b[v.i] == '}' {
		v.i++
		return true
	}
	for {
		if v.i >= len(v.b) || v.b[v.i] != '"' || !v.string() {
			return false
		}
		v.space()
		if v.i >= len(v.b) || v.b[v.i] != ':' {
			return false
		}
		v.i++
		v.space()
		if !v.value(depth) {
			return false
		}
		if more, ok := v.next('}'); !more {
			return ok
		}
	}
}

func (v *jsonValidator) array(depth int) bool {
	if depth > maxJSONDepth {
		return false
	}
	v.i++ // [
	v.space()
	if v.i < len(v.b) && v.b[v.i] == ']' {
		v.i++
		return true
	}
	for {
		if !v.value(depth) {
			return false
		}
		if more, ok := v.next(']'); !more {
			return ok
		}
	}
}

// next reads what follows a member or an element: a comma, with more to
// come, or close, which ends the object or array (ok); anything else is
// not JSON.
func (v *jsonValidator) next(close byte) (more, ok bool) {
	v.space()
	if v.i >= len(v.b) {
		return false, false
	}
	switch v.b[v.i] {
	case ',':
		v.i++
		v.space()
		return true, true
	case close:
		v.i++
		return false, true
	}
	return false, false
}

// string reads a string literal; any byte from 0x20 up is taken as it is.
func (v *jsonValidator) string() bool {
	v.i++ // "
	for v.i < len(v.b) {
		c := v.b[v.i]
		switch {
		case c == '"':
			v.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			v.i++
			if v.i >= len(v.b) {
				return false
			}
			switch v.b[v.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.i++
			case 'u':
				if len(v.b)-v.i < 5 {
					return false
				}
				for _, h := range v.b[v.i+1 : v.i+5] {
					if !isHex(h) {
						return false
					}
				}
				v.i += 5
			default:
				return false
			}
		default:
			v.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (v *jsonValidator) number() bool {
	if v.b[v.i] == '-' {
		v.i++
	}
	switch {
	case v.i >= len(v.b):
		return false
	case v.b[v.i] == '0':
		v.i++
	case v.b[v.i] >= '1' && v.b[v.i] <= '9':
		v.digits()
	default:
		return false
	}
	if v.i < len(v.b) && v.b[v.i] == '.' {
		v.i++
		if v.digits() == 0 {
			return false
		}
	}
	if v.i < len(v.b) && (v.b[v.i] == 'e' || v.b[v.i] == 'E') {
		v.i++
		if v.i < len(v.b) && (v.b[v.i] == '+' || v.b[v.i] == '-') {
			v.i++
		}
		if v.digits() == 0 {
			return false
		}
	}
	return true
}

func (v *jsonValidator) digits() int {
	start := v.i
	for v.i < len(v.b) && v.b[v.i] >= '0' && v.b[v.i] <= '9' {
		v.i++
	}
	return v.i - start
}
