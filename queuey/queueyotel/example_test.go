package queueyotel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/queuey/queueyotel"
	"github.com/queuey/queuey/queueytest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// SendEmail is a job that fails once, then succeeds.
type SendEmail struct {
	To string `json:"to"`
}

func (SendEmail) Kind() string  { return "send-email" }
func (SendEmail) Queue() string { return "emails" }

// Wiring: one Observer for the producer and the worker. In production the
// providers are the application's SDK ones, with exporters; here a manual
// reader and a span recorder show what is reported.
func Example() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	obs, err := queueyotel.New(queueyotel.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	t := &exampleT{}
	defer t.done()
	h := queueytest.New(t, queueytest.Options{
		Producer: queuey.ProducerConfig{Observer: obs},
		Worker:   queuey.WorkerConfig{Observer: obs},
	}, queuey.QueueConfig{Name: "emails"})
	queueytest.Handle(h, func(ctx context.Context, job *queuey.Job[SendEmail]) error {
		if job.Attempt == 1 {
			return errors.New("SMTP timeout")
		}
		return nil
	})
	h.Start()
	if _, err := h.Producer.Enqueue(context.Background(), SendEmail{To: "a@example.com"}); err != nil {
		fmt.Println(err)
		return
	}
	h.WaitFor("the retry to be held", func() bool { return h.Held("emails") == 1 })
	h.Advance(time.Minute) // past the retry's backoff
	h.WaitFor("the second run's span", func() bool { return len(spans.Ended()) == 3 })

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name != "queuey.handlers.running" {
			fmt.Printf("%s %d\n", m.Name, sum.DataPoints[0].Value)
		}
	}
	// The spans end in no fixed order: the first run can end before the
	// enqueue's confirm has returned to the producer.
	var send sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindProducer {
			send = s
		}
	}
	runs := 0
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer && s.Parent().SpanID() == send.SpanContext().SpanID() {
			runs++
		}
	}
	fmt.Printf("span %q, with %d runs of %q as its children\n", send.Name(), runs, "process emails")
	// Output:
	// queuey.jobs.enqueued 1
	// queuey.jobs.started 2
	// queuey.jobs.succeeded 1
	// queuey.jobs.retried 1
	// span "send emails", with 2 runs of "process emails" as its children
}

// exampleT is the queueytest.TB of an example: a failure panics.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                        {}
func (*exampleT) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (*exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (*exampleT) Errorf(format string, a ...any) { fmt.Printf(format+"\n", a...) }
func (t *exampleT) Cleanup(f func())             { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
