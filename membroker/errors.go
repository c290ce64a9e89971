package membroker

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// vhost is the only virtual host membroker has; it appears in error texts.
const vhost = "/"

// serverError builds an *amqp.Error the way amqp091 does for a channel.close
// or connection.close sent by the server.
func serverError(code int, text string) *amqp.Error {
	if len(text) > 255 {
		text = text[:255] // rabbit_binary_generator limits the reply text to 255 characters
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
