package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Version is the wire format version this package writes and reads.
const Version = 1

// ErrMalformed is matched, with errors.Is, by every error
// Decode returns and by every validation error Encode returns. The
// error itself is an *Error that says which field is at fault.
var ErrMalformed = errors.New("queuey: malformed envelope")

// Error is the error Decode and Envelope.Encode return for an
// envelope that breaks the wire format. It matches ErrMalformed with
// errors.Is.
type Error struct {
	// Field is the wire key at fault: one of "v", "id", "kind", "queue",
	// "payload", "attempt", "deferrals", "priority", "enqueued_at", "ext", or
	// the offending key itself for an unknown or duplicated top-level key. It
	// is empty for a problem with the body as a whole, such as a body that is
	// not JSON or not an object.
	Field string

	// Reason says what is wrong, in lower case and without a trailing period.
	Reason string
}

// Error returns `queuey: invalid envelope: field "attempt": must be at least
// 1, got 0`, or `queuey: invalid envelope: <reason>` when Field is empty.
func (e *Error) Error() string {
	if e.Field == "" {
		return "queuey: invalid envelope: " + e.Reason
	}
	return fmt.Sprintf("queuey: invalid envelope: field %q: %s", e.Field, e.Reason)
}

// Is reports whether target is ErrMalformed.
func (e *Error) Is(target error) bool {
	return target == ErrMalformed
}

// Wire keys of an envelope, in the order Encode writes them.
const (
	envelopeKeyVersion    = "v"
	envelopeKeyID         = "id"
	envelopeKeyKind       = "kind"
	envelopeKeyQueue      = "queue"
	envelopeKeyPayload    = "payload"
	envelopeKeyAttempt    = "attempt"
	envelopeKeyDeferrals  = "deferrals"
	envelopeKeyPriority   = "priority"
	envelopeKeyEnqueuedAt = "enqueued_at"
	envelopeKeyExt        = "ext"
)

// envelopeTimeLayout is RFC 3339 with exactly nine fractional digits. Encode
// always writes UTC, so the zone is always "Z".
const envelopeTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// Envelope is a job as it travels on a queue: the job's arguments plus what a
// worker needs to run it, settle it and log it. Its wire form is the
// package's documentation.
type Envelope struct {
	// Version is the wire format version. Decode sets it to
	// Version. Encode accepts Version or 0 (meaning the
	// current version) and always writes Version.
	Version int

	// ID is the job id. Must not be empty.
	ID string

	// Kind is the job kind, which selects the handler. Must not be empty.
	Kind string

	// Queue is the logical queue name. Must not be empty.
	Queue string

	// Payload is the job's arguments as JSON: any valid JSON value, including
	// null. A nil or empty Payload is not valid JSON and is refused; use
	// json.RawMessage("null") for a job without arguments.
	Payload json.RawMessage

	// Attempt is the 1-based number of the next run: 1 for a new job. Must be
	// at least 1.
	Attempt int

	// Deferrals is how many times a handler deferred the job. Must not be
	// negative.
	Deferrals int

	// Priority is an informational copy of the AMQP priority the envelope is
	// published with. The broker orders by the message property, not by this.
	Priority uint8

	// EnqueuedAt is when the job was first enqueued. Must not be the zero
	// time, and must lie within the years 0000 to 9999 in UTC. It is written
	// in UTC with nanosecond precision; any monotonic clock reading is lost.
	EnqueuedAt time.Time

	// Ext holds extension fields: room to grow without a version bump. Each
	// value must be valid JSON. Omitted from the wire when empty.
	Ext map[string]json.RawMessage
}

// Encode validates e and returns its wire form, as described on Envelope. An
// invalid envelope gets an *Error naming the field at fault and no
// bytes.
func (e Envelope) Encode() ([]byte, error) {
	b, err := e.AppendEncoded(make([]byte, 0, 160+len(e.ID)+len(e.Kind)+len(e.Queue)+len(e.Payload)))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// AppendEncoded is Encode appending the wire form to b, for callers that
// reuse one buffer. On an error b is returned unchanged.
func (e Envelope) AppendEncoded(b []byte) ([]byte, error) {
	if err := e.validate(); err != nil {
		return b, err
	}
	return appendEnvelope(b, e), nil
}

// MaxString is the longest id, kind or queue name an envelope carries, in
// bytes: an AMQP short string's.
const MaxString = 255

// tooLong is the error for a string field over MaxString bytes.
func tooLong(key, value string) *Error {
	return &Error{Field: key, Reason: fmt.Sprintf("is %d bytes, over the %d an AMQP short string carries", len(value), MaxString)}
}

// validate checks e against the rules of the wire format, in wire key order.
func (e Envelope) validate() error {
	if e.Version != 0 && e.Version != Version {
		return &Error{Field: envelopeKeyVersion, Reason: fmt.Sprintf(
			"unsupported version %d (this package writes version %d)", e.Version, Version)}
	}
	for _, f := range []struct{ key, value string }{
		{envelopeKeyID, e.ID},
		{envelopeKeyKind, e.Kind},
		{envelopeKeyQueue, e.Queue},
	} {
		if f.value == "" {
			return &Error{Field: f.key, Reason: "must not be empty"}
		}
		if len(f.value) > MaxString {
			return tooLong(f.key, f.value)
		}
		if !utf8.ValidString(f.value) {
			return &Error{Field: f.key, Reason: "must be valid UTF-8"}
		}
	}
	if reason := checkEnvelopeJSON(e.Payload); reason != "" {
		if len(e.Payload) == 0 {
			reason += " (use null for a job without arguments)"
		}
		return &Error{Field: envelopeKeyPayload, Reason: reason}
	}
	if e.Attempt < 1 {
		return &Error{Field: envelopeKeyAttempt, Reason: fmt.Sprintf("must be at least 1, got %d", e.Attempt)}
	}
	if e.Deferrals < 0 {
		return &Error{Field: envelopeKeyDeferrals, Reason: fmt.Sprintf("must not be negative, got %d", e.Deferrals)}
	}
	if reason := checkEnvelopeTime(e.EnqueuedAt); reason != "" {
		return &Error{Field: envelopeKeyEnqueuedAt, Reason: reason}
	}
	if len(e.Ext) == 0 {
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(e.Ext)) {
		if !utf8.ValidString(key) {
			return &Error{Field: envelopeKeyExt, Reason: fmt.Sprintf("key %q is not valid UTF-8", key)}
		}
		if reason := checkEnvelopeJSON(e.Ext[key]); reason != "" {
			return &Error{Field: envelopeKeyExt, Reason: fmt.Sprintf("key %q: value %s", key, reason)}
		}
	}
	return nil
}

// checkEnvelopeJSON returns why raw cannot be written as a JSON value, or ""
// if it can.
func checkEnvelopeJSON(raw []byte) string {
	switch {
	case len(raw) == 0:
		return "must be valid JSON, got nothing"
	case !validJSON(raw):
		return "must be valid JSON"
	case !utf8.Valid(raw):
		return "must be valid UTF-8"
	}
	return ""
}

// checkEnvelopeTime returns why t cannot be an enqueued_at, or "" if it can.
func checkEnvelopeTime(t time.Time) string {
	if t.IsZero() {
		return "must be set, got the zero time"
	}
	// RFC 3339 has four-digit years only.
	if !inEnvelopeYears(t) {
		return fmt.Sprintf("year %d in UTC is outside 0000 to 9999", t.UTC().Year())
	}
	return ""
}

// Decode parses body strictly, by the rules on Envelope. Every error
// it returns is an *Error and matches ErrMalformed. A body of
// another version gets an error for field "v" that names the version. The
// envelope refers to none of body's bytes: body may be reused as soon as
// Decode returns.
func Decode(body []byte) (Envelope, error) {
	if e, ok := decodeCanonicalEnvelope(body); ok {
		return e, nil
	}
	return decodeEnvelopeGeneral(body)
}

// decodeEnvelopeGeneral is Decode for any body: it reads the
// members in any order and with any spacing and says what is wrong.
func decodeEnvelopeGeneral(body []byte) (Envelope, error) {
	fields, unknown, err := splitEnvelopeObject(body)
	if err != nil {
		return Envelope{}, err
	}

	// The version comes first: every other rule belongs to version 1.
	rawVersion, ok := fields[envelopeKeyVersion]
	if !ok {
		return Envelope{}, &Error{Field: envelopeKeyVersion, Reason: "missing"}
	}
	version, err := decodeEnvelopeInt(envelopeKeyVersion, rawVersion)
	if err != nil {
		return Envelope{}, err
	}
	if version != Version {
		return Envelope{}, &Error{Field: envelopeKeyVersion, Reason: fmt.Sprintf(
			"unsupported version %d (this package reads version %d)", version, Version)}
	}

	if unknown != "" {
		return Envelope{}, &Error{Field: unknown, Reason: `unknown key (extension fields go in "ext")`}
	}
	for _, key := range []string{
		envelopeKeyID, envelopeKeyKind, envelopeKeyQueue, envelopeKeyPayload,
		envelopeKeyAttempt, envelopeKeyEnqueuedAt,
	} {
		if _, ok := fields[key]; !ok {
			return Envelope{}, &Error{Field: key, Reason: "missing"}
		}
	}

	e := Envelope{Version: Version}
	for _, f := range []struct {
		key string
		dst *string
	}{
		{envelopeKeyID, &e.ID},
		{envelopeKeyKind, &e.Kind},
		{envelopeKeyQueue, &e.Queue},
	} {
		if *f.dst, err = decodeEnvelopeString(f.key, fields[f.key]); err != nil {
			return Envelope{}, err
		}
		if *f.dst == "" {
			return Envelope{}, &Error{Field: f.key, Reason: "must not be empty"}
		}
		if len(*f.dst) > MaxString {
			return Envelope{}, tooLong(f.key, *f.dst)
		}
	}

	e.Payload = compactEnvelopeJSON(fields[envelopeKeyPayload])

	attempt, err := decodeEnvelopeInt(envelopeKeyAttempt, fields[envelopeKeyAttempt])
	if err != nil {
		return Envelope{}, err
	}
	if attempt < 1 {
		return Envelope{}, &Error{Field: envelopeKeyAttempt, Reason: fmt.Sprintf("must be at least 1, got %d", attempt)}
	}
	e.Attempt = attempt

	if raw, ok := fields[envelopeKeyDeferrals]; ok {
		deferrals, err := decodeEnvelopeInt(envelopeKeyDeferrals, raw)
		if err != nil {
			return Envelope{}, err
		}
		if deferrals < 0 {
			return Envelope{}, &Error{Field: envelopeKeyDeferrals, Reason: fmt.Sprintf("must not be negative, got %d", deferrals)}
		}
		e.Deferrals = deferrals
	}

	if raw, ok := fields[envelopeKeyPriority]; ok {
		priority, err := decodeEnvelopeInt(envelopeKeyPriority, raw)
		if err != nil {
			return Envelope{}, err
		}
		if priority < 0 || priority > 255 {
			return Envelope{}, &Error{Field: envelopeKeyPriority, Reason: fmt.Sprintf("must be between 0 and 255, got %d", priority)}
		}
		e.Priority = uint8(priority)
	}

	enqueuedAt, err := decodeEnvelopeString(envelopeKeyEnqueuedAt, fields[envelopeKeyEnqueuedAt])
	if err != nil {
		return Envelope{}, err
	}
	if err := e.EnqueuedAt.UnmarshalText([]byte(enqueuedAt)); err != nil {
		return Envelope{}, &Error{Field: envelopeKeyEnqueuedAt, Reason: "must be an RFC 3339 time, got " + envelopeSnippet([]byte(strconv.Quote(enqueuedAt)))}
	}
	e.EnqueuedAt = e.EnqueuedAt.UTC()
	if reason := checkEnvelopeTime(e.EnqueuedAt); reason != "" {
		return Envelope{}, &Error{Field: envelopeKeyEnqueuedAt, Reason: reason}
	}

	if raw, ok := fields[envelopeKeyExt]; ok {
		if e.Ext, err = decodeEnvelopeExt(raw); err != nil {
			return Envelope{}, err
		}
	}
	return e, nil
}

// splitEnvelopeObject checks that body is one JSON object in UTF-8 and returns
// its members, each value as raw JSON, and the first key (in body order) that
// is not an envelope key, if any. A duplicated key is an error.
func splitEnvelopeObject(body []byte) (fields map[string]json.RawMessage, unknown string, err error) {
	if !utf8.Valid(body) {
		return nil, "", &Error{Reason: "body is not valid UTF-8"}
	}
	if !validJSON(body) {
		return nil, "", &Error{Reason: "body is not valid JSON (or has data after the value)"}
	}
	if kind := envelopeJSONKind(body); kind != "object" {
		return nil, "", &Error{Reason: "body must be a JSON object, got " + kind}
	}
	fields = make(map[string]json.RawMessage, 10)
	err = eachEnvelopeMember(body, func(key string, value json.RawMessage) error {
		if _, dup := fields[key]; dup {
			return &Error{Field: key, Reason: "duplicate key"}
		}
		fields[key] = value
		if unknown == "" && !isEnvelopeKey(key) {
			unknown = key
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return fields, unknown, nil
}

// isEnvelopeKey reports whether key is a top-level key of the wire format.
func isEnvelopeKey(key string) bool {
	switch key {
	case envelopeKeyVersion, envelopeKeyID, envelopeKeyKind, envelopeKeyQueue,
		envelopeKeyPayload, envelopeKeyAttempt, envelopeKeyDeferrals,
		envelopeKeyPriority, envelopeKeyEnqueuedAt, envelopeKeyExt:
		return true
	}
	return false
}

// eachEnvelopeMember calls fn with each member of the JSON object obj, which
// must already be known to be a valid JSON object, in order. Values are
// sub-slices of obj.
func eachEnvelopeMember(obj []byte, fn func(key string, value json.RawMessage) error) error {
	i := skipJSONSpace(obj, 0) + 1 // past '{'
	for {
		i = skipJSONSpace(obj, i)
		switch obj[i] {
		case '}':
			return nil
		case ',':
			i = skipJSONSpace(obj, i+1)
		}
		end := endOfJSONString(obj, i)
		rawKey := obj[i:end]
		var key string
		if bytes.IndexByte(rawKey, '\\') < 0 {
			key = internEnvelopeKey(rawKey[1 : len(rawKey)-1])
		} else if err := json.Unmarshal(rawKey, &key); err != nil {
			return &Error{Reason: "cannot read object: " + err.Error()}
		}
		i = skipJSONSpace(obj, end) + 1 // past ':'
		i = skipJSONSpace(obj, i)
		vend := endOfJSONValue(obj, i)
		if err := fn(key, obj[i:vend:vend]); err != nil {
			return err
		}
		i = vend
	}
}

// internEnvelopeKey returns the wire keys' constants without allocating.
func internEnvelopeKey(b []byte) string {
	switch string(b) {
	case envelopeKeyVersion:
		return envelopeKeyVersion
	case envelopeKeyID:
		return envelopeKeyID
	case envelopeKeyKind:
		return envelopeKeyKind
	case envelopeKeyQueue:
		return envelopeKeyQueue
	case envelopeKeyPayload:
		return envelopeKeyPayload
	case envelopeKeyAttempt:
		return envelopeKeyAttempt
	case envelopeKeyDeferrals:
		return envelopeKeyDeferrals
	case envelopeKeyPriority:
		return envelopeKeyPriority
	case envelopeKeyEnqueuedAt:
		return envelopeKeyEnqueuedAt
	case envelopeKeyExt:
		return envelopeKeyExt
	}
	return string(b)
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// endOfJSONString returns the index just past the valid JSON string at b[i].
func endOfJSONString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// endOfJSONValue returns the index just past the valid JSON value at b[i].
func endOfJSONValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return endOfJSONString(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = endOfJSONString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// envelopeJSONKind names the type of the valid JSON value raw.
func envelopeJSONKind(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// decodeEnvelopeString decodes the JSON string raw, the value of key.
func decodeEnvelopeString(key string, raw json.RawMessage) (string, error) {
	if kind := envelopeJSONKind(raw); kind != "string" {
		return "", &Error{Field: key, Reason: "must be a string, got " + kind}
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", &Error{Field: key, Reason: "must be a string: " + err.Error()}
	}
	return s, nil
}

// decodeEnvelopeInt decodes raw, the value of key, as an integer written with
// digits only, and returns it if it fits an int.
func decodeEnvelopeInt(key string, raw json.RawMessage) (int, error) {
	if kind := envelopeJSONKind(raw); kind != "number" {
		return 0, &Error{Field: key, Reason: "must be an integer, got " + kind}
	}
	if bytes.ContainsAny(raw, ".eE") {
		return 0, &Error{Field: key, Reason: "must be an integer without fraction or exponent, got " + envelopeSnippet(raw)}
	}
	n, err := strconv.ParseInt(string(raw), 10, strconv.IntSize)
	if err != nil {
		return 0, &Error{Field: key, Reason: "integer out of range, got " + envelopeSnippet(raw)}
	}
	return int(n), nil
}

// decodeEnvelopeExt decodes the value of "ext": an object whose values are
// kept as compacted raw JSON. An empty object gives a nil map.
func decodeEnvelopeExt(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if kind := envelopeJSONKind(raw); kind != "object" {
		return nil, &Error{Field: envelopeKeyExt, Reason: "must be an object, got " + kind}
	}
	var ext map[string]json.RawMessage
	err := eachEnvelopeMember(raw, func(key string, value json.RawMessage) error {
		if _, dup := ext[key]; dup {
			return &Error{Field: envelopeKeyExt, Reason: fmt.Sprintf("duplicate key %q", key)}
		}
		if ext == nil {
			ext = make(map[string]json.RawMessage)
		}
		ext[key] = compactEnvelopeJSON(value)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ext, nil
}

// compactEnvelopeJSON returns a compacted copy of the valid JSON value raw.
func compactEnvelopeJSON(raw json.RawMessage) json.RawMessage {
	if !spaceOutsideStrings(raw) {
		return bytes.Clone(raw)
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := json.Compact(&buf, raw); err != nil {
		// raw came out of a valid body; keep it as it is rather than lose it.
		return bytes.Clone(raw)
	}
	return buf.Bytes()
}

// envelopeSnippet returns raw for an error message, shortened if long.
func envelopeSnippet(raw []byte) string {
	const limit = 40
	if len(raw) <= limit {
		return string(raw)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return string(raw[:cut]) + "…"
}
