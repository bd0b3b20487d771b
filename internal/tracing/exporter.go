package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newExporter returns the span exporter the standard variables select:
// OTEL_TRACES_EXPORTER (otlp, the default, or console) and, for otlp,
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
// (http/protobuf, the default, or grpc). The OTLP exporters read their own
// endpoint, headers, TLS and timeout variables.
//
// It chooses among the span exporters alone, rather than through the
// contrib autoexport package, because that package links every metric and
// log exporter too: about a tenth of the binary for spans only.
func newExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	kind, err := exporterKind(getenv)
	if err != nil {
		return nil, err
	}
	switch kind {
	case exportConsole:
		return stdouttrace.New()
	case exportGRPC:
		return otlptracegrpc.New(ctx)
	default:
		return otlptracehttp.New(ctx)
	}
}

// The exporters newExporter builds.
const (
	exportHTTP    = "otlp http/protobuf"
	exportGRPC    = "otlp grpc"
	exportConsole = "console"
)

// exporterKind reads the variables that choose the exporter (os.Getenv when
// getenv is nil).
func exporterKind(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch kind := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); kind {
	case "", "otlp":
	case "console":
		return exportConsole, nil
	default:
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER %q: want otlp, console or none", kind)
	}
	proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch proto {
	case "", "http/protobuf":
		return exportHTTP, nil
	case "grpc":
		return exportGRPC, nil
	default:
		return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
	}
}
