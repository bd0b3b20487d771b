// Package outbox is the transactional outbox: events are written in the
// caller's database transaction together with the state they describe, and a
// relay publishes them to brokers at-least-once.
package outbox

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/msgx/msgx/store"
)

// EventType says what a compacted consumer should do with the key.
type EventType string

// Event types.
const (
	// Upsert carries the newest state for its key.
	Upsert EventType = "UPSERT"
	// Tombstone deletes its key; it is published with a null (empty) value.
	Tombstone EventType = "TOMBSTONE"
)

// Event is one message to publish.
type Event struct {
	// ID is the stable, unique event id carried as the msgx-event-id header so
	// consumers can deduplicate; Enqueue generates one when empty.
	ID string
	// Target names the relay lane configuration, e.g. "kafka:msg".
	Target string
	// Topic is the broker destination.
	Topic string
	// Key is the partition key (per-key order and compaction are per Key).
	Key string
	// Type defaults to Upsert.
	Type    EventType
	Payload []byte
	Headers map[string]string
	// CreatedAt defaults to the enqueue time.
	CreatedAt time.Time
}

//go:embed sql
var sqlFS embed.FS

// queries holds the embedded SQL per dialect; it is read-only after init and a
// broken file is a build defect, caught by every test.
var queries = map[store.Dialect]store.Queries{
	store.Postgres: mustLoad(store.Postgres),
	store.SQLite:   mustLoad(store.SQLite),
}

func mustLoad(d store.Dialect) store.Queries {
	q, err := store.LoadQueries(sqlFS, "sql", d)
	if err != nil {
		panic(err)
	}
	return q
}

func queriesFor(d store.Dialect) (store.Queries, error) {
	q, ok := queries[d]
	if !ok {
		return nil, fmt.Errorf("outbox: unsupported dialect %q", d)
	}
	return q, nil
}

// NewEventID returns a random 128-bit event id.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Enqueue writes events in the caller's transaction: they become visible to
// the relay only if that transaction commits. now stamps created and first
// due time.
func Enqueue(ctx context.Context, tx store.Tx, now time.Time, events ...Event) error {
	q, err := queriesFor(tx.Dialect())
	if err != nil {
		return err
	}
	ins := q.Get("Insert")
	for i := range events {
		e := &events[i]
		if e.Target == "" || e.Topic == "" {
			return errors.New("outbox: event needs a target and a topic")
		}
		if e.ID == "" {
			e.ID = NewEventID()
		}
		if e.Type == "" {
			e.Type = Upsert
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
		var headers any
		if len(e.Headers) > 0 {
			h, err := json.Marshal(e.Headers)
			if err != nil {
				return fmt.Errorf("outbox: headers of %s: %w", e.ID, err)
			}
			headers = string(h)
		}
		if _, err := tx.Exec(ctx, ins, e.ID, e.Target, e.Topic, e.Key, string(e.Type), e.Payload, headers, e.CreatedAt); err != nil {
			return fmt.Errorf("outbox: enqueue %s: %w", e.ID, err)
		}
	}
	return nil
}
