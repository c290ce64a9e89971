// Package redact hides the passwords of AMQP and HTTP URLs in what the
// project shows: logs, errors and state reports. rabbitmq.Redact is its
// exported face; the command-line tools use it directly.
package redact

import (
	"net/url"
	"strconv"
	"strings"
)

// Unparsable is what URL returns for a URL it cannot trust to show where
// its password is.
const Unparsable = "<unparsable URL>"

// URL returns rawURL with its password, if any, replaced by "xxxxx". A URL
// that does not parse is replaced whole, since it may hold a password where
// the parser cannot find it; so is one with an "@" the parser did not take
// for the end of a user and password ("amqp://user:123/pw@host/" parses as
// host "user", port 123).
func URL(rawURL string) string {
	if _, ok := password(rawURL); !ok {
		return Unparsable
	}
	u, _ := url.Parse(rawURL)
	return u.Redacted()
}

// password returns raw's password ("" for none), and false when raw cannot
// be trusted to show where its password is: it does not parse, or has an
// "@" outside the userinfo.
func password(raw string) (string, bool) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", false
	case u.User == nil:
		return "", !strings.Contains(raw, "@")
	}
	pw, _ := u.User.Password()
	return pw, true
}

// Err removes raw's password from err's text, if it is there. When raw
// cannot be trusted to show its password (see URL), raw itself is replaced
// wherever it appears, as it is or quoted (url.Error quotes it). errors.Is
// and errors.As still see the original error.
func Err(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	if pw, ok := password(raw); !ok {
		q := strconv.Quote(raw)
		out = strings.ReplaceAll(out, q[1:len(q)-1], Unparsable)
		out = strings.ReplaceAll(out, raw, Unparsable)
	} else if pw != "" {
		out = strings.ReplaceAll(out, pw, "xxxxx")
	}
	if out == msg {
		return err
	}
	return redacted{msg: out, err: err}
}

// redacted is an error whose text hides a password.
type redacted struct {
	msg string
	err error
}

func (e redacted) Error() string { return e.msg }
func (e redacted) Unwrap() error { return e.err }
