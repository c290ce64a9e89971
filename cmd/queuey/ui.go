package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/queuey/queuey/internal/dashboard"
	"github.com/queuey/queuey/rabbitmq"
)

// defaultListen is where `queuey ui` listens without --listen: loopback
// only.
const defaultListen = "127.0.0.1:8080"

// ui serves the dashboard until ctx ends. It starts whether or not the
// broker answers: the pages say when it does not, and recover when it
// does, since every Inspector call reconnects if it must.
func (a *app) ui(ctx context.Context, o options) error {
	if o.url == "" {
		return usagef("no broker: set AMQP_URL or pass --url")
	}
	if o.json {
		return usagef("ui does not take --json")
	}
	if o.managementURL == "" {
		return usagef("ui needs the management API, since AMQP cannot list queues: set RABBITMQ_MANAGEMENT_URL or pass --management-url (for example http://localhost:15672/)")
	}
	top := rabbitmq.Topology{DeadSuffix: o.deadSuffix, DeferredSuffix: o.deferred}
	if err := top.Validate(); err != nil {
		return usageError{err.Error()}
	}
	user, password := a.getenv("QUEUEY_UI_USER"), a.getenv("QUEUEY_UI_PASSWORD")
	if password == "" && !dashboard.LoopbackHost(o.listen) {
		return usagef("--listen %s reaches beyond this machine, so the dashboard needs a password: set QUEUEY_UI_PASSWORD (and QUEUEY_UI_USER, default queuey), or listen on loopback (--listen 127.0.0.1:8080)", o.listen)
	}
	if password == "" && user != "" {
		return usagef("QUEUEY_UI_USER is set but QUEUEY_UI_PASSWORD is not: set both, or neither")
	}
	m, err := rabbitmq.NewManagementAPI(o.managementURL, o.url, a.httpClient)
	if err != nil {
		return usageError{redactAPIErr(err, o).Error()}
	}
	log := slog.New(slog.NewTextHandler(a.stderr, nil))
	conn := &redialer{dial: a.dial, url: o.url}
	defer conn.close()
	in, err := rabbitmq.NewInspector(conn.channel, rabbitmq.InspectorOptions{Topology: top, Queues: m, Logger: log})
	if err != nil {
		return err
	}
	srv, err := dashboard.New(in, dashboard.Options{
		ReadOnly: o.readOnly, User: user, Password: password, Logger: log,
		Redact: func(err error) error { return redactAPIErr(err, o) },
		Ping:   conn.ping,
	})
	if err != nil {
		return err
	}
	listen := a.listen
	if listen == nil {
		listen = net.Listen
	}
	ln, err := listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", o.listen, err)
	}
	// No WriteTimeout: a redrive's answer waits for the redrive.
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	mode := ""
	if o.readOnly {
		mode = ", read-only"
	}
	fmt.Fprintf(a.stdout, "queuey: dashboard at http://%s/ for %s%s (Ctrl-C stops it)\n", ln.Addr(), rabbitmq.Redact(o.url), mode)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Requests in flight get 5 s to finish; a redrive still running then
	// is cut off, which loses nothing (rabbitmq.Inspector.Redrive).
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(stop); err != nil {
		fmt.Fprintf(a.stderr, "queuey: stopping with requests still running: %v\n", err)
		_ = hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// redialer opens the dashboard's channels on one connection to the
// broker, dialled when first needed and again whenever opening a channel
// fails, so that the dashboard outlives a broker restart.
type redialer struct {
	dial func(ctx context.Context, url string) (opener, func() error, error)
	url  string

	mu   sync.Mutex
	open opener
	shut func() error
}

// channel opens a channel, on a new connection if the one it had fails.
func (r *redialer) channel() (rabbitmq.InspectChannel, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for fresh := false; ; fresh = true {
		if r.open == nil {
			open, shut, err := r.dial(context.Background(), r.url)
			if err != nil {
				return nil, err
			}
			r.open, r.shut, fresh = open, shut, true
		}
		ch, err := r.open()
		if err == nil {
			return ch, nil
		}
		_ = r.shut()
		r.open, r.shut = nil, nil
		if fresh {
			return nil, err
		}
	}
}

// ping opens a channel and closes it: whether the broker's AMQP side
// answers, for the overview.
func (r *redialer) ping(context.Context) error {
	ch, err := r.channel()
	if err != nil {
		return err
	}
	return ch.Close()
}

func (r *redialer) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shut != nil {
		_ = r.shut()
		r.open, r.shut = nil, nil
	}
}
