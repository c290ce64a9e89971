// Package memapi serves the one request of RabbitMQ's management HTTP API
// that rabbitmq.ManagementAPI makes, GET /api/queues/{vhost}, over a
// membroker Broker, so that tests of the queuey command and its dashboard
// run the product's own ManagementAPI client without a broker.
package memapi

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/queuey/queuey/membroker"
)

// Server is a management API over a membroker Broker, for the default
// virtual host, that accepts one user and password.
type Server struct {
	broker         *membroker.Broker
	user, password string
	down           atomic.Bool
}

// New returns a management API over b that admits user with password.
func New(b *membroker.Broker, user, password string) *Server {
	return &Server{broker: b, user: user, password: password}
}

// SetDown makes every request fail with 503, as a broker's API does while
// its node is stopping, until SetDown(false).
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// ServeHTTP answers GET /api/queues/%2F with the broker's queues, as
// RabbitMQ 4 does, message_stats publish and ack included once the queue
// has seen a message, 401
// to a wrong user or password, and 404 to anything else.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.down.Load() {
		http.Error(w, `{"error":"node down"}`, http.StatusServiceUnavailable)
		return
	}
	if user, pass, _ := r.BasicAuth(); user != s.user || pass != s.password {
		http.Error(w, `{"error":"not_authorised"}`, http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet || r.URL.EscapedPath() != "/api/queues/%2F" {
		http.NotFound(w, r)
		return
	}
	out := []map[string]any{}
	for _, q := range s.broker.Queues() {
		l := map[string]any{"name": q.Name, "type": q.Type, "messages_ready": q.Ready,
			"messages_unacknowledged": q.Unacked, "consumers": len(q.Consumers)}
		if q.Type == "quorum" {
			l["messages_dlx"] = q.DeadLettering
		}
		if q.Published > 0 || q.Acked > 0 {
			l["message_stats"] = map[string]int64{"publish": q.Published, "ack": q.Acked}
		}
		out = append(out, l)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
