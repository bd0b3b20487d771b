// Package outbox is the transactional outbox: events are written in the
// caller's database transaction together with the state they describe
// (Enqueue), and a Relay publishes them to brokers at-least-once through the
// broker port's confirmed send. Each target is relayed in a lane: Unordered
// (parallel batch claims), PerKey (at most one event of a key in flight, in
// id order) or Compacted (only the newest state of a key is sent). Claims use
// SELECT … FOR UPDATE SKIP LOCKED and a lease, so any number of relays may
// run; a send the broker cannot take now (broker.Unavailable) pauses its
// target and charges the events nothing, while sends that fail on the event
// itself are retried with backoff and end as DEAD letters that can be
// replayed. docs/outbox.md has the design and the measurements.
package outbox

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
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

var queries = store.MustLoadQuerySet("outbox", sqlFS, "sql")

func queriesFor(d store.Dialect) (store.Queries, error) { return queries.For(d) }

// NewEventID returns a random 128-bit event id.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Enqueue writes events in the caller's transaction: they become visible to
// the relay only if that transaction commits. now stamps created and first
// due time.
//
// On PostgreSQL, Enqueue also takes a transaction-scoped advisory lock per
// distinct (target, key) of the events before their ids are allocated, so two
// transactions enqueueing for the same key are serialised until the first
// commits. That is what lets the per-key and compacted lanes trust id order:
// once an event of a key is visible, every lower id of that key has already
// committed or rolled back. Enqueue all events of a transaction in one call
// (or always in the same key order) so that two producers cannot wait on each
// other's keys in opposite orders; PostgreSQL would abort one of them.
// Events without a key take no lock and carry no order. Enqueue also gives
// the transaction its transaction id before it takes event ids, which the
// relay's id watermark relies on, and wakes the relays when the transaction
// commits (notify; the relay decides whether it listens: WithWakeOnCommit).
//
// In the WAL mode (SetMode) Enqueue writes no row and takes no lock: it emits
// the call's events as one logical decoding message in tx, which the WAL
// relay reads in commit order (wal.go). The emit is held back to travel with
// tx's next statement or its COMMIT (store.Hold), so its failure, if any, is
// reported there.
func Enqueue(ctx context.Context, tx store.Tx, now time.Time, events ...Event) error {
	if txMode(tx) == ModeWAL {
		return enqueueWAL(ctx, tx, now, events)
	}
	stmts, err := statements(tx.Dialect(), now, events...)
	if err != nil {
		return err
	}
	if err := tx.ExecBatch(ctx, stmts...); err != nil {
		if len(events) == 1 {
			return fmt.Errorf("outbox: enqueue %s: %w", events[0].ID, err)
		}
		return fmt.Errorf("outbox: enqueue %d events (first %s): %w", len(events), events[0].ID, err)
	}
	if len(stmts) > 0 {
		notify(tx)
	}
	return nil
}

// statements returns the statements Enqueue runs in the table mode, and
// fills in missing ids, types and creation times of events.
func statements(d store.Dialect, now time.Time, events ...Event) ([]store.Stmt, error) {
	if len(events) == 0 {
		return nil, nil
	}
	q, err := queriesFor(d)
	if err != nil {
		return nil, err
	}
	headers := make([]*string, len(events))
	for i := range events {
		e := &events[i]
		if e.Target == "" || e.Topic == "" {
			return nil, errors.New("outbox: event needs a target and a topic")
		}
		if e.ID == "" {
			e.ID = NewEventID()
		}
		if e.Type == "" {
			e.Type = Upsert
		}
		if e.Type != Upsert && e.Type != Tombstone {
			return nil, fmt.Errorf("outbox: event %s: unknown type %q", e.ID, e.Type)
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
		if len(e.Headers) > 0 {
			h, err := json.Marshal(e.Headers)
			if err != nil {
				return nil, fmt.Errorf("outbox: headers of %s: %w", e.ID, err)
			}
			hs := string(h)
			headers[i] = &hs
		}
	}
	if d == store.Postgres {
		if len(events) <= maxSingles {
			return statementsSingle(q, now, events, headers), nil
		}
		return []store.Stmt{statementPostgres(q.Get("Insert"), now, events, headers)}, nil
	}
	ins := q.Get("Insert")
	stmts := make([]store.Stmt, len(events))
	for i := range events {
		stmts[i] = store.Stmt{SQL: ins, Args: eventArgs(&events[i], headers[i], now)}
	}
	return stmts, nil
}

// eventArgs are the arguments of a single-event insert ($1 to $9): the
// statements of both dialects take one event's columns in this order.
func eventArgs(e *Event, headers *string, now time.Time) []any {
	var h any
	if headers != nil {
		h = *headers
	}
	return []any{e.ID, e.Target, e.Topic, e.Key, string(e.Type), e.Payload, h, now, e.CreatedAt}
}

// maxSingles is the most events written by one statement each rather than by
// one statement for all: the statement over arrays costs more than a
// statement per event for a few events (an SIS message's two events: 60 – 77
// µs of PostgreSQL time against about 25 µs each, and about a tenth more
// messages per second), and less for many (a route-passport batch's hundred).
const maxSingles = 4

// statementsSingle writes each event with a statement of its own, in the
// call's order; the first also takes the locks of all the call's keys, in
// sorted order, so that the call keeps Insert's guarantees.
func statementsSingle(q store.Queries, now time.Time, events []Event, headers []*string) []store.Stmt {
	locks := keyLocks(events)
	stmts := make([]store.Stmt, len(events))
	for i := range events {
		args := eventArgs(&events[i], headers[i], now)
		switch {
		case i > 0 || len(locks) == 0:
			stmts[i] = store.Stmt{SQL: q.Get("InsertOneUnlocked"), Args: args}
		case len(locks) == 1:
			stmts[i] = store.Stmt{SQL: q.Get("InsertOne"), Args: append(args, locks[0])}
		default:
			stmts[i] = store.Stmt{SQL: q.Get("InsertOneLocking"), Args: append(args, locks)}
		}
	}
	return stmts
}

// statementPostgres inserts many events in one statement from arrays, taking
// the per-key advisory locks in a fixed order so concurrent writers cannot
// deadlock on them.
func statementPostgres(ins string, now time.Time, events []Event, headers []*string) store.Stmt {
	n := len(events)
	ids, targets, topics, keys, types := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads := make([][]byte, n)
	created := make([]time.Time, n)
	for i := range events {
		e := &events[i]
		ids[i], targets[i], topics[i], keys[i], types[i] = e.ID, e.Target, e.Topic, e.Key, string(e.Type)
		payloads[i] = e.Payload
		created[i] = e.CreatedAt
	}
	return store.Stmt{SQL: ins, Args: []any{ids, targets, topics, keys, types, payloads, headers, now, created, keyLocks(events)}}
}

// keyLocks returns the sorted, distinct advisory lock keys of the events
// that have a key.
func keyLocks(events []Event) []int64 {
	locks := make([]int64, 0, len(events))
	for i := range events {
		if e := &events[i]; e.Key != "" {
			locks = append(locks, KeyLock(e.Target, e.Key))
		}
	}
	slices.Sort(locks)
	return slices.Compact(locks)
}

// KeyLock is the PostgreSQL advisory lock key (the one-argument bigint form)
// that Enqueue holds for a (target, key) until the transaction ends. Code that
// writes msgx_outbox rows by other means must take it too, before inserting,
// to keep the per-key order guarantee.
func KeyLock(target, key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(target))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return int64(h.Sum64())
}
