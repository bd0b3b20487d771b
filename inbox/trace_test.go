package inbox

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/store"
)

type spanProc struct{ in trace.SpanContext }

func (*spanProc) Decode([]byte) (Decoded, error) { return Decoded{}, nil }
func (p *spanProc) Process(ctx context.Context, _ store.Tx, _ *Message) (Outcome, error) {
	p.in = trace.SpanContextFromContext(ctx)
	return Done(), nil
}

// preparingProc is a processor with a read-ahead that records its batches.
type preparingProc struct {
	spanProc
	batches [][]any
}

func (p *preparingProc) Prepare(_ context.Context, _ store.Tx, batch []any) error {
	p.batches = append(p.batches, batch)
	return nil
}

// A processing attempt runs in a span that continues the trace the message
// arrived with; the wrapper of a processor with a read-ahead passes it on,
// the wrapper of one without has none, and either unwraps to the processor.
func TestProcessingSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	ictx, ingest := tr.Start(context.Background(), "ingest")
	ingest.End()
	tp, ts := tracing.Context(ictx)

	p := &preparingProc{}
	w := traced(tr, p)
	if _, err := w.Process(context.Background(), nil, &Message{Stream: "s", ID: 7, Attempt: 1, TraceParent: tp, TraceState: ts}); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[1].Name != tracing.SpanProcess || spans[1].Parent.SpanID() != spans[0].SpanContext.SpanID() {
		t.Fatalf("spans: %v", spans)
	}
	if p.in.SpanID() != spans[1].SpanContext.SpanID() {
		t.Error("Process does not run in the processing span")
	}
	pr, ok := w.(Preparer)
	if !ok {
		t.Fatal("the wrapper of a Preparer is no Preparer")
	}
	if err := pr.Prepare(context.Background(), nil, []any{"a", "b"}); err != nil || len(p.batches) != 1 || len(p.batches[0]) != 2 {
		t.Fatalf("Prepare: %v, batches %v", err, p.batches)
	}
	if got, ok := As[*preparingProc](w); !ok || got != p {
		t.Error("the wrapper does not unwrap to the processor")
	}
	plain := traced(tr, &spanProc{})
	if _, ok := plain.(Preparer); ok {
		t.Error("the wrapper of a processor without a read-ahead is a Preparer")
	}
	if _, ok := As[*spanProc](plain); !ok {
		t.Error("the wrapper does not unwrap to the processor")
	}
}
