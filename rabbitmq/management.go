package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/queuey/queuey/internal/redact"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ManagementAPI lists queues through RabbitMQ's management HTTP API (the
// rabbitmq_management plugin), for an Inspector's Stats. Make one with
// NewManagementAPI.
//
// The API's counts are the broker's statistics, which it collects every
// collect_statistics_interval (5 seconds by default): they lag the queues
// by up to that much, where the AMQP counts Stats reads itself do not.
type ManagementAPI struct {
	base     *url.URL // the API's root, without credentials
	user     string
	password string
	vhost    string
	client   *http.Client
}

// DefaultManagementTimeout bounds each request of a ManagementAPI.
const DefaultManagementTimeout = 10 * time.Second

// NewManagementAPI returns the management API at apiURL (for example
// http://127.0.0.1:15672/) for the virtual host and user of amqpURL: the
// user and password are apiURL's if it has them, else amqpURL's (guest,
// guest when neither does), and the virtual host is amqpURL's ("/" when it
// has none). client may be nil: requests then use a client of their own
// that gives up after DefaultManagementTimeout.
func NewManagementAPI(apiURL, amqpURL string, client *http.Client) (*ManagementAPI, error) {
	base, err := url.Parse(apiURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("rabbitmq: management API URL %q: want http(s)://host:port/", Redact(apiURL))
	}
	uri, err := amqp.ParseURI(amqpURL)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: AMQP URL %q: %w", Redact(amqpURL), redact.Err(err, amqpURL))
	}
	m := &ManagementAPI{user: uri.Username, password: uri.Password, vhost: uri.Vhost, client: client}
	if base.User != nil {
		m.user = base.User.Username()
		m.password, _ = base.User.Password()
	}
	base.User = nil
	base.Path = strings.TrimSuffix(base.Path, "/") + "/"
	m.base = base
	if m.client == nil {
		m.client = &http.Client{Timeout: DefaultManagementTimeout}
	}
	return m, nil
}

// ErrManagement is the error of a management API request that failed: the
// API was unreachable, refused the user, or answered nonsense.
var ErrManagement = errors.New("rabbitmq: management API request failed")

// ListQueues lists the virtual host's queues.
func (m *ManagementAPI) ListQueues(ctx context.Context) ([]QueueListing, error) {
	u := *m.base
	u.Path += "api/queues/" + m.vhost
	u.RawPath = m.base.EscapedPath() + "api/queues/" + url.PathEscape(m.vhost)
	u.RawQuery = "columns=name,type,messages_ready,messages_unacknowledged,messages_dlx,consumers,message_stats.publish,message_stats.ack"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(m.user, m.password)
	resp, err := m.client.Do(req)
	if err != nil {
		// The client's error names the URL, which has no password.
		return nil, fmt.Errorf("%w: %w", ErrManagement, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", ErrManagement, u.String(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s as %q: %s: %s", ErrManagement, u.String(), m.user, resp.Status, firstLine(body))
	}
	var queues []struct {
		Name      string `json:"name"`
		Type      string `json:"type"`
		Ready     int    `json:"messages_ready"`
		Unacked   int    `json:"messages_unacknowledged"`
		DLX       int    `json:"messages_dlx"` // quorum queues only
		Consumers int    `json:"consumers"`
		// Absent until the queue has seen a message.
		Stats struct {
			Publish int64 `json:"publish"`
			Ack     int64 `json:"ack"`
		} `json:"message_stats"`
	}
	if err := json.Unmarshal(body, &queues); err != nil {
		return nil, fmt.Errorf("%w: GET %s: %w", ErrManagement, u.String(), err)
	}
	out := make([]QueueListing, len(queues))
	for i, q := range queues {
		out[i] = QueueListing{Name: q.Name, Type: q.Type, Ready: q.Ready, Unacked: q.Unacked, DeadLettering: q.DLX, Consumers: q.Consumers,
			Published: q.Stats.Publish, Acked: q.Stats.Ack}
	}
	return out, nil
}

// firstLine is the start of an error body, for a message.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
