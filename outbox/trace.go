package outbox

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/internal/tracing"
)

// WithTracer gives every relayed message a send span (msgx.relay.send), a
// child of the trace its headers carry (the processor's, see
// tracing.Inject), and puts that span's W3C context in the message's headers,
// so that the consumer on the other side of the broker continues the trace.
func WithTracer(tr trace.Tracer) Option { return func(c *config) { c.tracer = tr } }

// tracedPublisher is a lane's publisher with send spans.
type tracedPublisher struct {
	next   Publisher
	tr     trace.Tracer
	target string
}

// Ping passes a probe of a paused target to the wrapped publisher;
// broker.ErrUnsupported when it has none.
func (p *tracedPublisher) Ping(ctx context.Context) error {
	if pg, ok := p.next.(Pinger); ok {
		return pg.Ping(ctx)
	}
	return broker.ErrUnsupported
}

func (p *tracedPublisher) SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error {
	spans := make([]trace.Span, len(msgs))
	out := make([]*broker.Message, len(msgs))
	for i, m := range msgs {
		parent := tracing.Extract(ctx, m.Headers)
		sctx, span := p.tr.Start(parent, tracing.SpanRelaySend, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.destination.name", topic),
				attribute.String("msgx.target", p.target),
				attribute.String("msgx.event_id", m.Header(broker.HeaderEventID)),
			))
		spans[i] = span
		h := make(map[string]string, len(m.Headers)+2)
		maps.Copy(h, m.Headers)
		out[i] = &broker.Message{Key: m.Key, Payload: m.Payload, Headers: tracing.Inject(sctx, h)}
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
