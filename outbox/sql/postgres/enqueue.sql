-- name: Insert
INSERT INTO msgx_outbox (event_id, target, topic, partition_key, event_type, payload, headers, next_attempt_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
