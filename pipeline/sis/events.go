package sis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/tracing"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// MsgEvent is the payload of a TargetMsg event: the message as it concerns
// one flight, normalized to JSON (docs/events.md).
type MsgEvent struct {
	Schema   string `json:"schema"`
	MsgID    int64  `json:"msgId"`
	Identity string `json:"identity"`
	Kind     string `json:"kind"`
	Meta     Meta   `json:"meta"`
	FLID     string `json:"flid"`
	// OperationDay, Status and StateVersion are the flight's after the message.
	OperationDay string `json:"operationDay"`
	Status       string `json:"status"`
	StateVersion int64  `json:"stateVersion"`
	// Body is the message body in the generic JSON shape (see Item), every
	// element kept, known or not; a schedule message's body carries only
	// this flight's FLTR.
	Body map[string]any `json:"body"`
}

// Meta is the META header in an event.
type Meta struct {
	SNDR string `json:"SNDR"`
	SEQN int64  `json:"SEQN"`
	DTTM string `json:"DTTM"`
	TYPE string `json:"TYPE"`
	STYP string `json:"STYP"`
	// Sent is DTTM as an instant (RFC 3339 with the airport's offset).
	Sent string `json:"sent"`
}

// SchdEvent is the payload of a TargetSchd upsert: the full state of a
// flight.
type SchdEvent struct {
	SchdHead
	Fields      map[string]string `json:"fields"`
	Collections map[string][]Item `json:"collections"`
}

// SchdHead is the part of SchdEvent that says which flight, in which state.
type SchdHead struct {
	Schema       string `json:"schema"`
	FLID         string `json:"flid"`
	OperationDay string `json:"operationDay"`
	Status       string `json:"status"`
	StateVersion int64  `json:"stateVersion"`
	LastMsgID    int64  `json:"lastMsgId"`
}

// eventPair is the events of one changed flight.
type eventPair struct{ msg, schd outbox.Event }

// events builds the two events of a changed flight; headers (the trace
// context, or nil) travel with both.
func (p *Processor) events(msg *inbox.Message, m *sisxml.Message, c change, headers map[string]string) (eventPair, error) {
	f := c.f
	me := MsgEvent{
		Schema: SchemaMsg, MsgID: msg.ID, Identity: msg.Identity, Kind: m.Meta.Kind(),
		Meta: Meta{SNDR: m.Meta.Sender, SEQN: m.Meta.Seq, DTTM: m.Meta.SentRaw, TYPE: m.Meta.Type, STYP: m.Meta.Subtype,
			Sent: m.Meta.Sent.Format(time.RFC3339)},
		FLID: f.FLID, OperationDay: f.OperationDay, Status: f.Status, StateVersion: f.Version,
		Body: msgBody(m, c.record),
	}
	mb, err := appendMsgEvent(make([]byte, 0, 1024), &me)
	if err != nil {
		return eventPair{}, err
	}
	id := msg.Stream + ":" + strconv.FormatInt(msg.ID, 10) + ":"
	ev := eventPair{
		msg: outbox.Event{ID: id + "msg:" + f.FLID, Target: TargetMsg, Topic: p.cfg.MsgTopic, Key: f.FLID, Payload: mb, Headers: headers},
	}
	ev.schd = outbox.Event{ID: id + "schd:" + f.FLID, Target: TargetSchd, Topic: p.cfg.SchdTopic, Key: f.FLID, Headers: headers}
	if c.deleted {
		ev.schd.Type = outbox.Tombstone
		return ev, nil
	}
	ev.schd.Payload, err = schdPayload(f)
	return ev, err
}

// schdPayload is the JSON of SchdEvent for f, made of its head and the
// flight's encoded state ({"fields":…,"collections":…}) rather than by
// encoding the state a second time.
func schdPayload(f *Flight) ([]byte, error) {
	if len(f.doc) < 2 || f.doc[0] != '{' {
		return nil, fmt.Errorf("sis: flight %s: state not encoded", f.FLID)
	}
	out := make([]byte, 0, 192+len(f.doc))
	out = appendSchdHead(out, &SchdHead{Schema: SchemaSchd, FLID: f.FLID, OperationDay: f.OperationDay, Status: f.Status,
		StateVersion: f.Version, LastMsgID: f.LastMsgID})
	out[len(out)-1] = ','
	return append(out, f.doc[1:]...), nil
}

// msgBody is the message body in the generic shape. In a schedule message
// the record is one FLTR among others: the body keeps the SCHD element's
// other children and only that FLTR.
func msgBody(m *sisxml.Message, record *sisxml.Element) map[string]any {
	out := map[string]any{}
	for _, e := range m.Body {
		if record != nil && record.Name == "FLTR" && e.Name == "SCHD" {
			kept := &sisxml.Element{Name: e.Name, Attrs: e.Attrs, Text: e.Text}
			for _, c := range e.Children {
				if c.Name != "FLTR" || c == record {
					kept.Children = append(kept.Children, c)
				}
			}
			e = kept
		}
		if prev, ok := out[e.Name]; ok {
			arr, isArr := prev.([]any)
			if !isArr {
				arr = []any{prev}
			}
			out[e.Name] = append(arr, value(e))
			continue
		}
		out[e.Name] = value(e)
	}
	return out
}

// enqueue writes a message's events with the statements held before them
// (store.Hold: one round trip for both), in one Enqueue call so that the
// per-key locks are taken in one order.
func (p *Processor) enqueue(ctx context.Context, tx store.Tx, msg *inbox.Message, pairs []eventPair) error {
	evs := make([]outbox.Event, 0, 2*len(pairs))
	for _, e := range pairs {
		evs = append(evs, e.msg, e.schd)
	}
	return outbox.Enqueue(ctx, tx, msg.Now, evs...)
}

func sortedUnique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// traceHeaders carries the processing span's trace context into the events,
// so that the relay's send, and the consumers beyond it, continue the trace
// (W3C traceparent). Without a span there is nothing to carry.
func traceHeaders(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	return tracing.Inject(ctx, nil)
}
