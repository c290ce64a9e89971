package rabbitmq

// The connections a supervised Backend dials (Connect): what it needs of
// one, and the Dialer that makes them.

import (
	"context"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Conn is a connection a supervised Backend dials (see Connect): what it
// needs of an *amqp091.Connection or a *membroker.Connection, adapted by
// AdaptConn.
type Conn interface {
	Channel() (Channel, error)
	NotifyClose(receiver chan *amqp.Error) chan *amqp.Error
	IsClosed() bool
	Close() error
}

// connLike is a connection whose Channel method returns a concrete channel
// type.
type connLike[C Channel] interface {
	Channel() (C, error)
	NotifyClose(receiver chan *amqp.Error) chan *amqp.Error
	IsClosed() bool
	Close() error
}

// AdaptConn makes a Conn of an *amqp091.Connection or a
// *membroker.Connection:
//
//	rabbitmq.AdaptConn[*amqp.Channel](conn)
//	rabbitmq.AdaptConn[*membroker.Channel](broker.Dial())
func AdaptConn[C Channel, K connLike[C]](k K) Conn { return adapted[C, K]{k} }

type adapted[C Channel, K connLike[C]] struct{ k K }

func (a adapted[C, K]) Channel() (Channel, error) {
	ch, err := a.k.Channel()
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return ch, nil
}
func (a adapted[C, K]) NotifyClose(r chan *amqp.Error) chan *amqp.Error { return a.k.NotifyClose(r) }
func (a adapted[C, K]) IsClosed() bool                                  { return a.k.IsClosed() }
func (a adapted[C, K]) Close() error                                    { return a.k.Close() }

// ServerVersion is the broker's release as the connection reports it
// (membroker's, and amqp091's Properties["version"]), "" if it cannot
// tell.
func (a adapted[C, K]) ServerVersion() string { return serverVersionOf(a.k) }

// serverVersionOf is k's ServerVersion, if it has one, or an amqp091
// connection's Properties["version"] (a Dialer that adapts one itself).
func serverVersionOf(k any) string {
	switch c := k.(type) {
	case interface{ ServerVersion() string }:
		return c.ServerVersion()
	case *amqp.Connection:
		v, _ := c.Properties["version"].(string)
		return v
	}
	return ""
}

// NotifyBlocked is the connection's, if it has one (amqp091's does); nil
// otherwise.
func (a adapted[C, K]) NotifyBlocked(r chan amqp.Blocking) chan amqp.Blocking {
	if b, ok := any(a.k).(blocker); ok {
		return b.NotifyBlocked(r)
	}
	return nil
}

// blocker is a connection that reports connection.blocked.
type blocker interface {
	NotifyBlocked(receiver chan amqp.Blocking) chan amqp.Blocking
}

// Dialer opens a connection to url. It should give up when ctx ends.
type Dialer func(ctx context.Context, url string) (Conn, error)

// DefaultDialTimeout bounds DialAMQP's TCP connection and AMQP handshake.
const DefaultDialTimeout = 30 * time.Second

// DialAMQP is the Dialer of amqp091 with cfg (its zero value is amqp091's
// defaults: a heartbeat every 10 s, locale en_US). Unless cfg.Dial is set,
// the TCP connection honours ctx and the connection and handshake are
// bounded by DefaultDialTimeout. cfg.Recovery is ignored: the backend
// reconnects on its own, and amqp091's recovery would reopen its channels
// behind its back (a publisher that saw a write fail would then take a
// later write on the fresh connection for one that never left).
func DialAMQP(cfg amqp.Config) Dialer {
	return func(ctx context.Context, url string) (Conn, error) {
		c := cfg
		c.Recovery = nil
		if c.Dial == nil {
			c.Dial = func(network, addr string) (net.Conn, error) {
				d := net.Dialer{Timeout: DefaultDialTimeout}
				conn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				// amqp091 clears the deadline once the handshake is done.
				if err := conn.SetDeadline(time.Now().Add(DefaultDialTimeout)); err != nil {
					_ = conn.Close()
					return nil, err
				}
				return conn, nil
			}
		}
		conn, err := amqp.DialConfig(url, c)
		if err != nil {
			return nil, err
		}
		return AdaptConn[*amqp.Channel](conn), nil
	}
}
