package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/rabbitmq"
)

// TestMain runs the program's main instead of the tests when
// QUEUEY_QUICKSTART_MAIN is set: TestMainWithoutAMQPURL runs it so.
func TestMain(m *testing.M) {
	if os.Getenv("QUEUEY_QUICKSTART_MAIN") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The program runs to completion against RabbitMQ at AMQP_URL (CI runs it
// against 4.0.5 and 4.3.6), within a minute even on a broker new to its
// queue, whose first hold waits 5 s (rabbitmq.Topology.HoldWarmup).
func TestLiveQuickstart(t *testing.T) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		t.Skip("AMQP_URL is not set: the quick start needs RabbitMQ (scripts/rabbitmq start)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out lockedBuffer
	err := run(ctx, rabbitmq.ConnectOptions{URLs: []string{url}}, slog.New(slog.NewTextHandler(&out, nil)))
	t.Logf("the quick start's log:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	checkLog(t, out.String())
}

// The program's logic runs to completion on membroker, in a synctest
// bubble's virtual time, so that it is checked without a broker too.
func TestQuickstartOnMembroker(t *testing.T) {
	var out lockedBuffer
	synctest.Test(t, func(t *testing.T) {
		broker := membroker.New(membroker.Config{})
		dial := func(ctx context.Context, url string) (rabbitmq.Conn, error) {
			c, err := broker.Dial()
			if err != nil {
				return nil, err
			}
			return rabbitmq.AdaptConn[*membroker.Channel](c), nil
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		copts := rabbitmq.ConnectOptions{URLs: []string{"amqp://membroker"}, Dial: dial}
		if err := run(ctx, copts, slog.New(slog.NewTextHandler(&out, nil))); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	})
	checkLog(t, out.String())
}

// checkLog checks the quick start's log: four jobs done, /flaky after one
// retry and /limited after one deferral.
func checkLog(t *testing.T, log string) {
	t.Helper()
	for _, want := range []string{
		`msg="job done" endpoint=/ok attempt=1 deferrals=0`,
		`msg="job done" endpoint=/flaky attempt=2 deferrals=0`,
		`msg="job done" endpoint=/limited attempt=1 deferrals=1`,
		`msg="job done" endpoint=/later attempt=1 deferrals=0`,
		`msg="queuey: job failed, retrying"`,
		`msg="queuey: job deferred"`,
		`msg="all 4 jobs done"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the quick start's log has no %s:\n%s", want, log)
		}
	}
}

// Without AMQP_URL the program says so and exits with status 1, without
// a panic.
func TestMainWithoutAMQPURL(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(withoutAMQPURL(os.Environ()), "QUEUEY_QUICKSTART_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("main without AMQP_URL: %v, want exit status 1; stderr:\n%s", err, stderr.String())
	}
	if got := stderr.String(); !strings.Contains(got, "AMQP_URL is not set") || strings.Contains(got, "panic") {
		t.Errorf("main without AMQP_URL printed %q, want that AMQP_URL is not set", got)
	}
}

// withoutAMQPURL is env without AMQP_URL.
func withoutAMQPURL(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "AMQP_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

// lockedBuffer is a bytes.Buffer safe for concurrent use: the backend and
// the worker log from their goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
