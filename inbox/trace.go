package inbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/store"
)

// WithTracer gives every processing attempt a span (msgx.inbox.process);
// Process runs with it in its context, so the events it enqueues can carry
// it (tracing.Inject). The span is a child of the trace context the message
// arrived with (its ingest span), so one trace runs from the ingest through
// processing to the relay's send; a message without one (the shared
// mailbox's) starts a trace.
func WithTracer(tr trace.Tracer) Option { return func(o *options) { o.tracer = tr } }

// traced wraps proc with processing spans. The wrapper is a Preparer exactly
// when proc is one, so the engine still reads ahead for it, and it unwraps to
// proc (As).
func traced(tr trace.Tracer, proc Processor) Processor {
	p := &tracedProcessor{next: proc, tr: tr}
	if pr, ok := proc.(Preparer); ok {
		return &tracedPreparer{tracedProcessor: p, prep: pr}
	}
	return p
}

type tracedProcessor struct {
	next Processor
	tr   trace.Tracer
}

// tracedPreparer is the wrapper of a processor with a read-ahead; the
// read-ahead has no span of its own (it belongs to no one message).
type tracedPreparer struct {
	*tracedProcessor
	prep Preparer
}

func (p *tracedPreparer) Prepare(ctx context.Context, tx store.Tx, batch []any) error {
	return p.prep.Prepare(ctx, tx, batch)
}

// Unwrap returns the wrapped processor.
func (p *tracedProcessor) Unwrap() any { return p.next }

func (p *tracedProcessor) Decode(payload []byte) (Decoded, error) { return p.next.Decode(payload) }

func (p *tracedProcessor) Process(ctx context.Context, tx store.Tx, msg *Message) (Outcome, error) {
	if msg.TraceParent != "" {
		ctx = tracing.Extract(ctx, map[string]string{"traceparent": msg.TraceParent, "tracestate": msg.TraceState})
	}
	ctx, span := p.tr.Start(ctx, tracing.SpanProcess, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("msgx.stream", msg.Stream),
		attribute.Int64("msgx.msg_id", msg.ID),
		attribute.Int("msgx.attempt", msg.Attempt),
		attribute.String("msgx.kind", msg.Kind),
	))
	defer span.End()
	out, err := p.next.Process(ctx, tx, msg)
	if err != nil {
		span.RecordError(err)
		span.SetAttributes(attribute.String("msgx.error_class", string(ClassOf(err))))
		span.SetStatus(codes.Error, string(ClassOf(err)))
	} else {
		span.SetAttributes(attribute.String("msgx.outcome", string(out.Status)))
	}
	return out, err
}
