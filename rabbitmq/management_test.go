package rabbitmq

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestManagementAPIListsQueues(t *testing.T) {
	var gotPath, gotQuery, gotUser, gotPassword string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery = r.URL.EscapedPath(), r.URL.RawQuery
		gotUser, gotPassword, _ = r.BasicAuth()
		_, _ = w.Write([]byte(`[{"name":"jobs","type":"quorum","messages_ready":3,"messages_unacknowledged":2,"consumers":1,"extra":true,
			"message_stats":{"publish":40,"ack":31,"publish_details":{"rate":0.5}}},
			{"name":"jobs.deferred.1000","type":"classic","messages_ready":5}]`))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		api, amqp, path, user, password string
	}{
		{srv.URL, "amqp://guest:guest@127.0.0.1:5672/", "/api/queues/%2F", "guest", "guest"},
		{srv.URL + "/", "amqp://ops:s3cret@127.0.0.1/prod", "/api/queues/prod", "ops", "s3cret"},
		{strings.Replace(srv.URL, "http://", "http://admin:pw@", 1) + "/rmq/", "amqp://ops:s3cret@127.0.0.1/a%2Fb", "/rmq/api/queues/a%2Fb", "admin", "pw"},
	} {
		m, err := NewManagementAPI(tc.api, tc.amqp, nil)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := m.ListQueues(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if gotPath != tc.path || gotUser != tc.user || gotPassword != tc.password || !strings.HasPrefix(gotQuery, "columns=") {
			t.Errorf("%s + %s: GET %s?%s as %s:%s; want %s as %s:%s", tc.api, tc.amqp, gotPath, gotQuery, gotUser, gotPassword, tc.path, tc.user, tc.password)
		}
		want := []QueueListing{{Name: "jobs", Type: "quorum", Ready: 3, Unacked: 2, Consumers: 1, Published: 40, Acked: 31}, {Name: "jobs.deferred.1000", Type: "classic", Ready: 5}}
		if len(qs) != 2 || qs[0] != want[0] || qs[1] != want[1] {
			t.Errorf("queues %+v, want %+v", qs, want)
		}
	}
}

func TestManagementAPIErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("columns") != "" && r.Header.Get("Authorization") != "" {
		case strings.HasSuffix(r.URL.Path, "/garbage"):
			_, _ = w.Write([]byte(`<html>`))
		default:
			http.Error(w, `{"error":"not_authorised","reason":"Login failed"}`, http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct{ api, amqp, want string }{
		{srv.URL, "amqp://guest:topsecret@127.0.0.1/", "401 Unauthorized"},
		{srv.URL, "amqp://guest:topsecret@127.0.0.1/garbage", "invalid character"},
		{"http://127.0.0.1:1/", "amqp://guest:topsecret@127.0.0.1/", "connection refused"},
	} {
		m, err := NewManagementAPI(tc.api, tc.amqp, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.ListQueues(t.Context())
		if !errors.Is(err, ErrManagement) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "topsecret") {
			t.Errorf("%s: %v; want ErrManagement saying %q, without the password", tc.amqp, err, tc.want)
		}
	}
	for _, bad := range [][2]string{
		{"127.0.0.1:15672", "amqp://guest:guest@127.0.0.1/"},
		{"ftp://u:topsecret@h/", "amqp://guest:guest@127.0.0.1/"},
		{"http://127.0.0.1:15672/", "http://u:topsecret@h/"},
		{"http://127.0.0.1:15672/", "amqp://u:topsecret^@h/"}, // the parser's error quotes the URL
	} {
		if _, err := NewManagementAPI(bad[0], bad[1], nil); err == nil || strings.Contains(err.Error(), "topsecret") {
			t.Errorf("NewManagementAPI(%q, %q): %v; want an error without the password", bad[0], bad[1], err)
		}
	}
}
