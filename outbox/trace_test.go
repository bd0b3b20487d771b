package outbox

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/internal/tracing"
)

type capture struct {
	msgs []*broker.Message
	err  error
}

func (c *capture) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	c.msgs = append(c.msgs, msgs...)
	return c.err
}

type pinging struct {
	capture
	err error
}

func (p *pinging) Ping(context.Context) error { return p.err }

// A relay built WithTracer sends every message in a span that continues
// the trace its headers carry (the processor's) and whose context the sent
// message carries on; a failed send is recorded; the lane still probes a
// paused target through the wrapper.
func TestSendSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	sent := &pinging{err: errors.New("connection refused")}
	cfg, err := newConfig([]Option{WithTracer(tr), Target("kafka:msg", sent, PerKey)})
	if err != nil {
		t.Fatal(err)
	}
	pub := cfg.lanes[0].pub

	pctx, proc := tr.Start(context.Background(), "process")
	orig := &broker.Message{Key: "k", Headers: tracing.Inject(pctx, map[string]string{broker.HeaderEventID: "e1"})}
	proc.End()
	before := orig.Headers["traceparent"]
	if err := pub.SendConfirmed(context.Background(), "msg", orig); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[1].Name != tracing.SpanRelaySend {
		t.Fatalf("spans: %v", spans)
	}
	if spans[1].SpanContext.TraceID() != spans[0].SpanContext.TraceID() || spans[1].Parent.SpanID() != spans[0].SpanContext.SpanID() {
		t.Error("the send span does not continue the processor's trace")
	}
	out := sent.msgs[0]
	if got := trace.SpanContextFromContext(tracing.Extract(context.Background(), out.Headers)); got.SpanID() != spans[1].SpanContext.SpanID() {
		t.Error("the sent message does not carry the send span")
	}
	if out.Header(broker.HeaderEventID) != "e1" || orig.Headers["traceparent"] != before {
		t.Error("the sent message lost its headers, or the caller's message was changed")
	}

	sent.capture.err = errors.New("broker down")
	if err := pub.SendConfirmed(context.Background(), "msg", &broker.Message{}); err == nil {
		t.Fatal("error swallowed")
	}
	if spans := exp.GetSpans(); spans[len(spans)-1].Status.Code.String() != "Error" {
		t.Error("the failed send's span is not an error")
	}

	if err := pub.(Pinger).Ping(context.Background()); !errors.Is(err, sent.err) {
		t.Errorf("Ping through the wrapper: %v", err)
	}
	cfg, err = newConfig([]Option{WithTracer(tr), Target("t", &capture{}, Unordered)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.lanes[0].pub.(Pinger).Ping(context.Background()); !errors.Is(err, broker.ErrUnsupported) {
		t.Errorf("Ping of a publisher without one: %v", err)
	}
}
