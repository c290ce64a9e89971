package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestErr(t *testing.T) {
	base := errors.New("base")
	for _, tc := range []struct{ raw, msg, want string }{
		{"amqp://u:pw1@h/", "dial amqp://u:pw1@h/: refused", "dial amqp://u:xxxxx@h/: refused"},
		{"amqp://u@h/", "dial amqp://u@h/: refused", "dial amqp://u@h/: refused"},
		{"amqp://u:se^cret@h/", `parse "amqp://u:se^cret@h/": invalid userinfo`, `parse "<unparsable URL>": invalid userinfo`},
		{"amqp://u:a\"b@h/", `parse "amqp://u:a\"b@h/": invalid userinfo`, `parse "<unparsable URL>": invalid userinfo`},
		{"amqp://u:123/secret@h/", "dial amqp://u:123/secret@h/: refused", "dial <unparsable URL>: refused"},
	} {
		err := Err(fmt.Errorf("%s: %w", tc.msg, base), tc.raw)
		if got := strings.TrimSuffix(err.Error(), ": base"); got != tc.want {
			t.Errorf("Err(%q, %q) = %q, want %q", tc.msg, tc.raw, got, tc.want)
		}
		if !errors.Is(err, base) {
			t.Errorf("Err(%q, %q) lost the error it wraps", tc.msg, tc.raw)
		}
	}
	if Err(nil, "amqp://u:pw@h/") != nil {
		t.Error("Err(nil) is not nil")
	}
	for _, raw := range []string{"amqp://u:se^cret@h/"} { // not a constant: staticcheck would flag the parse
		var ue *url.Error
		_, perr := url.Parse(raw)
		if !errors.As(Err(perr, raw), &ue) {
			t.Error("errors.As does not reach the url.Error")
		}
	}
}
