package queueyotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queuey/queueyotel"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// payJob's handler does what Do says: "ok", "fail-once" (fails its first
// attempt), "defer-once" (defers its first run by 10 s), "fatal".
type payJob struct {
	Do string `json:"do"`
}

func (payJob) Kind() string  { return "pay" }
func (payJob) Queue() string { return "payments" }

// ghostJob has no handler on the worker.
type ghostJob struct{}

func (ghostJob) Kind() string  { return "ghost" }
func (ghostJob) Queue() string { return "payments" }

// Every instrument and the trace from Enqueue to each handler run, end to
// end on membroker, with the SDK's manual reader and span recorder.
func TestObserverEndToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		spans := tracetest.NewSpanRecorder()
		obs, err := queueyotel.New(queueyotel.Config{
			MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		})
		if err != nil {
			t.Fatal(err)
		}
		broker := membroker.New(membroker.Config{Clock: clock.New(), Version: membroker.RabbitMQ40})
		conn, err := broker.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		backend, err := rabbitmq.New(rabbitmq.Channels(conn.Channel), rabbitmq.Options{Topology: rabbitmq.Topology{HoldWarmup: -1}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = backend.Close() }()
		queues := []queuey.QueueConfig{{Name: "payments", Prefetch: 4,
			Retry: queuey.RetryPolicy{MaxAttempts: 3, Base: 2 * time.Second, Cap: 2 * time.Second, Jitter: queuey.NoJitter}}}
		producer, err := queuey.NewProducer(t.Context(), backend, queues, queuey.ProducerConfig{Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		worker, err := queuey.NewWorker(t.Context(), backend, queues, queuey.WorkerConfig{Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		handlerSpans := map[string]trace.SpanContext{} // job ID and attempt: the span in the handler's ctx
		if err := queuey.Register(worker, queuey.HandlerFunc[payJob](func(ctx context.Context, j *queuey.Job[payJob]) error {
			mu.Lock()
			handlerSpans[fmt.Sprintf("%s/%d/%d", j.ID, j.Attempt, j.Deferrals)] = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond) // virtual: a handler's work
			switch {
			case j.Args.Do == "fail-once" && j.Attempt == 1:
				return errors.New("vendor timeout")
			case j.Args.Do == "defer-once" && j.Deferrals == 0:
				return queuey.Defer(10*time.Second, "rate limited")
			case j.Args.Do == "fatal":
				return queuey.Fatal(errors.New("card declined"))
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		ids := map[string]string{}
		for _, do := range []string{"ok", "fail-once", "defer-once", "fatal"} {
			id, err := producer.Enqueue(t.Context(), payJob{Do: do})
			if err != nil {
				t.Fatal(err)
			}
			ids[do] = id
		}
		if _, err := producer.Enqueue(t.Context(), ghostJob{}); err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Publish("", "payments", false, false, amqp.Publishing{Body: []byte("not json")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // virtual: the jobs wait a second before a worker runs
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- worker.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, sm := range rm.ScopeMetrics {
			if sm.Scope.Name != queueyotel.ScopeName {
				t.Errorf("scope %q", sm.Scope.Name)
			}
			for _, m := range sm.Metrics {
				got[m.Name] = summarize(m.Data)
			}
		}
		q, pay, ghost := "messaging.destination.name=payments", "queuey.job.kind=pay", "queuey.job.kind=ghost"
		want := map[string]string{
			"queuey.jobs.enqueued":      fmt.Sprintf("{%s %s}:1 {%s %s}:4", q, ghost, q, pay),
			"queuey.jobs.started":       fmt.Sprintf("{%s %s}:1 {%s %s}:6", q, ghost, q, pay),
			"queuey.jobs.succeeded":     fmt.Sprintf("{%s %s}:3", q, pay),
			"queuey.jobs.retried":       fmt.Sprintf("{%s %s}:1", q, pay),
			"queuey.jobs.deferred":      fmt.Sprintf("{%s %s}:1", q, pay),
			"queuey.jobs.dead_lettered": fmt.Sprintf("{%s queuey.dead_letter.reason=fatal %s}:1 {%s queuey.dead_letter.reason=unknown job kind %s}:1", q, pay, q, ghost),
			"queuey.jobs.malformed":     fmt.Sprintf("{%s}:1", q),
			"queuey.handlers.running":   fmt.Sprintf("{%s %s}:0 {%s %s}:0", q, ghost, q, pay),
			// Six runs of pay took 50 ms each; the ghost's took none.
			"queuey.handler.duration": fmt.Sprintf("{%s %s}:n=1,sum=0.000 {%s %s}:n=6,sum=0.300", q, ghost, q, pay),
			// Five first runs, a second after their enqueue; the ghost,
			// fifth in line for four handlers, waited for one 50 ms more.
			"queuey.job.wait": fmt.Sprintf("{%s %s}:n=1,sum=1.050 {%s %s}:n=4,sum=4.000", q, ghost, q, pay),
			// The retry's 2 s and the deferral's 10 s, rounded to 1 s
			// holds, are exact on membroker.
			"queuey.hold.added_wait": fmt.Sprintf("{%s %s}:n=2,sum=0.000", q, pay),
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s:\n got %s\nwant %s", name, got[name], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("instruments %v, want %d", got, len(want))
		}

		// Traces: each run of a job is a child of its enqueue, and the
		// handler's ctx carries the run's span.
		ended := spans.Ended()
		sends := map[string]sdktrace.ReadOnlySpan{}
		var runs []sdktrace.ReadOnlySpan
		for _, s := range ended {
			id := attr(s, "messaging.message.id")
			switch s.SpanKind() {
			case trace.SpanKindProducer:
				sends[id] = s
			case trace.SpanKindConsumer:
				runs = append(runs, s)
			}
		}
		if len(sends) != 5 || len(runs) != 7 {
			t.Fatalf("%d send and %d process spans, want 5 and 7", len(sends), len(runs))
		}
		var outcomes []string
		for _, r := range runs {
			id := attr(r, "messaging.message.id")
			send := sends[id]
			if send == nil || r.Parent().SpanID() != send.SpanContext().SpanID() || r.SpanContext().TraceID() != send.SpanContext().TraceID() {
				t.Errorf("process span of %s is not a child of its send span", id)
			}
			if r.Name() != "process payments" || attr(r, "messaging.system") != "rabbitmq" || attr(r, "messaging.operation.type") != "process" {
				t.Errorf("process span %s %v", r.Name(), r.Attributes())
			}
			outcomes = append(outcomes, fmt.Sprintf("%s/%s/%s", attr(r, "queuey.job.kind"), attr(r, "queuey.job.attempt"), attr(r, "queuey.job.outcome")))
		}
		slices.Sort(outcomes)
		if want := []string{"ghost/1/dead_lettered", "pay/1/dead_lettered", "pay/1/deferred", "pay/1/retried", "pay/1/succeeded", "pay/1/succeeded", "pay/2/succeeded"}; !slices.Equal(outcomes, want) {
			t.Errorf("outcomes %v, want %v", outcomes, want)
		}
		if s := sends[ids["ok"]]; s.Name() != "send payments" || attr(s, "messaging.operation.type") != "send" || attr(s, "messaging.destination.name") != "payments" {
			t.Errorf("send span %s %v", s.Name(), s.Attributes())
		}
		mu.Lock()
		defer mu.Unlock()
		for key, sc := range handlerSpans {
			found := false
			for _, r := range runs {
				found = found || r.SpanContext().SpanID() == sc.SpanID()
			}
			if !found {
				t.Errorf("the handler of %s ran without its process span in ctx", key)
			}
		}
		if len(handlerSpans) != 6 {
			t.Errorf("%d handler runs recorded, want 6", len(handlerSpans))
		}
	})
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// summarize is a metric's data points, sorted: attributes and value, or
// count and sum for a histogram.
func summarize(data metricdata.Aggregation) string {
	var pts []string
	label := func(set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
		}
		return fmt.Sprint(kv)
	}
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			pts = append(pts, fmt.Sprintf("{%s}:%d", label(p.Attributes)[1:len(label(p.Attributes))-1], p.Value))
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			pts = append(pts, fmt.Sprintf("{%s}:n=%d,sum=%.3f", label(p.Attributes)[1:len(label(p.Attributes))-1], p.Count, p.Sum))
		}
	default:
		return fmt.Sprintf("%T", data)
	}
	slices.Sort(pts)
	return fmt.Sprint(pts)[1 : len(fmt.Sprint(pts))-1]
}

// Kinds come off the wire: a producer's bug that gives every job a kind of
// its own must not give the metrics a series per job. Past 1024 queue and
// kind pairs, kinds count as OtherKind; spans keep them.
func TestMetricsKindsAreBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := queueyotel.New(queueyotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1100
	for i := range n {
		job := queuey.JobContext{ID: fmt.Sprint(i), Kind: fmt.Sprintf("kind-%d", i), Queue: "q", Attempt: 1, EnqueuedAt: time.Unix(1, 0)}
		_, done := obs.Run(t.Context(), queuey.RunInfo{Job: job, Started: time.Unix(2, 0)})
		done(queuey.RunOutcome{Action: queuey.ActionDeadLetter, Reason: queuey.ReasonUnknownKind})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"queuey.jobs.started", "queuey.jobs.dead_lettered"} {
		kinds := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || m.Name != name {
					continue
				}
				for _, p := range sum.DataPoints {
					k, _ := p.Attributes.Value(queueyotel.KindKey)
					kinds[k.AsString()] += p.Value
				}
			}
		}
		if len(kinds) != 1025 || kinds[queueyotel.OtherKind] != n-1024 || kinds["kind-0"] != 1 {
			t.Errorf("%s: %d kinds, %d counted as %q; want 1025, %d", name, len(kinds), kinds[queueyotel.OtherKind], queueyotel.OtherKind, n-1024)
		}
	}
}
