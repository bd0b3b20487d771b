-- name: Insert
-- One statement for all events of a call. The filter runs before the first
-- row, and so the first id, is produced: its sub-select (evaluated once)
-- takes the transaction-scoped advisory locks of the events' keys (sorted, so
-- two producers never wait on each other in opposite orders), which
-- serialises the writers of a key from id allocation to commit and so makes
-- the ids of a key grow in commit order; and pg_current_xact_id() gives the
-- transaction its id before it takes any event id, which the relay's id
-- watermark relies on (see watermark.go). An event is due at once: at the
-- producer's time, but never later than the database's (the relays judge
-- what is due on the database's clock, so a producer whose clock runs ahead
-- must not delay its events by its error).
INSERT INTO msgx_outbox (event_id, target, topic, partition_key, event_type, payload, headers, created_at, next_attempt_at)
SELECT e.event_id, e.target, e.topic, e.partition_key, e.event_type, e.payload, e.headers::jsonb, e.created_at, LEAST($8::timestamptz, now())
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], $9::timestamptz[])
     AS e(event_id, target, topic, partition_key, event_type, payload, headers, created_at)
WHERE (SELECT count(pg_advisory_xact_lock(k)) FROM unnest($10::bigint[]) AS k) >= 0
  AND pg_current_xact_id() IS NOT NULL

-- name: InsertOne
-- Insert of one event taking one lock ($10) first: a call's only event with
-- a key, or the first of a few events whose keys share that lock. The same
-- guarantees as Insert with less work (no arrays).
INSERT INTO msgx_outbox (event_id, target, topic, partition_key, event_type, payload, headers, created_at, next_attempt_at)
SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $9, LEAST($8::timestamptz, now())
WHERE (SELECT 1 FROM pg_advisory_xact_lock($10)) = 1
  AND pg_current_xact_id() IS NOT NULL

-- name: InsertOneLocking
-- The first of a few events written a statement each (for a few events that
-- costs less than Insert): it takes the locks of every key of the call
-- ($10, sorted) and the transaction id before the first id, so that the call
-- keeps Insert's guarantees.
INSERT INTO msgx_outbox (event_id, target, topic, partition_key, event_type, payload, headers, created_at, next_attempt_at)
SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $9, LEAST($8::timestamptz, now())
WHERE (SELECT count(pg_advisory_xact_lock(k)) FROM unnest($10::bigint[]) AS k) >= 0
  AND pg_current_xact_id() IS NOT NULL

-- name: InsertOneUnlocked
-- Insert of one event that takes no lock: it has no key (no order to keep),
-- or the call's first statement (InsertOne or InsertOneLocking) took its
-- key's lock.
INSERT INTO msgx_outbox (event_id, target, topic, partition_key, event_type, payload, headers, created_at, next_attempt_at)
SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $9, LEAST($8::timestamptz, now())
WHERE pg_current_xact_id() IS NOT NULL
