package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/msgx/msgx/app/apptest"
	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/store/storetest"
)

// A message posted to the HTTP ingress with a traceparent is processed in
// the caller's trace: ingest span → processing span (continued from the
// trace context the inbox kept with the message) → the relay's send span,
// whose context the Kafka record carries.
func TestTraceContinuesFromIngestToTheRelay(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "msg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: "127.0.0.1:0", stream: s}
brokers: {k: {kind: kafka, seeds: [%s]}}
mailboxes: {local: {kind: store, start: from-beginning, poll-interval: 1h}}
streams: {s: {processor: flop, mailbox: local, poll-interval: 20ms}}
relay: {poll-interval: 20ms, targets: {"kafka:msg": {broker: k}}}
`, dsn, strings.Join(kf.ListenAddrs(), ", ")))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, cfg, registry(), WithLogOutput(io.Discard), WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The poller's first poll creates the cursor and reads the mailbox once;
	// after that read it scans only when the ingress nudges it, after its
	// enqueue: the message is the ingress's, with its trace context, not the
	// poller's without one. (The cursor alone is not enough: it commits
	// before that first read, which could still find the ingress's row.)
	for deadline := time.Now().Add(30 * time.Second); scans(t, a, "s") == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the poller did not read the mailbox")
		}
	}
	msgs, err := apptest.Messages(1, 1, time.Now().UnixNano()%1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest("POST", "http://"+a.IngressAddr()+"/cminmsgs/send", bytes.NewReader(msgs[0]))
	req.Header.Set("Content-Type", "application/xml")
	req.Header.Set("traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ingress: %d %s", resp.StatusCode, body)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.ConsumeTopics("msg"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
	defer pcancel()
	var rec *kgo.Record
	for rec == nil {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatal("the event never reached Kafka")
		}
		fs.EachRecord(func(r *kgo.Record) { rec = r })
	}
	var traceparent string
	for _, h := range rec.Headers {
		if h.Key == "traceparent" {
			traceparent = string(h.Value)
		}
	}

	// The send span ends once the broker confirmed the send, which may be
	// after the record is fetched.
	byName := map[string]sdktrace.ReadOnlySpan{}
	for deadline := time.Now().Add(30 * time.Second); byName[tracing.SpanRelaySend] == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no send span; spans: %v", exp.GetSpans().Snapshots())
		}
		for _, s := range exp.GetSpans().Snapshots() {
			byName[s.Name()] = s
		}
	}
	ingest, process, send := byName[tracing.SpanIngest], byName[tracing.SpanProcess], byName[tracing.SpanRelaySend]
	if ingest == nil || process == nil {
		t.Fatalf("spans: %v", exp.GetSpans().Snapshots())
	}
	callerTrace := strings.Split(caller, "-")[1]
	for _, s := range []sdktrace.ReadOnlySpan{ingest, process, send} {
		if s.SpanContext().TraceID().String() != callerTrace {
			t.Errorf("span %s is in trace %s, not the caller's %s", s.Name(), s.SpanContext().TraceID(), callerTrace)
		}
	}
	if ingest.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("the ingest span's parent is %s, not the caller's span", ingest.Parent().SpanID())
	}
	if process.Parent().SpanID() != ingest.SpanContext().SpanID() {
		t.Errorf("the processing span's parent is %s, not the ingest span %s", process.Parent().SpanID(), ingest.SpanContext().SpanID())
	}
	if send.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Errorf("the send span's parent is not the processing span")
	}
	want := fmt.Sprintf("00-%s-%s-01", callerTrace, send.SpanContext().SpanID())
	if traceparent != want {
		t.Errorf("the Kafka record's traceparent is %q, want %q", traceparent, want)
	}
}

// scans is how many times the poller of stream has read its mailbox.
func scans(t *testing.T, a *App, stream string) uint64 {
	t.Helper()
	mfs, err := a.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "msgx_mailbox_rows_per_scan" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" && l.GetValue() == stream {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}
