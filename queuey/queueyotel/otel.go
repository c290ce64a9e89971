// Package queueyotel reports what queuey's producers and workers do
// through OpenTelemetry: metrics, and traces that follow each job from its
// Enqueue to every run of its handler. It depends on OpenTelemetry's API
// only; the application brings the SDK and exporters.
//
//	obs, err := queueyotel.New(queueyotel.Config{}) // the global providers
//	producer, err := queuey.NewProducer(ctx, backend, queues, queuey.ProducerConfig{Observer: obs})
//	worker, err := queuey.NewWorker(ctx, backend, queues, queuey.WorkerConfig{Observer: obs})
//
// # Metrics
//
// Counters, each with the attributes messaging.destination.name (the work
// queue) and queuey.job.kind:
//
//	queuey.jobs.enqueued        jobs published by Enqueue, EnqueueAfter and Defer (error.type when the publish failed)
//	queuey.jobs.started         handler runs begun
//	queuey.jobs.succeeded       runs that returned nil
//	queuey.jobs.retried         runs that failed and will run again after a backoff
//	queuey.jobs.deferred        runs that deferred their job (no attempt spent)
//	queuey.jobs.dead_lettered   runs whose job went to the dead-letter queue; also queuey.dead_letter.reason
//	queuey.jobs.malformed       bodies that were not envelopes (messaging.destination.name only)
//
// Histograms, in seconds:
//
//	queuey.handler.duration     how long handlers run
//	queuey.job.wait             from a job's enqueue to its first run (not counting redeliveries)
//	queuey.hold.added_wait      how much later than asked a retried or deferred job runs again:
//	                            the granularity's rounding, the broker's timers, and the wait for a worker
//
// An up-down counter, queuey.handlers.running, counts handlers running now.
//
// Kinds come off the wire, so their number is bounded: after the first
// 1024 queue and kind pairs an Observer sees, further kinds are counted as
// queuey.job.kind "other" (OtherKind). Spans carry every kind as it is.
//
// # Traces
//
// Enqueue starts a producer span, "send QUEUE", and writes its W3C trace
// context (traceparent, tracestate) into the job's envelope, in Ext: the
// envelope is the message's own header, and unlike AMQP headers it travels
// with the job through hold queues, retries, deferrals and redrives. Each
// handler run is a consumer span, "process QUEUE", a child of it, and the
// handler's context carries the span. The attributes follow
// OpenTelemetry's messaging conventions (messaging.system rabbitmq,
// messaging.operation.type send or process, messaging.destination.name,
// messaging.message.id the job ID), plus queuey.job.kind,
// queuey.job.attempt and queuey.job.outcome.
//
// A worker without an Observer does none of this, at no cost.
package queueyotel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/queuey/queuey/queuey"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of queueyotel's meter and tracer.
const ScopeName = "github.com/queuey/queuey/queuey/queueyotel"

// Attribute keys of queuey's own.
const (
	KindKey    = attribute.Key("queuey.job.kind")
	AttemptKey = attribute.Key("queuey.job.attempt")
	OutcomeKey = attribute.Key("queuey.job.outcome")
	ReasonKey  = attribute.Key("queuey.dead_letter.reason")
)

// Config configures an Observer. The zero value uses OpenTelemetry's
// global providers and W3C trace context.
type Config struct {
	// MeterProvider makes the instruments. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator writes and reads the trace context in envelopes. Defaults
	// to W3C trace context (propagation.TraceContext).
	Propagator propagation.TextMapPropagator
}

// Observer implements queuey.Observer with OpenTelemetry. Make one with
// New; it is safe for concurrent use.
type Observer struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator

	enqueued, started, succeeded, retried, deferred, deadLettered, malformed metric.Int64Counter
	running                                                                  metric.Int64UpDownCounter
	duration, wait, addedWait                                                metric.Float64Histogram

	mu    sync.RWMutex
	attrs map[jobClass]measurement
}

// jobClass is what the metrics are broken down by.
type jobClass struct{ queue, kind string }

// measure is the measurement option of a queue and kind's points, made
// once: building the attribute set per job cost a few allocations each
// (BenchmarkConsume, impl=queuey+otel). It also returns the kind the
// points are labelled with, for the metrics that add attributes of their
// own.
//
// Kinds come off the wire, and a producer's bug can make every job's kind
// different: once maxClasses queue and kind pairs have been seen, a new
// pair's kind counts as OtherKind, so the metrics' series stay bounded.
func (o *Observer) measure(queue, kind string) (metric.MeasurementOption, string) {
	c := jobClass{queue, kind}
	o.mu.RLock()
	m, ok := o.attrs[c]
	o.mu.RUnlock()
	if ok {
		return m.opt, m.kind
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if m, ok := o.attrs[c]; ok {
		return m.opt, m.kind
	}
	if len(o.attrs) >= maxClasses {
		if m, ok := o.attrs[jobClass{queue, OtherKind}]; ok {
			return m.opt, m.kind
		}
		c.kind = OtherKind
	}
	m = measurement{metric.WithAttributeSet(attribute.NewSet(semconv.MessagingDestinationName(queue), KindKey.String(c.kind))), c.kind}
	o.attrs[c] = m
	return m.opt, m.kind
}

// measurement is a queue and kind's measurement option and kind label.
type measurement struct {
	opt  metric.MeasurementOption
	kind string
}

// maxClasses bounds the queue and kind pairs the metrics break down by.
const maxClasses = 1024

// OtherKind is the queuey.job.kind of the metrics of every kind beyond the
// first 1024 queue and kind pairs an Observer has seen.
const OtherKind = "other"

var _ queuey.Observer = (*Observer)(nil)

// New returns an Observer with its instruments made.
func New(cfg Config) (*Observer, error) {
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	m := cfg.MeterProvider.Meter(ScopeName)
	o := &Observer{tracer: cfg.TracerProvider.Tracer(ScopeName), propagator: cfg.Propagator, attrs: map[jobClass]measurement{}}
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{job}"))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600))
		errs = append(errs, err)
		return h
	}
	o.enqueued = counter("queuey.jobs.enqueued", "Jobs published by Enqueue, EnqueueAfter and Defer.")
	o.started = counter("queuey.jobs.started", "Handler runs begun.")
	o.succeeded = counter("queuey.jobs.succeeded", "Handler runs that returned nil.")
	o.retried = counter("queuey.jobs.retried", "Handler runs that failed and will run again after a backoff.")
	o.deferred = counter("queuey.jobs.deferred", "Handler runs that deferred their job, spending no attempt.")
	o.deadLettered = counter("queuey.jobs.dead_lettered", "Handler runs whose job went to the dead-letter queue.")
	o.malformed = counter("queuey.jobs.malformed", "Deliveries whose body was not an envelope, dead-lettered verbatim.")
	var err error
	o.running, err = m.Int64UpDownCounter("queuey.handlers.running", metric.WithDescription("Handlers running now."), metric.WithUnit("{handler}"))
	errs = append(errs, err)
	o.duration = seconds("queuey.handler.duration", "How long handlers run.")
	o.wait = seconds("queuey.job.wait", "From a job's enqueue to its first run.")
	o.addedWait = seconds("queuey.hold.added_wait", "How much later than asked a retried or deferred job runs again.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("queueyotel: making instruments: %w", err)
	}
	return o, nil
}

// extCarrier reads and writes trace context in an envelope's Ext, as
// JSON strings.
type extCarrier struct{ ext *map[string]json.RawMessage }

func (c extCarrier) Get(key string) string {
	var s string
	if raw, ok := (*c.ext)[key]; ok && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

func (c extCarrier) Set(key, value string) {
	if *c.ext == nil {
		*c.ext = map[string]json.RawMessage{}
	}
	b, _ := json.Marshal(value) // a string: cannot fail
	(*c.ext)[key] = b
}

func (c extCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.ext))
	for k := range *c.ext {
		keys = append(keys, k)
	}
	return keys
}

// Enqueue starts the producer span, writes its context into env.Ext and
// counts the job when its publish ends.
func (o *Observer) Enqueue(ctx context.Context, env *queuey.Envelope) func(error) {
	ctx, span := o.tracer.Start(ctx, "send "+env.Queue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("send"), semconv.MessagingDestinationName(env.Queue),
			semconv.MessagingMessageID(env.ID), KindKey.String(env.Kind)))
	o.propagator.Inject(ctx, extCarrier{&env.Ext})
	return func(err error) {
		if err != nil {
			_, kind := o.measure(env.Queue, env.Kind)
			o.enqueued.Add(ctx, 1, metric.WithAttributes(semconv.MessagingDestinationName(env.Queue),
				KindKey.String(kind), semconv.ErrorType(err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			opt, _ := o.measure(env.Queue, env.Kind)
			o.enqueued.Add(ctx, 1, opt)
		}
		span.End()
	}
}

// Run starts the consumer span, a child of the job's producer span, and
// records the run's outcome when it is decided.
func (o *Observer) Run(ctx context.Context, run queuey.RunInfo) (context.Context, func(queuey.RunOutcome)) {
	job := run.Job
	ext := run.Ext
	ctx = o.propagator.Extract(ctx, extCarrier{&ext})
	ctx, span := o.tracer.Start(ctx, "process "+job.Queue, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"), semconv.MessagingDestinationName(job.Queue),
			semconv.MessagingMessageID(job.ID), KindKey.String(job.Kind), AttemptKey.Int(job.Attempt)))
	attrs, kind := o.measure(job.Queue, job.Kind)
	o.started.Add(ctx, 1, attrs)
	o.running.Add(ctx, 1, attrs)
	now := run.Started
	if job.Attempt == 1 && job.Deferrals == 0 && !run.Redelivered {
		o.wait.Record(ctx, max(now.Sub(job.EnqueuedAt), 0).Seconds(), attrs)
	}
	if !run.DueAt.IsZero() {
		o.addedWait.Record(ctx, max(now.Sub(run.DueAt), 0).Seconds(), attrs)
	}
	return ctx, func(out queuey.RunOutcome) {
		o.running.Add(ctx, -1, attrs)
		o.duration.Record(ctx, out.Duration.Seconds(), attrs)
		var outcome string
		switch out.Action {
		case queuey.ActionAck:
			outcome = "succeeded"
			o.succeeded.Add(ctx, 1, attrs)
		case queuey.ActionRetry:
			outcome = "retried"
			o.retried.Add(ctx, 1, attrs)
		case queuey.ActionDefer:
			outcome = "deferred"
			o.deferred.Add(ctx, 1, attrs)
		case queuey.ActionDeadLetter:
			outcome = "dead_lettered"
			o.deadLettered.Add(ctx, 1, metric.WithAttributes(semconv.MessagingDestinationName(job.Queue),
				KindKey.String(kind), ReasonKey.String(reasonClass(out.Reason))))
		}
		span.SetAttributes(OutcomeKey.String(outcome))
		if out.Result != nil && out.Action != queuey.ActionDefer {
			span.RecordError(out.Result)
			span.SetStatus(codes.Error, out.Result.Error())
		}
		span.End()
	}
}

// reasonClass is a dead-letter reason fit for a metric attribute: a fatal
// error's text is unbounded, so it counts as "fatal".
func reasonClass(reason string) string {
	switch reason {
	case queuey.ReasonAttemptsExhausted, queuey.ReasonUnknownKind, queuey.ReasonMalformed, queuey.ReasonDelayTooLong, queuey.ReasonJobTooLarge, queuey.ReasonTimedOut:
		return reason
	}
	if len(reason) >= 5 && reason[:5] == "fatal" {
		return "fatal"
	}
	return "other"
}

// Malformed counts a malformed body.
func (o *Observer) Malformed(ctx context.Context, queue string) {
	o.malformed.Add(ctx, 1, metric.WithAttributes(semconv.MessagingDestinationName(queue)))
}
