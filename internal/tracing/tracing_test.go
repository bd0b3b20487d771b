package tracing

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/store"
)

type capture struct {
	msgs []*broker.Message
	err  error
}

func (c *capture) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	c.msgs = append(c.msgs, msgs...)
	return c.err
}

type stubProc struct{ headers map[string]string }

func (stubProc) Decode([]byte) (inbox.Decoded, error) { return inbox.Decoded{}, nil }
func (p *stubProc) Process(ctx context.Context, _ store.Tx, _ *inbox.Message) (inbox.Outcome, error) {
	p.headers = Inject(ctx, nil)
	return inbox.Done(), nil
}

func newTracer() (*tracetest.InMemoryExporter, trace.Tracer) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	return exp, tp.Tracer("test")
}

// The trace goes on from the processor's span, through the headers of the
// event, to the relay's send span and on to the consumer.
func TestTraceCrossesTheOutbox(t *testing.T) {
	exp, tr := newTracer()
	proc := &stubProc{}
	if _, err := WrapProcessor(tr, proc).Process(context.Background(), nil, &inbox.Message{Stream: "s", ID: 7, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if proc.headers["traceparent"] == "" {
		t.Fatal("no traceparent injected by the processor")
	}
	sent := &capture{}
	orig := &broker.Message{Key: "k", Headers: proc.headers}
	if err := WrapPublisher(tr, "kafka:msg", sent).SendConfirmed(context.Background(), "msg", orig); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != SpanProcess || spans[1].Name != SpanRelaySend {
		t.Fatalf("spans: %v", spans)
	}
	if spans[1].SpanContext.TraceID() != spans[0].SpanContext.TraceID() || spans[1].Parent.SpanID() != spans[0].SpanContext.SpanID() {
		t.Error("the send span does not continue the processor's trace")
	}
	out := sent.msgs[0]
	consumer := trace.SpanContextFromContext(Extract(context.Background(), out.Headers))
	if consumer.SpanID() != spans[1].SpanContext.SpanID() {
		t.Error("the sent message does not carry the send span")
	}
	if orig.Headers["traceparent"] != proc.headers["traceparent"] {
		t.Error("the caller's message was changed")
	}
}

func TestFailuresAreRecorded(t *testing.T) {
	exp, tr := newTracer()
	sent := &capture{err: errors.New("broker down")}
	if err := WrapPublisher(tr, "t", sent).SendConfirmed(context.Background(), "msg", &broker.Message{}); err == nil {
		t.Fatal("error swallowed")
	}
	h := WrapIngest(tr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/cminmsgs/send", nil))
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Status.Code.String() != "Error" || spans[1].Name != SpanIngest || spans[1].Status.Code.String() != "Error" {
		t.Fatalf("spans: %+v", spans)
	}
}

func TestEnabled(t *testing.T) {
	env := func(v string) func(string) string { return func(string) string { return v } }
	for _, c := range []struct {
		configured bool
		exporter   string
		want       bool
	}{{false, "", false}, {true, "", true}, {false, "otlp", true}, {true, "none", false}, {false, "none", false}} {
		if got := Enabled(c.configured, env(c.exporter)); got != c.want {
			t.Errorf("Enabled(%v, %q) = %v", c.configured, c.exporter, got)
		}
	}
	p, err := New(context.Background(), false, "msgx")
	if err != nil || p.Tracer() == nil || p.Shutdown(context.Background()) != nil {
		t.Fatal("no-op provider")
	}
}

type pinging struct {
	capture
	err error
}

func (p *pinging) Ping(context.Context) error { return p.err }

// The relay probes a paused target through the wrapper: the wrapped
// publisher's Ping answers, and one without Ping says it has none.
func TestPingPassesThrough(t *testing.T) {
	_, tr := newTracer()
	down := errors.New("connection refused")
	p, ok := WrapPublisher(tr, "t", &pinging{err: down}).(interface{ Ping(context.Context) error })
	if !ok {
		t.Fatal("the wrapper has no Ping")
	}
	if err := p.Ping(context.Background()); !errors.Is(err, down) {
		t.Fatalf("Ping: %v", err)
	}
	np := WrapPublisher(tr, "t", &capture{}).(interface{ Ping(context.Context) error })
	if err := np.Ping(context.Background()); !errors.Is(err, broker.ErrUnsupported) {
		t.Fatalf("Ping of a publisher without one: %v", err)
	}
}

// The standard variables choose the span exporter; a value msgx does not
// know is an error at start, not a silent default.
func TestExporterChoice(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string // "" for an error
	}{
		{nil, exportHTTP},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, exportGRPC},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, exportHTTP},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, exportGRPC},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, exportConsole},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, ""},
	}
	for _, c := range cases {
		got, err := exporterKind(func(k string) string { return c.env[k] })
		if c.want == "" {
			if err == nil {
				t.Errorf("%v: no error", c.env)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: %q, %v; want %q", c.env, got, err, c.want)
		}
		exp, err := newExporter(context.Background(), func(k string) string { return c.env[k] })
		if err != nil {
			t.Errorf("%v: %v", c.env, err)
			continue
		}
		_ = exp.Shutdown(context.Background())
	}
}

// preparingProc is a processor with a read-ahead that records its batches.
type preparingProc struct {
	stubProc
	batches [][]any
}

func (p *preparingProc) Prepare(_ context.Context, _ store.Tx, batch []any) error {
	p.batches = append(p.batches, batch)
	return nil
}

// The engine finds Preparer on the processor it is given: the wrapper of a
// processor with a read-ahead passes it on, the wrapper of one without has
// none, and either unwraps to the processor it wraps.
func TestWrappedProcessorKeepsItsReadAhead(t *testing.T) {
	_, tr := newTracer()
	p := &preparingProc{}
	w := WrapProcessor(tr, p)
	pr, ok := w.(inbox.Preparer)
	if !ok {
		t.Fatal("the wrapper of a Preparer is no Preparer")
	}
	if err := pr.Prepare(context.Background(), nil, []any{"a", "b"}); err != nil || len(p.batches) != 1 || len(p.batches[0]) != 2 {
		t.Fatalf("Prepare: %v, batches %v", err, p.batches)
	}
	if got, ok := inbox.As[*preparingProc](w); !ok || got != p {
		t.Error("the wrapper does not unwrap to the processor")
	}
	plain := WrapProcessor(tr, &stubProc{})
	if _, ok := plain.(inbox.Preparer); ok {
		t.Error("the wrapper of a processor without a read-ahead is a Preparer")
	}
	if _, ok := inbox.As[*stubProc](plain); !ok {
		t.Error("the wrapper does not unwrap to the processor")
	}
}
