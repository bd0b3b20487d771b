package routepassport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

// Event types (the msgx-type header of the output events).
const (
	TypeRouteIn      = "RouteIn"
	TypeGeoreference = "RouteGeoreference"
)

// Source is where an input record came from.
type Source struct {
	Topic     string `json:"topic"`
	Partition *int32 `json:"partition"`
	Offset    *int64 `json:"offset"`
	Key       string `json:"key"`
}

// RouteInEvent is the payload of pcp.route.in.v1 (mission planning).
type RouteInEvent struct {
	EventID       string     `json:"eventId"`
	EventType     string     `json:"eventType"`
	RouteID       string     `json:"routeId"`
	RouteNameFull string     `json:"routeNameFull"`
	RequestID     *string    `json:"requestId"`
	TraceID       *string    `json:"traceId"`
	CorrelationID *string    `json:"correlationId"`
	CreatedAt     *time.Time `json:"createdAt"`
	RouteStatus   string     `json:"routeStatus"`
	GeometryType  string     `json:"geometryType"`
	GeometryWKT   string     `json:"geometryWkt"`
	ReceivedAt    time.Time  `json:"receivedAt"`
	Source        Source     `json:"source"`
}

// GeoreferenceEvent is the payload of pcp.route.georeference.v1
// (request-service matching): the route-in fields plus the geometry as
// received and the record's properties.
type GeoreferenceEvent struct {
	RouteInEvent
	Geometry   json.RawMessage `json:"geometry"`
	Properties json.RawMessage `json:"properties"`
}

// ingest stores the records in one transaction and returns those that were
// new (the others were ingested before and are left alone).
func (p *Pipeline) ingest(ctx context.Context, items []*item) ([]*item, error) {
	// One identity once per call (a non-Kafka broker may deliver identical
	// records, whose content digests are equal, in one batch).
	seen := make(map[string]bool, len(items))
	var uniq []*item
	for _, it := range items {
		if !seen[it.sourceID] {
			seen[it.sourceID] = true
			uniq = append(uniq, it)
		}
	}
	var fresh []*item
	err := p.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		fresh = fresh[:0]
		ids, routes := make([]string, len(uniq)), make([]string, len(uniq))
		for i, it := range uniq {
			ids[i], routes[i] = it.sourceID, it.rec.RouteID
		}
		rows, err := tx.Query(ctx, p.q.Get("ClaimSources"), ids, routes)
		if err != nil {
			return fmt.Errorf("claim sources: %w", err)
		}
		isNew := make(map[string]bool, len(uniq))
		var now time.Time
		for rows.Next() {
			var id string
			if err := rows.Scan(&id, &now); err != nil {
				rows.Close()
				return fmt.Errorf("claim sources: %w", err)
			}
			isNew[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim sources: %w", err)
		}
		if len(isNew) == 0 {
			return nil
		}
		for _, it := range uniq {
			if isNew[it.sourceID] {
				fresh = append(fresh, it)
			}
		}
		stmts := []store.Stmt{p.upsert(fresh)}
		events := make([]outbox.Event, 0, 2*len(fresh))
		var oversize []*item
		for _, it := range fresh {
			in, geo, err := p.events(it, now)
			if err != nil {
				return err
			}
			if ce := p.oversize(in, geo); ce != nil {
				it.err = ce
				oversize = append(oversize, it)
			}
			events = append(events, in, geo)
		}
		if len(oversize) > 0 {
			// Rolled back: the caller refuses these and stores the rest.
			return &oversizeError{items: oversize}
		}
		// The upsert travels with the events' statements: one round trip.
		if err := store.Hold(ctx, tx, stmts...); err != nil {
			return err
		}
		return outbox.Enqueue(ctx, tx, p.cfg.clock.Now(), events...)
	})
	if err != nil {
		return nil, err
	}
	return fresh, nil
}

// oversizeError is ingest's error for records whose output event the broker
// could never take; their item's err says which event and its size.
type oversizeError struct{ items []*item }

func (e *oversizeError) Error() string {
	return fmt.Sprintf("%d records with an output event over the broker's limit", len(e.items))
}

// oversize refuses a record (class size) whose output event exceeds the
// broker's message limit less the room for the relay's headers: the event
// would fail every send, so the record is never stored half-deliverable.
// The georeference event carries the geometry twice (WKT and GeoJSON), so it
// reaches the limit first, at about half of it in geometry.
func (p *Pipeline) oversize(events ...outbox.Event) *ContractError {
	if p.eventLimit <= 0 {
		return nil
	}
	for _, e := range events {
		size, _ := p.b.MessageBytes(&broker.Message{Key: e.Key, Payload: e.Payload, Headers: e.Headers})
		if size > p.eventLimit {
			return &ContractError{Class: ClassSize, Message: fmt.Sprintf(
				"the %s event of this record would be %d bytes, over the %d bytes the broker takes for an event (its message limit less %d for the relay's headers)",
				e.Topic, size, p.eventLimit, EventHeaderRoom)}
		}
	}
	return nil
}

// upsert writes the last record of each route of the batch.
func (p *Pipeline) upsert(fresh []*item) store.Stmt {
	last := make(map[string]int, len(fresh))
	for i, it := range fresh {
		last[it.rec.RouteID] = i
	}
	idx := make([]int, 0, len(last))
	for _, i := range last {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	n := len(idx)
	var (
		routeID, name, geomType, wkt, document, topic, source = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		requestID, traceID, corrID, key                       = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		created                                               = make([]*time.Time, n)
		partition                                             = make([]*int32, n)
		offset                                                = make([]*int64, n)
		size                                                  = make([]int32, n)
	)
	for j, i := range idx {
		it := fresh[i]
		r := it.rec
		routeID[j], name[j], geomType[j], wkt[j] = r.RouteID, r.RouteNameFull, r.Geometry.Type, r.Geometry.WKT
		document[j], topic[j], source[j] = string(r.Document), it.d.Topic, it.sourceID
		requestID[j], traceID[j], corrID[j] = opt(r.RequestID), opt(r.TraceID), opt(r.CorrelationID)
		k := it.d.Key
		key[j] = &k
		created[j] = r.CreatedAt
		partition[j], offset[j] = it.partition, it.offset
		size[j] = int32(len(it.d.Payload))
	}
	return store.Stmt{SQL: p.q.Get("Upsert"), Args: []any{routeID, name, requestID, traceID, corrID, created,
		geomType, wkt, document, topic, partition, offset, key, source, size}}
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// events builds the two outbox events of a record; receivedAt is the
// transaction's database time.
func (p *Pipeline) events(it *item, receivedAt time.Time) (in, geo outbox.Event, err error) {
	r := it.rec
	base := RouteInEvent{
		EventType: TypeRouteIn, RouteID: r.RouteID, RouteNameFull: r.RouteNameFull,
		RequestID: opt(r.RequestID), TraceID: opt(r.TraceID), CorrelationID: opt(r.CorrelationID), CreatedAt: r.CreatedAt,
		RouteStatus: "PROCESSED", GeometryType: r.Geometry.Type, GeometryWKT: r.Geometry.WKT, ReceivedAt: receivedAt.UTC(),
		Source: Source{Topic: it.d.Topic, Partition: it.partition, Offset: it.offset, Key: it.d.Key},
	}
	base.EventID = eventID(it.sourceID, RouteInTarget)
	inPayload, err := json.Marshal(base)
	if err != nil {
		return in, geo, fmt.Errorf("route-in event: %w", err)
	}
	g := GeoreferenceEvent{RouteInEvent: base, Geometry: r.GeometryJSON, Properties: r.Properties}
	g.EventID, g.EventType = eventID(it.sourceID, GeoreferenceTarget), TypeGeoreference
	if g.Properties == nil {
		g.Properties = json.RawMessage("null")
	}
	geoPayload, err := georeferencePayload(inPayload, base.EventID, &g)
	if err != nil {
		return in, geo, fmt.Errorf("georeference event: %w", err)
	}
	headers := func(typ string) map[string]string {
		h := map[string]string{broker.HeaderType: typ, "msgx-route-id": r.RouteID, "msgx-source-id": it.sourceID}
		if r.CorrelationID != "" {
			h[broker.HeaderCorrelationID] = r.CorrelationID
		}
		if r.TraceID != "" {
			h["msgx-trace-id"] = r.TraceID
		}
		return h
	}
	in = outbox.Event{ID: base.EventID, Target: RouteInTarget, Topic: p.cfg.inTopic, Key: r.RouteID,
		Payload: inPayload, Headers: headers(TypeRouteIn), CreatedAt: receivedAt}
	geo = outbox.Event{ID: g.EventID, Target: GeoreferenceTarget, Topic: p.cfg.georefTopic, Key: r.RouteID,
		Payload: geoPayload, Headers: headers(TypeGeoreference), CreatedAt: receivedAt}
	return in, geo, nil
}

// georeferencePayload is json.Marshal(g), built from inPayload, the
// route-in payload of the same record (event id inID): after their first two
// members the two hold the same ones, so that part is encoded by reflection
// once (encoding/json was a tenth of the process's CPU per record) and only
// geometry and properties are added. Event ids are hex and the types
// constants, so the first two members need no escaping.
func georeferencePayload(inPayload []byte, inID string, g *GeoreferenceEvent) ([]byte, error) {
	inHead := `{"eventId":"` + inID + `","eventType":"` + TypeRouteIn + `",`
	if !bytes.HasPrefix(inPayload, []byte(inHead)) || !bytes.HasSuffix(inPayload, []byte("}")) {
		return json.Marshal(g)
	}
	// RawMessage members are compacted and escaped as inside a struct.
	geometry, err := json.Marshal(g.Geometry)
	if err != nil {
		return nil, err
	}
	properties, err := json.Marshal(g.Properties)
	if err != nil {
		return nil, err
	}
	shared := inPayload[len(inHead) : len(inPayload)-1]
	b := make([]byte, 0, len(inPayload)+len(geometry)+len(properties)+64)
	b = append(b, `{"eventId":"`...)
	b = append(b, g.EventID...)
	b = append(b, `","eventType":"`...)
	b = append(b, g.EventType...)
	b = append(b, `",`...)
	b = append(b, shared...)
	b = append(b, `,"geometry":`...)
	b = append(b, geometry...)
	b = append(b, `,"properties":`...)
	b = append(b, properties...)
	return append(b, '}'), nil
}
