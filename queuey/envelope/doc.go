// Package envelope is the wire format of queuey's jobs: how a job travels
// on a queue, and how strictly it is read. Package queuey uses it through
// aliases (queuey.Envelope, queuey.DecodeEnvelope); a service in another
// language that enqueues queuey jobs writes this format.
//
// # Wire format, version 1
//
// An envelope is one UTF-8 JSON object (RFC 8259) with these keys:
//
//	key          required  JSON type              rule
//	v            yes       integer                must be 1 (Version)
//	id           yes       string                 the job id; 1 to 255 bytes
//	kind         yes       string                 the job kind, which selects the handler; 1 to 255 bytes
//	queue        yes       string                 the logical queue name; 1 to 255 bytes
//	payload      yes       any JSON value         the job's arguments; null is allowed
//	attempt      yes       integer                1-based number of the next run (1 for a new job); >= 1
//	deferrals    no        integer                times a handler deferred the job; >= 0; absent means 0
//	priority     no        integer                AMQP priority the job was published with; 0..255; absent means 0
//	enqueued_at  yes       string                 when the job was first enqueued; RFC 3339; not 0001-01-01T00:00:00Z
//	ext          no        object                 extension fields of any JSON value; absent means none
//
// Keys of "ext" that start with "queuey_" are queuey's own: package
// contract describes each (ExtMaxAttempts, ExtPriority, ExtDueAt,
// ExtErrors: a job's latest failed attempts, with their errors). A
// queuey worker refuses, as malformed, an envelope whose ExtMaxAttempts or
// ExtPriority is not as described there.
//
// For example:
//
//	{"v":1,"id":"job-1","kind":"send_email","queue":"emails","payload":{"to":"a@example.com"},
//	 "attempt":1,"deferrals":0,"priority":0,"enqueued_at":"2025-01-02T03:04:05.123456789Z"}
//
// The three strings are at most 255 bytes (MaxString) because AMQP carries
// them as short strings: the id as the message-id property, the kind as the
// type property, and the queue as a queue name. A longer one would fail on
// the wire, where amqp091-go closes the whole connection over it.
//
// Readers are strict, so that what one producer writes means the same thing
// to every consumer:
//
//   - the body is exactly one JSON object, with nothing but JSON whitespace
//     after it, and is valid UTF-8;
//   - a key appears at most once, at the top level and inside "ext";
//   - a key not in the table is refused: new fields go in "ext", which needs
//     no version bump, and anything that changes the meaning of an existing
//     field gets a new version;
//   - every value has the type in the table: an integer is written with
//     digits only (no quotes, fraction or exponent, so 1.0 and 1e0 are
//     refused), and null is accepted only as the payload;
//   - "v" is checked before any other rule, so a body of another version is
//     reported as such (naming the version) rather than as, say, an unknown
//     key;
//   - "enqueued_at" may carry any offset and any number of fractional digits;
//     it must still lie within the years 0000 to 9999 once converted to UTC.
//
// Writers (Encode) produce the keys in the order of the table, with no
// insignificant whitespace, "deferrals" and "priority" always present, "ext"
// only when it has entries (its keys in byte order), characters such as <, >
// and & unescaped, and "enqueued_at" in UTC with exactly nine fractional
// digits, e.g. "2025-01-02T03:04:05.120000000Z". Encoding is canonical: two
// equal envelopes encode to the same bytes, and decoding then encoding an
// envelope written by Encode reproduces it byte for byte.
//
// # Decoded values
//
// Decode returns EnqueuedAt in UTC, Payload and the Ext values
// compacted (insignificant whitespace removed, nothing else changed), and a
// nil Ext when the body has none or an empty object.
//
// # Why the codec is written by hand
//
// Encode and Decode are written for speed: a canonical body (what Encode
// writes) is read in one pass, and encoding needs no reflection. Against
// the same rules built on encoding/json (json.Marshal with HTML escaping
// off, json.Valid, and a scan for duplicate keys), measured side by side,
// each build pinned to its own core, on 2026-12-01: the simulator's
// BenchmarkSizingHour took 5.4 s against 10.6 s (six rounds), and the
// default queuey-sim run 22.8 to 33.0 s against 41.8 to 57.5 s, so the
// hand codec saves about 45 % of the simulator's time. On a live broker,
// where a job costs 67 to 208 µs, it does not matter.
//
// The fuzz targets and rapid properties in this package hold the hand
// codec to encoding/json: Encode's output byte for byte to json.Marshal's,
// the validator to json.Valid, and the one-pass reader to the general one.
package envelope
