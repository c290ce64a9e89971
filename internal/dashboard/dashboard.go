// Package dashboard is the web dashboard that `queuey ui` serves:
// operators' pages over an Inspector, with no JavaScript build step and
// every template and asset embedded in the binary.
//
//   - GET / is the overview: every work queue with its counts, rates and a
//     chart of the last minutes, refreshed live by a small script that
//     fetches GET /live (the same template's live part) every
//     Options.Refresh.
//   - GET /queues/{queue} is a queue's page: its hold queues and its dead
//     letters grouped by reason, each group with redrive and purge.
//   - GET /queues/{queue}/dead?reason=R&page=N lists a group's dead
//     letters, Options.PageSize a page; /queues/{queue}/dead/{id} is one.
//   - GET /queues/{queue}/redrive and /purge ask for confirmation; the
//     POSTs they submit act, through the Inspector, and show its report.
//
// Safe by default: a Server without a password admits only requests
// whose Host is a loopback name or address (no DNS rebinding), and the
// queuey command refuses to listen beyond loopback without one. Every
// change is a POST that carries the server's CSRF token and passes
// net/http's cross-origin protection; ReadOnly hides and refuses them. An
// error the Inspector returns is shown on the page, through
// Options.Redact, and a page that failed, or whose broker is unreachable,
// recovers when the broker does: the overview on its next refresh, every
// other page on reload (an error page reloads itself). See
// docs/dashboard.md.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/queuey/queuey/rabbitmq"
)

// Source is what the dashboard reads and changes: *rabbitmq.Inspector
// with a QueueLister (the management API), whose methods document what
// each does to the queues.
type Source interface {
	WorkQueues(ctx context.Context) ([]rabbitmq.QueueStats, error)
	Stats(ctx context.Context, queues ...string) ([]rabbitmq.QueueStats, error)
	Ladder(ctx context.Context) (rabbitmq.LadderStats, error)
	DeadLetters(ctx context.Context, queue string, filter rabbitmq.DeadLetterFilter, limit int) ([]rabbitmq.DeadLetter, error)
	Redrive(ctx context.Context, queue string, opts rabbitmq.RedriveOptions) (rabbitmq.RedriveReport, error)
	Purge(ctx context.Context, queue string) (int, error)
	Delete(ctx context.Context, queue string, filter rabbitmq.DeadLetterFilter, limit int) (int, error)
}

// Options configure a Server. The zero value serves a loopback-only,
// read-write dashboard.
type Options struct {
	// ReadOnly hides redrive, purge and delete, and refuses their
	// requests with 403.
	ReadOnly bool
	// User and Password, when Password is set, are required of every
	// request, by HTTP basic authentication (User defaults to "queuey"),
	// and requests for any Host are served. Without a Password only
	// requests for a loopback Host (localhost, 127.0.0.0/8, ::1) are.
	User, Password string
	// Refresh is how often the overview fetches fresh figures, and the
	// least time between two samples of its charts. Defaults to 2 s.
	Refresh time.Duration
	// History is how far back the overview's charts go. Defaults to 10
	// minutes.
	History time.Duration
	// PageSize is how many dead letters a page lists. Defaults to 50.
	PageSize int
	// GroupLimit is the most dead letters a queue's page reads to group
	// by reason; the page says when there were more. Defaults to 10,000.
	GroupLimit int
	// Redact rewrites an error before a page or the log shows it; the
	// queuey command hides its URLs' passwords with it. Defaults to none.
	Redact func(error) error
	// Ping, if set, is called with each reading of the overview, whose
	// figures come from the management API alone: an error says that the
	// broker's AMQP side is unreachable, and the overview shows it above
	// the figures. The queuey command opens and closes a channel.
	Ping func(ctx context.Context) error
	// Logger receives each redrive and purge, at INFO, and failures to
	// render, at ERROR. Defaults to discarding.
	Logger *slog.Logger
	// Now is the clock of the charts and rates. Defaults to time.Now.
	Now func() time.Time
}

// Server is the dashboard: an http.Handler. Safe for concurrent use.
type Server struct {
	src     Source
	opts    Options
	csrf    string
	pages   map[string]*template.Template
	mux     http.Handler
	mu      sync.Mutex
	history history
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns a dashboard over src.
func New(src Source, opts Options) (*Server, error) {
	if src == nil {
		return nil, errors.New("dashboard: no Source")
	}
	switch {
	case opts.Refresh < 0, opts.History < 0, opts.PageSize < 0, opts.GroupLimit < 0:
		return nil, errors.New("dashboard: Refresh, History, PageSize and GroupLimit must not be negative")
	}
	if opts.Refresh == 0 {
		opts.Refresh = 2 * time.Second
	}
	if opts.History == 0 {
		opts.History = 10 * time.Minute
	}
	if opts.PageSize == 0 {
		opts.PageSize = 50
	}
	if opts.GroupLimit == 0 {
		opts.GroupLimit = 10000
	}
	if opts.User == "" {
		opts.User = "queuey"
	}
	if opts.Redact == nil {
		opts.Redact = func(err error) error { return err }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var token [32]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("dashboard: CSRF token: %w", err)
	}
	s := &Server{src: src, opts: opts, csrf: hex.EncodeToString(token[:]),
		history: history{every: opts.Refresh, keep: opts.History, queues: map[string][]sample{}}}
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /live", s.live)
	mux.HandleFunc("GET /queues/{queue}", s.queue)
	mux.HandleFunc("GET /queues/{queue}/dead", s.deadList)
	mux.HandleFunc("GET /queues/{queue}/dead/{id}", s.deadLetter)
	mux.HandleFunc("GET /queues/{queue}/redrive", s.confirmRedrive)
	mux.HandleFunc("POST /queues/{queue}/redrive", s.redrive)
	mux.HandleFunc("GET /queues/{queue}/purge", s.confirmPurge)
	mux.HandleFunc("POST /queues/{queue}/purge", s.purge)
	mux.HandleFunc("GET /queues/{queue}/delete", s.confirmDelete)
	mux.HandleFunc("POST /queues/{queue}/delete", s.deleteOne)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux = http.NewCrossOriginProtection().Handler(mux)
	return s, nil
}

// ServeHTTP serves the dashboard: it checks the Host or the password,
// sets headers that keep the pages out of frames and scripts of other
// origins, and routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Password != "" {
		user, pass, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(user), []byte(s.opts.User))&
			subtle.ConstantTimeCompare([]byte(pass), []byte(s.opts.Password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="queuey", charset="UTF-8"`)
			http.Error(w, "queuey: this dashboard needs its user and password", http.StatusUnauthorized)
			return
		}
	} else if !LoopbackHost(r.Host) {
		http.Error(w, "queuey: this dashboard has no password, so it answers only requests for a loopback host (localhost, 127.0.0.1 or [::1]), not "+r.Host, http.StatusMisdirectedRequest)
		return
	}
	if !s.crossSiteAllowed(r) {
		http.Error(w, "queuey: this page reads dead letters, so it is not served to requests from another site: open it from the dashboard's overview", http.StatusForbidden)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

// crossSiteAllowed reports whether r may be served given where it comes
// from. A GET from another site (a link, an image, a script of a page
// the operator visits) reaches only the overview and the assets: every
// other page reads dead letters, which holds them unacknowledged a while
// and, on a quorum queue, counts a delivery of each, so no other site may
// make the dashboard do it. Browsers say where a request comes from in
// Sec-Fetch-Site; POSTs are net/http's CrossOriginProtection's.
func (s *Server) crossSiteAllowed(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/static/")
	}
	return true
}

// LoopbackHost reports whether hostport (a Host header or a listen
// address, with or without a port) names this machine's loopback
// interface only: "localhost", or an address in 127.0.0.0/8 or ::1. An
// empty host (":8080", every interface) is not loopback.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkPOST refuses a change when the dashboard is read-only or the form
// lacks the CSRF token; it reports whether to go on.
func (s *Server) checkPOST(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.ReadOnly {
		http.Error(w, "queuey: this dashboard is read-only (--read-only)", http.StatusForbidden)
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
		http.Error(w, "queuey: the form's CSRF token is missing or stale: reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}
