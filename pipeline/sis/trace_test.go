package sis_test

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestEventsCarryTheTraceContext: the events of a message processed under a
// span carry its W3C traceparent, so the relay's send and the consumers
// continue the trace; without a span they carry no headers at all.
func TestEventsCarryTheTraceContext(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema()))
	h := newHarness(t, db, sis.Config{})
	h.ok(adft(1, "15"))

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	payload := withSeq(fixture(t, "FLOP_HNAG_1.xml"), 2)
	d, err := h.p.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	msg := &inbox.Message{Stream: "sis", ID: 2, Payload: payload, Attempt: 1, Identity: d.Identity, Kind: d.Kind, Decoded: d.Value, Now: t0}
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := h.p.Process(ctx, tx, msg, d.Value)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	rows, err := db.Query(context.Background(), "SELECT event_id, headers FROM msgx_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	want := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	var traced int
	for rows.Next() {
		var (
			id  string
			raw []byte
		)
		if err := rows.Scan(&id, &raw); err != nil {
			t.Fatal(err)
		}
		var hdr map[string]string
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &hdr); err != nil {
				t.Fatalf("%s headers %s: %v", id, raw, err)
			}
		}
		switch {
		case hdr["traceparent"] == want:
			traced++
		case len(hdr) != 0:
			t.Errorf("event %s: headers %v", id, hdr)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if traced != 2 {
		t.Errorf("%d events carry the trace context, want the msg and schd events of the FLOP", traced)
	}
}
