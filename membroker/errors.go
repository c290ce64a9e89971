package membroker

import (
	"errors"
	"fmt"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// vhost is the only virtual host membroker has; it appears in error texts.
const vhost = "/"

// serverError builds an *amqp.Error the way amqp091 does for a channel.close
// or connection.close sent by the server.
//
// rabbit_binary_generator:amqp_exception_explanation formats the text with
// chars_limit 255: a longer text becomes its first 252 characters and
// "...". A text that is still longer than the 255 bytes a shortstr carries
// (multi-byte characters) cannot be encoded: the channel process crashes
// and the reader closes the connection with a bare 541 INTERNAL_ERROR,
// which Channel.fail turns into a connection exception. (Observed on
// 4.0.5: a passive declare of a missing queue named with 110 'é' gets 541
// INTERNAL_ERROR; with 109 it gets the 254-byte 404.)
func serverError(code int, text string) *amqp.Error {
	if utf8.RuneCountInString(text) > 255 {
		n := 0
		for i := range text {
			if n == 252 {
				text = text[:i] + "..."
				break
			}
			n++
		}
	}
	if len(text) > 255 {
		return &amqp.Error{Code: amqp.InternalError, Reason: "INTERNAL_ERROR", Server: true}
	}
	return &amqp.Error{Code: code, Reason: text, Server: true, Recover: isSoftCode(code)}
}

func isSoftCode(code int) bool {
	switch code {
	case 311, 312, 313, 403, 404, 405, 406:
		return true
	}
	return false
}

func preconditionFailed(format string, a ...any) *amqp.Error {
	return serverError(amqp.PreconditionFailed, "PRECONDITION_FAILED - "+fmt.Sprintf(format, a...))
}

func notFoundQueue(name string) *amqp.Error {
	return serverError(amqp.NotFound, fmt.Sprintf("NOT_FOUND - no queue '%s' in vhost '%s'", name, vhost))
}

func notFoundExchange(name string) *amqp.Error {
	return serverError(amqp.NotFound, fmt.Sprintf("NOT_FOUND - no exchange '%s' in vhost '%s'", name, vhost))
}

func resourceLocked(name string) *amqp.Error {
	return serverError(amqp.ResourceLocked, fmt.Sprintf(
		"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '%s' in vhost '%s'. "+
			"It could be originally declared on another connection or the exclusive property value "+
			"does not match that of the original declaration.", name, vhost))
}

// deprecatedDenied is the 541 INTERNAL_ERROR RabbitMQ 4.3 answers when a
// declaration uses a deprecated feature that is denied by default: the
// feature's generated "not permitted" warning, cut to 255 characters by
// serverError (semantics §E13, §E0).
func deprecatedDenied(feature string) *amqp.Error {
	return serverError(amqp.InternalError, fmt.Sprintf("INTERNAL_ERROR - Feature `%[1]s` is deprecated.\n"+
		"By default, this feature is not permitted anymore.\n"+
		"The feature will be removed from a future major RabbitMQ version, "+
		"regardless of the configuration; actual version to be determined.\n"+
		"To continue using this feature when it is not permitted by default, "+
		"set the following parameter in your configuration:\n"+
		"    \"deprecated_features.permit.%[1]s = true\"", feature))
}

func notImplemented(text string) *amqp.Error {
	return serverError(amqp.NotImplemented, "NOT_IMPLEMENTED - "+text)
}

// ErrNameTooLong is returned, before anything reaches the model, for a queue
// name, consumer tag or routing key longer than the 255 bytes an AMQP
// short string can carry. amqp091-go refuses such a name client-side too, but
// its connection is unusable afterwards; membroker keeps the connection.
var ErrNameTooLong = errors.New("membroker: name exceeds 255 bytes")

func checkShortstr(what, s string) error {
	if len(s) > 255 {
		return fmt.Errorf("%w: %s of %d bytes", ErrNameTooLong, what, len(s))
	}
	return nil
}
