package envelope

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// appendEnvelope appends the wire form of the valid envelope e: the bytes
// encoding/json writes for envelopeWire with HTML escaping off, without the
// trailing newline (TestEncodeMatchesEncodingJSON holds it to that), built
// by hand because encoding a job is on every publish's path.
func appendEnvelope(b []byte, e Envelope) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, e.ID)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, e.Kind)
	b = append(b, `,"queue":`...)
	b = appendJSONString(b, e.Queue)
	b = append(b, `,"payload":`...)
	b = appendCompactJSON(b, e.Payload)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(e.Attempt), 10)
	b = append(b, `,"deferrals":`...)
	b = strconv.AppendInt(b, int64(e.Deferrals), 10)
	b = append(b, `,"priority":`...)
	b = strconv.AppendUint(b, uint64(e.Priority), 10)
	b = append(b, `,"enqueued_at":"`...)
	b = appendEnvelopeTime(b, e.EnqueuedAt.UTC())
	b = append(b, '"')
	if len(e.Ext) > 0 {
		b = append(b, `,"ext":{`...)
		for i, k := range slices.Sorted(maps.Keys(e.Ext)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendCompactJSON(b, e.Ext[k])
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendCompactJSON appends the valid JSON value raw without insignificant
// space, as encoding/json writes a json.RawMessage.
func appendCompactJSON(b []byte, raw []byte) []byte {
	if !spaceOutsideStrings(raw) {
		return append(b, raw...)
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return append(b, raw...) // unreachable: validate checked raw
	}
	return buf.Bytes()
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s, valid UTF-8, as a JSON string the way
// encoding/json does with HTML escaping off: '"' and '\\' escaped, control
// characters as \n, \r, \t, \b, \f or \u00XX, and U+2028 and U+2029
// escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decodeCanonicalEnvelope decodes body when it is exactly in the form Encode
// writes, without escaped strings, and with extension fields only as
// Encode writes them (keys in order, values compact): the common case,
// read without building a member map. ok is false for anything else, which
// Decode then reads the general way. Whatever it accepts,
// the general decoder accepts with the same result
// (TestCanonicalDecodeAgreesWithGeneral and FuzzDecodeEnvelope hold it to
// that).
func decodeCanonicalEnvelope(body []byte) (e Envelope, ok bool) {
	p := canonicalReader{cursor{b: body}}
	if !p.lit(`{"v":1,"id":`) {
		return Envelope{}, false
	}
	e.Version = Version
	// Any rule broken, the general reader says which.
	if e.ID, ok = p.str(); !ok || e.ID == "" || len(e.ID) > MaxString || !p.lit(`,"kind":`) {
		return Envelope{}, false
	}
	kind, ok := p.strBytes()
	if !ok || len(kind) == 0 || len(kind) > MaxString || !p.lit(`,"queue":`) {
		return Envelope{}, false
	}
	queue, ok := p.strBytes()
	if !ok || len(queue) == 0 || len(queue) > MaxString || !p.lit(`,"payload":`) {
		return Envelope{}, false
	}
	start := p.i
	if p.i >= len(body) {
		return Envelope{}, false
	}
	switch body[p.i] {
	case '{', '[', '"', 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
	default:
		return Envelope{}, false
	}
	end := scanCanonicalValue(body, p.i)
	if end < 0 {
		return Envelope{}, false
	}
	payload := body[start:end]
	if !utf8.Valid(payload) || !validJSON(payload) || hasJSONSpace(payload) {
		return Envelope{}, false
	}
	p.i = end
	var attempt, deferrals, priority int
	if !p.lit(`,"attempt":`) {
		return Envelope{}, false
	}
	if attempt, ok = p.uint(); !ok || attempt < 1 || !p.lit(`,"deferrals":`) {
		return Envelope{}, false
	}
	if deferrals, ok = p.uint(); !ok || !p.lit(`,"priority":`) {
		return Envelope{}, false
	}
	if priority, ok = p.uint(); !ok || priority > 255 || !p.lit(`,"enqueued_at":`) {
		return Envelope{}, false
	}
	ts, ok := p.strBytes()
	if !ok {
		return Envelope{}, false
	}
	if p.lit(`,"ext":{`) {
		if e.Ext, ok = p.ext(); !ok {
			return Envelope{}, false
		}
	}
	if !p.lit(`}`) || p.i != len(body) {
		return Envelope{}, false
	}
	t, ok := parseEnvelopeTime(ts)
	if !ok {
		if err := t.UnmarshalText(ts); err != nil {
			return Envelope{}, false
		}
	}
	t = t.UTC()
	if checkEnvelopeTime(t) != "" {
		return Envelope{}, false
	}
	e.Kind, e.Queue = kindNames.intern(kind), queueNames.intern(queue)
	e.Payload = bytes.Clone(payload)
	e.Attempt, e.Deferrals, e.Priority, e.EnqueuedAt = attempt, deferrals, uint8(priority), t
	return e, true
}

// hasJSONSpace reports whether b holds a byte JSON counts as whitespace.
func hasJSONSpace(b []byte) bool {
	for _, c := range b {
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			return true
		}
	}
	return false
}

// interned is a small lossy cache of strings that repeat from one envelope
// to the next (kinds, queue names), so decoding one does not allocate them
// again. It is safe for concurrent use: a slot holds an immutable string
// and a collision just replaces it.
type interned struct {
	slots [64]atomic.Pointer[string]
}

var kindNames, queueNames interned

// intern returns string(b), reusing the string a slot holds if it matches.
func (t *interned) intern(b []byte) string {
	if len(b) > 128 {
		return string(b)
	}
	h := uint32(2166136261) // FNV-1a
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	slot := &t.slots[h%uint32(len(t.slots))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}

// cursor is a position in a byte slice, shared by the canonical decoder and
// the JSON validator.
type cursor struct {
	b []byte
	i int
}

// lit consumes s if the input continues with it.
func (c *cursor) lit(s string) bool {
	if len(c.b)-c.i < len(s) || string(c.b[c.i:c.i+len(s)]) != s {
		return false
	}
	c.i += len(s)
	return true
}

type canonicalReader struct{ cursor }

// str reads a string with no escapes and no control characters, in valid
// UTF-8.
func (p *canonicalReader) str() (string, bool) {
	b, ok := p.strBytes()
	if !ok {
		return "", false
	}
	return string(b), true
}

// strBytes is str returning the string's bytes inside the body, not a copy.
func (p *canonicalReader) strBytes() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	j := p.i + 1
	for j < len(p.b) && p.b[j] != '"' {
		if c := p.b[j]; c == '\\' || c < 0x20 {
			return nil, false
		}
		j++
	}
	if j >= len(p.b) || !utf8.Valid(p.b[p.i+1:j]) {
		return nil, false
	}
	s := p.b[p.i+1 : j]
	p.i = j + 1
	return s, true
}

// ext reads the members of an "ext" object up to its closing brace, as
// Encode writes them: at least one, keys non-empty and strictly
// increasing, each value valid JSON without insignificant space. Each
// value is a copy.
func (p *canonicalReader) ext() (map[string]json.RawMessage, bool) {
	var ext map[string]json.RawMessage
	prev := ""
	for {
		key, ok := p.str()
		if !ok || key == "" || (prev != "" && key <= prev) || !p.lit(`:`) || p.i >= len(p.b) {
			return nil, false
		}
		end := scanCanonicalValue(p.b, p.i)
		if end < 0 {
			return nil, false
		}
		v := p.b[p.i:end]
		if !utf8.Valid(v) || !validJSON(v) || spaceOutsideStrings(v) {
			return nil, false
		}
		if ext == nil {
			ext = make(map[string]json.RawMessage, 2)
		}
		ext[key] = bytes.Clone(v)
		p.i, prev = end, key
		if p.lit(`}`) {
			return ext, true
		}
		if !p.lit(`,`) {
			return nil, false
		}
	}
}

// spaceOutsideStrings reports whether the JSON value b holds whitespace
// outside its strings: whether compacting it would change it.
func spaceOutsideStrings(b []byte) bool {
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\r' || c == '\n'):
			return true
		}
	}
	return false
}

// uint reads a non-negative decimal integer of at most 9 digits with no
// leading zero.
func (p *canonicalReader) uint() (int, bool) {
	j, n := p.i, 0
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' && j-p.i < 10 {
		n = n*10 + int(p.b[j]-'0')
		j++
	}
	digits := j - p.i
	if digits == 0 || digits > 9 || (digits > 1 && p.b[p.i] == '0') {
		return 0, false
	}
	p.i = j
	return n, true
}

// scanCanonicalValue returns the end of the JSON value at b[i] as far as
// brackets and strings go, or -1; validJSON then checks it properly.
func scanCanonicalValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return -1
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// appendEnvelopeTime appends t, in UTC with a year within 0000..9999, in
// envelopeTimeLayout: what t.AppendFormat writes, without its layout
// interpreter.
func appendEnvelopeTime(b []byte, t time.Time) []byte {
	if !inEnvelopeYears(t) {
		return t.AppendFormat(b, envelopeTimeLayout) // unreachable: validate checked the year
	}
	sec := t.Unix()
	days := floorDiv(sec, 86400)
	rem := int(sec - days*86400)
	y, mo, d := civilFromDays(days)
	// Written into a fixed buffer, two digits at a time.
	var buf [30]byte
	put2(buf[0:], y/100)
	put2(buf[2:], y%100)
	buf[4] = '-'
	put2(buf[5:], mo)
	buf[7] = '-'
	put2(buf[8:], d)
	buf[10] = 'T'
	put2(buf[11:], rem/3600)
	buf[13] = ':'
	put2(buf[14:], rem/60%60)
	buf[16] = ':'
	put2(buf[17:], rem%60)
	buf[19] = '.'
	ns := t.Nanosecond()
	buf[20] = byte('0' + ns/1e8)
	ns %= 1e8
	put2(buf[21:], ns/1e6)
	put2(buf[23:], ns/1e4%100)
	put2(buf[25:], ns/100%100)
	put2(buf[27:], ns%100)
	buf[29] = 'Z'
	return append(b, buf[:]...)
}

// put2 writes v, 0 to 99, as two digits.
func put2(b []byte, v int) {
	const digits = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
	b[0], b[1] = digits[2*v], digits[2*v+1]
}

// parseEnvelopeTime reads a time exactly as appendEnvelopeTime writes it
// ("2006-01-02T15:04:05.000000000Z"); ok is false for anything else,
// including dates that do not exist, which the caller then reads with
// time.Time.UnmarshalText.
func parseEnvelopeTime[S string | []byte](s S) (time.Time, bool) {
	if len(s) != 30 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != '.' || s[29] != 'Z' {
		return time.Time{}, false
	}
	num := func(from, to int) (int, bool) {
		n := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	y, ok1 := num(0, 4)
	mo, ok2 := num(5, 7)
	d, ok3 := num(8, 10)
	h, ok4 := num(11, 13)
	mi, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	ns, ok7 := num(20, 29)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59 {
		return time.Time{}, false
	}
	if d > daysIn(y, mo) {
		return time.Time{}, false // a day the month does not have
	}
	unix := daysFromCivil(y, mo, d)*86400 + int64(h*3600+mi*60+sec)
	return time.Unix(unix, int64(ns)).UTC(), true
}
