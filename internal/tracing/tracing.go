// Package tracing holds the OpenTelemetry tracer provider (its exporter
// chosen by the standard OTEL_* variables: OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_ENDPOINT, ...; tracing is off unless it is enabled), the
// ingest span, and the W3C trace context (traceparent, tracestate) in
// envelope headers, so that a trace continues from a process to a broker to
// the next process. The processing and send spans are made where those steps
// live: inbox.WithTracer and outbox.WithTracer.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span names of the message path.
const (
	SpanIngest    = "msgx.ingest"
	SpanProcess   = "msgx.inbox.process"
	SpanRelaySend = "msgx.relay.send"
)

// propagator is the W3C trace context; it has no state.
var propagator = propagation.TraceContext{}

// Enabled reports whether tracing should run: asked for by configuration, or
// an exporter named by OTEL_TRACES_EXPORTER (other than "none").
func Enabled(configured bool, getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	v := getenv("OTEL_TRACES_EXPORTER")
	return configured && v != "none" || v != "" && v != "none"
}

// Provider is a tracer provider and how to flush and stop it.
type Provider struct {
	trace.TracerProvider
	shutdown func(context.Context) error
}

// Tracer is the msgx tracer of the provider.
func (p *Provider) Tracer() trace.Tracer { return p.TracerProvider.Tracer("github.com/msgx/msgx") }

// Shutdown flushes the spans not exported yet and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error { return p.shutdown(ctx) }

// Wrap returns a provider over tp whose Shutdown does nothing: tp belongs to
// the caller.
func Wrap(tp trace.TracerProvider) *Provider {
	return &Provider{TracerProvider: tp, shutdown: func(context.Context) error { return nil }}
}

// New returns a provider exporting through the exporter the OTEL_* variables
// select when on, or a no-op provider.
func New(ctx context.Context, on bool, service string) (*Provider, error) {
	if !on {
		return &Provider{TracerProvider: noop.NewTracerProvider(), shutdown: func(context.Context) error { return nil }}, nil
	}
	exp, err := newExporter(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(semconv.ServiceName(service)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, shutdown: tp.Shutdown}, nil
}

// Inject writes the trace context of ctx into headers (allocating the map
// when nil) and returns them. Processors call it on the headers of the outbox
// events they enqueue so that the relay's send continues their trace.
func Inject(ctx context.Context, headers map[string]string) map[string]string {
	if headers == nil {
		headers = map[string]string{}
	}
	propagator.Inject(ctx, propagation.MapCarrier(headers))
	return headers
}

// Extract returns ctx carrying the remote trace context found in headers.
func Extract(ctx context.Context, headers map[string]string) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(headers))
}

// Context returns the W3C trace context of ctx as its two headers ("" when
// ctx carries no valid span context), for a source to keep with a message.
func Context(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// WrapIngest gives every request of an ingress handler a server span that
// continues the caller's traceparent, and records the answer's status.
func WrapIngest(tr trace.Tracer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tr.Start(ctx, SpanIngest, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(sw.status))
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
