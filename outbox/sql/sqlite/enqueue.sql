-- name: Insert
-- SQLite has one writer at a time, so ids already grow in commit order.
INSERT INTO msgx_outbox (event_id, target, topic, partition_key, event_type, payload, headers, next_attempt_at, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
