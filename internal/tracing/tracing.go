// Package tracing puts OpenTelemetry spans on the message path and carries
// the W3C trace context (traceparent, tracestate) in envelope headers, so a
// trace continues from a process to a broker to the next process. The
// exporter is chosen by the standard OTEL_* variables (OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_ENDPOINT, ...); tracing is off unless it is enabled.
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

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/store"
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

// Publisher is the confirmed send the outbox relay uses (outbox.Publisher).
type Publisher interface {
	SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error
}

type publisher struct {
	next   Publisher
	tr     trace.Tracer
	target string
}

// WrapPublisher gives every relayed message a send span, child of the trace
// its headers carry (the processor's), and puts that span's context in the
// message's headers so the consumer continues the trace.
func WrapPublisher(tr trace.Tracer, target string, next Publisher) Publisher {
	return &publisher{next: next, tr: tr, target: target}
}

// Ping passes a probe of the relay (a paused target's broker, see
// outbox.Pinger) to the wrapped publisher; broker.ErrUnsupported when it
// has none.
func (p *publisher) Ping(ctx context.Context) error {
	if pg, ok := p.next.(interface{ Ping(context.Context) error }); ok {
		return pg.Ping(ctx)
	}
	return broker.ErrUnsupported
}

func (p *publisher) SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error {
	spans := make([]trace.Span, len(msgs))
	out := make([]*broker.Message, len(msgs))
	for i, m := range msgs {
		parent := Extract(ctx, m.Headers)
		sctx, span := p.tr.Start(parent, SpanRelaySend, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.destination.name", topic),
				attribute.String("msgx.target", p.target),
				attribute.String("msgx.event_id", m.Header(broker.HeaderEventID)),
			))
		spans[i] = span
		h := make(map[string]string, len(m.Headers)+2)
		for k, v := range m.Headers {
			h[k] = v
		}
		out[i] = &broker.Message{Key: m.Key, Payload: m.Payload, Headers: Inject(sctx, h)}
	}
	err := p.next.SendConfirmed(ctx, topic, out...)
	for _, s := range spans {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, "send failed")
		}
		s.End()
	}
	return err
}

type processor struct {
	next inbox.Processor
	tr   trace.Tracer
}

// WrapProcessor gives every processing attempt a span; Process runs with it
// in its context, so the events it enqueues can carry it (see Inject). The
// span is a child of the trace context the message arrived with (its ingest
// span), so one trace runs from the ingest through processing to the relay's
// send; a message without one (the shared mailbox's) starts a trace.
// The wrapper is an inbox.Preparer exactly when next is one, so the engine
// still reads ahead for it, and it unwraps to next (inbox.As).
func WrapProcessor(tr trace.Tracer, next inbox.Processor) inbox.Processor {
	p := &processor{next: next, tr: tr}
	if pr, ok := next.(inbox.Preparer); ok {
		return &preparingProcessor{processor: p, prep: pr}
	}
	return p
}

// preparingProcessor is the wrapper of a processor with a read-ahead; the
// read-ahead has no span of its own (it belongs to no one message).
type preparingProcessor struct {
	*processor
	prep inbox.Preparer
}

func (p *preparingProcessor) Prepare(ctx context.Context, tx store.Tx, batch []any) error {
	return p.prep.Prepare(ctx, tx, batch)
}

// Unwrap returns the wrapped processor.
func (p *processor) Unwrap() any { return p.next }

func (p *processor) Decode(payload []byte) (inbox.Decoded, error) { return p.next.Decode(payload) }

func (p *processor) Process(ctx context.Context, tx store.Tx, msg *inbox.Message) (inbox.Outcome, error) {
	if msg.TraceParent != "" {
		ctx = Extract(ctx, map[string]string{"traceparent": msg.TraceParent, "tracestate": msg.TraceState})
	}
	ctx, span := p.tr.Start(ctx, SpanProcess, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("msgx.stream", msg.Stream),
		attribute.Int64("msgx.msg_id", msg.ID),
		attribute.Int("msgx.attempt", msg.Attempt),
		attribute.String("msgx.kind", msg.Kind),
	))
	defer span.End()
	out, err := p.next.Process(ctx, tx, msg)
	if err != nil {
		span.RecordError(err)
		span.SetAttributes(attribute.String("msgx.error_class", string(inbox.ClassOf(err))))
		span.SetStatus(codes.Error, string(inbox.ClassOf(err)))
	} else {
		span.SetAttributes(attribute.String("msgx.outcome", string(out.Status)))
	}
	return out, err
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
