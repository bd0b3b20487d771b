package sis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/store"
)

// Version is one version of a flight (a flight_version row): the message
// that made it, what it changed and the events it produced. The processing
// transaction writes it with the flight, so a version is there exactly when
// the flight has it; the history sweep deletes a flight's versions with the
// flight.
type Version struct {
	FLID    string `json:"flid"`
	Version int64  `json:"version"`
	// Status is the flight's status after this version.
	Status string `json:"status"`
	// Stream and MsgID are the inbox message that made the version.
	Stream string `json:"stream"`
	MsgID  int64  `json:"msgId"`
	// SEQN, TYPE, STYP and SNDR are the message's META.
	SEQN int64  `json:"SEQN"`
	TYPE string `json:"TYPE"`
	STYP string `json:"STYP"`
	SNDR string `json:"SNDR"`
	// Changes is what the message changed.
	Changes Changes `json:"changes"`
	// Events are the outbox events the version produced.
	Events []VersionEvent `json:"events"`
	// At is when the message was processed.
	At time.Time `json:"at"`
}

// Changes is what one message changed in a flight: before → after of the
// status, of each scalar field and of each collection. Before is empty for a
// new flight and an added field; After is empty for a cleared one.
type Changes struct {
	Status      *FieldChange       `json:"status,omitempty"`
	Fields      []FieldChange      `json:"fields,omitempty"`
	Collections []CollectionChange `json:"collections,omitempty"`
}

// FieldChange is a scalar field (or the status) before and after.
type FieldChange struct {
	Name   string `json:"name,omitempty"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// CollectionChange is a collection before and after, its items in the
// generic shape (see Item); null when the flight had none.
type CollectionChange struct {
	Name   string          `json:"name"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// VersionEvent is an outbox event a version produced.
type VersionEvent struct {
	ID     string `json:"id"`
	Target string `json:"target"`
	Topic  string `json:"topic"`
	// Type is upsert or tombstone.
	Type string `json:"type"`
}

// diff is what c changes; colls are its collection changes (see
// collectionChanges).
func diff(c change, colls []CollectionChange) Changes {
	var ch Changes
	oldStatus := ""
	if c.old != nil {
		oldStatus = c.old.Status
	}
	if oldStatus != c.f.Status {
		ch.Status = &FieldChange{Before: oldStatus, After: c.f.Status}
	}
	if c.deleted {
		// FDEL changes the status only: the fields and details stay.
		return ch
	}
	for k, a := range c.f.Fields {
		if b := c.old.field(k); b != a {
			ch.Fields = append(ch.Fields, FieldChange{Name: k, Before: b, After: a})
		}
	}
	if c.old != nil {
		for k, b := range c.old.Fields {
			if _, ok := c.f.Fields[k]; !ok && b != "" {
				ch.Fields = append(ch.Fields, FieldChange{Name: k, Before: b})
			}
		}
	}
	slices.SortFunc(ch.Fields, func(a, b FieldChange) int { return strings.Compare(a.Name, b.Name) })
	ch.Collections = colls
	return ch
}

// collectionChanges lists, in name order, the collections c changes, each
// before and after in its canonical encoding: all of a new flight's, of an
// existing one the touched collections that differ (no other can have
// changed), none of a deleted one (FDEL leaves the details as they were).
func collectionChanges(c change) ([]CollectionChange, error) {
	if c.deleted {
		return nil, nil
	}
	var out []CollectionChange
	if c.old == nil {
		for _, n := range sortedKeys(c.f.Collections) {
			a, err := c.f.collectionJSON(n)
			if err != nil {
				return nil, err
			}
			out = append(out, CollectionChange{Name: n, Before: orNull(nil), After: orNull(a)})
		}
		return out, nil
	}
	for _, n := range sortedUnique(slices.Clone(c.touched)) {
		b, err := c.old.collectionJSON(n)
		if err != nil {
			return nil, err
		}
		a, err := c.f.collectionJSON(n)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(b, a) {
			out = append(out, CollectionChange{Name: n, Before: orNull(b), After: orNull(a)})
		}
	}
	return out, nil
}

func orNull(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// versionStmts are the statements that record c's version, made by msg,
// with its collection changes colls and its events ev: for a flight made
// anew, first the forgetting of an earlier flight's versions under its
// FLID, then the version.
func (s flightStore) versionStmts(msg *inbox.Message, m *sisxml.Message, c change, colls []CollectionChange, ev eventPair) []store.Stmt {
	changes := appendChanges(make([]byte, 0, 256), diff(c, colls))
	events := make([]byte, 0, 256)
	events = append(events, '[')
	events = appendVersionEvent(events, VersionEvent{ID: ev.msg.ID, Target: ev.msg.Target, Topic: ev.msg.Topic, Type: "upsert"})
	events = append(events, ',')
	schd := VersionEvent{ID: ev.schd.ID, Target: ev.schd.Target, Topic: ev.schd.Topic, Type: "upsert"}
	if c.deleted {
		schd.Type = "tombstone"
	}
	events = append(appendVersionEvent(events, schd), ']')
	insert := store.Stmt{SQL: s.q.Get("InsertVersion"), Args: []any{c.f.FLID, c.f.Version, c.f.Status, msg.Stream, msg.ID,
		m.Meta.Seq, m.Meta.Type, m.Meta.Subtype, m.Meta.Sender, string(changes), string(events), msg.Now}}
	if c.old != nil {
		return []store.Stmt{insert}
	}
	return []store.Stmt{{SQL: s.q.Get("ForgetVersions"), Args: []any{c.f.FLID}}, insert}
}

// appendChanges appends ch as encoding/json writes it (TestVersionJSON),
// without its reflection: every changed flight records one.
func appendChanges(out []byte, ch Changes) []byte {
	out = append(out, '{')
	sep := func() {
		if out[len(out)-1] != '{' {
			out = append(out, ',')
		}
	}
	if ch.Status != nil {
		out = append(out, `"status":`...)
		out = appendFieldChange(out, *ch.Status)
	}
	if len(ch.Fields) > 0 {
		sep()
		out = append(out, `"fields":[`...)
		for i, f := range ch.Fields {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendFieldChange(out, f)
		}
		out = append(out, ']')
	}
	if len(ch.Collections) > 0 {
		sep()
		out = append(out, `"collections":[`...)
		for i, c := range ch.Collections {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"name":`...)
			out = appendJSONString(out, c.Name)
			out = append(out, `,"before":`...)
			out = append(out, orNull(c.Before)...)
			out = append(out, `,"after":`...)
			out = append(out, orNull(c.After)...)
			out = append(out, '}')
		}
		out = append(out, ']')
	}
	return append(out, '}')
}

func appendFieldChange(out []byte, f FieldChange) []byte {
	out = append(out, '{')
	if f.Name != "" {
		out = append(out, `"name":`...)
		out = appendJSONString(out, f.Name)
		out = append(out, ',')
	}
	out = append(out, `"before":`...)
	out = appendJSONString(out, f.Before)
	out = append(out, `,"after":`...)
	out = appendJSONString(out, f.After)
	return append(out, '}')
}

func appendVersionEvent(out []byte, e VersionEvent) []byte {
	out = append(out, `{"id":`...)
	out = appendJSONString(out, e.ID)
	out = append(out, `,"target":`...)
	out = appendJSONString(out, e.Target)
	out = append(out, `,"topic":`...)
	out = appendJSONString(out, e.Topic)
	out = append(out, `,"type":`...)
	out = appendJSONString(out, e.Type)
	return append(out, '}')
}

// MaxVersions bounds the versions one history query returns.
const MaxVersions = 1000

// FlightHistory returns a flight's versions, newest first: at most limit
// (1 to MaxVersions) of them, those before version before (0 for the
// newest).
func FlightHistory(ctx context.Context, db store.Querier, flid string, before int64, limit int) ([]Version, error) {
	q, err := queries.For(db.Dialect())
	if err != nil {
		return nil, err
	}
	return scanVersions(ctx, db, q.Get("FlightVersions"), flid, before, limit)
}

// MessageVersions returns the flight versions one inbox message made (at
// most MaxVersions, in FLID order): the flights it changed and the events
// it produced.
func MessageVersions(ctx context.Context, db store.Querier, stream string, msgID int64) ([]Version, error) {
	q, err := queries.For(db.Dialect())
	if err != nil {
		return nil, err
	}
	return scanVersions(ctx, db, q.Get("MessageVersions"), stream, msgID, MaxVersions)
}

func scanVersions(ctx context.Context, db store.Querier, query string, args ...any) ([]Version, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sis: flight versions: %w", err)
	}
	defer rows.Close()
	out := []Version{}
	for rows.Next() {
		var (
			v      Version
			ch, ev string
		)
		if err := rows.Scan(&v.FLID, &v.Version, &v.Status, &v.Stream, &v.MsgID, &v.SEQN, &v.TYPE, &v.STYP, &v.SNDR, &ch, &ev, &v.At); err != nil {
			return nil, fmt.Errorf("sis: flight versions: %w", err)
		}
		if err := json.Unmarshal([]byte(ch), &v.Changes); err != nil {
			return nil, fmt.Errorf("sis: flight %s version %d: changes: %w", v.FLID, v.Version, err)
		}
		if err := json.Unmarshal([]byte(ev), &v.Events); err != nil {
			return nil, fmt.Errorf("sis: flight %s version %d: events: %w", v.FLID, v.Version, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sis: flight versions: %w", err)
	}
	return out, nil
}

// FlightHistoryPage is the answer of the admin query "flight-history".
type FlightHistoryPage struct {
	FLID     string    `json:"flid"`
	Versions []Version `json:"versions"`
	// Next is the before of the next page (older versions); 0 on the last.
	Next int64 `json:"next"`
}

// FlightHistoryQuery answers the admin query "flight-history" (GET
// /v1/flights/{flid}/history): parameters flid (required), before (the
// cursor: the previous page's next) and limit (default 100, at most 1000).
func FlightHistoryQuery(db store.Querier) func(ctx context.Context, params map[string][]string) (any, error) {
	return func(ctx context.Context, params map[string][]string) (any, error) {
		one, err := queryParams(params, []string{"flid", "before", "limit"}, nil)
		if err != nil {
			return nil, err
		}
		flid := strings.TrimSpace(one["flid"])
		if flid == "" {
			return nil, fmt.Errorf("%w: flid is required", admin.ErrBadParameter)
		}
		limit, before := 100, int64(0)
		if s, ok := one["limit"]; ok {
			if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > MaxVersions {
				return nil, fmt.Errorf("%w: limit %q: want 1 to %d", admin.ErrBadParameter, s, MaxVersions)
			}
		}
		if s, ok := one["before"]; ok {
			if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 1 {
				return nil, fmt.Errorf("%w: before %q: want a version (1 or more)", admin.ErrBadParameter, s)
			}
		}
		vs, err := FlightHistory(ctx, db, flid, before, limit+1)
		if err != nil {
			return nil, err
		}
		page := FlightHistoryPage{FLID: flid, Versions: vs}
		if len(vs) > limit {
			page.Versions = vs[:limit]
			page.Next = vs[limit-1].Version
		}
		return page, nil
	}
}

// MessageEffects is the answer of the admin query "message-effects": the
// flight versions one message made, with the events they produced.
type MessageEffects struct {
	Stream   string    `json:"stream"`
	MsgID    int64     `json:"msgId"`
	Versions []Version `json:"versions"`
}

// MessageEffectsQuery answers the admin query "message-effects" (GET
// /v1/messages/{stream}/{id}/effects): parameters stream and id, both
// required.
func MessageEffectsQuery(db store.Querier) func(ctx context.Context, params map[string][]string) (any, error) {
	return func(ctx context.Context, params map[string][]string) (any, error) {
		one, err := queryParams(params, []string{"stream", "id"}, nil)
		if err != nil {
			return nil, err
		}
		stream := one["stream"]
		id, err := strconv.ParseInt(one["id"], 10, 64)
		if stream == "" || err != nil {
			return nil, fmt.Errorf("%w: stream and id (a message id) are required", admin.ErrBadParameter)
		}
		vs, err := MessageVersions(ctx, db, stream, id)
		if err != nil {
			return nil, err
		}
		return MessageEffects{Stream: stream, MsgID: id, Versions: vs}, nil
	}
}
