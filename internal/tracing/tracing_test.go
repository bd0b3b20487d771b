package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The ingest span continues the caller's traceparent and records a 5xx
// answer as an error.
func TestIngestSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	caller, span := tr.Start(context.Background(), "caller")
	span.End()
	var inside trace.SpanContext
	h := WrapIngest(tr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(503)
	}))
	req := httptest.NewRequest("POST", "/cminmsgs/send", nil)
	tp, _ := Context(caller)
	req.Header.Set("traceparent", tp)
	h.ServeHTTP(httptest.NewRecorder(), req)
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[1].Name != SpanIngest || spans[1].Status.Code.String() != "Error" {
		t.Fatalf("spans: %+v", spans)
	}
	if spans[1].Parent.SpanID() != spans[0].SpanContext.SpanID() || inside.SpanID() != spans[1].SpanContext.SpanID() {
		t.Error("the ingest span does not continue the caller's trace, or the handler does not run in it")
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
